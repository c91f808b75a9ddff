package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/fidelity"
	"github.com/morphlab/morphlab/internal/flagalias"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "calibrate", summary: "time the CPU executor over a grid of batches and fit the simulator's CPU step-time model", run: runCalibrate})
}

const calibrateHelp = `
Calibrate times the CPU executor (the real forward pass) over a grid of batch compositions and fits the
simulator's step-time model for this CPU to them by least squares (engine/executor/costmodel.Calibration): a cost a
layer and a layer-token for each weight format, and a layer's cost in steps of few tokens (1, 2-4, 5-8, 9-16
and 17-64: the kernels' loops change with the token count), a cost an attended key in prompt
chunks and in decode, and a cost a sampled row (experiments/fidelity.Calibrate). --model is a model name
(stories110M, ...), timed on seeded synthetic weights, or a checkpoint file. The grid: prompt chunks of 16, 64, 256
and 512 tokens (64 also after 256 cached positions, 128 after 512), decode batches of 1, 4 and 12 sequences at 64
and 384 positions, and one mixed step (8 decodes beside a 32-token chunk), positions scaled down for a model of a
shorter context, each with every layer in each of --formats and with the first and last format half and half;
each configuration's grid is timed in --reps rounds and each step's fastest time kept
on the wall clock (on a shared machine a burst of other work then spoils one round, not every run of a step),
its median on the CPU clock (what a run's steps, timed alike, see). Six more
steps of other shapes are timed the same way and left out of the fit, to report its error on steps it did not
see. About a minute on stories110M on two cores. The file written (--out) is what the simulator reads for the cpu device.

--clock sets how a step is timed, as 'morphlab run --clock' does: wall (elapsed time) or cpu (the process CPU
time the step used over the kernel threads). A calibration predicts runs on the same clock: wall for runs on
the wall clock of an idle machine, cpu for 'run --clock cpu', which a loaded machine skews less.

--steps fits the model to the steps of real runs instead of timing a grid: steps.jsonl files that 'morphlab run
--steps' or 'morphlab serve --steps' wrote (comma-separated), every fifth step held out. Those steps ran as a run runs them (sequences of
every length side by side, KV blocks wherever the pool had them, the engine's own work between steps), which a
grid timed on its own does not reproduce. --model, --kv-cache-dtype, --threads and --clock then say what the runs
were, for the file.`

func runCalibrate(e *env, args []string) error {
	fs := e.flags("--model M --out FILE [flags]", calibrateHelp)
	var df deploy.Flags
	df.RegisterModel(fs)
	formats := fs.String("formats", "f32,int8,int4", "comma-separated layer `formats` to time, the full precision first (f32, f16, int8, int4, q8_0, q4_0)")
	flagalias.Deprecate(fs, "format", "formats")
	out := fs.String("out", "", "write the calibration JSON to `file`")
	reps := fs.Int("reps", 3, "timed `rounds` over the grid")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	stepFiles := fs.String("steps", "", "fit the steps.jsonl `files` of real runs (comma-separated) instead of timing a grid")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	d, err := df.Deployment()
	if err != nil {
		return usagef("%v", err)
	}
	switch {
	case d.Model == "" || *out == "":
		return usagef("--model and --out are required")
	case *reps < 1:
		return usagef("--reps=%d, want at least 1", *reps)
	}
	var fmts []quant.Format
	for _, name := range strings.Split(*formats, ",") {
		f, err := quant.ParseFormat(strings.TrimSpace(name))
		if err != nil {
			return usagef("--formats: %v", err)
		}
		if f == quant.BF16 {
			return usagef("--formats: no CPU kernel runs bf16 weights")
		}
		if !slices.Contains(fmts, f) {
			fmts = append(fmts, f)
		}
	}
	var c *costmodel.Calibration
	start := time.Now()
	if *stepFiles != "" {
		cfg, err := deploy.ModelConfig(d.Model)
		if err != nil {
			return err
		}
		runs, err := fidelity.ReadSteps(cfg.NLayers, strings.Split(*stepFiles, ",")...)
		if err != nil {
			return err
		}
		if c, err = fidelity.FitSteps(d, runs...); err != nil {
			return err
		}
	} else {
		bar := newProgress(e.stderr, "calibrate")
		c, err = fidelity.Calibrate(d, fidelity.CalibrateOptions{Formats: fmts, Reps: *reps, Progress: bar.set})
		bar.clear()
		if err != nil {
			return err
		}
	}
	if err := c.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "fitted %d steps in %s; wrote %s\n", c.Steps+c.HeldOutSteps, time.Since(start).Round(time.Second), *out)
	return reportCalibration(e, c, d.Model, *asJSON)
}

// reportCalibration prints the calibration's fit and terms (a table, or JSON).
func reportCalibration(e *env, c *costmodel.Calibration, name string, asJSON bool) error {
	if asJSON {
		return writeJSON(e.stdout, c)
	}
	fmt.Fprintf(e.stdout, "%s on %s (%d threads, %s KV, %s clock): median error %.1f%% over the %d steps fitted, %.1f%% over %d held out\n\n",
		name, c.Machine, c.Threads, c.KV, c.Clock, c.MAPE, c.Steps, c.HeldOutMAPE, c.HeldOutSteps)
	rows := [][]string{}
	for _, ft := range c.Formats {
		rows = append(rows, []string{ft.Format + " a layer", numfmt.Figure(ft.Layer * 1e6)}, []string{ft.Format + " a layer-token", numfmt.Figure(ft.LayerToken * 1e6)})
		low := 1
		for _, b := range ft.Bands {
			tokens := fmt.Sprintf("%d-%d tokens", low, b.UpTo)
			if low == b.UpTo {
				tokens = fmt.Sprintf("%d token", low)
			}
			rows = append(rows, []string{fmt.Sprintf("%s a layer, step of %s", ft.Format, tokens), numfmt.Figure(b.Layer * 1e6)})
			low = b.UpTo + 1
		}
	}
	rows = append(rows, []string{"a prompt key a layer", numfmt.Figure(c.PrefillKey * 1e6)},
		[]string{"a decode key a layer", numfmt.Figure(c.DecodeKey * 1e6)}, []string{"a sampled row", numfmt.Figure(c.Sampled * 1e6)})
	return mdtable.Write(e.stdout, []string{"term", "µs"}, rows)
}
