package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/results"
)

// TestFailover: on the recorded run in experiments/failover/testdata, failover accounts for every request (its
// measured column), simulates the same fleet with r2 failing when it was killed, for as long as it was down, and
// writes both to failover.md and the simulation to sim/; bad flags are one-line usage errors.
func TestFailover(t *testing.T) {
	data := filepath.Join("..", "..", "experiments", "failover", "testdata")
	out := t.TempDir()
	args := []string{"failover", "--outcomes", filepath.Join(data, "outcomes.jsonl"), "--haproxy-log", filepath.Join(data, "haproxy.log"),
		"--events", filepath.Join(data, "events.txt"), "--servers", "r1,r2,r3", "--killed", "r2", "--check-inter", "1s",
		"--model", "llama-2-7b", "--device", "l4", "--out", out}
	code, stdout, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
	}
	md, err := os.ReadFile(filepath.Join(out, "failover.md"))
	if err != nil || string(md) != stdout {
		t.Fatalf("failover.md %v, not what was printed", err)
	}
	for _, row := range []string{"| sent                                     | 240      | 240       |", "| failed                                   | 16 ",
		"| detection: kill to marked down (s)       | 2.455    | 3.000     |", "Every request accounted for; the only failures are the streams cut on r2."} {
		if !strings.Contains(stdout, row) {
			t.Errorf("failover.md without %q:\n%s", row, stdout)
		}
	}
	r, err := results.Load(filepath.Join(out, "sim", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := r.Fleet.Faults
	if len(r.Requests) != 240 || len(r.Fleet.Replicas) != 3 || len(f) != 1 || f[0].Replica != 1 || math.Abs(f[0].At-11.978339137) > 1e-9 ||
		math.Abs(f[0].Restarted-f[0].At-10.017771872) > 1e-9 || f[0].Detected-f[0].At != 3 {
		t.Errorf("simulation: %d requests, %d replicas, faults %+v", len(r.Requests), len(r.Fleet.Replicas), f)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--killed", "r4"}, `--killed "r4" is not one of --servers r1,r2,r3`},
		{[]string{"--check-fall", "0"}, "--check-fall 0"},
	} {
		code, _, stderr := runCLI(append(args, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}
