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
	if got := s.Sample([]float32{0.1, 0.5, 2, 1}, 0); got != 2 {
		t.Fatalf("greedy Sample = %d, want 2", got)
	}
}

// TestFrequencies draws a token at each of many positions and compares their frequencies with the probabilities
// the parameters imply: the streams of successive positions are independent draws.
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
		for pos := range n {
			counts[s.Sample(logits, pos)]++
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
		if x, y := a.Sample(logits, i), b.Sample(logits, i); x != y {
			t.Fatalf("draw %d: %d vs %d with the same seed", i, x, y)
		}
	}
}

// TestDrawDependsOnPosition: the token drawn at a position is the same whatever was drawn before it with the
// sampler (as when a preempted sequence is recomputed and draws again where it left off, or a step is redone),
// and another seed draws another sequence of tokens.
func TestDrawDependsOnPosition(t *testing.T) {
	logits := make([]float32, 50) // uniform over 50 tokens: every draw is a fresh random choice
	p := Params{Temperature: 1, Seed: 7}
	once := New(p)
	want := make([]int, 40)
	for pos := range want {
		want[pos] = once.Sample(logits, pos)
	}
	again := New(p)
	for pos := 39; pos >= 0; pos-- { // backwards, each position drawn twice
		again.Sample(logits, pos)
		if got := again.Sample(logits, pos); got != want[pos] {
			t.Fatalf("position %d drawn again after other draws: %d, want %d as drawn in order", pos, got, want[pos])
		}
	}
	other := New(Params{Temperature: 1, Seed: 8})
	same := 0
	for pos := range want {
		if other.Sample(logits, pos) == want[pos] {
			same++
		}
	}
	if same > 8 { // 40 draws that agree by chance with probability 1/50 each: about one
		t.Errorf("seed 8 draws %d of 40 tokens as seed 7 does, want about 1", same)
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
