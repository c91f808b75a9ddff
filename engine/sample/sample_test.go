package sample

import (
	"math"
	"testing"
)

func TestArgmaxFirstOnTies(t *testing.T) {
	if got := Argmax([]float32{1, 3, 3, -2}); got != 1 {
		t.Fatalf("Argmax = %d, want 1", got)
	}
}

func TestGreedyIsArgmax(t *testing.T) {
	s := New(Params{})
	if got := s.Sample([]float32{0.1, 0.5, 2, 1}); got != 2 {
		t.Fatalf("greedy Sample = %d, want 2", got)
	}
}

// TestFrequencies draws many tokens and compares their frequencies with the probabilities the parameters imply.
func TestFrequencies(t *testing.T) {
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(4)), float32(math.Log(1))} // p ∝ 1, 2, 4, 1
	cases := []struct {
		name string
		p    Params
		want []float64
	}{
		{"temperature 1", Params{Temperature: 1, Seed: 1}, []float64{1. / 8, 2. / 8, 4. / 8, 1. / 8}},
		{"top-k 2", Params{Temperature: 1, TopK: 2, Seed: 2}, []float64{0, 2. / 6, 4. / 6, 0}},
		// Nucleus 0.7: 4/8 alone is 0.5 < 0.7, adding 2/8 reaches 0.75.
		{"top-p 0.7", Params{Temperature: 1, TopP: 0.7, Seed: 3}, []float64{0, 2. / 6, 4. / 6, 0}},
		// Temperature 0.5 squares the odds: 1, 4, 16, 1.
		{"temperature 0.5", Params{Temperature: 0.5, Seed: 4}, []float64{1. / 22, 4. / 22, 16. / 22, 1. / 22}},
	}
	const n = 200000
	for _, c := range cases {
		s := New(c.p)
		counts := make([]int, len(logits))
		for range n {
			counts[s.Sample(logits)]++
		}
		for i, w := range c.want {
			got := float64(counts[i]) / n
			// 5 standard deviations of a binomial proportion at n draws.
			if tol := 5*math.Sqrt(w*(1-w)/n) + 1e-9; math.Abs(got-w) > tol {
				t.Errorf("%s: token %d frequency %.4f, want %.4f ± %.4f", c.name, i, got, w, tol)
			}
		}
	}
}

func TestSeedRepeats(t *testing.T) {
	logits := []float32{0.3, 0.1, 0.9, 0.5, 0.2}
	a, b := New(Params{Temperature: 0.8, TopP: 0.9, Seed: 42}), New(Params{Temperature: 0.8, TopP: 0.9, Seed: 42})
	for i := range 100 {
		if x, y := a.Sample(logits), b.Sample(logits); x != y {
			t.Fatalf("draw %d: %d vs %d with the same seed", i, x, y)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {Temperature: math.NaN()}} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", p)
		}
	}
	if err := (Params{Temperature: 0.7, TopK: 40, TopP: 0.95}).Validate(); err != nil {
		t.Errorf("Validate of valid params: %v", err)
	}
}
