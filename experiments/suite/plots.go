package suite

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/morphlab/morphlab/experiments/results"
)

// timePolicies are the policies the over-time plots show.
var timePolicies = []string{"fp16", "static:int4", "morph:default"}

// The page of a saved figure: this wide, each plot this tall.
const (
	pageWidth  = 8 * vg.Inch
	plotHeight = 3 * vg.Inch
)

// save writes plots stacked in one column as base.png and base.svg (layout).
func save(base string, plots ...*plot.Plot) error {
	width, height := pageWidth, vg.Length(len(plots))*plotHeight
	for _, ext := range []string{"png", "svg"} {
		var c vg.CanvasWriterTo
		if ext == "png" {
			c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(100))}
		} else {
			c = vgsvg.New(width, height)
		}
		for i, pc := range layout(draw.New(c), plots) {
			plots[i].Draw(pc)
		}
		f, err := os.Create(base + "." + ext)
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// legendGap is the space between the data areas and the legends to their right.
const legendGap vg.Length = 12 // points

// layout places plots stacked in one column on c, their data areas aligned, with a strip on the right of them
// all for their legends: outside every data area, where no legend hides a point or a line. It returns each
// plot's canvas.
func layout(c draw.Canvas, plots []*plot.Plot) []draw.Canvas {
	var strip vg.Length
	for _, p := range plots {
		strip = max(strip, p.Legend.Rectangle(c).Size().X)
	}
	if strip > 0 {
		strip += legendGap
	}
	const pad vg.Length = 4
	for _, p := range plots {
		p.Legend.Top, p.Legend.Left, p.Legend.XOffs = true, false, strip
	}
	col := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		col[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: pad, PadBottom: pad, PadX: pad, PadY: 14, PadRight: pad}
	aligned := plot.Align(col, tiles, draw.Crop(c, 0, -strip, 0, 0))
	out := make([]draw.Canvas, len(plots))
	for i := range plots {
		out[i] = aligned[i][0]
	}
	return out
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Add(plotter.NewGrid())
	return p
}

// addLine adds a line (and its legend entry) in the i-th color.
func addLine(p *plot.Plot, name string, i int, xys plotter.XYs, dashed bool) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color = plotutil.Color(i)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return l, nil
}

// addSteps adds a step function (and its legend entry) in the i-th color: each sample's value held until the
// next sample's time, as a fleet's size is.
func addSteps(p *plot.Plot, name string, i int, xys plotter.XYs, dashed bool) error {
	l, err := addLine(p, name, i, xys, dashed)
	if err != nil {
		return err
	}
	l.StepStyle = plotter.PostStep
	return nil
}

// padAxes widens p's axes beyond its data by share of their span on each side (or by share of the value, or 1,
// where the data span nothing), so that no marker at the data's edge touches the frame.
func padAxes(p *plot.Plot, share float64) {
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		span := a.Max - a.Min
		if span == 0 {
			span = max(math.Abs(a.Max), 1)
		}
		a.Min -= share * span
		a.Max += share * span
	}
}

// addScatter adds a scatter of xys in series i's color and shape, its glyphs of radius points, named in the
// legend.
func addScatter(p *plot.Plot, name string, i int, xys plotter.XYs, radius float64) error {
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	sc.Color, sc.GlyphStyle.Radius, sc.GlyphStyle.Shape = plotutil.Color(i), vg.Points(radius), plotutil.Shape(i)
	p.Add(sc)
	p.Legend.Add(name, sc)
	return nil
}

