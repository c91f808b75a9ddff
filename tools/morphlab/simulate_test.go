package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/numfmt"
)

// burstFile writes a seeded on/off burst of n requests and returns its path.
func burstFile(t testing.TB, dir string, n int) string {
	tr, err := trace.Generate(trace.Spec{Process: trace.OnOff{OnRate: 12, OffRate: 1, OnMean: 5, OffMean: 10},
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 50, Max: 900}, Output: trace.Uniform{Min: 20, Max: 400}}, N: n}, 7)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "burst.csv")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := trace.Write(f, tr, "vidur"); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSimulate: simulate writes results with every request served, the same inputs give byte-identical
// results.json, morph:default cuts fp16's SLO violations on a bursty load, and bad flags are one-line usage errors.
func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	tr := burstFile(t, dir, 600)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	runs := map[string]*results.Run{}
	for _, c := range []struct{ name, policy string }{{"fp16", "fp16"}, {"morph", "morph:default"}, {"morph-again", "morph:default"}} {
		code, stdout, stderr := runCLI("simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", tr, "--policy", c.policy,
			"--kv-blocks", "958", "--out", filepath.Join(dir, c.name))
		if code != 0 || !strings.Contains(stdout, c.policy) {
			t.Fatalf("simulate %s: exit %d, %q, %q", c.policy, code, stdout, stderr)
		}
		r, err := results.Load(filepath.Join(dir, c.name, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Aggregates.Completed != 600 || r.Meta.KVBlocksFull != 958 || r.Meta.Executor != "sim" {
			t.Fatalf("%s: %d of 600 completed, pool %d, executor %q", c.policy, r.Aggregates.Completed, r.Meta.KVBlocksFull, r.Meta.Executor)
		}
		runs[c.name] = r
	}
	if !bytes.Equal(read("morph"), read("morph-again")) {
		t.Error("two simulations of the same inputs wrote different results.json")
	}
	f, m := runs["fp16"].Aggregates, runs["morph"].Aggregates
	if f.SLOViolations == 0 || m.SLOViolations >= f.SLOViolations || m.SwapActions == 0 {
		t.Errorf("fp16 %d violations, morph:default %d with %d swaps: the burst should overload fp16 and morphing help", f.SLOViolations, m.SLOViolations, m.SwapActions)
	}
	t.Logf("fp16: %d violations, P95 TTFT %.0f ms; morph:default: %d, %.0f ms, %d swaps, %.0f%% tokens at full precision",
		f.SLOViolations, f.TTFT.P95, m.SLOViolations, m.TTFT.P95, m.SwapActions, 100*m.FullPrecision)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", tr, "--out", dir, "--model", "gpt-9", "--device", "l4"}, `--model: model "gpt-9" is neither a file nor a model name: unknown model "gpt-9"`},
		{[]string{"--trace", tr, "--out", dir, "--model", "llama-2-7b", "--device", "tpu"}, `--device: unknown device "tpu"`},
		{[]string{"--trace", tr, "--out", dir, "--model", "llama-2-7b"}, "the sim needs a device"},
		{[]string{"--trace", tr, "--out", dir, "--device", "cpu", "--model", "stories110M"}, "needs a calibration file"},
		{[]string{"--out", dir, "--model", "llama-2-7b", "--device", "l4"}, "--trace is required"},
		{[]string{"--trace", tr, "--out", dir, "--model", "llama-2-7b", "--device", "l4", "--gpu-memory-utilization", "2"}, "utilization 2"},
		{[]string{"--trace", tr, "--out", dir, "--model", "llama-2-7b", "--device", "l4", "--clock", "cpu"}, `clock "cpu": the sim runs in virtual time`},
	} {
		code, _, stderr := runCLI(append([]string{"simulate"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("simulate %v: exit %d, %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// TestSimulateFault: --fail-replica kills a replica of the fleet and starts it again: every request has one
// outcome, completed or failed with the error, results.json records the fault with the proxy's times from the
// flags, and the requests that failed are those it counts lost.
func TestSimulateFault(t *testing.T) {
	dir := t.TempDir()
	tr := burstFile(t, dir, 300)
	out := filepath.Join(dir, "fault")
	code, stdout, stderr := runCLI("simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", tr, "--kv-blocks", "958",
		"--replicas", "3", "--router", "least-outstanding", "--fail-replica", "1@20s+30s", "--fail-detect", "3s", "--fail-restart", "5s", "--out", out)
	if code != 0 {
		t.Fatalf("simulate --fail-replica: exit %d, %q, %q", code, stdout, stderr)
	}
	r, err := results.Load(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Fleet.Faults) != 1 {
		t.Fatalf("faults %+v, want one", r.Fleet.Faults)
	}
	f := r.Fleet.Faults[0]
	a := r.Aggregates
	if f.Replica != 1 || f.At != 20 || f.Detected != 23 || f.Restarted != 50 || f.Serving != 55 || f.Lost == 0 || a.Failed != f.Lost ||
		a.Completed+a.Failed != 300 || len(r.Requests) != 300 {
		t.Errorf("fault %+v; %d requests, %d completed, %d failed", f, len(r.Requests), a.Completed, a.Failed)
	}
}

// TestSimulateFleet: --replicas and --autoscale make simulate replay the trace on a fleet: every request served,
// results.json with the fleet's replicas and cost, and its plot; bad fleet flags are one-line usage errors.
func TestSimulateFleet(t *testing.T) {
	dir := t.TempDir()
	tr := burstFile(t, dir, 300)
	out := filepath.Join(dir, "fleet")
	code, stdout, stderr := runCLI("simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", tr, "--kv-blocks", "958",
		"--replicas", "2", "--router", "least-kv", "--autoscale", "outstanding=8", "--max-replicas", "4", "--out", out)
	if code != 0 || !strings.Contains(stdout, "fp16") {
		t.Fatalf("simulate --replicas: exit %d, %q, %q", code, stdout, stderr)
	}
	r, err := results.Load(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Aggregates.Completed != 300 || r.Fleet == nil || r.Fleet.Router != "least-kv" || len(r.Fleet.Replicas) < 2 || !(r.Fleet.Cost > 0) {
		t.Fatalf("fleet results: %d completed, %+v", r.Aggregates.Completed, r.Fleet)
	}
	if _, err := os.Stat(filepath.Join(out, "fleet.svg")); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "0"}, "--replicas 0, want at least 1"},
		{[]string{"--replicas", "2", "--router", "random"}, `--router "random"`},
		{[]string{"--replicas", "2", "--rate-limit", "5"}, "a rate with a burst"},
		{[]string{"--autoscale", "outstanding"}, "want metric=target"},
		{[]string{"--autoscale", "gpu=3"}, `metric "gpu"`},
		{[]string{"--replicas", "2", "--fail-replica", "1@10s"}, "--fail-replica: fault \"1@10s\", want REPLICA@AT+DOWN"},
		{[]string{"--replicas", "2", "--fail-replica", "2@10s+10s"}, "fault of replica 2, want one of the 2"},
		{[]string{"--replicas", "2", "--fail-replica", "1@10s+10s", "--fail-response", "headers"}, "--fail-response: response start \"headers\""},
	} {
		args := append([]string{"simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", tr, "--out", dir}, c.args...)
		code, _, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// TestSimulateLoadtest: --loadtest serves the requests a load test's report describes, rate by rate: as many
// requests of the lengths loadtest drew from its seed, each rate's results in its own directory, the curve and its
// knee (under the report's target) in loadtest.json, which --compare sets beside the measured report.
func TestSimulateLoadtest(t *testing.T) {
	dir := t.TempDir()
	measured := loadtest.Report{URL: "http://127.0.0.1:8000", Model: "m", Burstiness: 1, DurationS: 2, Seed: 5, RangeRatio: 0.5, IgnoreEOS: true,
		PromptTokens: 200, OutputTokens: 100, Vocab: 32000, KneeTarget: &loadtest.KneeTarget{Metric: "ttft", Limit: time.Second},
		Runs: []loadtest.Point{{Rate: 2}, {Rate: 8}}}
	file := filepath.Join(dir, "measured.json")
	writeReport := func(path string, r loadtest.Report) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeReport(file, measured)
	out := filepath.Join(dir, "sim")
	code, stdout, stderr := runCLI("simulate", "--loadtest", file, "--model", "llama-2-7b", "--device", "l4", "--kv-blocks", "958", "--out", out, "--json")
	if code != 0 {
		t.Fatalf("simulate --loadtest: exit %d, %s", code, stderr)
	}
	var r loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || len(r.Runs) != 2 {
		t.Fatalf("stdout is not a report of two runs (%v):\n%s", err, stdout)
	}
	for i, rate := range []float64{2, 8} {
		n := int(rate * 2)
		pl, ol, err := loadtest.RandomLengths(n, 200, 100, 0.5, 5)
		if err != nil {
			t.Fatal(err)
		}
		m := r.Runs[i].Metrics
		if r.Runs[i].Rate != rate || m.Requests != n || m.Completed != n || m.TotalInputTokens != sum(pl) || m.TotalOutputTokens != sum(ol) {
			t.Errorf("rate %v: %d requests, %d completed, %d prompt and %d output tokens; want %d, %d, %d and %d",
				r.Runs[i].Rate, m.Requests, m.Completed, m.TotalInputTokens, m.TotalOutputTokens, n, n, sum(pl), sum(ol))
		}
		if _, err := results.Load(filepath.Join(out, fmt.Sprintf("rate-%v", rate), "results.json")); err != nil {
			t.Error(err)
		}
	}
	if r.Knee == nil || r.Knee.Rate != 8 || r.KneeTarget == nil || *r.KneeTarget != *measured.KneeTarget {
		t.Errorf("knee %+v under %+v; want the 8 req/s run under the report's target", r.Knee, r.KneeTarget)
	}
	saved, err := os.ReadFile(filepath.Join(out, "loadtest.json"))
	if err != nil || !bytes.Equal(saved, []byte(stdout)) {
		t.Errorf("loadtest.json differs from the report printed (%v)", err)
	}
	code, stdout, stderr = runCLI("loadtest", "--compare", "measured="+file+",simulated="+filepath.Join(out, "loadtest.json"), "--knee", "ttft=1s",
		"--plot", filepath.Join(dir, "both"))
	if rows := tableRows(stdout); code != 0 || len(rows["simulated"]) != 5 || rows["simulated"][1] != "8.000" ||
		len(rows["8.000"]) != 2 || rows["8.000"][0] != "0" || rows["8.000"][1] != numfmt.Figure(r.Runs[1].Metrics.TTFT.P95) {
		t.Errorf("compare: exit %d, %s:\n%s", code, stderr, stdout)
	}

	text := measured
	text.TextPrompts = true
	writeReport(file, text)
	if code, _, stderr := runCLI("simulate", "--loadtest", file, "--model", "llama-2-7b", "--device", "l4", "--out", out); code != 1 ||
		!strings.Contains(stderr, "--loadtest "+file+": the load test sent text prompts") {
		t.Errorf("a report of text prompts: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI("simulate", "--loadtest", file, "--trace", file, "--model", "llama-2-7b", "--device", "l4", "--out", out); code != 2 ||
		!strings.Contains(stderr, "give one of --trace and --loadtest") {
		t.Errorf("--trace and --loadtest: exit %d, %q", code, stderr)
	}
}
