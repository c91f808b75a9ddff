// Package fidelity holds the simulator to the real CPU engine: Calibrate fits the sim's model of this CPU to timed
// steps of the CPU executor (a grid of batches, or FitSteps: the steps of real runs), and Run replays the same
// traces on the real engine and in the sim with that calibration, every figure of each pair side by side with
// the sim's error. `morphlab fidelity` and the real-engine part of `morphlab reproduce` call it.
//
// # How the runs are timed
//
// The real runs are replayed in virtual time advanced by each step's CPU time (the deployment's "thread" clock:
// one kernel thread per run, each run counting only its own thread), all at once in this process, the calibration
// runs or the calibration grid beside them, so that the calibration is timed over the same minutes and under the
// same load as the runs it predicts: a step's CPU time moves by a tenth and more with what else the machine runs
// (calibrations of the same grid 15 minutes apart differed by 10%; the runs share caches and memory bandwidth).
// And the load stays until the last run ends: as each run finishes, a ballast run takes its place (a trace of the
// same kind at BallastRate, seed 3, under fp16, its results thrown away). Without it the longest run, the
// overloaded fp16 one, runs its last minute with the CPU to itself, its steps faster than the calibration timed
// beside the others predicts, and the simulated queue's tail comes out longer than the real one.
//
// The default calibration is fitted to the steps of further real runs (Options.CalibrationRuns: traces of the
// same kind drawn with seed 2): fp16 and static:int4 at 1 req/s, so that both layer formats are timed, and
// morph:default at 2.5 req/s, whose freed KV blocks let it decode 9-17 sequences a step, which the kernels run by
// other loops than the 2-4 of the others. Their steps ran as the compared runs' do, with the engine's own work
// between them, sequences of every length side by side and KV blocks wherever the pool had them.
package fidelity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/quant"
)

// Load is a policy served at a Poisson rate.
type Load struct {
	Policy string
	Rate   float64 // requests per second
}

// Options are the comparison's settings; DefaultOptions has the defaults.
type Options struct {
	// Deployment is the real runs' deployment (model, dtype, KV type and pool, step budget, block size); its
	// executor, clock, threads and policy are set for each run.
	Deployment deploy.Deployment
	Rates      []float64 // the compared runs' Poisson rates
	Policies   []string  // the policies compared at each rate
	Duration   time.Duration
	Lengths    trace.Independent // prompt and output lengths
	MaxOutput  int               // outputs clipped to this
	Context    int               // prompt and output clipped to this
	// Calibrate is "steps" (fit the steps of CalibrationRuns) or "grid" (time Calibrate's grid in Reps rounds);
	// with Calibration set, neither: that calibration is used.
	Calibrate       string
	CalibrationRuns []Load
	Reps            int
	Calibration     *costmodel.Calibration
	// Ballast keeps a run going in the place of each that finishes, at BallastRate, until the last compared run
	// ends.
	Ballast     bool
	BallastRate float64
	SLO         metrics.SLO
	// Progress, when set, is told what starts and ends.
	Progress func(msg string)
}

// DefaultOptions are the comparison's defaults: stories110M's shape in f16 layers and KV, 48 KV blocks of 16,
// 512 tokens a step, Poisson traces of 120 s at 0.6, 1.5 and 2.5 req/s with log-normal lengths (median prompt 120
// tokens, sigma 0.6; median output 48, sigma 0.6; at most 192 out, 1,024 in all), fp16 and morph:default, the
// calibration fitted to the steps of fp16 and static:int4 at 1 req/s and morph:default at 2.5 req/s, with ballast
// at 1 req/s, TTFT SLO 2 s. 57 minutes on two vCPUs that other jobs also held (BENCHMARKS.md).
func DefaultOptions() Options {
	return Options{
		Deployment: deploy.Deployment{Model: "stories110M", DType: "f16", KV: deploy.KV{Blocks: 48, BlockSize: 16, DType: "f16"},
			Scheduler: deploy.Scheduler{MaxBatchedTokens: 512}},
		Rates:           []float64{0.6, 1.5, 2.5},
		Policies:        []string{"fp16", "morph:default"},
		Duration:        120 * time.Second,
		Lengths:         trace.Independent{Prompt: trace.LogNormal{Median: 120, Sigma: 0.6}, Output: trace.LogNormal{Median: 48, Sigma: 0.6}},
		MaxOutput:       192,
		Context:         1024,
		Calibrate:       "steps",
		CalibrationRuns: []Load{{"fp16", 1}, {"static:int4", 1}, {"morph:default", 2.5}},
		Reps:            10,
		Ballast:         true,
		BallastRate:     1,
		SLO:             metrics.SLO{TTFT: 2 * time.Second},
	}
}

