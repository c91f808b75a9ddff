package loadtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Table is a table of figures: a header and rows of cells. The functions below lay a run's figures out as
// tables (latencies in milliseconds); Write prints one, and a command line can print them its own way.
type Table struct {
	Header []string
	Rows   [][]string
}

// Write writes t as a Markdown pipe table, which reads as aligned columns on a terminal and pastes into a
// report as it is.
func (t Table) Write(w io.Writer) error { return mdtable.Write(w, t.Header, t.Rows) }

// WriteTables writes tables one after another, a blank line between them.
func WriteTables(w io.Writer, tables ...Table) error {
	for i, t := range tables {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if err := t.Write(w); err != nil {
			return err
		}
	}
	return nil
}

// Write writes the report as text: one run's metrics (MetricsTables) or a sweep (SweepTable), then the knee and
// the capacity plan when there are.
func (r *Report) Write(w io.Writer) error {
	tables := []Table{SweepTable(r.Runs, r.Knee)}
	if len(r.Runs) == 1 {
		tables = MetricsTables(r.Runs[0].Metrics)
	}
	if err := WriteTables(w, tables...); err != nil {
		return err
	}
	if r.KneeTarget != nil {
		line := fmt.Sprintf("\nknee: no rate meets %v with every request completed\n", r.KneeTarget)
		if k := r.Knee; k != nil {
			line = fmt.Sprintf("\nknee: %s req/s achieved at rate %v (%v: %s ms)\n", numfmt.Figure(k.Metrics.RequestThroughput), k.Rate, r.KneeTarget,
				numfmt.Figure(r.KneeTarget.P95(k.Metrics)))
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	if r.Capacity == nil {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return WriteTables(w, CapacityTable(*r.Capacity))
}

// MetricsTables lays out a run's metrics as two tables: counts and throughputs, then the latencies.
func MetricsTables(m Metrics) []Table {
	counts := Table{Header: []string{"metric", "value"}, Rows: [][]string{
		{"requests", strconv.Itoa(m.Requests)},
		{"completed", strconv.Itoa(m.Completed)},
		{"rejected (429)", strconv.Itoa(m.Rejected)},
		{"failed", strconv.Itoa(m.Failed)},
		{"duration (s)", numfmt.Figure(m.DurationS)},
		{"asked arrival rate (req/s)", numfmt.Figure(m.AskedRate)},
		{"achieved arrival rate (req/s)", numfmt.Figure(m.ArrivalRate)},
		{"total input tokens", strconv.Itoa(m.TotalInputTokens)},
		{"total output tokens", strconv.Itoa(m.TotalOutputTokens)},
		{"request throughput (req/s)", numfmt.Figure(m.RequestThroughput)},
	}}
	if !m.SLO.IsZero() {
		counts.Rows = append(counts.Rows, []string{"request goodput (req/s)", numfmt.Figure(m.RequestGoodput)})
	}
	counts.Rows = append(counts.Rows,
		[]string{"output token throughput (tok/s)", numfmt.Figure(m.OutputThroughput)},
		[]string{"total token throughput (tok/s)", numfmt.Figure(m.TotalTokenThroughput)})
	lat := Table{Header: []string{"latency (ms)", "n", "mean", "std", "median", "P90", "P95", "P99"}}
	for _, l := range []struct {
		name string
		s    Summary
	}{{"TTFT", m.TTFT}, {"TPOT", m.TPOT}, {"ITL", m.ITL}, {"E2EL", m.E2EL}} {
		s := l.s
		lat.Rows = append(lat.Rows, []string{l.name, strconv.Itoa(s.N), numfmt.Figure(s.Mean), numfmt.Figure(s.Std), numfmt.Figure(s.Median), numfmt.Figure(s.P90), numfmt.Figure(s.P95), numfmt.Figure(s.P99)})
	}
	return []Table{counts, lat}
}

// SweepTable lays out a sweep, a row per rate, marking the knee (knee is nil when there is none).
func SweepTable(points []Point, knee *Point) Table {
	t := Table{Header: []string{"rate", "arrival req/s", "req/s", "out tok/s", "TTFT P50", "TTFT P95", "E2EL P50", "E2EL P95", "done", "429", "failed", "knee"}}
	for _, p := range points {
		m := p.Metrics
		mark := ""
		if knee != nil && p.Rate == knee.Rate {
			mark = "*"
		}
		t.Rows = append(t.Rows, []string{numfmt.Figure(p.Rate), numfmt.Figure(m.ArrivalRate), numfmt.Figure(m.RequestThroughput), numfmt.Figure(m.OutputThroughput),
			numfmt.Figure(m.TTFT.Median), numfmt.Figure(m.TTFT.P95), numfmt.Figure(m.E2EL.Median), numfmt.Figure(m.E2EL.P95),
			strconv.Itoa(m.Completed), strconv.Itoa(m.Rejected), strconv.Itoa(m.Failed), mark})
	}
	return t
}

// CompareTable lays out each curve's knee under target: its rate, achieved throughput, P95 of the target's
// latency, and the throughput as a multiple of each other curve's knee but the last's (with three curves A, B, C:
// columns "x A" and "x B", so that C's row has C/A and C/B).
func CompareTable(curves []Curve, target KneeTarget) Table {
	t := Table{Header: []string{"curve", "rates", "knee rate", "knee req/s", "P95 " + strings.ToUpper(target.Metric) + " (ms)"}}
	rps := make([]float64, len(curves)) // 0 for no knee
	for i, c := range curves {
		if k, ok := Knee(c.Points, target); ok {
			rps[i] = k.Metrics.RequestThroughput
		}
	}
	bases := curves[:max(1, len(curves)-1)]
	for _, b := range bases {
		t.Header = append(t.Header, "x "+b.Label)
	}
	for i, c := range curves {
		k, ok := Knee(c.Points, target)
		if !ok {
			t.Rows = append(t.Rows, append([]string{c.Label, strconv.Itoa(len(c.Points)), "none", "", ""}, make([]string, len(bases))...))
			continue
		}
		row := []string{c.Label, strconv.Itoa(len(c.Points)), numfmt.Figure(k.Rate), numfmt.Figure(rps[i]), numfmt.Figure(target.P95(k.Metrics))}
		for j := range bases {
			ratio := ""
			if rps[j] > 0 {
				ratio = numfmt.Figure(rps[i] / rps[j])
			}
			row = append(row, ratio)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// RatesTable lays out the P95 of the target's latency at every rate of the curves, a column per curve ("-"
// where a curve did not run that rate), rates in increasing order.
func RatesTable(curves []Curve, target KneeTarget) Table {
	t := Table{Header: []string{"rate (req/s)"}}
	var rates []float64
	for _, c := range curves {
		t.Header = append(t.Header, c.Label+" P95 "+strings.ToUpper(target.Metric)+" (ms)")
		for _, p := range c.Points {
			if !slices.Contains(rates, p.Rate) {
				rates = append(rates, p.Rate)
			}
		}
	}
	slices.Sort(rates)
	for _, r := range rates {
		row := []string{numfmt.Figure(r)}
		for _, c := range curves {
			cell := "-"
			if i := slices.IndexFunc(c.Points, func(p Point) bool { return p.Rate == r }); i >= 0 {
				cell = numfmt.Figure(target.P95(c.Points[i].Metrics))
			}
			row = append(row, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// CapacityTable lays out a capacity plan.
func CapacityTable(c Capacity) Table {
	return Table{Header: []string{"capacity", "value"}, Rows: [][]string{
		{"target (req/s)", numfmt.Figure(c.TargetRPS)},
		{"one instance at the knee (req/s)", numfmt.Figure(c.KneeRPS)},
		{"instances", strconv.Itoa(c.Instances)},
		{"cost per instance-hour", numfmt.Figure(c.CostPerInstance)},
		{"cost per hour", numfmt.Figure(c.CostPerHour)},
		{"cost per million output tokens", numfmt.Figure(c.CostPerMillionOutputTokens)},
	}}
}

// PlotCurve draws the Latency-RPS curve of a sweep: P50 and P95 of TTFT and E2EL (ms) against the request
// throughput achieved, and writes it to base.png and base.svg.
func PlotCurve(points []Point, title, base string) error {
	if len(points) == 0 {
		return fmt.Errorf("no points to plot")
	}
	p := newPlot(title)
	if err := plotutil.AddLinePoints(p,
		"TTFT P50", series(points, func(m Metrics) float64 { return m.TTFT.Median }),
		"TTFT P95", series(points, func(m Metrics) float64 { return m.TTFT.P95 }),
		"E2EL P50", series(points, func(m Metrics) float64 { return m.E2EL.Median }),
		"E2EL P95", series(points, func(m Metrics) float64 { return m.E2EL.P95 }),
	); err != nil {
		return err
	}
	return savePlot(p, base)
}

// Curve is one labelled sweep of a comparison, such as one scheduler's.
type Curve struct {
	Label  string
	Points []Point
}

// PlotCompare draws several sweeps on one Latency-RPS plot, P95 TTFT and P95 E2EL (ms) of each against its
// achieved request throughput, and writes it to base.png and base.svg.
func PlotCompare(curves []Curve, title, base string) error {
	if len(curves) == 0 {
		return fmt.Errorf("no curves to plot")
	}
	p := newPlot(title)
	var lines []any
	for _, c := range curves {
		if len(c.Points) == 0 {
			return fmt.Errorf("curve %s has no points", c.Label)
		}
		lines = append(lines,
			c.Label+" TTFT P95", series(c.Points, func(m Metrics) float64 { return m.TTFT.P95 }),
			c.Label+" E2EL P95", series(c.Points, func(m Metrics) float64 { return m.E2EL.P95 }))
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return savePlot(p, base)
}

func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "achieved throughput (req/s)"
	p.Y.Label.Text = "latency (ms)"
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// series is one latency of each point against the point's request throughput.
func series(points []Point, f func(Metrics) float64) plotter.XYs {
	xys := make(plotter.XYs, len(points))
	for i, pt := range points {
		xys[i].X, xys[i].Y = pt.Metrics.RequestThroughput, f(pt.Metrics)
	}
	return xys
}

// savePlot writes p to base.png and base.svg, making base's directory.
func savePlot(p *plot.Plot, base string) error {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, base+ext); err != nil {
			return fmt.Errorf("plot %s%s: %v", base, ext, err)
		}
	}
	return nil
}
