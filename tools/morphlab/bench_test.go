package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/internal/benchsum"
)

// TestBenchRun runs go test on testdata/benchpkg through the command: raw file, table, exit status.
func TestBenchRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test binary")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.txt")
	t.Setenv("MORPHLAB_PROBE", "")
	code, stdout, stderr := runCLI("bench", "--pkg", "./testdata/benchpkg", "--count", "2", "--benchtime", "10x", "--out", out)
	if code != 0 {
		t.Fatalf("bench: exit %d, stderr %q", code, stderr)
	}
	sums, notes, err := benchsum.ReadFile(out, 0.95)
	if err != nil || len(sums) != 2 || len(notes) != 0 || sums[0].Runs != 2 {
		t.Errorf("raw output: %d summaries, notes %q (%v), want 2 benchmarks of 2 runs", len(sums), notes, err)
	}
	for _, want := range []string{"Sum  github.com/morphlab/morphlab/tools/morphlab/testdata/benchpkg\n",
		"| n    | runs | sec/op", "B/s", "elems", "\n| 64   | 2    | ", "\n| 4096 | 2    | ", " ± ∞ ", "± ∞: need >= 6 samples"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench table has no %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = runCLI("bench", "--pkg", "./testdata/benchpkg", "--count", "1", "--benchtime", "10x", "--out", out, "--json")
	var js []benchsum.Summary
	if err := json.Unmarshal([]byte(stdout), &js); code != 0 || err != nil || len(js) != 2 || js[0].Name != "Sum/n=64" ||
		len(js[0].Metrics) != 3 || js[0].Metrics[0].Unit != "sec/op" || js[0].Metrics[0].Lo != nil || js[0].Metrics[2].Unit != "elems" ||
		js[0].Metrics[2].Median != 64 {
		t.Errorf("bench --json: exit %d (%v), stderr %q:\n%s", code, err, stderr, stdout)
	}

	code, _, stderr = runCLI("bench", "--pkg", "./testdata/benchpkg", "--bench", "NoSuch", "--count", "1", "--out", out)
	if code != 1 || !strings.Contains(stderr, `morphlab bench: no benchmark matched "NoSuch"`) {
		t.Errorf("bench --bench NoSuch: exit %d, stderr %q; want 1 and a no-match line", code, stderr)
	}

	bad := filepath.Join(dir, "bad.json")
	code, _, stderr = runCLI("bench", "--pkg", "./testdata/benchpkg", "--probe", bad, "--out", out)
	if code != 1 || stderr != "morphlab bench: probe: load "+bad+": open "+bad+": no such file or directory\n" {
		t.Errorf("bench --probe %s: exit %d, stderr %q; want 1 and one line naming the file", bad, code, stderr)
	}
	for _, args := range [][]string{{"--plot", "x.jpg"}, {"--confidence", "1"}} {
		code, _, stderr = runCLI(append([]string{"bench", "--pkg", "./testdata/benchpkg"}, args...)...)
		if code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("bench %v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
}
