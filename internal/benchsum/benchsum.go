// Package benchsum summarizes Go benchmark output as benchstat does: golang.org/x/perf/benchfmt reads the results
// (units tidied to sec/op, B/s, ...), golang.org/x/perf/benchmath takes each metric's median and its confidence
// interval assuming nothing about the distribution, and golang.org/x/perf/benchunit scales the numbers for the
// tables. Read and ReadFile summarize each benchmark (one package, name and GOMAXPROCS) over its runs; WriteTables
// prints one table per top-level benchmark, with its key=value sub-benchmark parts as columns; Plot draws one
// unit's medians as a bar chart with the intervals as whiskers.
package benchsum

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/morphlab/morphlab/internal/mdtable"
	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchunit"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Summary is what the runs of one benchmark (one package, name and GOMAXPROCS) measured.
type Summary struct {
	Pkg     string   `json:"pkg"`
	Name    string   `json:"name"` // the full name without "Benchmark" and the -procs suffix: "GEMM/m=1/n=4096"
	Procs   int      `json:"procs"`
	Runs    int      `json:"runs"`
	Metrics []Metric `json:"metrics"` // in the order the units first appear
}

// Metric is the median of one unit over the runs that report it, with benchmath's confidence interval.
// Lo and Hi are null when there are too few runs for an interval at that level (6 at 95%).
type Metric struct {
	Unit       string   `json:"unit"`
	Median     float64  `json:"median"`
	Lo         *float64 `json:"lo"`
	Hi         *float64 `json:"hi"`
	Confidence float64  `json:"confidence"` // the interval's actual level, at least the one asked for
	N          int      `json:"n"`

	summary benchmath.Summary
}

// Metric returns the summary's metric in unit.
func (s Summary) Metric(unit string) (Metric, bool) {
	for _, m := range s.Metrics {
		if m.Unit == unit {
			return m, true
		}
	}
	return Metric{}, false
}

// ReadFile summarizes the benchmark results in the file at path; see Read.
func ReadFile(path string, confidence float64) ([]Summary, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return Read(f, path, confidence)
}

// Read reads Go benchmark output from r and summarizes each benchmark, in the order each first appears, with
// intervals at the confidence level given (such as 0.95). Lines that look like results but do not parse come back
// as notes ("file:line: message"); the error is r's.
func Read(r io.Reader, fileName string, confidence float64) ([]Summary, []string, error) {
	type key struct {
		pkg, name string
		procs     int
	}
	var (
		order  []key
		runs   = map[key]int{}
		units  = map[key][]string{}
		values = map[key]map[string][]float64{}
		notes  []string
	)
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			notes = append(notes, rec.Error())
		case *benchfmt.Result:
			name, procs := splitProcs(rec.Name)
			k := key{rec.GetConfig("pkg"), name, procs}
			if _, seen := runs[k]; !seen {
				order = append(order, k)
				values[k] = map[string][]float64{}
			}
			runs[k]++
			for i, v := range rec.Values {
				if slices.ContainsFunc(rec.Values[:i], func(w benchfmt.Value) bool { return w.Unit == v.Unit }) {
					continue // a unit twice on one line: the first counts, as Result.Value reads it
				}
				if !slices.Contains(units[k], v.Unit) {
					units[k] = append(units[k], v.Unit)
				}
				values[k][v.Unit] = append(values[k][v.Unit], v.Value)
			}
		}
	}
	if err := br.Err(); err != nil {
		return nil, notes, err
	}
	sums := make([]Summary, 0, len(order))
	for _, k := range order {
		s := Summary{Pkg: k.pkg, Name: k.name, Procs: k.procs, Runs: runs[k]}
		for _, u := range units[k] {
			sample := benchmath.NewSample(values[k][u], &benchmath.DefaultThresholds)
			sum := benchmath.AssumeNothing.Summary(sample, confidence)
			m := Metric{Unit: u, Median: sum.Center, Confidence: sum.Confidence, N: len(sample.Values), summary: sum}
			if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) {
				m.Lo, m.Hi = &sum.Lo, &sum.Hi
			}
			s.Metrics = append(s.Metrics, m)
		}
		sums = append(sums, s)
	}
	return sums, notes, nil
}

// splitProcs splits the -N GOMAXPROCS suffix off a benchmark name (benchfmt.Name.Parts finds it); a name
// without one ran with GOMAXPROCS 1.
func splitProcs(n benchfmt.Name) (string, int) {
	_, parts := n.Parts()
	if len(parts) > 0 && parts[len(parts)-1][0] == '-' {
		last := parts[len(parts)-1]
		if procs, err := strconv.Atoi(string(last[1:])); err == nil {
			return string(n[:len(n)-len(last)]), procs
		}
	}
	return string(n), 1
}

// param is one part of a sub-benchmark name: "/m=1" is {m 1}; a part without "=" is {case part}.
type param struct {
	key, value string
}

// splitName splits a name without its procs suffix into the top-level name and its sub-benchmark parts.
func splitName(name string) (top string, params []param) {
	base, parts := benchfmt.Name(name).Parts()
	for _, p := range parts {
		k, v, ok := bytes.Cut(p[1:], []byte("="))
		if !ok {
			k, v = []byte("case"), p[1:]
		}
		params = append(params, param{string(k), string(v)})
	}
	return string(base), params
}

// formatMetric formats a metric as benchstat does, "1.234m ± 3%", its center scaled by sc; the interval is "∞"
// when there are too few runs for one.
func formatMetric(m Metric, sc benchunit.Scaler) string {
	return sc.Format(m.Median) + " ± " + m.summary.PctRangeString()
}

