package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/benchfmt"
)

func TestPrintBenchTables(t *testing.T) {
	f, err := os.Open("../../experiments/benchfmt/testdata/sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := benchfmt.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := printBenchTables(&b, benchfmt.Summarize(rs)); err != nil {
		t.Fatal(err)
	}
	want := `BenchmarkGEMM  github.com/morphlab/morphlab/kernels/cpu
m   n     k     runs  ns/op      MB/s  GFLOP/s  %bw    %fma
1   4096  4096  3     10500000   6390  3.196    41.50  -
64  4096  4096  2     350000000  -     6.264    -      1.650

BenchmarkRMSNorm  github.com/morphlab/morphlab/kernels/cpu
dim   runs  ns/op
4096  2     1100

BenchmarkSum  github.com/morphlab/morphlab/kernels/probe
procs  runs  ns/op
2      3     30.00
1      1     25.00
`
	if b.String() != want {
		t.Errorf("tables:\n%s\nwant:\n%s", b.String(), want)
	}
}

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
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := benchfmt.Parse(strings.NewReader(string(raw)))
	if err != nil || len(rs) != 4 {
		t.Errorf("raw output has %d results (%v), want 4:\n%s", len(rs), err, raw)
	}
	for _, want := range []string{"BenchmarkSum  github.com/morphlab/morphlab/tools/morphlab/testdata/benchpkg\n",
		"n     runs  ns/op", "MB/s", "elems", "\n64    2  ", "\n4096  2  "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench table has no %q:\n%s", want, stdout)
		}
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
}
