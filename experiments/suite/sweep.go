package suite

import (
	"context"
	"fmt"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/trace"
)

// SweepPoint is one policy at one request rate of the rate sweep (the paper's Fig. 6).
type SweepPoint struct {
	Policy     string  `json:"policy"`
	Multiplier float64 `json:"rate_multiplier"` // of the workload's own rate
	Rate       float64 `json:"request_rate"`    // requests per second asked
	Throughput float64 `json:"request_throughput"`
	Goodput    float64 `json:"request_goodput"`
	Violations float64 `json:"slo_violation_rate"`
	P95TTFT    float64 `json:"p95_ttft_ms"`
}

var sweepPolicies = []string{"fp16", "static:int4", "morph:default"}

func sweepFactors(quick bool) []float64 {
	if quick {
		return []float64{0.5, 1, 2, 4}
	}
	return []float64{0.5, 0.75, 1, 1.5, 2, 3, 4}
}

// sweepSetup is the sweep's deployment: Llama-2-7B on the L4 when the suite has it, else its first setup.
func sweepSetup(setups []Setup) Setup {
	for _, s := range setups {
		if s.Model == "llama-2-7b" {
			return s
		}
	}
	return setups[0]
}

// runSweep replays w at each multiple of its rate (inter-arrival times divided by the factor) under the sweep's
// policies.
func runSweep(ctx context.Context, opt Options, w Workload, factors []float64, step func()) ([]SweepPoint, error) {
	s := sweepSetup(opt.Setups)
	base, err := trace.Clip(w.Trace, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput})
	if err != nil {
		return nil, err
	}
	var out []SweepPoint
	for _, p := range sweepPolicies {
		spec, err := morph.Parse(p)
		if err != nil {
			return nil, err
		}
		for _, f := range factors {
			t, err := trace.TimeScale(base, 1/f)
			if err != nil {
				return nil, err
			}
			c, err := simulate(ctx, s, s.Deployment(spec), t)
			if err != nil {
				return nil, fmt.Errorf("sweep %s at %gx: %w", p, f, err)
			}
			a := c.Run.Aggregates
			out = append(out, SweepPoint{Policy: p, Multiplier: f, Rate: a.AskedRate, Throughput: a.RequestThroughput,
				Goodput: a.RequestGoodput, Violations: a.SLOViolationRate, P95TTFT: a.TTFT.P95})
			step()
		}
	}
	return out, nil
}
