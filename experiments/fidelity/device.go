package fidelity

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
)

// DeviceOptions are the settings of RunDevice: one bursty trace served on the GPU by the CUDA executor under each
// policy, and the simulator's predictions of the same runs on the catalog's device.
type DeviceOptions struct {
	// Deployment is the served model (model, dtype, KV pool, step budget, block size) on its executor, cuda
	// when unset (the tests run the pipeline on cpu); its policy is set for each run.
	Deployment deploy.Deployment
	// Device is the catalog GPU the simulator predicts the runs on (the GPU they ran on).
	Device   string
	Policies []string
	Arrivals trace.Process
	Duration time.Duration
	Lengths  trace.Independent
	// MaxOutput and Context clip the trace's outputs and whole requests.
	MaxOutput, Context int
	SLO                metrics.SLO
	// Progress, when set, is told what starts and ends.
	Progress func(msg string)
}

// DefaultDeviceOptions: Llama-2-7B's shape with seeded weights in f16 on an H200, 2,048 KV blocks of 16 tokens
// (32,768 tokens: the burst fills them), 2,048 tokens a step; 60 s of Poisson arrivals at 4/s with a 20-s burst
// at 24/s in the middle; prompts log-normal around 512 tokens and outputs around 128 (sigma 0.6; at most 512 out,
// 4,096 in all); fp16 and morph:default; TTFT SLO 1 s: a burst that the catalog's H200 predicts fp16 to serve
// with some requests over the SLO and morph:default with none.
func DefaultDeviceOptions() DeviceOptions {
	return DeviceOptions{
		Deployment: deploy.Deployment{Model: "llama2-7b", DType: "f16", Device: "h200",
			KV: deploy.KV{Blocks: 2048, BlockSize: 16}, Scheduler: deploy.Scheduler{MaxBatchedTokens: 2048}},
		Device:    "h200",
		Policies:  []string{"fp16", "morph:default"},
		Arrivals:  trace.Schedule{{Duration: 20, PerSecond: 4}, {Duration: 20, PerSecond: 24}, {Duration: 20, PerSecond: 4}},
		Duration:  60 * time.Second,
		Lengths:   trace.Independent{Prompt: trace.LogNormal{Median: 512, Sigma: 0.6}, Output: trace.LogNormal{Median: 128, Sigma: 0.6}},
		MaxOutput: 512,
		Context:   4096,
		SLO:       metrics.SLO{TTFT: time.Second},
	}
}

// DeviceRun is one policy's run on the GPU and the simulator's two predictions of it: with the catalog's profile
// of the device (its ceilings and the efficiencies fitted to Vidur's measured operators) and with the step times
// fitted to the GPU runs' steps.
type DeviceRun struct {
	Policy                string
	Real, Catalog, Fitted *results.Run
	// FittedErr says why there is no fitted prediction (the runs took no steps in a format the policy uses).
	FittedErr error
	events    [3][]engine.Event
}

// DeviceReport is what RunDevice produced.
type DeviceReport struct {
	Options DeviceOptions
	Trace   *trace.Trace
	// Fit is the step-time model fitted to the GPU runs' steps, four in five; the fifth are held out. FitErr
	// says why there is none (the steps did not vary enough to fit); the runs and the catalog's predictions stand.
	Fit    *costmodel.Calibration
	FitErr error
	Runs   []*DeviceRun
}

// RunDevice replays the trace (seed 1) on GPU 0 under each policy, fits the simulator's step times to the steps
// the runs took, and replays the trace in the simulator under each policy twice: on the catalog's device and with
// the fit. It needs a morphlab built with -tags cuda on a machine with a GPU.
func RunDevice(ctx context.Context, o DeviceOptions) (*DeviceReport, error) {
	if len(o.Policies) == 0 {
		return nil, fmt.Errorf("fidelity: no policies to compare")
	}
	policies := make([]morph.Policy, len(o.Policies))
	for i, name := range o.Policies {
		var err error
		if policies[i], err = morph.Parse(name); err != nil {
			return nil, fmt.Errorf("fidelity: %v", err)
		}
	}
	t, err := trace.Generate(trace.Spec{Process: o.Arrivals, Duration: o.Duration.Seconds(), Lengths: o.Lengths}, 1)
	if err == nil {
		t, err = trace.Clip(t, trace.Limits{Context: o.Context, Output: o.MaxOutput})
	}
	if err != nil {
		return nil, err
	}
	rep := &DeviceReport{Options: o, Trace: t}
	var steps [][]costmodel.Sample
	var cfg model.Config
	var kv model.KVType
	for _, p := range policies {
		run := &DeviceRun{Policy: p.String()}
		rep.Runs = append(rep.Runs, run)
		d := o.Deployment
		d.Policy = p
		if d.Executor == "" {
			d.Executor = "cuda"
		}
		o.progress("load " + d.Model + " for " + run.Policy)
		in, err := d.Build()
		if err != nil {
			return nil, err
		}
		o.progress("run " + run.Policy + " on the GPU")
		run.Real, run.events[0], err = in.Replay(ctx, t, deploy.ReplayOptions{SLO: o.SLO, KeepSteps: true})
		cfg, kv = in.Config, in.KVType
		if c, ok := in.Executor.(interface{ Close() }); ok {
			c.Close() // the next policy's executor needs the GPU's memory
		}
		if err != nil {
			return nil, err
		}
		steps = append(steps, run.Real.Steps)
	}
	if f, err := fitHeldOut(steps, cfg.NLayers); err != nil {
		rep.FitErr = err
	} else {
		f.Machine, f.Model, f.Config, f.KV, f.Clock = o.Device+" (GPU 0, measured)", o.Deployment.Model, cfg, kv.String(), "wall"
		rep.Fit = f
	}
	for i, p := range policies {
		run := rep.Runs[i]
		if run.Catalog, run.events[1], err = simulate(ctx, o.Deployment, o.Device, nil, p, t, o.SLO); err != nil {
			return nil, err
		}
		if rep.Fit == nil {
			run.FittedErr = rep.FitErr
			continue
		}
		run.Fitted, run.events[2], run.FittedErr = simulate(ctx, o.Deployment, o.Device, rep.Fit, p, t, o.SLO)
	}
	return rep, nil
}