// Pair is a compared run: the real engine's and the sim's results of the same trace under the same policy.
type Pair struct {
	Load
	Real, Sim *results.Run
	// trace is the load's trace (seed 1), which both replay.
	trace *trace.Trace
	// events are the runs' engine events, for Write.
	realEvents, simEvents []engine.Event
}

// Report is what Run produced.
type Report struct {
	Options     Options
	Calibration *costmodel.Calibration
	Pairs       []*Pair
	// CalibrationSteps are the steps of the calibration runs the calibration was fitted to (with Calibrate
	// "steps").
	CalibrationSteps [][]costmodel.Sample
}

// Metric is one figure compared: its name and where results keep it.
type Metric struct {
	Name  string
	Value func(a results.Aggregates) float64
}

// Metrics are the figures a pair compares.
var Metrics = []Metric{
	{"P50 TTFT (ms)", func(a results.Aggregates) float64 { return a.TTFT.Median }},
	{"P95 TTFT (ms)", func(a results.Aggregates) float64 { return a.TTFT.P95 }},
	{"mean TPOT (ms)", func(a results.Aggregates) float64 { return a.TPOT.Mean }},
	{"output throughput (tok/s)", func(a results.Aggregates) float64 { return a.OutputThroughput }},
}

// Error is the sim's relative error on metric m: (sim - real) / real.
func (p *Pair) Error(m Metric) float64 {
	return relErr(m.Value(p.Sim.Aggregates), m.Value(p.Real.Aggregates))
}

// relErr is (sim - real) / real.
func relErr(sim, real float64) float64 { return (sim - real) / real }

