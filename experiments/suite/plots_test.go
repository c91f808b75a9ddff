package suite

import (
	"image/color"
	"math"
	"slices"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/morphlab/morphlab/experiments/results"
)

// drawn is plots laid out and drawn as save draws them, recorded: the drawing actions and each plot's data area.
type drawn struct {
	actions []recorder.Action
	data    []draw.Canvas
}

func drawPlots(plots ...*plot.Plot) drawn {
	var rec recorder.Canvas
	c := draw.NewCanvas(&rec, pageWidth, vg.Length(len(plots))*plotHeight)
	var d drawn
	for i, pc := range layout(c, plots) {
		plots[i].Draw(pc)
		d.data = append(d.data, plots[i].DataCanvas(pc))
	}
	d.actions = rec.Actions
	return d
}

// stroked is the points, in p's data coordinates, of the lines drawn in col inside the data area (a legend's
// thumbnail of the line is outside it), consecutive equal points once.
func stroked(d drawn, p *plot.Plot, data draw.Canvas, col color.Color) [][2]float64 {
	var cur color.Color
	var out [][2]float64
	for _, a := range d.actions {
		switch a := a.(type) {
		case *recorder.SetColor:
			cur = a.Color
		case *recorder.Stroke:
			if !sameColor(cur, col) || len(a.Path) == 0 {
				continue
			}
			inside := true
			for _, pc := range a.Path {
				inside = inside && within(pc.Pos, data.Rectangle, 1e-6)
			}
			if !inside {
				continue
			}
			for _, pc := range a.Path {
				x := p.X.Min + float64((pc.Pos.X-data.Min.X)/(data.Max.X-data.Min.X))*(p.X.Max-p.X.Min)
				y := p.Y.Min + float64((pc.Pos.Y-data.Min.Y)/(data.Max.Y-data.Min.Y))*(p.Y.Max-p.Y.Min)
				pt := [2]float64{round(x), round(y)}
				if len(out) == 0 || out[len(out)-1] != pt {
					out = append(out, pt)
				}
			}
		}
	}
	return out
}

