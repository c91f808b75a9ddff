package suite

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// PrefixOptions configure the prefix-caching study on one deployment (PrefixStudy): the real CPU engine's form of
// the suite's study, which `morphlab prefix` runs.
type PrefixOptions struct {
	// Deployment is what every run deploys; its policy and prefix caching are set for each run.
	Deployment deploy.Deployment
	Trace      *trace.Trace
	SLO        metrics.SLO
	// Parallel runs this many at once. Above 1 the cpu executor needs the thread clock with one kernel thread
	// (each run then counts only its own thread's CPU time).
	Parallel int
	// Out, when set, is where each run's files go: <Out>/<policy>[_no-prefix-caching]/.
	Out string
	// Progress, when set, is told when each run ends.
	Progress func(msg string)
}

// PrefixStudy replays the trace under fp16 and morph:default with the prefix cache on and off. The rows come in the
// suite's order (fp16 off, fp16 on, morph:default off, on), Setup naming the model. On the cpu executor the
// quality loss is the share of output tokens that differ from fp16's with the cache (greedy decoding, so fp16
// without the cache differs in none); on the sim it is left out.
func PrefixStudy(ctx context.Context, o PrefixOptions) ([]*PrefixRun, error) {
	d := o.Deployment
	if o.Parallel > 1 && d.Executor != "sim" && (d.Clock != "thread" || d.Threads != 1) {
		return nil, fmt.Errorf("suite: %d runs side by side on the cpu executor need the thread clock and one kernel thread (clock %q, %d threads)",
			o.Parallel, d.Clock, d.Threads)
	}
	block := d.KV.BlockSize
	if block == 0 {
		block = deploy.DefaultBlockSize
	}
	unbounded, err := unboundedRate(d.Model, o.Trace, block)
	if err != nil {
		return nil, err
	}
	var runs []*PrefixRun
	for _, p := range prefixPolicies {
		for _, caching := range []bool{false, true} {
			runs = append(runs, &PrefixRun{Setup: d.Model, Workload: o.Trace.Source, Policy: p, Caching: caching, Unbounded: unbounded, Loss: math.NaN()})
		}
	}
	sem := make(chan struct{}, max(1, o.Parallel))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = prefixReplay(ctx, o, r)
			if o.Progress != nil && errs[i] == nil {
				a := r.Run.Aggregates
				o.Progress(fmt.Sprintf("%s, prefix caching %v: %.1f%% over the SLO, P95 TTFT %.0f ms, hit rate %.1f%%",
					r.Policy, r.Caching, 100*a.SLOViolationRate, a.TTFT.P95, 100*a.PrefixHitRate))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s, prefix caching %v: %w", runs[i].Policy, runs[i].Caching, err)
		}
	}
	if d.Executor != "sim" {
		base := prefixRun(runs, d.Model, o.Trace.Source, "fp16", true)
		for _, r := range runs {
			_, agree, err := results.Agreement(r.Run, base.Run)
			if err != nil {
				return nil, err
			}
			r.Loss = 1 - agree
		}
	}
	return runs, nil
}

// prefixReplay runs one of the study's replays and writes its files.
func prefixReplay(ctx context.Context, o PrefixOptions, r *PrefixRun) error {
	spec, err := morph.Parse(r.Policy)
	if err != nil {
		return err
	}
	d := o.Deployment
	d.Policy, d.KV.NoPrefixCaching = spec, !r.Caching
	in, err := d.Build()
	if err != nil {
		return err
	}
	var events []engine.Event
	if r.Run, events, err = in.Replay(ctx, o.Trace, deploy.ReplayOptions{SLO: o.SLO, KeepTokens: true}); err != nil {
		return err
	}
	if o.Out == "" {
		return nil
	}
	dir := DirName(r.Policy)
	if !r.Caching {
		dir += "_no-prefix-caching"
	}
	return r.Run.Write(filepath.Join(o.Out, dir), events)
}