// Run calibrates the sim (unless Options.Calibration is given), replays each rate's trace (seed 1) under each
// policy on the real CPU engine and then in the sim with the calibration, and returns the pairs.
func Run(ctx context.Context, o Options) (*Report, error) {
	switch {
	case len(o.Rates) == 0 || len(o.Policies) == 0:
		return nil, fmt.Errorf("fidelity: no rates or no policies to compare")
	case o.Calibration == nil && o.Calibrate != "steps" && o.Calibrate != "grid":
		return nil, fmt.Errorf("fidelity: calibrate %q, want steps or grid", o.Calibrate)
	case o.Calibration == nil && o.Calibrate == "steps" && len(o.CalibrationRuns) == 0:
		return nil, fmt.Errorf("fidelity: calibrate from steps with no calibration runs")
	case o.Ballast && !(o.BallastRate > 0):
		return nil, fmt.Errorf("fidelity: ballast at %g req/s, want above 0", o.BallastRate)
	}
	for _, l := range slices.Concat(o.CalibrationRuns, loads(o)) {
		if _, err := morph.Parse(l.Policy); err != nil {
			return nil, fmt.Errorf("fidelity: %v", err)
		}
		if !(l.Rate > 0) {
			return nil, fmt.Errorf("fidelity: %s at %g req/s, want a rate above 0", l.Policy, l.Rate)
		}
	}
	rep := &Report{Options: o, Calibration: o.Calibration}
	for _, l := range loads(o) {
		t, err := o.trace(l.Rate, 1)
		if err != nil {
			return nil, err
		}
		rep.Pairs = append(rep.Pairs, &Pair{Load: l, trace: t})
	}
	prev := cpu.SetThreads(1)
	defer cpu.SetThreads(prev)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil && !errors.Is(err, context.Canceled) {
			first = err
			cancel()
		}
	}
	var ballast sync.WaitGroup
	var running atomic.Int64
	// start runs f beside the others; with ballast, a ballast run takes its place when it ends, while others run.
	start := func(what string, f func() error) {
		running.Add(1)
		wg.Go(func() {
			o.progress("start " + what)
			err := f()
			left := running.Add(-1)
			if err != nil {
				fail(fmt.Errorf("%s: %w", what, err))
				return
			}
			o.progress("done " + what)
			if o.Ballast && left > 0 {
				ballast.Go(func() { o.runBallast(ctx) })
			}
		})
	}
	if rep.Calibration == nil && o.Calibrate == "steps" {
		rep.CalibrationSteps = make([][]costmodel.Sample, len(o.CalibrationRuns))
		for i, l := range o.CalibrationRuns {
			start(fmt.Sprintf("calibration run %s at %g req/s", l.Policy, l.Rate), func() error {
				t, err := o.trace(l.Rate, 2)
				if err != nil {
					return err
				}
				r, _, err := o.replay(ctx, l.Policy, t, true)
				if err == nil {
					rep.CalibrationSteps[i] = r.Steps
				}
				return err
			})
		}
	} else if rep.Calibration == nil {
		start("calibration grid", func() error {
			d := o.Deployment
			d.Threads, d.Clock = 1, "thread"
			c, err := Calibrate(d, CalibrateOptions{Formats: o.formats(), Reps: o.Reps})
			rep.Calibration = c
			return err
		})
	}
	for _, p := range rep.Pairs {
		start(fmt.Sprintf("%s at %g req/s", p.Policy, p.Rate), func() (err error) {
			p.Real, p.realEvents, err = o.replay(ctx, p.Policy, p.trace, false)
			return err
		})
	}
	wg.Wait()
	cancel() // ends the ballast
	ballast.Wait()
	if first != nil {
		return nil, first
	}
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if rep.Calibration == nil {
		d := o.Deployment
		d.Threads, d.Clock = 1, "thread"
		c, err := FitSteps(d, rep.CalibrationSteps...)
		if err != nil {
			return nil, err
		}
		rep.Calibration = c
	}
	for _, p := range rep.Pairs {
		pol, err := morph.Parse(p.Policy)
		if err != nil {
			return nil, err
		}
		if p.Sim, p.simEvents, err = simulate(parent, o.Deployment, "cpu", rep.Calibration, pol, p.trace, o.SLO); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// loads are the compared runs: each rate under each policy.
func loads(o Options) []Load {
	var out []Load
	for _, r := range o.Rates {
		for _, p := range o.Policies {
			out = append(out, Load{p, r})
		}
	}
	return out
}

// formats are the layer formats the grid times: the full precision and the policies' quantized formats.
func (o Options) formats() []quant.Format {
	full := quant.F32
	if o.Deployment.DType != "" {
		if f, err := quant.ParseFormat(o.Deployment.DType); err == nil {
			full = f
		}
	}
	fs := []quant.Format{full}
	for _, name := range o.Policies {
		p, _ := morph.Parse(name)
		for _, f := range p.Needs() {
			if !slices.Contains(fs, f) {
				fs = append(fs, f)
			}
		}
	}
	return fs
}

func (o Options) progress(msg string) {
	if o.Progress != nil {
		o.Progress(msg)
	}
}

// trace draws the Poisson trace of a load with seed.
func (o Options) trace(rate float64, seed uint64) (*trace.Trace, error) {
	t, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: rate}, Duration: o.Duration.Seconds(), Lengths: o.Lengths}, seed)
	if err != nil {
		return nil, err
	}
	return trace.Clip(t, trace.Limits{Context: o.Context, Output: o.MaxOutput})
}

// replay replays t under policy on the real engine, on one kernel thread and its thread's clock.
func (o Options) replay(ctx context.Context, policy string, t *trace.Trace, steps bool) (*results.Run, []engine.Event, error) {
	d := o.Deployment
	d.Executor, d.Threads, d.Clock = "cpu", 1, "thread"
	var err error
	if d.Policy, err = morph.Parse(policy); err != nil {
		return nil, nil, err
	}
	in, err := d.Build()
	if err != nil {
		return nil, nil, err
	}
	return in.Replay(ctx, t, deploy.ReplayOptions{SLO: o.SLO, KeepSteps: steps})
}

