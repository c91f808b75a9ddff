package trace

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotFormats are the image formats Plot writes.
var PlotFormats = []string{"png", "svg"}

// Plot draws t as a figure in format ("png" or "svg"): requests per second over time (unless t is a length-only
// table) above histograms of the prompt and output lengths.
func Plot(w io.Writer, t *Trace, format string) error {
	if len(t.Requests) == 0 {
		return fmt.Errorf("plot: %s has no requests", t.Source)
	}
	var plots [][]*plot.Plot
	if !t.NoArrivals {
		p, err := ratePlot(t)
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	for _, l := range []struct {
		name string
		of   func(Request) int
	}{{"prompt tokens", func(r Request) int { return r.PromptTokens }}, {"output tokens", func(r Request) int { return r.OutputTokens }}} {
		p, err := lengthPlot(t, l.name, l.of)
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	plots[0][0].Title.Text = title(t) + "\n" + plots[0][0].Title.Text

	width, height := 8*vg.Inch, vg.Length(len(plots))*2.6*vg.Inch
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("plot: format %q, want png or svg", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(14)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := c.WriteTo(w)
	return err
}

// PlotFormat returns the image format a file name asks for by its extension.
func PlotFormat(path string) (string, error) {
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if !slices.Contains(PlotFormats, ext) {
		return "", fmt.Errorf("%s: want a .png or .svg file", path)
	}
	return ext, nil
}

// title is the trace's source and transforms, cut to a line's length.
func title(t *Trace) string {
	s := filepath.Base(t.Source)
	if t.Format == Synthetic {
		s = t.Source
	}
	if len(t.Transforms) > 0 {
		s += "  " + strings.Join(t.Transforms, " ")
	}
	if len(s) > 110 {
		s = s[:107] + "..."
	}
	return s
}

// ratePlot is requests per second in consecutive bins: 1 s wide, or 10, 100, ... s for long traces so that the
// line has at most 1,200 points.
func ratePlot(t *Trace) (*plot.Plot, error) {
	d := t.Duration()
	width := 1.0
	for d/width > 1200 {
		width *= 10
	}
	n := int(math.Floor(d/width)) + 1
	counts := make([]float64, n)
	for _, r := range t.Requests {
		counts[min(int(r.Arrival/width), n-1)]++
	}
	xys := make(plotter.XYs, n)
	for i, c := range counts {
		xys[i] = plotter.XY{X: float64(i) * width, Y: c / width}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("requests/s in %g-s bins (%d requests, mean %.3g/s)", width, len(t.Requests), Stats(t).MeanRate)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "requests/s"
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	p.Add(line)
	return p, nil
}

// lengthPlot is a 50-bin histogram of one length.
func lengthPlot(t *Trace, name string, of func(Request) int) (*plot.Plot, error) {
	vs := make(plotter.Values, len(t.Requests))
	for i, r := range t.Requests {
		vs[i] = float64(of(r))
	}
	h, err := plotter.NewHist(vs, 50)
	if err != nil {
		return nil, err
	}
	ls := lengthStats(t.Requests, of)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: p50 %d, mean %.0f, p99 %d, max %d", name, ls.P50, ls.Mean, ls.P99, ls.Max)
	p.X.Label.Text = name
	p.Y.Label.Text = "requests"
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	p.Add(h)
	return p, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros ("7500", not "7500.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 6, 64)
		}
	}
	return ticks
}
