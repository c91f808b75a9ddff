package sensitivity

import (
	"fmt"
	"io"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/profiling/eval"
)

// WriteTables prints the layer scores, then perplexity (and KL) by order and number of quantized layers, with the
// random orders' mean as one row, and the near-additivity along the LIS order.
func WriteTables(w io.Writer, p *Profile) error {
	var rows [][]string
	for _, s := range p.Layers {
		rank := 0
		for i, l := range p.Order {
			if l == s.Layer {
				rank = i + 1
			}
		}
		rows = append(rows, []string{fmt.Sprint(s.Layer), fmt.Sprintf("%.6f", s.LTS), fmt.Sprintf("%.6f", s.LRS),
			fmt.Sprintf("%.6f", s.MDS), fmt.Sprintf("%.6f", s.LIS), fmt.Sprint(rank)})
	}
	if err := mdtable.Write(w, []string{"layer", "LTS", "LRS", "MDS", "LIS", "rank"}, rows); err != nil {
		return err
	}
	if p.Baseline == nil {
		return nil
	}
	fmt.Fprintf(w, "\nPPL (KL nats/token) by quantized layers; full precision PPL %.4f on %d tokens\n", p.Baseline.PPL, p.Baseline.Tokens)
	ks := []string{"order"}
	for _, pt := range p.Orders[0].Curve {
		ks = append(ks, fmt.Sprintf("k=%d", pt.K))
	}
	rows = nil
	for _, c := range curves(p) {
		rows = append(rows, curveRow(c.label, c.points))
	}
	if err := mdtable.Write(w, ks, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nnear-additivity along the LIS order: PPL increase of each layer alone vs added\n")
	rows = nil
	for _, a := range p.Additivity {
		rows = append(rows, []string{fmt.Sprint(a.Layer), fmt.Sprintf("%+.4f", a.Alone), fmt.Sprintf("%+.4f", a.Added)})
	}
	return mdtable.Write(w, []string{"layer", "alone", "added"}, rows)
}

// curve is one line of the perplexity table and plot: an order, or the mean of the random orders.
type curve struct {
	label  string
	points []eval.Point
}

// curves returns the profile's fixed orders, each labelled with its layers, then the mean of its random orders
// (stat.Mean at each k) as one curve.
func curves(p *Profile) []curve {
	var (
		out    []curve
		random []OrderEval
	)
	for _, o := range p.Orders {
		if o.Seed != nil {
			random = append(random, o)
			continue
		}
		out = append(out, curve{o.Name + " " + fmt.Sprint(o.Order), o.Curve})
	}
	if len(random) == 0 {
		return out
	}
	mean := make([]eval.Point, len(random[0].Curve))
	ppl, kl := make([]float64, len(random)), make([]float64, len(random))
	for i := range mean {
		for j, o := range random {
			ppl[j], kl[j] = o.Curve[i].PPL, o.Curve[i].KL
		}
		mean[i].K = random[0].Curve[i].K
		mean[i].PPL, mean[i].KL = stat.Mean(ppl, nil), stat.Mean(kl, nil)
	}
	return append(out, curve{fmt.Sprintf("random (mean of %d)", len(random)), mean})
}

// Plot draws perplexity against the number of quantized layers, from full precision at k = 0, one line per
// order (the random orders' mean as one), and saves it to file, whose extension picks the format (.png, .svg,
// .pdf). The profile must have been evaluated.
func Plot(file string, p *Profile) error {
	if p.Baseline == nil {
		return fmt.Errorf("sensitivity: the profile has no evaluation to plot")
	}
	pl := plot.New()
	kind := ""
	if p.Quantizer.WeightOnly {
		kind = " weight-only"
	}
	pl.Title.Text = fmt.Sprintf("%s %s%s: perplexity by quantized layers", p.Quantizer.Format, p.Quantizer.Method, kind)
	pl.X.Label.Text = "quantized layers (k)"
	pl.Y.Label.Text = "perplexity"
	pl.Legend.Top = true
	pl.Legend.Left = true
	ticks := []plot.Tick{{Value: 0, Label: "0"}}
	for _, pt := range p.Orders[0].Curve {
		ticks = append(ticks, plot.Tick{Value: float64(pt.K), Label: fmt.Sprint(pt.K)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	var lines []any
	for _, c := range curves(p) {
		xys := plotter.XYs{{X: 0, Y: p.Baseline.PPL}}
		for _, pt := range c.points {
			xys = append(xys, plotter.XY{X: float64(pt.K), Y: pt.PPL})
		}
		lines = append(lines, c.label, xys)
	}
	if err := plotutil.AddLinePoints(pl, lines...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := pl.Save(7*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
}

func curveRow(name string, pts []eval.Point) []string {
	row := []string{name}
	for _, pt := range pts {
		row = append(row, fmt.Sprintf("%.4f (%.4f)", pt.PPL, pt.KL))
	}
	return row
}