// plotRuns draws one setup and workload's runs: TTFT over time with the SLO line above the quantized layers over
// time, KV blocks over time, and the TTFT and TPOT distributions.
func plotRuns(dir string, s Setup, workload string, runs []*results.Run) error {
	title := s.Name + ", " + workload
	ttft := newPlot(title+": TTFT by arrival", "arrival (s)", "TTFT (s)")
	layers := newPlot("quantized layers", "time (s)", "layers")
	kv := newPlot(title+": KV blocks (solid: in use, dashed: attached)", "time (s)", "blocks")
	ttftCDF := newPlot(title+": TTFT distribution", "TTFT (s)", "share of requests")
	tpotCDF := newPlot(title+": TPOT distribution", "TPOT (ms)", "share of requests")
	for i, r := range runs {
		var byArrival, ttfts, tpots plotter.XYs
		for _, q := range r.Requests {
			byArrival = append(byArrival, plotter.XY{X: q.Arrival, Y: q.TTFT / 1000})
			ttfts = append(ttfts, plotter.XY{X: q.TTFT / 1000})
			if q.Output > 1 {
				tpots = append(tpots, plotter.XY{X: q.TPOT})
			}
		}
		if err := addCDF(ttftCDF, r.Meta.Policy, i, ttfts); err != nil {
			return err
		}
		if err := addCDF(tpotCDF, r.Meta.Policy, i, tpots); err != nil {
			return err
		}
		if !slices.Contains(timePolicies, r.Meta.Policy) {
			continue
		}
		sc, err := plotter.NewScatter(byArrival)
		if err != nil {
			return err
		}
		sc.Color, sc.GlyphStyle.Radius = plotutil.Color(i), vg.Points(1.5)
		ttft.Add(sc)
		ttft.Legend.Add(r.Meta.Policy, sc)
		var q, used, total plotter.XYs
		for _, p := range r.Timeline {
			q = append(q, plotter.XY{X: p.Seconds, Y: float64(p.Quantized)})
			used = append(used, plotter.XY{X: p.Seconds, Y: float64(p.KVUsed)})
			total = append(total, plotter.XY{X: p.Seconds, Y: float64(p.KVTotal)})
		}
		if _, err := addLine(layers, r.Meta.Policy, i, q, false); err != nil {
			return err
		}
		if _, err := addLine(kv, r.Meta.Policy, i, used, false); err != nil {
			return err
		}
		if _, err := addLine(kv, r.Meta.Policy+" attached", i, total, true); err != nil {
			return err
		}
	}
	if slo := SLO.TTFT.Seconds(); len(runs) > 0 {
		line := plotter.NewFunction(func(float64) float64 { return slo })
		line.Color, line.Dashes = color.Black, []vg.Length{vg.Points(2), vg.Points(2)}
		ttft.Add(line)
		ttft.Legend.Add(fmt.Sprintf("SLO %gs", slo), line)
	}
	for name, ps := range map[string][]*plot.Plot{"ttft-over-time": {ttft, layers}, "kv-over-time": {kv}, "ttft-cdf": {ttftCDF}, "tpot-cdf": {tpotCDF}} {
		if err := save(dir+"/"+name, ps...); err != nil {
			return err
		}
	}
	return nil
}

// addCDF adds the empirical distribution of xs' X values.
func addCDF(p *plot.Plot, name string, i int, xs plotter.XYs) error {
	if len(xs) == 0 {
		return nil
	}
	v := make([]float64, len(xs))
	for j, xy := range xs {
		v[j] = xy.X
	}
	slices.Sort(v)
	cdf := make(plotter.XYs, len(v))
	for j, x := range v {
		cdf[j] = plotter.XY{X: x, Y: float64(j+1) / float64(len(v))}
	}
	_, err := addLine(p, name, i, cdf, false)
	return err
}

// plotPareto draws each policy's TTFT-SLO violation rate against its quality loss, averaged over the setups and
// workloads (the paper's Fig. 1d).
func plotPareto(base string, r *Report) error {
	p, err := paretoPlot(r)
	if err != nil {
		return err
	}
	return save(base, p)
}

// markerPad is the share of an axis' span that scatter plots leave beyond their outermost markers.
const markerPad = 0.08

// paretoPlot is plotPareto's plot.
func paretoPlot(r *Report) (*plot.Plot, error) {
	p := newPlot("SLO violations against quality loss (mean over setups and workloads)", "token-weighted perplexity increase (%)", "TTFT-SLO violations (%)")
	for i, pol := range r.Options.Policies {
		v, l := r.mean(pol, func(c *Cell) float64 { return c.Run.Aggregates.SLOViolationRate }), r.mean(pol, func(c *Cell) float64 { return c.Loss })
		if math.IsNaN(l) {
			continue // a model without a quality curve for the policy's formats
		}
		if err := addScatter(p, pol, i, plotter.XYs{{X: 100 * l, Y: 100 * v}}, 4); err != nil {
			return nil, err
		}
	}
	padAxes(p, markerPad)
	return p, nil
}

// plotSweep draws request throughput and goodput against the request rate for the sweep's policies.
func plotSweep(base string, pts []SweepPoint) error {
	tp := newPlot("rate sweep: throughput (solid) and goodput (dashed)", "request rate (req/s)", "requests/s")
	for i, pol := range sweepPolicies {
		var thr, good plotter.XYs
		for _, s := range pts {
			if s.Policy == pol {
				thr = append(thr, plotter.XY{X: s.Rate, Y: s.Throughput})
				good = append(good, plotter.XY{X: s.Rate, Y: s.Goodput})
			}
		}
		if len(thr) == 0 {
			continue
		}
		if _, err := addLine(tp, pol, i, thr, false); err != nil {
			return err
		}
		if _, err := addLine(tp, pol+" goodput", i, good, true); err != nil {
			return err
		}
	}
	return save(base, tp)
}
