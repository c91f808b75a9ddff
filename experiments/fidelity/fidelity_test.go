package fidelity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/quant"
)

// short is the comparison at a test's scale: stories260K's shape on a pool of 12 blocks that fills, 2 s of
// Poisson arrivals at 40 req/s clipped to 176 tokens (within the full-precision pool, so that no request is served
// or rejected by whether morph had attached blocks in time), fp16 and morph:default.
func short() Options {
	o := DefaultOptions()
	o.Deployment = deploy.Deployment{Model: "stories260K", DType: "f16", KV: deploy.KV{Blocks: 12, BlockSize: 16, DType: "f16"},
		Scheduler: deploy.Scheduler{MaxBatchedTokens: 256}}
	o.Rates, o.Duration, o.Context, o.MaxOutput = []float64{40}, 2*time.Second, 176, 96
	o.Lengths = trace.Independent{Prompt: trace.LogNormal{Median: 60, Sigma: 0.5}, Output: trace.LogNormal{Median: 32, Sigma: 0.5}}
	o.CalibrationRuns = []Load{{"fp16", 40}, {"static:int4", 40}}
	return o
}

// TestRun: calibrated on the steps of its calibration runs, with ballast, the comparison serves the same requests
// with the same output lengths on the real engine and in the sim; the calibration is fitted to every calibration
// step (a fifth held out) and covers both layer formats; the report writes every run and the tables. Timings are
// logged, not asserted: stories260K's steps take tens of microseconds, below a shared machine's noise.
func TestRun(t *testing.T) {
	o := short()
	var mu sync.Mutex
	var msgs []string
	o.Progress = func(m string) { mu.Lock(); msgs = append(msgs, m); mu.Unlock() }
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, s := range r.CalibrationSteps {
		steps += len(s)
	}
	cfg, _ := model.ShapeByName("stories260K")
	if c := r.Calibration; c.Steps+c.HeldOutSteps != steps || c.Clock != "thread" || c.KV != "f16" || c.Check(cfg, []quant.Format{quant.F16, quant.Int4}) != nil {
		t.Errorf("calibration %+v: want %d steps of f16 and int4 layers on the thread clock", c, steps)
	}
	if len(r.Pairs) != 2 {
		t.Fatalf("%d pairs, want fp16 and morph:default at 40 req/s", len(r.Pairs))
	}
	for _, p := range r.Pairs {
		ra, sa := p.Real.Aggregates, p.Sim.Aggregates
		if ra.Completed == 0 || ra.Completed != sa.Completed || ra.TotalOutputTokens != sa.TotalOutputTokens ||
			p.Real.Meta.Clock != "thread" || p.Sim.Meta.Executor != "sim" || p.Sim.Meta.Device != "cpu" {
			t.Errorf("%s: real %d completed, %d tokens, %+v; sim %d, %d, %+v", p.Policy, ra.Completed, ra.TotalOutputTokens, p.Real.Meta,
				sa.Completed, sa.TotalOutputTokens, p.Sim.Meta)
		}
		for _, m := range Metrics {
			t.Logf("%s %s: real %.4g, sim %.4g (%+.1f%%)", p.Policy, m.Name, m.Value(ra), m.Value(sa), 100*p.Error(m))
		}
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "done calibration run static:int4 at 40 req/s") {
		t.Errorf("progress %q", msgs)
	}
	dir := t.TempDir()
	if err := r.Write(dir, 0.1); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"calibration.json", "fidelity.md", "real-40-fp16/results.json", "sim-40-morph-default/events.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the report did not write %s: %v", f, err)
		}
	}
	if n := r.Over(1e9); n != 0 {
		t.Errorf("%d figures off by more than 1e9", n)
	}
	if n := r.Over(-1); n != 2*len(Metrics) {
		t.Errorf("%d figures off by more than -1, want all %d", n, 2*len(Metrics))
	}
}

// TestRunErrors: settings the comparison cannot run are refused before anything starts.
func TestRunErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Rates = nil }, "no rates"},
		{func(o *Options) { o.Calibrate = "guess" }, `calibrate "guess"`},
		{func(o *Options) { o.CalibrationRuns = nil }, "no calibration runs"},
		{func(o *Options) { o.BallastRate = 0 }, "ballast at 0 req/s"},
		{func(o *Options) { o.Policies = []string{"morph:fast"} }, `mode "fast"`},
		{func(o *Options) { o.CalibrationRuns = []Load{{"fp16", -1}} }, "want a rate above 0"},
	} {
		o := short()
		c.edit(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
