package deploy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/trace"
)

// fewestWaitingTokens sends a request to the replica with the fewest prompt tokens waiting to be prefilled, then
// the fewest requests in it: a router that balances prefill work rather than request counts.
type fewestWaitingTokens struct{}

func (fewestWaitingTokens) Route(_ engine.TimedRequest, replicas []deploy.ReplicaView) int {
	best := 0
	for i, v := range replicas {
		b := replicas[best]
		if v.WaitingTokens() < b.WaitingTokens() || v.WaitingTokens() == b.WaitingTokens() && v.Outstanding() < b.Outstanding() {
			best = i
		}
	}
	return best
}

func init() {
	deploy.RegisterRouter("fewest-waiting-tokens", func() deploy.Router { return fewestWaitingTokens{} })
}

// A router from outside the package: registered under a name, a fleet (or --router) finds it by that name.
func ExampleRouter() {
	tr, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: 4}, N: 200,
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 50, Max: 1500}, Output: trace.Uniform{Min: 20, Max: 200}}}, 1)
	if err != nil {
		log.Fatal(err)
	}
	d := deploy.Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: deploy.KV{Blocks: 958}}
	for _, router := range []string{"round-robin", "fewest-waiting-tokens"} {
		f := deploy.Fleet{Router: router, Replicas: []deploy.Deployment{d, d, d}}
		r, err := f.Replay(context.Background(), tr, deploy.ReplayOptions{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: requests per replica", r.Fleet.Router)
		for _, rep := range r.Fleet.Replicas {
			fmt.Printf(" %d", rep.Requests)
		}
		fmt.Printf(", P95 TTFT %.0f ms\n", r.Aggregates.TTFT.P95)
	}
	// Output:
	// round-robin: requests per replica 67 67 66, P95 TTFT 4749 ms
	// fewest-waiting-tokens: requests per replica 71 63 66, P95 TTFT 3806 ms
}