// WriteTables prints one table per package and top-level benchmark: a row per sub-benchmark, with its
// parameters as columns (a procs column when more than one GOMAXPROCS ran), the run count, and every unit's
// median ± confidence interval, each column on one scale. A note under a table says when intervals are ±∞.
func WriteTables(w io.Writer, sums []Summary) error {
	type group struct {
		pkg, top string
		rows     []Summary
	}
	var groups []*group
	for _, s := range sums {
		top, _ := splitName(s.Name)
		i := slices.IndexFunc(groups, func(g *group) bool { return g.pkg == s.Pkg && g.top == top })
		if i < 0 {
			groups = append(groups, &group{pkg: s.Pkg, top: top})
			i = len(groups) - 1
		}
		groups[i].rows = append(groups[i].rows, s)
	}
	for gi, g := range groups {
		var keys, units []string
		procs := map[int]bool{}
		for _, s := range g.rows {
			_, params := splitName(s.Name)
			for _, p := range params {
				if !slices.Contains(keys, p.key) {
					keys = append(keys, p.key)
				}
			}
			for _, m := range s.Metrics {
				if !slices.Contains(units, m.Unit) {
					units = append(units, m.Unit)
				}
			}
			procs[s.Procs] = true
		}
		scalers := map[string]benchunit.Scaler{}
		for _, u := range units {
			var centers []float64
			for _, s := range g.rows {
				if m, ok := s.Metric(u); ok {
					centers = append(centers, m.Median)
				}
			}
			scalers[u] = benchunit.CommonScale(centers, benchunit.ClassOf(u))
		}
		header := slices.Clone(keys)
		if len(procs) > 1 {
			header = append(header, "procs")
		}
		header = append(header, "runs")
		header = append(header, units...)

		var (
			rows     [][]string
			infinite bool
		)
		for _, s := range g.rows {
			cells := make([]string, 0, len(header))
			_, params := splitName(s.Name)
			for _, k := range keys {
				cell := "-"
				for _, p := range params {
					if p.key == k {
						cell = p.value
					}
				}
				cells = append(cells, cell)
			}
			if len(procs) > 1 {
				cells = append(cells, strconv.Itoa(s.Procs))
			}
			cells = append(cells, strconv.Itoa(s.Runs))
			for _, u := range units {
				cell := "-"
				if m, ok := s.Metric(u); ok {
					cell = formatMetric(m, scalers[u])
					infinite = infinite || m.Lo == nil
				}
				cells = append(cells, cell)
			}
			rows = append(rows, cells)
		}
		if gi > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  %s\n", g.top, g.pkg)
		if err := mdtable.Write(w, header, rows); err != nil {
			return err
		}
		if infinite {
			if _, err := fmt.Fprintln(w, infiniteNote(g.rows)); err != nil {
				return err
			}
		}
	}
	return nil
}

// infiniteNote is benchmath's warning for an interval that needs more runs, once for the table.
func infiniteNote(rows []Summary) string {
	for _, s := range rows {
		for _, m := range s.Metrics {
			if m.Lo == nil && len(m.summary.Warnings) > 0 {
				return "± ∞: " + m.summary.Warnings[0].Error()
			}
		}
	}
	return "± ∞: too few runs for a confidence interval"
}

// bars holds the medians of one unit and their intervals for plotter.XErrorBars: bar i is at y = i.
type bars struct {
	medians, lo, hi []float64
}

func (b bars) Len() int                    { return len(b.medians) }
func (b bars) XY(i int) (float64, float64) { return b.medians[i], float64(i) }
func (b bars) XError(i int) (float64, float64) {
	return b.medians[i] - b.lo[i], b.hi[i] - b.medians[i]
}

// Plot draws the median of unit for every benchmark that reports it as a horizontal bar, with its
// confidence interval as a whisker (none where the interval is ±∞), and saves the chart to file, whose
// extension picks the format (.png, .svg or .pdf).
func Plot(file string, sums []Summary, unit string) error {
	var (
		labels []string
		bars   bars
		sc     []float64
	)
	for _, s := range sums {
		m, ok := s.Metric(unit)
		if !ok {
			continue
		}
		label := s.Name
		if s.Procs != 1 {
			label += "-" + strconv.Itoa(s.Procs)
		}
		lo, hi := m.Median, m.Median
		if m.Lo != nil {
			lo, hi = *m.Lo, *m.Hi
		}
		labels = append(labels, label)
		bars.medians = append(bars.medians, m.Median)
		bars.lo = append(bars.lo, lo)
		bars.hi = append(bars.hi, hi)
		sc = append(sc, m.Median)
	}
	if len(labels) == 0 {
		return fmt.Errorf("unit %q: no benchmark reports it", unit)
	}
	// Plot in the scaled unit the tables use, so the axis reads "ms/op" rather than 0.00123 sec/op.
	scale := benchunit.CommonScale(sc, benchunit.ClassOf(unit))
	for i := range bars.medians {
		bars.medians[i] /= scale.Factor
		bars.lo[i] /= scale.Factor
		bars.hi[i] /= scale.Factor
	}
	p := plot.New()
	p.Title.Text = "median and 95% interval"
	p.X.Label.Text = scale.Prefix + unit // "m" and "sec/op": msec/op
	p.X.Min = 0
	p.X.Max = slices.Max(bars.hi) * 1.05 // room for the longest whisker's cap
	chart, err := plotter.NewBarChart(plotter.Values(bars.medians), vg.Points(12))
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	chart.Horizontal = true
	whiskers, err := plotter.NewXErrorBars(bars)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	p.Add(chart, whiskers)
	p.NominalY(labels...)
	height := vg.Length(len(labels))*vg.Points(18) + vg.Centimeter*3
	if err := p.Save(8*vg.Inch, height, file); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
}
