package deploy_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/trace"
)

// waitingTokens is the prompt tokens waiting to be prefilled, per serving replica: a load measure that counts a
// long prompt as more work than a short one.
type waitingTokens struct{}

func (waitingTokens) Measure(replicas []deploy.ReplicaView) float64 {
	sum := 0
	for _, v := range replicas {
		sum += v.WaitingTokens()
	}
	return float64(sum) / float64(len(replicas))
}

func init() {
	deploy.RegisterScaleMetric("waiting-tokens", func() deploy.ScaleMetric { return waitingTokens{} })
}

// An autoscale metric from outside the package: registered under a name, the autoscaler (or --autoscale
// NAME=TARGET) finds it by that name and holds it at its target with the HPA's rule.
func ExampleScaleMetric() {
	// A request a second for 15 minutes, six a second from the second minute to the sixth.
	var tr trace.Trace
	for at := 0.0; at < 900; {
		rate := 1.0
		if at >= 120 && at < 360 {
			rate = 6
		}
		at += 1 / rate
		tr.Requests = append(tr.Requests, trace.Request{Arrival: at, PromptTokens: 1000, OutputTokens: 100})
	}
	d := deploy.Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: deploy.KV{Blocks: 958}}
	f := deploy.Fleet{Router: "least-outstanding", Replicas: []deploy.Deployment{d},
		Autoscale: &deploy.Autoscale{Template: d, Metric: "waiting-tokens", Target: 1000, Min: 1, Max: 8, Delay: time.Minute, CoolDown: 2 * time.Minute}}
	r, err := f.Replay(context.Background(), &tr, deploy.ReplayOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for i, rep := range r.Fleet.Replicas {
		fmt.Printf("replica %d: asked for at %4.0f s, serving from %4.0f s, stopped at %4.0f s, %d requests\n", i, rep.Asked, rep.Ready, rep.Stopped, rep.Requests)
	}
	fmt.Printf("%.2f replica-hours, $%.2f\n", r.Fleet.ReplicaHours, r.Fleet.Cost)
	// Output:
	// replica 0: asked for at    0 s, serving from    0 s, stopped at  604 s, 588 requests
	// replica 1: asked for at  135 s, serving from  195 s, stopped at  603 s, 188 requests
	// replica 2: asked for at  135 s, serving from  195 s, stopped at  600 s, 187 requests
	// replica 3: asked for at  135 s, serving from  195 s, stopped at  601 s, 185 requests
	// replica 4: asked for at  135 s, serving from  195 s, stopped at  602 s, 184 requests
	// replica 5: asked for at  150 s, serving from  210 s, stopped at  605 s, 163 requests
	// replica 6: asked for at  150 s, serving from  210 s, stopped at  908 s, 462 requests
	// replica 7: asked for at  150 s, serving from  210 s, stopped at  600 s, 143 requests
	// 1.15 replica-hours, $0.92
}
