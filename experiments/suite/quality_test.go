package suite

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/quant"
)

func TestCurve(t *testing.T) {
	c := PaperCurves["llama-3-8b"]
	for _, x := range []struct {
		k    int
		want float64
	}{{0, 6.14}, {3, (6.15 + 6.18) / 2}, {12, (6.22 + 6.32) / 2}, {32, 6.53}, {40, 6.53}} {
		if got := c.At(x.k); math.Abs(got-x.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", x.k, got, x.want)
		}
	}
	mix := make([]int, 33)
	mix[0], mix[32] = 3, 1 // three tokens at full precision, one with every layer quantized
	loss, err := c.Loss(mix)
	if want := (6.53/6.14 - 1) / 4; err != nil || math.Abs(loss-want) > 1e-12 {
		t.Errorf("Loss = %v, %v; want %v", loss, err, want)
	}
	if _, err := c.Loss(make([]int, 12)); err == nil {
		t.Error("a mix of the wrong length passed")
	}
}

// TestPublished: the W8A8 curves reach SmoothQuant's published all-layer figures where there are some, and where
// there are none the mean share of the INT4 increase that those figures are; W8A16's one figure (a gain) counts as
// no loss, and so do the models without one; every source is named.
func TestPublished(t *testing.T) {
	l2, l3 := (5.515/5.474-1)/(5.60/5.47-1), (6.258/6.138-1)/(6.53/6.14-1) // 0.315, 0.308
	if got := Share(W8A8Published); math.Abs(got-(l2+l3)/2) > 1e-12 {
		t.Errorf("W8A8 share %v, want %v", got, (l2+l3)/2)
	}
	for model, want := range map[string]float64{
		"llama-2-7b": 5.515/5.474 - 1, "llama-3-8b": 6.258/6.138 - 1,
		"vicuna-7b-v1.5": (l2 + l3) / 2 * (6.98/6.78 - 1), "codellama-34b": (l2 + l3) / 2 * (5.53/5.47 - 1),
	} {
		q := Qualities[model]["W8A8"]
		c := PaperCurves[model]
		last := c.Layers[len(c.Layers)-1]
		if math.Abs(q.Increase-want) > 1e-12 || math.Abs(q.At(last)/q.At(0)-1-want) > 1e-12 || q.At(0) != c.PPL[0] {
			t.Errorf("%s W8A8: increase %v, curve %v..%v, want %v from %v", model, q.Increase, q.At(0), q.At(last), want, c.PPL[0])
		}
		_, published := W8A8Published[model]
		if published != strings.Contains(q.Source, "SmoothQuant") || published == strings.Contains(q.Source, "no published figure") {
			t.Errorf("%s W8A8 source %q", model, q.Source)
		}
		if w := Qualities[model]["W8A16"]; w.Increase != 0 || w.Source == "" {
			t.Errorf("%s W8A16: increase %v, source %q; want 0 and a source", model, w.Increase, w.Source)
		}
		if q4 := Qualities[model]["W4A16"]; !slices.Equal(q4.PPL, c.PPL) || !strings.Contains(q4.Source, "Table 8") {
			t.Errorf("%s W4A16: %+v", model, q4)
		}
	}
}

// TestScaled: the scaled curve keeps the INT4 curve's shape: each point's increase in the same proportion.
func TestScaled(t *testing.T) {
	c := PaperCurves["llama-3-8b"]
	s := c.Scaled(0.02)
	r := 0.02 * 6.14 / (6.53 - 6.14)
	for i, k := range c.Layers {
		if want := 6.14 + (c.PPL[i]-6.14)*r; math.Abs(s.At(k)-want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", k, s.At(k), want)
		}
	}
	if flat := (Curve{[]int{0, 4}, []float64{5, 5}}).Scaled(0.1); flat.At(4) != 5 {
		t.Errorf("a flat INT4 curve scaled to %v", flat.At(4))
	}
}

// TestPositionLoss: one format on a prefix of the order costs what Loss says; two formats at once cost each
// layer's step of its own curve; a format without a curve or a mix of another depth is an error.
func TestPositionLoss(t *testing.T) {
	c4 := PaperCurves["llama-2-7b"]
	c8 := c4.Scaled(0.01)
	mix := make([]int, 33)
	mix[0], mix[4], mix[16] = 10, 5, 3 // 5 tokens with the first 4 layers quantized, 3 with 16
	pos := make([]int, 32)
	for p := range pos {
		if p < 4 {
			pos[p] += 5
		}
		if p < 16 {
			pos[p] += 3
		}
	}
	want, _ := c4.Loss(mix)
	got, err := PositionLoss(map[quant.Format]Curve{quant.Int4: c4}, map[quant.Format][]int{quant.Int4: pos}, 18)
	if err != nil || math.Abs(got-want) > 1e-12 {
		t.Errorf("prefix: %v, %v; want Loss's %v", got, err, want)
	}
	// 4 tokens with positions 0-1 in int8 and 2-3 in int4.
	p8, p4 := make([]int, 32), make([]int, 32)
	p8[0], p8[1], p4[2], p4[3] = 4, 4, 4, 4
	mixed := 4 * ((c8.At(2) - c8.At(0)) + (c4.At(4) - c4.At(2))) / 5.47 / 8
	got, err = PositionLoss(map[quant.Format]Curve{quant.Int4: c4, quant.Int8: c8}, map[quant.Format][]int{quant.Int8: p8, quant.Int4: p4}, 8)
	if err != nil || math.Abs(got-mixed) > 1e-12 {
		t.Errorf("mixed: %v, %v; want %v", got, err, mixed)
	}
	if _, err := PositionLoss(map[quant.Format]Curve{quant.Int4: c4}, map[quant.Format][]int{quant.Int8: p8}, 8); err == nil {
		t.Error("a format without a curve passed")
	}
	if _, err := PositionLoss(map[quant.Format]Curve{quant.Int4: c4}, map[quant.Format][]int{quant.Int4: make([]int, 12)}, 8); err == nil {
		t.Error("positions of another depth passed")
	}
}
