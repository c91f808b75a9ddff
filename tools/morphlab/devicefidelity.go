package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/morphlab/morphlab/experiments/fidelity"
	"github.com/morphlab/morphlab/experiments/trace"
)

func init() {
	register(&command{name: "device-fidelity", summary: "the simulator against the CUDA engine on this machine's GPU: one bursty trace in both, each figure's error",
		run: runDeviceFidelity})
}

const deviceFidelityHelp = `
Device-fidelity holds the simulator to the CUDA engine (experiments/fidelity.RunDevice): it draws one trace of
--arrivals, serves it on GPU 0 with the CUDA executor under each of --policies (wall clock, swaps overlapped with
the steps), fits the simulator's step times to the steps those runs took (four in five; the fifth held out), and
replays the trace in the simulator twice under each policy: on the catalog's --device (its ceilings and the
efficiencies fitted to Vidur's operator profiles) and with the fit. It prints each run's P50 and P95 TTFT, mean
TPOT, output throughput and SLO violations, measured beside both predictions with their errors, writes the fit
(fit.json, a calibration 'morphlab simulate --calibration' takes), every run's results and the tables (device.md)
under --out, and exits 1 when a catalog prediction's error is over --limit percent.

It needs a morphlab built with -tags cuda ('make device-bundle' builds build/device/morphlab) and a GPU (sm_80
or newer). The defaults serve Llama-2-7B's shape with seeded weights in f16.`

func runDeviceFidelity(e *env, args []string) error {
	fs := e.flags("[--out DIR] [flags]", deviceFidelityHelp)
	o := fidelity.DefaultDeviceOptions()
	d := &o.Deployment
	fs.StringVar(&d.Model, "model", d.Model, "model `name` or checkpoint file")
	fs.StringVar(&d.DType, "dtype", d.DType, "`format` of the decoder layers at full precision: f16, bf16 or f32")
	fs.IntVar(&d.KV.Blocks, "kv-blocks", d.KV.Blocks, "KV pool: `N` blocks beside the full-precision weights and the workspace")
	fs.IntVar(&d.KV.BlockSize, "block-size", d.KV.BlockSize, "KV block size in `tokens`")
	fs.IntVar(&d.Scheduler.MaxBatchedTokens, "max-num-batched-tokens", d.Scheduler.MaxBatchedTokens, "`tokens` one iteration feeds at most")
	fs.StringVar(&o.Device, "device", o.Device, "the catalog `GPU` the simulator predicts on: the one this machine has")
	policies := fs.String("policies", strings.Join(o.Policies, ","), "comma-separated `policies` compared")
	arrivals := fs.String("arrivals", o.Arrivals.String(), "arrival `process` (as 'morphlab trace gen')")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "the trace's length")
	prompt := fs.String("prompt", o.Lengths.Prompt.String(), "prompt length `distribution` (as 'morphlab trace gen')")
	output := fs.String("output", o.Lengths.Output.String(), "output length `distribution`")
	fs.IntVar(&o.MaxOutput, "max-output", o.MaxOutput, "outputs clipped to `tokens`")
	fs.IntVar(&o.Context, "clip", o.Context, "prompt and output clipped to `tokens` in all")
	fs.DurationVar(&o.SLO.TTFT, "ttft-slo", o.SLO.TTFT, "the TTFT SLO")
	limit := fs.Float64("limit", 10, "the error, in `percent`, above which a catalog prediction fails")
	out := fs.String("out", "results/device-fidelity", "output `directory`")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	var err error
	o.Policies = strings.Split(*policies, ",")
	d.Device = o.Device
	if o.Arrivals, err = trace.ParseProcess(*arrivals); err != nil {
		return usagef("--arrivals: %v", err)
	}
	if o.Lengths, err = lengths(*prompt, *output); err != nil {
		return err
	}
	o.Progress = func(msg string) { fmt.Fprintf(e.stderr, "device-fidelity: %s\n", msg) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := fidelity.RunDevice(ctx, o)
	if err != nil {
		return err
	}
	if err := r.Write(*out, *limit/100, e.stdout); err != nil {
		return err
	}
	if n := r.CatalogOver(*limit / 100); n > 0 {
		return fmt.Errorf("%d of %d catalog predictions are off by more than %g%%", n, len(r.Runs)*len(fidelity.Metrics), *limit)
	}
	return nil
}
