package quant

import (
	"math"
	"testing"
)

func TestMetrics(t *testing.T) {
	ref, got := []float32{1, 2, 3}, []float32{1, 2, 4}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"RMSE", RMSE(ref, got), math.Sqrt(1.0 / 3)},
		{"SQNR", SQNR(ref, got), 10 * math.Log10(14)},
		{"Cosine", Cosine(ref, got), 17 / math.Sqrt(14*21)},
		{"MaxAbsErr", MaxAbsErr(ref, got), 1},
		{"SQNR exact", SQNR(ref, ref), math.Inf(1)},
		{"Cosine zero", Cosine(ref, []float32{0, 0, 0}), 0},
	} {
		if math.Abs(tc.got-tc.want) > 1e-12 && tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestStats(t *testing.T) {
	s := NewStats(3)
	s.Add([]float32{1, -2, 0, -3, 4, 0})
	s.Add([]float32{2, 0, 0})
	if s.Tokens != 3 {
		t.Fatalf("Tokens = %d, want 3", s.Tokens)
	}
	mean, mx := s.MeanAbs(), s.MaxAbs()
	for c, want := range []float32{2, 2, 0} {
		if mean[c] != want {
			t.Errorf("MeanAbs[%d] = %v, want %v", c, mean[c], want)
		}
	}
	for c, want := range []float32{3, 4, 0} {
		if mx[c] != want {
			t.Errorf("MaxAbs[%d] = %v, want %v", c, mx[c], want)
		}
	}
}
