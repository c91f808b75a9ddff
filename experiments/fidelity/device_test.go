package fidelity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/trace"
)

// TestRunDevice runs the GPU comparison's pipeline on the CPU executor with a tiny model: each policy's run, the
// fit to their steps, both predictions, the tables and the files.
func TestRunDevice(t *testing.T) {
	o := DefaultDeviceOptions()
	o.Deployment = deploy.Deployment{Model: "stories260K", Executor: "cpu", Clock: "thread", Threads: 1,
		KV: deploy.KV{Blocks: 10, BlockSize: 16}, Scheduler: deploy.Scheduler{MaxBatchedTokens: 256}}
	o.Arrivals = trace.Schedule{{Duration: 1, PerSecond: 4}, {Duration: 1, PerSecond: 60}, {Duration: 1, PerSecond: 4}}
	o.Duration = 3 * time.Second
	o.Lengths = trace.Independent{Prompt: trace.LogNormal{Median: 64, Sigma: 0.5}, Output: trace.LogNormal{Median: 24, Sigma: 0.5}}
	o.MaxOutput, o.Context = 64, 512
	rep, err := RunDevice(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fit == nil {
		t.Fatalf("no fit: %v", rep.FitErr)
	}
	if len(rep.Runs) != 2 || rep.Fit.Steps == 0 || rep.Fit.HeldOutSteps == 0 || rep.Fit.Model != "stories260K" || rep.Fit.KV != "f32" {
		t.Fatalf("report: %d runs, fit %+v", len(rep.Runs), rep.Fit)
	}
	if rep.Runs[1].Real.Aggregates.SwapActions == 0 {
		t.Fatal("morph:default did not swap: the fit has no int4 steps to predict it with")
	}
	for _, run := range rep.Runs {
		if run.Fitted == nil {
			t.Fatalf("%s: no fitted prediction: %v", run.Policy, run.FittedErr)
		}
		n := len(rep.Trace.Requests)
		if run.Real.Aggregates.Requests != n || run.Catalog.Aggregates.Requests != n || run.Fitted.Aggregates.Requests != n {
			t.Fatalf("%s: %d, %d, %d requests, the trace has %d", run.Policy, run.Real.Aggregates.Requests,
				run.Catalog.Aggregates.Requests, run.Fitted.Aggregates.Requests, n)
		}
		if run.Real.Meta.Executor != "cpu" || run.Catalog.Meta.Device != "h200" || run.Fitted.Meta.Device != "h200" {
			t.Fatalf("%s: executor %q, predictions on %q and %q", run.Policy, run.Real.Meta.Executor, run.Catalog.Meta.Device, run.Fitted.Meta.Device)
		}
	}
	dir := t.TempDir()
	if err := rep.Write(dir, 0.1); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "device.md"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device.md:\n%s", md)
	for _, want := range []string{"morph:default", "sim, catalog h200", "P95 TTFT (ms)", "TTFT SLO violations"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("device.md lacks %q:\n%s", want, md)
		}
	}
	for _, f := range []string{"fit.json", "gpu-fp16/results.json", "sim-catalog-morph-default/results.json", "sim-fitted-fp16/results.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}