func (o DeviceOptions) progress(msg string) {
	if o.Progress != nil {
		o.Progress(msg)
	}
}

// CatalogOver is the number of the catalog predictions' figures whose error is over limit (a share).
func (r *DeviceReport) CatalogOver(limit float64) int {
	n := 0
	for _, run := range r.Runs {
		for _, m := range Metrics {
			if math.Abs(relErr(m.Value(run.Catalog.Aggregates), m.Value(run.Real.Aggregates))) > limit {
				n++
			}
		}
	}
	return n
}

// WriteTables prints the fit and, for each policy, each metric measured beside the two predictions with their
// errors, marking the errors over limit.
func (r *DeviceReport) WriteTables(w io.Writer, limit float64) error {
	if f := r.Fit; f != nil {
		fmt.Fprintf(w, "step times fitted to the GPU runs: %s, median error %.1f%% over the %d steps fitted, %.1f%% over %d held out\n",
			f.Machine, f.MAPE, f.Steps, f.HeldOutMAPE, f.HeldOutSteps)
	} else {
		fmt.Fprintf(w, "no step times fitted to the GPU runs: %v\n", r.FitErr)
	}
	for _, run := range r.Runs {
		ra := run.Real.Aggregates
		fitted := "no fitted prediction: " + fmt.Sprint(run.FittedErr)
		if run.Fitted != nil {
			fitted = fmt.Sprintf("fitted sim %d / %d", run.Fitted.Aggregates.SwapActions, run.Fitted.Aggregates.Preemptions)
		}
		fmt.Fprintf(w, "\n%s, %s for %v, %s, %d KV blocks: %d requests, GPU %d swaps / %d preemptions, catalog sim %d / %d, %s\n\n",
			r.Options.Deployment.Model, r.Options.Arrivals, r.Options.Duration, run.Policy, run.Real.Meta.KVBlocksFull, ra.Requests,
			ra.SwapActions, ra.Preemptions, run.Catalog.Aggregates.SwapActions, run.Catalog.Aggregates.Preemptions, fitted)
		var rows [][]string
		cell := func(run *results.Run, m func(results.Aggregates) float64, real float64) string {
			if run == nil {
				return "n/a"
			}
			v := m(run.Aggregates)
			e := relErr(v, real)
			over := ""
			if math.Abs(e) > limit {
				over = ", over"
			}
			return fmt.Sprintf("%.4g (%+.1f%%%s)", v, 100*e, over)
		}
		for _, m := range Metrics {
			real := m.Value(ra)
			rows = append(rows, []string{m.Name, fmt.Sprintf("%.4g", real), cell(run.Catalog, m.Value, real), cell(run.Fitted, m.Value, real)})
		}
		violations := func(run *results.Run) string {
			if run == nil {
				return "n/a"
			}
			return fmt.Sprintf("%.1f", 100*run.Aggregates.SLOViolationRate)
		}
		rows = append(rows, []string{"TTFT SLO violations (%)", violations(run.Real), violations(run.Catalog), violations(run.Fitted)})
		if err := mdtable.Write(w, []string{"metric", "GPU", "sim, catalog " + r.Options.Device, "sim, fitted"}, rows); err != nil {
			return err
		}
	}
	return nil
}

// Write writes the fit, each run's results (results.json, events.jsonl, steps) and the predictions', and the
// tables (device.md, and to each of also) under dir.
func (r *DeviceReport) Write(dir string, limit float64, also ...io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if r.Fit != nil {
		if err := r.Fit.Save(filepath.Join(dir, "fit.json")); err != nil {
			return err
		}
	}
	for _, run := range r.Runs {
		name := dirName(run.Policy)
		for i, part := range []struct {
			prefix string
			r      *results.Run
		}{{"gpu-", run.Real}, {"sim-catalog-", run.Catalog}, {"sim-fitted-", run.Fitted}} {
			if part.r == nil {
				continue
			}
			if err := part.r.Write(filepath.Join(dir, part.prefix+name), run.events[i]); err != nil {
				return err
			}
		}
	}
	return writeTables(filepath.Join(dir, "device.md"), func(w io.Writer) error { return r.WriteTables(w, limit) }, also)
}