// runBallast replays the ballast trace under fp16 again and again until ctx ends; its results are thrown away.
func (o Options) runBallast(ctx context.Context) {
	t, err := o.trace(o.BallastRate, 3)
	for err == nil && ctx.Err() == nil {
		_, _, err = o.replay(ctx, "fp16", t, false)
	}
}

// simulate replays t under p in the sim on device (a catalog GPU, or cpu), with calib's step times when it is
// not nil, the rest of the deployment as d says.
func simulate(ctx context.Context, d deploy.Deployment, device string, calib *costmodel.Calibration, p morph.Policy, t *trace.Trace,
	slo metrics.SLO) (*results.Run, []engine.Event, error) {
	d.Executor, d.Device, d.Calibrated, d.Clock, d.Threads, d.Policy = "sim", device, calib, "", 0, p
	in, err := d.Build()
	if err != nil {
		return nil, nil, err
	}
	return in.Replay(ctx, t, deploy.ReplayOptions{SLO: slo})
}

// Over is the number of figures whose error is over limit (a share: 0.1 is 10%).
func (r *Report) Over(limit float64) int {
	n := 0
	for _, p := range r.Pairs {
		for _, m := range Metrics {
			if math.Abs(p.Error(m)) > limit {
				n++
			}
		}
	}
	return n
}

// WriteTables prints, for each pair, its requests, swaps and preemptions, then each metric real beside simulated
// with the sim's error, marking the errors over limit.
func (r *Report) WriteTables(w io.Writer, limit float64) error {
	c := r.Calibration
	fmt.Fprintf(w, "calibration: %s on %s (%d threads, %s KV, %s clock), median error %.1f%% over the %d steps fitted, %.1f%% over %d held out\n",
		c.Model, c.Machine, c.Threads, c.KV, c.Clock, c.MAPE, c.Steps, c.HeldOutMAPE, c.HeldOutSteps)
	o := r.Options
	for _, p := range r.Pairs {
		ra, sa := p.Real.Aggregates, p.Sim.Aggregates
		fmt.Fprintf(w, "\n%s, poisson:%g for %v, %s, %d KV blocks: %d requests, real %d swaps / %d preemptions, sim %d / %d\n\n",
			o.Deployment.Model, p.Rate, o.Duration, p.Policy, p.Real.Meta.KVBlocksFull, ra.Requests, ra.SwapActions, ra.Preemptions,
			sa.SwapActions, sa.Preemptions)
		var rows [][]string
		for _, m := range Metrics {
			e := p.Error(m)
			over := ""
			if math.Abs(e) > limit {
				over = " (over)"
			}
			rows = append(rows, []string{m.Name, fmt.Sprintf("%.4g", m.Value(ra)), fmt.Sprintf("%.4g", m.Value(sa)), fmt.Sprintf("%+.1f%%%s", 100*e, over)})
		}
		if err := mdtable.Write(w, []string{"metric", "real", "sim", "error"}, rows); err != nil {
			return err
		}
	}
	return nil
}

// Write writes the calibration, each pair's real and simulated results (results.json, events.jsonl, table.md)
// and the tables (fidelity.md, and to each of also) under dir.
func (r *Report) Write(dir string, limit float64, also ...io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := r.Calibration.Save(filepath.Join(dir, "calibration.json")); err != nil {
		return err
	}
	for _, p := range r.Pairs {
		name := fmt.Sprintf("%g-%s", p.Rate, dirName(p.Policy))
		if err := p.Real.Write(filepath.Join(dir, "real-"+name), p.realEvents); err != nil {
			return err
		}
		if err := p.Sim.Write(filepath.Join(dir, "sim-"+name), p.simEvents); err != nil {
			return err
		}
	}
	return writeTables(filepath.Join(dir, "fidelity.md"), func(w io.Writer) error { return r.WriteTables(w, limit) }, also)
}

// writeTables renders tables once, into the file at path and to each of also.
func writeTables(path string, tables func(io.Writer) error, also []io.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tables(io.MultiWriter(append([]io.Writer{f}, also...)...)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dirName is a policy's name as a directory's.
func dirName(policy string) string {
	return strings.NewReplacer(":", "-", "=", "-", ",", "+").Replace(policy)
}
