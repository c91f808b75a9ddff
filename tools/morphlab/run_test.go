package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/results"
)

// TestRunCommand replays a small burst on stories260K's shape under fp16, static:int4 and morph:performance in
// CPU-time virtual time: every request completes, static:int4 starts with a larger pool, morph swaps, and bad flags
// are one-line usage errors. The 40 requests all arrive at once and need ten times the 30 blocks, so that the
// pressure that makes morph swap (a blocked prefill, KV usage over its trigger) comes from counts, not from how long
// the steps took: a step's CPU time counts the kernel threads' polling, which the machine's load changes, and
// arrivals spread over time let a run whose steps measured short finish each request before the next arrived.
func TestRunCommand(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.csv")
	rows := "arrived_at,num_prefill_tokens,num_decode_tokens\n"
	for i := range 40 {
		rows += fmt.Sprintf("0,%d,%d\n", 30+7*i%90, 20+5*i%40)
	}
	if err := os.WriteFile(tr, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := map[string]*results.Run{}
	for _, p := range []string{"fp16", "static:int4", "morph:performance:persistence=1"} {
		out := filepath.Join(dir, strings.ReplaceAll(p, ":", "_"))
		code, stdout, stderr := runCLI("run", "--model", "stories260K", "--trace", tr, "--policy", p, "--kv-blocks", "30",
			"--clock", "cpu", "--max-num-batched-tokens", "64", "--out", out)
		if code != 0 || !strings.Contains(stdout, "| "+p) {
			t.Fatalf("run %s: exit %d, stdout %q, stderr %q", p, code, stdout, stderr)
		}
		r, err := results.Load(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Aggregates.Completed != 40 || r.Meta.KVBlocksFull != 30 || r.Meta.Trace.Requests != 40 || len(r.Timeline) == 0 {
			t.Fatalf("%s: %d completed, pool %d, trace %+v, %d timeline points", p, r.Aggregates.Completed, r.Meta.KVBlocksFull, r.Meta.Trace, len(r.Timeline))
		}
		runs[p] = r
	}
	if a := runs["static:int4"].Aggregates; a.PeakKVAttached <= 30 || a.FullPrecision != 0 {
		t.Errorf("static:int4: %d blocks attached, %.2f of tokens at full precision; want more than 30 and none", a.PeakKVAttached, a.FullPrecision)
	}
	if a := runs["morph:performance:persistence=1"].Aggregates; a.SwapActions == 0 || a.MaxQuantized == 0 {
		t.Errorf("morph: %d swap actions, at most %d layers quantized; the burst should make it swap", a.SwapActions, a.MaxQuantized)
	}
	ref := filepath.Join(dir, "ref")
	if code, _, stderr := runCLI("run", "--model", "stories260K", "--trace", tr, "--kv-blocks", "30", "--clock", "cpu", "--max-num-batched-tokens", "64",
		"--keep-tokens", "--out", ref); code != 0 {
		t.Fatalf("run --keep-tokens: %s", stderr)
	}
	same := filepath.Join(dir, "same")
	code, _, stderr := runCLI("run", "--model", "stories260K", "--trace", tr, "--kv-blocks", "30", "--clock", "cpu", "--max-num-batched-tokens", "64",
		"--reference", filepath.Join(ref, "results.json"), "--out", same)
	r, err := results.Load(filepath.Join(same, "results.json"))
	if code != 0 || err != nil || r.Quality == nil || r.Quality.ExactMatch != 1 || r.Quality.TokenAgreement != 1 {
		t.Fatalf("fp16 against fp16: exit %d (%s), %v, quality %+v; want full agreement", code, stderr, err, r.Quality)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "stories260K", "--trace", tr, "--kv-blocks", "30"}, "--out is required"},
		{[]string{"--model", "stories260K", "--trace", tr, "--kv-blocks", "30", "--memory", "64MiB", "--out", dir}, "give one of them"},
		{[]string{"--model", "stories260K", "--trace", tr, "--out", dir, "--device", "l4"}, "the cpu executor runs on this CPU"},
		{[]string{"--model", "stories260K", "--trace", tr, "--kv-blocks", "30", "--out", dir, "--policy", "morph:fast"}, `mode "fast"`},
		{[]string{"--trace", tr, "--kv-blocks", "30", "--out", dir}, "--model is required"},
		{[]string{"--model", "stories260K", "--trace", tr, "--kv-blocks", "30", "--out", dir, "--clock", "sun"}, `clock "sun", want wall, cpu or thread`},
		{[]string{"--model", "stories260K", "--trace", tr, "--out", dir, "--clock", "thread"}, "the thread clock times one kernel thread"},
	} {
		code, _, stderr := runCLI(append([]string{"run"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("run %v: exit %d, stderr %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// TestReproduceQuick runs the quick suite with two policies: summary.md and the headline come out.
func TestReproduceQuick(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI("reproduce", "--quick", "--policies", "fp16,morph:default", "--out", out)
	if code != 0 || !strings.Contains(stdout, "TTFT-SLO violations cut by morph:default") {
		t.Fatalf("reproduce --quick: exit %d, %q, %q", code, stdout, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(out, "summary.md")); err != nil || !strings.Contains(string(b), "## Headline") {
		t.Fatalf("summary.md: %v", err)
	}
}
