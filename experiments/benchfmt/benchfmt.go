// Package benchfmt reads the Go benchmark format, the output of `go test -bench`, and reduces repeated runs to
// medians. It reads what benchstat reads: a result line is
//
//	BenchmarkName[/sub...][-procs]  iterations  value unit  [value unit ...]
//
// configuration lines ("pkg: path") set the package of the results that follow, and every other line (test
// output, PASS, ok) is skipped, as the format prescribes.
package benchfmt

import (
	"bufio"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Result is one benchmark result line.
type Result struct {
	Pkg    string  // the package from the last "pkg:" line before it, "" if none
	Name   string  // the name without the -procs suffix: "BenchmarkGEMM/m=1/n=4096"
	Procs  int     // the GOMAXPROCS suffix of the name, 1 when it has none
	Iters  int64   // iterations
	Values []Value // the measurements in line order, ns/op first
	Line   int     // line number in the input, from 1
}

// Value is one measurement of a result: 1234 ns/op, 5.6 GFLOP/s.
type Value struct {
	Value float64
	Unit  string
}

// Get returns the value of the result in the given unit.
func (r Result) Get(unit string) (float64, bool) {
	for _, v := range r.Values {
		if v.Unit == unit {
			return v.Value, true
		}
	}
	return 0, false
}

// ParseLine parses one line; ok is false when it is not a result line.
func ParseLine(line string) (r Result, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !isBenchmarkName(f[0]) {
		return Result{}, false
	}
	iters, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || iters < 0 {
		return Result{}, false
	}
	r = Result{Iters: iters}
	r.Name, r.Procs = splitProcs(f[0])
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Result{}, false
		}
		r.Values = append(r.Values, Value{v, f[i+1]})
	}
	return r, true
}

// isBenchmarkName reports whether s is "Benchmark" followed by nothing or by a character that is not a
// lower-case letter, so that "Benchmarking" is not one.
func isBenchmarkName(s string) bool {
	rest, ok := strings.CutPrefix(s, "Benchmark")
	if !ok {
		return false
	}
	for _, c := range rest {
		return !unicode.IsLower(c)
	}
	return true
}

// splitProcs splits the "-N" GOMAXPROCS suffix that go test appends to names (when N is not 1).
func splitProcs(name string) (string, int) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name, 1
	}
	procs, err := strconv.Atoi(name[i+1:])
	if err != nil || procs <= 0 {
		return name, 1
	}
	return name[:i], procs
}

// Parse reads every result of r. Lines that are not results are skipped; the only error is r's.
func Parse(r io.Reader) ([]Result, error) {
	var (
		out  []Result
		pkg  string
		line int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line++
		text := sc.Text()
		if p, ok := strings.CutPrefix(text, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if res, ok := ParseLine(text); ok {
			res.Pkg, res.Line = pkg, line
			out = append(out, res)
		}
	}
	return out, sc.Err()
}

// Summary is the median of the runs of one benchmark (one package, name and procs).
type Summary struct {
	Pkg    string             `json:"pkg"`
	Name   string             `json:"name"`
	Procs  int                `json:"procs"`
	Runs   int                `json:"runs"`
	Units  []string           `json:"units"`  // in the order they first appear
	Median map[string]float64 `json:"median"` // by unit, over the runs that report it
}

// Summarize groups results by package, name and procs, in the order each first appears, and takes the median
// of every unit.
func Summarize(results []Result) []Summary {
	type key struct {
		pkg, name string
		procs     int
	}
	var (
		order  []key
		values = map[key]map[string][]float64{}
		sums   = map[key]*Summary{}
	)
	for _, r := range results {
		k := key{r.Pkg, r.Name, r.Procs}
		s := sums[k]
		if s == nil {
			s = &Summary{Pkg: r.Pkg, Name: r.Name, Procs: r.Procs, Median: map[string]float64{}}
			sums[k], values[k] = s, map[string][]float64{}
			order = append(order, k)
		}
		s.Runs++
		for _, v := range r.Values {
			if !slices.Contains(s.Units, v.Unit) {
				s.Units = append(s.Units, v.Unit)
			}
			values[k][v.Unit] = append(values[k][v.Unit], v.Value)
		}
	}
	out := make([]Summary, 0, len(order))
	for _, k := range order {
		s := sums[k]
		for unit, vs := range values[k] {
			s.Median[unit] = median(vs)
		}
		out = append(out, *s)
	}
	return out
}

// median returns the middle of xs, the mean of the two middle values for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// Param is one part of a sub-benchmark name: "m=1" is {m 1}; a part without "=" has an empty Key.
type Param struct {
	Key, Value string
}

// SplitName splits a benchmark name into its top-level name and the parameters of its sub-benchmark parts:
// "BenchmarkGEMM/m=1/n=4096" gives "BenchmarkGEMM" and [{m 1} {n 4096}].
func SplitName(name string) (top string, params []Param) {
	parts := strings.Split(name, "/")
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			k, v = "", p
		}
		params = append(params, Param{k, v})
	}
	return parts[0], params
}
