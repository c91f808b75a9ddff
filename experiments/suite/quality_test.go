package suite

import (
	"math"
	"testing"
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
