package benchfmt

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	f, err := os.Open("testdata/sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	const cpu, probe = "github.com/morphlab/morphlab/kernels/cpu", "github.com/morphlab/morphlab/kernels/probe"
	// Every line of the sample that is a result, and none of the others (log lines, a lower-case name, an odd
	// field count, bad iterations or values, PASS and ok lines).
	var got []string
	for _, r := range rs {
		got = append(got, r.Pkg+" "+r.Name)
	}
	var want []string
	for _, w := range []struct {
		n         int
		pkg, name string
	}{
		{3, cpu, "BenchmarkGEMM/m=1/n=4096/k=4096"},
		{2, cpu, "BenchmarkGEMM/m=64/n=4096/k=4096"},
		{2, cpu, "BenchmarkRMSNorm/dim=4096"},
		{4, probe, "BenchmarkSum"},
	} {
		for range w.n {
			want = append(want, w.pkg+" "+w.name)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed results\n%q\nwant\n%q", got, want)
	}

	first := rs[0]
	wantFirst := Result{Pkg: cpu, Name: "BenchmarkGEMM/m=1/n=4096/k=4096", Procs: 2, Iters: 100, Line: 5,
		Values: []Value{{10500000, "ns/op"}, {6389.52, "MB/s"}, {3.196, "GFLOP/s"}, {41.5, "%bw"}}}
	if !reflect.DeepEqual(first, wantFirst) {
		t.Errorf("first result = %+v, want %+v", first, wantFirst)
	}
	if v, ok := first.Get("GFLOP/s"); !ok || v != 3.196 {
		t.Errorf("Get(GFLOP/s) = %v, %v, want 3.196, true", v, ok)
	}
	if _, ok := first.Get("allocs/op"); ok {
		t.Error("Get(allocs/op) found a unit the line does not have")
	}
	if rs[8].Procs != 1 {
		t.Errorf("BenchmarkSum without suffix: procs %d, want 1", rs[8].Procs)
	}
}

func TestSummarize(t *testing.T) {
	rs, err := Parse(strings.NewReader(`pkg: p
BenchmarkA/x=1-2 10 30 ns/op 3 GB/s
BenchmarkA/x=1-2 10 10 ns/op
BenchmarkB 5 7 ns/op
BenchmarkA/x=1-2 10 20 ns/op 5 GB/s
BenchmarkA/x=1-4 10 99 ns/op
`))
	if err != nil {
		t.Fatal(err)
	}
	got := Summarize(rs)
	want := []Summary{
		{Pkg: "p", Name: "BenchmarkA/x=1", Procs: 2, Runs: 3, Units: []string{"ns/op", "GB/s"},
			Median: map[string]float64{"ns/op": 20, "GB/s": 4}},
		{Pkg: "p", Name: "BenchmarkB", Procs: 1, Runs: 1, Units: []string{"ns/op"}, Median: map[string]float64{"ns/op": 7}},
		{Pkg: "p", Name: "BenchmarkA/x=1", Procs: 4, Runs: 1, Units: []string{"ns/op"}, Median: map[string]float64{"ns/op": 99}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line  string
		name  string
		procs int
		ok    bool
	}{
		{"Benchmark-8 1 2 ns/op", "Benchmark", 8, true},
		{"BenchmarkX/dtype=q4-g32-16 1 2 ns/op", "BenchmarkX/dtype=q4-g32", 16, true},
		{"BenchmarkX/case-a 1 2 ns/op", "BenchmarkX/case-a", 1, true},
		{"Benchmarking 1 2 ns/op", "", 0, false},
		{"BenchmarkX 1", "", 0, false},
		{"BenchmarkX -1 2 ns/op", "", 0, false},
	} {
		r, ok := ParseLine(tc.line)
		if ok != tc.ok || r.Name != tc.name || (ok && r.Procs != tc.procs) {
			t.Errorf("ParseLine(%q) = %q procs %d ok %v, want %q procs %d ok %v", tc.line, r.Name, r.Procs, ok, tc.name, tc.procs, tc.ok)
		}
	}
}

func TestSplitName(t *testing.T) {
	top, params := SplitName("BenchmarkGEMM/m=1/n=4096/fused")
	want := []Param{{"m", "1"}, {"n", "4096"}, {"", "fused"}}
	if top != "BenchmarkGEMM" || !reflect.DeepEqual(params, want) {
		t.Errorf("SplitName = %q %v, want BenchmarkGEMM %v", top, params, want)
	}
	if top, params := SplitName("BenchmarkSum"); top != "BenchmarkSum" || params != nil {
		t.Errorf("SplitName(BenchmarkSum) = %q %v", top, params)
	}
}
