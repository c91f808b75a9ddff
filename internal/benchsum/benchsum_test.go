package benchsum

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSummaries checks the medians and intervals against values worked out by hand: with 6 runs the 95%
// interval of the median is [min, max] (order statistics 1 and 6, at level 1 - 2/64), with fewer it is ±∞.
func TestSummaries(t *testing.T) {
	sums, notes, err := ReadFile("testdata/bench-sample.txt", 0.95)
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
	ns, ok := cp.Metric("sec/op")
	if !ok || !near(ns.Median, 12.5e-9) || ns.Lo == nil || !near(*ns.Lo, 10e-9) || !near(*ns.Hi, 20e-9) ||
		ns.Confidence != 1-2.0/64 || ns.N != 6 {
		t.Errorf("Copy sec/op = %+v, want median 12.5e-9 in [10e-9, 20e-9] at 0.96875 over 6 runs", ns)
	}
	gemm, _ := sums[0].Metric("GFLOP/s")
	if gemm.Median != 3.196 || gemm.Lo != nil || gemm.Hi != nil {
		t.Errorf("GEMM GFLOP/s = %+v, want median 3.196 and no interval from 3 runs", gemm)
	}
}

// near reports whether a and b agree to 12 digits (the unit tidying multiplies by 1e-9).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

func TestWriteTables(t *testing.T) {
	sums, _, err := ReadFile("testdata/bench-sample.txt", 0.95)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTables(&b, sums); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want, err := os.ReadFile("testdata/bench-sample.golden")
	if err != nil || got != string(want) {
		os.WriteFile("testdata/bench-sample.got", []byte(got), 0o644)
		t.Errorf("tables differ from testdata/bench-sample.golden (got in testdata/bench-sample.got):\n%s", got)
	}
}

func TestPlot(t *testing.T) {
	sums, _, err := ReadFile("testdata/bench-sample.txt", 0.95)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"b.png", "b.svg"} {
		path := filepath.Join(dir, name)
		if err := Plot(path, sums, "sec/op"); err != nil {
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
	if err := Plot(filepath.Join(dir, "c.png"), sums, "furlongs/op"); err == nil ||
		err.Error() != `unit "furlongs/op": no benchmark reports it` {
		t.Errorf("plot of an absent unit: %v", err)
	}
}

// FuzzTables: any input summarizes and prints without a panic, and every summary has a run for each metric.
func FuzzTables(f *testing.F) {
	sample, err := os.ReadFile("testdata/bench-sample.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(sample))
	f.Add("BenchmarkX-2 10 5 ns/op\nBenchmarkX-2 10 -5 ns/op 0 B/s\n")
	f.Add("pkg: p\nBenchmarkY/a=1/b-8 1 NaN ns/op\nBenchmarkY/a=1/b-8 1 +Inf ns/op\n")
	f.Fuzz(func(t *testing.T, in string) {
		sums, _, err := Read(strings.NewReader(in), "fuzz", 0.95)
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
		if err := WriteTables(&b, sums); err != nil {
			t.Fatal(err)
		}
	})
}
