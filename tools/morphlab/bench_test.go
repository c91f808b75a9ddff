package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchSummaries checks the medians and intervals against values worked out by hand: with 6 runs the 95%
// interval of the median is [min, max] (order statistics 1 and 6, at level 1 - 2/64), with fewer it is ±∞.
func TestBenchSummaries(t *testing.T) {
	sums, notes, err := summarizeBenchFile("testdata/bench-sample.txt", 0.95)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sums {
		names = append(names, s.Name+" "+s.Pkg[strings.LastIndexByte(s.Pkg, '/')+1:]+" "+strconv.Itoa(s.Procs)+" "+strconv.Itoa(s.Runs))
	}
	want := []string{"GEMM/m=1/n=4096/k=4096 cpu 2 3", "GEMM/m=64/n=4096/k=4096 cpu 2 2", "RMSNorm/dim=4096 cpu 2 2",
		"foo cpu 2 1", "Sum probe 2 3", "Sum probe 1 1", "Copy/n=64 half 2 6"}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("summaries:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if len(notes) != 3 || !strings.HasPrefix(notes[0], "testdata/bench-sample.txt:17: ") {
		t.Errorf("notes %q, want the three malformed result lines, the first at line 17", notes)
	}
	cp := sums[6]
	ns, ok := cp.metric("sec/op")
	if !ok || !near(ns.Median, 12.5e-9) || ns.Lo == nil || !near(*ns.Lo, 10e-9) || !near(*ns.Hi, 20e-9) ||
		ns.Confidence != 1-2.0/64 || ns.N != 6 {
		t.Errorf("Copy sec/op = %+v, want median 12.5e-9 in [10e-9, 20e-9] at 0.96875 over 6 runs", ns)
	}
	gemm, _ := sums[0].metric("GFLOP/s")
	if gemm.Median != 3.196 || gemm.Lo != nil || gemm.Hi != nil {
		t.Errorf("GEMM GFLOP/s = %+v, want median 3.196 and no interval from 3 runs", gemm)
	}
}

// near reports whether a and b agree to 12 digits (the unit tidying multiplies by 1e-9).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

func TestPrintBenchTables(t *testing.T) {
	sums, _, err := summarizeBenchFile("testdata/bench-sample.txt", 0.95)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := printBenchTables(&b, sums); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want, err := os.ReadFile("testdata/bench-sample.golden")
	if err != nil || got != string(want) {
		os.WriteFile("testdata/bench-sample.got", []byte(got), 0o644)
		t.Errorf("tables differ from testdata/bench-sample.golden (got in testdata/bench-sample.got):\n%s", got)
	}
}

func TestBenchPlot(t *testing.T) {
	sums, _, err := summarizeBenchFile("testdata/bench-sample.txt", 0.95)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"b.png", "b.svg"} {
		path := filepath.Join(dir, name)
		if err := plotBench(path, sums, "sec/op"); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if name == "b.png" && !strings.HasPrefix(string(data), "\x89PNG") {
			t.Errorf("%s is not a PNG", name)
		}
		if name == "b.svg" && (!strings.Contains(string(data), "<svg") || !strings.Contains(string(data), "Copy/n=64-2") ||
			!strings.Contains(string(data), "nsec/op")) {
			t.Errorf("%s lacks the svg element, a bar's label or the scaled unit", name)
		}
	}
	if err := plotBench(filepath.Join(dir, "c.png"), sums, "furlongs/op"); err == nil ||
		err.Error() != `--plot-unit "furlongs/op": no benchmark reports it` {
		t.Errorf("plot of an absent unit: %v", err)
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
	sums, notes, err := summarizeBenchFile(out, 0.95)
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
	var js []benchSummary
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

// FuzzBenchTables: any input summarizes and prints without a panic, and every summary has a run for each metric.
func FuzzBenchTables(f *testing.F) {
	sample, err := os.ReadFile("testdata/bench-sample.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(sample))
	f.Add("BenchmarkX-2 10 5 ns/op\nBenchmarkX-2 10 -5 ns/op 0 B/s\n")
	f.Add("pkg: p\nBenchmarkY/a=1/b-8 1 NaN ns/op\nBenchmarkY/a=1/b-8 1 +Inf ns/op\n")
	f.Fuzz(func(t *testing.T, in string) {
		sums, _, err := summarizeBench(strings.NewReader(in), "fuzz", 0.95)
		if err != nil {
			return
		}
		for _, s := range sums {
			for _, m := range s.Metrics {
				if m.N < 1 || m.N > s.Runs {
					t.Fatalf("%s %s: %d values over %d runs", s.Name, m.Unit, m.N, s.Runs)
				}
			}
		}
		var b strings.Builder
		if err := printBenchTables(&b, sums); err != nil {
			t.Fatal(err)
		}
	})
}
