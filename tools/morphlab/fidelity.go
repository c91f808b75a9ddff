package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/experiments/fidelity"
	"github.com/morphlab/morphlab/experiments/trace"
)

func init() {
	register(&command{name: "fidelity", summary: "the simulator against the real CPU engine: the same traces replayed in both, each figure's error", run: runFidelity})
}

const fidelityHelp = `
Fidelity holds the simulator to the real CPU engine (experiments/fidelity): it calibrates the simulator on this
CPU, draws a Poisson trace at each of --rates, replays it on the CPU engine and in the simulator under each of
--policies with the same model, KV pool, step budget and block size, and prints for each run the P50 and P95
TTFT, the mean TPOT and the output throughput, real beside simulated, with the simulator's error. It writes the
calibration, every run's results and the tables (fidelity.md) under --out, and exits 1 when an error is over
--limit percent.

The real runs all run at once in this process, each on one kernel thread timed by its own thread's CPU time, the
calibration beside them; as each run finishes a ballast run (fp16 at --ballast-rate, its results thrown away)
takes its place until the last ends, so that every step is timed under the same load (--ballast=false runs
without). --calibrate steps (the default) fits the calibration to the steps of --calibration-runs (policy@rate,
traces drawn with seed 2); grid times 'morphlab calibrate''s grid in --reps rounds; --calibration FILE uses that
calibration. The defaults took 57 minutes on two vCPUs that other jobs also held (BENCHMARKS.md).`

func runFidelity(e *env, args []string) error {
	fs := e.flags("[--out DIR] [flags]", fidelityHelp)
	o := fidelity.DefaultOptions()
	d := &o.Deployment
	fs.StringVar(&d.Model, "model", d.Model, "model `name` or checkpoint file")
	fs.StringVar(&d.DType, "dtype", d.DType, "`format` of the decoder layers at full precision")
	fs.StringVar(&d.KV.DType, "kv-cache-dtype", d.KV.DType, "KV cache element `type`")
	fs.IntVar(&d.KV.Blocks, "kv-blocks", d.KV.Blocks, "KV pool: `N` blocks beside the full-precision weights and the workspace")
	fs.IntVar(&d.KV.BlockSize, "block-size", d.KV.BlockSize, "KV block size in `tokens`")
	fs.IntVar(&d.Scheduler.MaxBatchedTokens, "max-num-batched-tokens", d.Scheduler.MaxBatchedTokens, "`tokens` one iteration feeds at most")
	var defRates, defRuns []string
	for _, r := range o.Rates {
		defRates = append(defRates, strconv.FormatFloat(r, 'g', -1, 64))
	}
	for _, l := range o.CalibrationRuns {
		defRuns = append(defRuns, l.Policy+"@"+strconv.FormatFloat(l.Rate, 'g', -1, 64))
	}
	rates := fs.String("rates", strings.Join(defRates, ","), "comma-separated Poisson `rates` (requests per second) compared")
	policies := fs.String("policies", strings.Join(o.Policies, ","), "comma-separated `policies` compared at each rate")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "each trace's length")
	prompt := fs.String("prompt", o.Lengths.Prompt.String(), "prompt length `distribution` (as 'morphlab trace gen')")
	output := fs.String("output", o.Lengths.Output.String(), "output length `distribution`")
	fs.IntVar(&o.MaxOutput, "max-output", o.MaxOutput, "outputs clipped to `tokens`")
	fs.IntVar(&o.Context, "clip", o.Context, "prompt and output clipped to `tokens` in all")
	fs.StringVar(&o.Calibrate, "calibrate", o.Calibrate, "how to calibrate: steps (of --calibration-runs) or grid")
	calRuns := fs.String("calibration-runs", strings.Join(defRuns, ","), "comma-separated `policy@rate` runs whose steps the calibration is fitted to")
	fs.IntVar(&o.Reps, "reps", o.Reps, "rounds over the grid (--calibrate grid)")
	calibration := fs.String("calibration", "", "use this calibration `file` instead of calibrating")
	fs.BoolVar(&o.Ballast, "ballast", o.Ballast, "keep the load on until the last run ends")
	fs.Float64Var(&o.BallastRate, "ballast-rate", o.BallastRate, "the ballast's Poisson `rate`")
	limit := fs.Float64("limit", 10, "the error, in `percent`, above which a figure fails")
	out := fs.String("out", "results/fidelity", "output `directory`")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	var err error
	if o.Rates, err = floats(*rates); err != nil {
		return usagef("--rates: %v", err)
	}
	o.Policies = strings.Split(*policies, ",")
	if o.Lengths, err = lengths(*prompt, *output); err != nil {
		return err
	}
	o.CalibrationRuns = nil
	for _, r := range strings.Split(*calRuns, ",") {
		policy, rate, ok := strings.Cut(r, "@")
		x, err := strconv.ParseFloat(rate, 64)
		if !ok || policy == "" || err != nil {
			return usagef("--calibration-runs: %q, want policy@rate", r)
		}
		o.CalibrationRuns = append(o.CalibrationRuns, fidelity.Load{Policy: policy, Rate: x})
	}
	if *calibration != "" {
		if o.Calibration, err = costmodel.LoadCalibration(*calibration); err != nil {
			return err
		}
	}
	o.Progress = func(msg string) { fmt.Fprintf(e.stderr, "fidelity: %s\n", msg) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := fidelity.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := r.Write(*out, *limit/100, e.stdout); err != nil {
		return err
	}
	if n := r.Over(*limit / 100); n > 0 {
		return fmt.Errorf("%d of %d figures are off by more than %g%%", n, len(r.Pairs)*len(fidelity.Metrics), *limit)
	}
	return nil
}

// lengths reads the --prompt and --output length distributions.
func lengths(prompt, output string) (trace.Independent, error) {
	p, err := trace.ParseDist(prompt)
	if err != nil {
		return trace.Independent{}, usagef("--prompt: %v", err)
	}
	o, err := trace.ParseDist(output)
	if err != nil {
		return trace.Independent{}, usagef("--output: %v", err)
	}
	return trace.Independent{Prompt: p, Output: o}, nil
}

// floats reads comma-separated numbers.
func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, x)
	}
	return out, nil
}