// round drops the last digits that converting to the canvas and back leaves.
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func sameColor(a, b color.Color) bool {
	if a == nil || b == nil {
		return false
	}
	r1, g1, b1, a1 := a.RGBA()
	r2, g2, b2, a2 := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

func within(pt vg.Point, r vg.Rectangle, tol vg.Length) bool {
	return pt.X >= r.Min.X-tol && pt.X <= r.Max.X+tol && pt.Y >= r.Min.Y-tol && pt.Y <= r.Max.Y+tol
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// steps is the points a step function through samples draws: each value held until the next sample's time.
func steps(samples [][2]float64) [][2]float64 {
	out := [][2]float64{samples[0]}
	for _, s := range samples[1:] {
		for _, pt := range [][2]float64{{s[0], out[len(out)-1][1]}, s} {
			if out[len(out)-1] != pt {
				out = append(out, pt)
			}
		}
	}
	return out
}

// TestFleetPlotSteps: a fleet's size and queue are drawn as step functions through its samples (a fixed fleet's
// replicas flat at its size until the run ends), below the top of their panels, with the legends beside the data.
func TestFleetPlotSteps(t *testing.T) {
	r := &results.Run{Meta: results.Meta{Policy: "fp16"}, Fleet: &results.Fleet{Router: "least-outstanding", Size: []results.SizePoint{
		{T: 0, Serving: 4}, {T: 10, Serving: 4, Waiting: 3, Running: 5}, {T: 20, Serving: 4, Running: 8},
		{T: 30, Serving: 4, Waiting: 12, Running: 8}, {T: 1700, Serving: 4, Running: 1}, {T: 1712.5}}}}
	plots, err := fleetPlots(r)
	if err != nil {
		t.Fatal(err)
	}
	d := drawPlots(plots...)
	for _, c := range []struct {
		panel, color int
		name         string
		value        func(results.SizePoint) int
	}{
		{0, 0, "serving", func(p results.SizePoint) int { return p.Serving }},
		{0, 1, "provisioning", func(p results.SizePoint) int { return p.Provisioning }},
		{1, 2, "waiting", func(p results.SizePoint) int { return p.Waiting }},
		{1, 3, "running", func(p results.SizePoint) int { return p.Running }},
	} {
		var samples [][2]float64
		for _, p := range r.Fleet.Size {
			samples = append(samples, [2]float64{p.T, float64(c.value(p))})
		}
		p := plots[c.panel]
		if got, want := stroked(d, p, d.data[c.panel], plotutil.Color(c.color)), steps(samples); !slices.Equal(got, want) {
			t.Errorf("%s drawn through %v, want the steps %v", c.name, got, want)
		}
	}
	if !(plots[0].Y.Max > 4) || !(plots[1].Y.Max > 12) {
		t.Errorf("the panels' tops %v and %v: the most replicas and requests would be drawn on the frame", plots[0].Y.Max, plots[1].Y.Max)
	}
	checkLegends(t, d, plots, []string{"serving", "provisioning", "waiting", "running"})
}

// checkLegends checks that every legend entry named is drawn, right of every plot's data area.
func checkLegends(t *testing.T, d drawn, plots []*plot.Plot, names []string) []vg.Rectangle {
	t.Helper()
	var boxes []vg.Rectangle
	for _, name := range names {
		found := false
		for _, a := range d.actions {
			s, ok := a.(*recorder.FillString)
			if !ok || s.String != name {
				continue
			}
			found = true
			size := plots[0].Legend.TextStyle.Rectangle(name).Size()
			box := vg.Rectangle{Min: s.Point, Max: vg.Point{X: s.Point.X + size.X, Y: s.Point.Y + size.Y}}
			boxes = append(boxes, box)
			for i, data := range d.data {
				if box.Min.X <= data.Max.X {
					t.Errorf("legend entry %q at %v, in plot %d's data area %v", name, box, i, data.Rectangle)
				}
			}
		}
		if !found {
			t.Errorf("legend entry %q not drawn", name)
		}
	}
	return boxes
}

// TestParetoPlot: every policy's marker lies inside the axes with room to spare (fp16's most violations and
// static:int4's most loss included), and the legend covers none of them.
func TestParetoPlot(t *testing.T) {
	points := map[string][2]float64{"fp16": {0, 0.56}, "static:int8": {0.0075, 0.30}, "static:int4": {0.024, 0.52}, "morph:default": {0.006, 0.01}}
	r := &Report{Options: Options{Policies: []string{"fp16", "static:int8", "static:int4", "morph:default"}}}
	for _, pol := range r.Options.Policies {
		for _, v := range []float64{-0.01, 0.01} { // two setups whose mean is the point
			r.Cells = append(r.Cells, &Cell{Policy: pol, Loss: points[pol][0],
				Run: &results.Run{Aggregates: results.Aggregates{SLOViolationRate: points[pol][1] + v}}})
		}
	}
	p, err := paretoPlot(r)
	if err != nil {
		t.Fatal(err)
	}
	d := drawPlots(p)
	data := d.data[0]
	trX, trY := p.Transforms(&data)
	legend := checkLegends(t, d, []*plot.Plot{p}, r.Options.Policies)
	const radius = vg.Length(4)
	for pol, pt := range points {
		x, y := 100*pt[0], 100*pt[1]
		dx, dy := 0.05*(p.X.Max-p.X.Min), 0.05*(p.Y.Max-p.Y.Min)
		if x < p.X.Min+dx || x > p.X.Max-dx || y < p.Y.Min+dy || y > p.Y.Max-dy {
			t.Errorf("%s at (%g, %g): within 5%% of the edge of the axes [%g, %g] x [%g, %g]", pol, x, y, p.X.Min, p.X.Max, p.Y.Min, p.Y.Max)
		}
		c := vg.Point{X: trX(x), Y: trY(y)}
		glyph := vg.Rectangle{Min: vg.Point{X: c.X - radius, Y: c.Y - radius}, Max: vg.Point{X: c.X + radius, Y: c.Y + radius}}
		if !within(glyph.Min, data.Rectangle, 0) || !within(glyph.Max, data.Rectangle, 0) {
			t.Errorf("%s's marker %v is cut by the data area %v", pol, glyph, data.Rectangle)
		}
		for i, box := range legend {
			if overlap(glyph, box) {
				t.Errorf("%s's marker %v under the legend entry %q at %v", pol, glyph, r.Options.Policies[i], box)
			}
		}
	}
}
