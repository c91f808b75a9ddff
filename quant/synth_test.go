package quant

import (
	"math/rand/v2"
)

// synthLayer is the test layer for AWQ and SmoothQuant: activations x [tokens, k] drawn N(0, 1) except for a few
// outlier channels scaled by outlierScale (as LLM activations have), and a weight w [n, k] drawn N(0, 0.05²).
func synthLayer(tokens, k, n, outliers int, outlierScale float64, seed uint64) (x, w []float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	big := make(map[int]bool)
	for len(big) < outliers {
		big[rng.IntN(k)] = true
	}
	x = make([]float32, tokens*k)
	for i := range x {
		v := rng.NormFloat64()
		if big[i%k] {
			v *= outlierScale
		}
		x[i] = float32(v)
	}
	w = make([]float32, n*k)
	for i := range w {
		w[i] = float32(0.05 * rng.NormFloat64())
	}
	return x, w
}

// gaussian returns n values drawn N(0, 1) with a fixed seed.
func gaussian(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}
