// Package cputop reads a CPU profile (runtime/pprof's format, with github.com/google/pprof/profile) into each
// function's flat and cumulative time, as `go tool pprof -top` counts them, and prints the functions with the
// most of each: what a long command's --pprof-top shows when it ends.
package cputop

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
	"github.com/morphlab/morphlab/internal/mdtable"
)

// Func is the CPU time of one function in a profile: flat (in the function itself) and cumulative (with what it
// calls).
type Func struct {
	Name      string
	Flat, Cum time.Duration
}

// Read reads a CPU profile and returns the time of each function, sorted by flat time, largest first (ties by name), and the profile's total. A sample's leaf
// frame, the innermost of an inlined group, gets its flat time; every function on its stack, once, gets its
// cumulative time, as `go tool pprof -top` counts them.
func Read(r io.Reader) ([]Func, time.Duration, error) {
	p, err := profile.Parse(r)
	if err != nil {
		return nil, 0, err
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, 0, fmt.Errorf("not a CPU profile: no cpu/nanoseconds sample type")
	}
	times := map[string]*Func{}
	get := func(name string) *Func {
		ft := times[name]
		if ft == nil {
			ft = &Func{Name: name}
			times[name] = ft
		}
		return ft
	}
	var total time.Duration
	for _, s := range p.Sample {
		v := time.Duration(s.Value[vi])
		total += v
		seen := map[string]bool{}
		for li, loc := range s.Location {
			for i, line := range loc.Line {
				name := "?"
				if line.Function != nil {
					name = line.Function.Name
				}
				if li == 0 && i == 0 {
					get(name).Flat += v
				}
				if !seen[name] {
					seen[name] = true
					get(name).Cum += v
				}
			}
		}
	}
	out := make([]Func, 0, len(times))
	for _, ft := range times {
		out = append(out, *ft)
	}
	slices.SortFunc(out, func(a, b Func) int {
		return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(a.Name, b.Name))
	})
	return out, total, nil
}

// WriteTop prints the n functions with the most flat time, then the n with the most cumulative time, of the CPU
// profile in file, as two tables.
func WriteTop(w io.Writer, file string, n int) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	top, total, err := Read(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	pct := func(d time.Duration) string {
		if total == 0 {
			return "0%"
		}
		return strconv.FormatFloat(100*float64(d)/float64(total), 'f', 1, 64) + "%"
	}
	rows := func(fs []Func) [][]string {
		var r [][]string
		for _, ft := range fs[:min(n, len(fs))] {
			r = append(r, []string{ft.Flat.Round(time.Millisecond).String(), pct(ft.Flat),
				ft.Cum.Round(time.Millisecond).String(), pct(ft.Cum), ft.Name})
		}
		return r
	}
	header := []string{"flat", "flat%", "cum", "cum%", "function"}
	fmt.Fprintf(w, "CPU profile %s: %v of samples; top %d by flat time\n", file, total.Round(time.Millisecond), n)
	if err := mdtable.Write(w, header, rows(top)); err != nil {
		return err
	}
	byCum := slices.Clone(top)
	slices.SortStableFunc(byCum, func(a, b Func) int { return cmp.Compare(b.Cum, a.Cum) })
	fmt.Fprintf(w, "top %d by cumulative time\n", n)
	return mdtable.Write(w, header, rows(byCum))
}
