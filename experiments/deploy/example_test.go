package deploy_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/trace"
)

// A whole experiment: Llama-2-7B on an L4 with the paper's FP16 KV pool, simulated under fp16 and under MorphServe's
// default mode, on the same bursty minute of requests.
func Example() {
	burst, err := trace.Generate(trace.Spec{Process: trace.OnOff{OnRate: 12, OffRate: 1, OnMean: 5, OffMean: 10}, Duration: 60,
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 50, Max: 500}, Output: trace.Uniform{Min: 20, Max: 250}}}, 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"fp16", "morph:default"} {
		policy, err := morph.Parse(name)
		if err != nil {
			log.Fatal(err)
		}
		d := deploy.Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: deploy.KV{Blocks: 958}, Policy: policy}
		in, err := d.Build()
		if err != nil {
			log.Fatal(err)
		}
		r, _, err := in.Replay(context.Background(), burst, deploy.ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: P95 TTFT %.0f ms, %.0f%% of requests over the SLO\n", name, r.Aggregates.TTFT.P95, 100*r.Aggregates.SLOViolationRate)
	}
	// Output:
	// fp16: P95 TTFT 16511 ms, 56% of requests over the SLO
	// morph:default: P95 TTFT 1510 ms, 0% of requests over the SLO
}
