package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanCommand plans two minutes of Poisson traffic over one device and two policies, fixed fleets only: it
// prints and writes plan.md (the winner, the capacity method's count, every candidate), plan.json, the winner's
// results.json and its replica's Latency-RPS curve; without --trace or --quality-loss it is a usage error.
func TestPlanCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the plan in -short mode")
	}
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.csv")
	if code, _, stderr := runCLI("trace", "gen", "--process", "poisson:4", "--duration", "2m", "--prompt", "lognormal:600:0.8",
		"--output", "lognormal:100:0.8", "--out", tr); code != 0 {
		t.Fatalf("trace gen: %s", stderr)
	}
	out := filepath.Join(dir, "plan")
	code, stdout, stderr := runCLI("plan", "--trace", tr, "--quality-loss", "1", "--devices", "h200", "--policies", "fp16,static:int4",
		"--autoscalers", "", "--out", out)
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Cheapest: h200, fp16, 1 replica:", "The capacity method", "| h200   | static:int4", "pruned: quality loss"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan's output lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"plan.md", "plan.json", "winner/results.json", "latency-rps.png", "latency-rps.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if code, _, stderr := runCLI("plan", "--trace", tr); code != 2 || !strings.Contains(stderr, "--quality-loss are required") {
		t.Errorf("plan without --quality-loss: exit %d, %q; want 2 and a usage error", code, stderr)
	}
}
