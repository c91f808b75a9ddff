package quant

import (
	"fmt"
	"math"
)

// SmoothQuant migrates quantization difficulty from activations to weights for W8A8 (Xiao et al., SmoothQuant).
// Activations with outlier channels quantize badly per token; dividing channel j of X by
// s_j = max|X_j|^α / max|W_j|^(1-α) flattens them, and multiplying column j of every weight by s_j keeps the
// product X·Wᵀ unchanged. max|W_j| is taken over the rows of all layers (they share the input, hence one s).
// Channels whose activation or weight maximum is 0 keep s_j = 1.
//
// xMax is max|X_j| per input channel (Stats.MaxAbs), α in [0, 1] (0.5 is the paper's default). It returns s and
// each layer's smoothed weights W·diag(s) in float32, to be quantized (Quantize with Int8); the caller folds 1/s
// into the preceding RMSNorm weight with FoldIntoNorm.
func SmoothQuant(xMax []float32, layers []Linear, alpha float64) (s []float32, smoothed [][]float32, err error) {
	k := len(xMax)
	if k == 0 {
		return nil, nil, fmt.Errorf("quant: SmoothQuant: empty xMax")
	}
	if !(alpha >= 0 && alpha <= 1) {
		return nil, nil, fmt.Errorf("quant: SmoothQuant: alpha=%v, want in [0, 1]", alpha)
	}
	if err := checkLinears("SmoothQuant", k, layers); err != nil {
		return nil, nil, err
	}
	wMax := make([]float32, k)
	for _, l := range layers {
		for i, v := range l.W {
			wMax[i%k] = max(wMax[i%k], abs32(v))
		}
	}
	s = make([]float32, k)
	for j := range s {
		s[j] = 1
		if xMax[j] > 0 && wMax[j] > 0 {
			s[j] = float32(math.Pow(float64(xMax[j]), alpha) / math.Pow(float64(wMax[j]), 1-alpha))
		}
	}
	for _, l := range layers {
		smoothed = append(smoothed, scaleColumns(l.W, s, false))
	}
	return s, smoothed, nil
}
