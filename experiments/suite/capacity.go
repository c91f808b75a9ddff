package suite

import (
	"context"
	"fmt"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/trace"
)

// The burst is sized to each deployment rather than given in requests per second: at one absolute rate the
// 7B setups on the L4 (958 blocks) are overloaded even on average while CodeLlama-34B on the A100 barely notices
// it. burstShape is its on/off process in multiples of the setup's fp16 capacity (Capacity): on at 2.5x for 6 s
// on average, off at a quarter for 12 s, so the mean load is the capacity itself — what fp16 serves over time
// but not in the bursts.
var burstShape = trace.OnOff{OnRate: 2.5, OffRate: 0.25, OnMean: 6, OffMean: 12}

// burstLengths are log-normal lengths with medians at half the setup's prompt and response limits.
func burstLengths(s Setup) trace.Independent {
	return trace.Independent{Prompt: trace.LogNormal{Median: float64(s.MaxPrompt) / 2, Sigma: 1}, Output: trace.LogNormal{Median: float64(s.MaxOutput) / 2, Sigma: 0.8}}
}

// DefaultBurstSeed draws every burst and every capacity probe unless Options.BurstSeed says otherwise; chosen
// once, recorded in each run's trace source and in summary.md.
const DefaultBurstSeed = 1

// burstAt is the 72-s burst of a deployment whose fp16 capacity is capacity requests per second.
func burstAt(s Setup, capacity float64) trace.Spec {
	p := burstShape
	p.OnRate *= capacity
	p.OffRate *= capacity
	return trace.Spec{Process: p, Duration: 72, Lengths: burstLengths(s)}
}

// capacityProbe is how long each Poisson run of the capacity search lasts, in seconds.
const capacityProbe = 300

// Capacity is the fp16 deployment's capacity for the burst's lengths: the knee (loadtest.Knee) of its P95 TTFT
// against the SLO over 300-s Poisson runs, simulated, that is the highest rate probed below the lowest rate probed
// that misses. From 1 req/s the rate is doubled or halved until one rate meets the SLO and another misses it, and
// then bisected to 1%. Its Poisson runs are drawn with seed.
func Capacity(ctx context.Context, s Setup, seed uint64) (float64, error) {
	target := loadtest.KneeTarget{Metric: "ttft", Limit: SLO.TTFT}
	var probed []loadtest.Point
	err := search(s.Name, func(rate float64) (bool, error) {
		m, err := probe(ctx, s, rate, seed)
		if err != nil {
			return false, err
		}
		probed = append(probed, loadtest.Point{Rate: rate, Metrics: m})
		return target.Meets(m), nil
	})
	if err != nil {
		return 0, err
	}
	knee, ok := loadtest.Knee(probed, target)
	if !ok {
		return 0, fmt.Errorf("%s: no probed rate meets the SLO", s.Name)
	}
	return knee.Rate, nil
}

// probe is fp16's metrics on the setup under a capacityProbe-second Poisson run of the burst's lengths at rate
// requests per second, drawn with seed.
func probe(ctx context.Context, s Setup, rate float64, seed uint64) (loadtest.Metrics, error) {
	spec, err := morph.Parse("fp16")
	if err != nil {
		return loadtest.Metrics{}, err
	}
	t, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: rate}, Duration: capacityProbe, Lengths: burstLengths(s)}, seed)
	if err != nil {
		return loadtest.Metrics{}, err
	}
	if t, err = trace.Clip(t, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput}); err != nil {
		return loadtest.Metrics{}, err
	}
	c, err := simulate(ctx, s, s.Deployment(spec), t)
	if err != nil {
		return loadtest.Metrics{}, fmt.Errorf("%s capacity at %.3g req/s: %w", s.Name, rate, err)
	}
	return c.Run.Aggregates.Metrics, nil
}

// search probes rates with meets until a rate that meets and a rate above it that misses are within 1% of each
// other, given that meets holds below some rate in [0.001, 1024] req/s and fails above it: from 1 req/s it doubles
// or halves, then bisects. Every rate it probes that meets lies below every rate it probes that misses.
func search(name string, meets func(rate float64) (bool, error)) error {
	var lo, hi float64
	for rate := 1.0; lo == 0 || hi == 0; {
		if rate > 1024 || rate < 1e-3 {
			return fmt.Errorf("%s: no fp16 capacity between 0.001 and 1024 req/s", name)
		}
		ok, err := meets(rate)
		if err != nil {
			return err
		}
		if ok {
			lo, rate = rate, rate*2
		} else {
			hi, rate = rate, rate/2
		}
	}
	for hi-lo > 0.01*lo {
		mid := (lo + hi) / 2
		ok, err := meets(mid)
		if err != nil {
			return err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return nil
}
