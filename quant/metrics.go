package quant

import (
	"fmt"
	"math"
)

// Error metrics between a reference ref and an approximation got of the same length, accumulated in float64.

// RMSE is the root mean squared error sqrt(mean((ref-got)²)).
func RMSE(ref, got []float32) float64 {
	checkPair("RMSE", ref, got)
	var se float64
	for i := range ref {
		d := float64(ref[i]) - float64(got[i])
		se += d * d
	}
	return math.Sqrt(se / float64(len(ref)))
}

// SQNR is the signal to quantization noise ratio in dB: 10·log10(Σref² / Σ(ref-got)²). +Inf when got == ref.
func SQNR(ref, got []float32) float64 {
	checkPair("SQNR", ref, got)
	var sig, noise float64
	for i := range ref {
		d := float64(ref[i]) - float64(got[i])
		sig += float64(ref[i]) * float64(ref[i])
		noise += d * d
	}
	return 10 * math.Log10(sig/noise)
}

// Cosine is the cosine similarity ref·got / (|ref|·|got|); 0 when either is all zeros.
func Cosine(ref, got []float32) float64 {
	checkPair("Cosine", ref, got)
	var dot, rr, gg float64
	for i := range ref {
		dot += float64(ref[i]) * float64(got[i])
		rr += float64(ref[i]) * float64(ref[i])
		gg += float64(got[i]) * float64(got[i])
	}
	if rr == 0 || gg == 0 {
		return 0
	}
	return dot / math.Sqrt(rr*gg)
}

// MaxAbsErr is max |ref-got|.
func MaxAbsErr(ref, got []float32) float64 {
	checkPair("MaxAbsErr", ref, got)
	var m float64
	for i := range ref {
		m = math.Max(m, math.Abs(float64(ref[i])-float64(got[i])))
	}
	return m
}

func checkPair(op string, ref, got []float32) {
	if len(ref) != len(got) || len(ref) == 0 {
		panic(fmt.Sprintf("quant: %s: len(ref)=%d len(got)=%d, want equal and > 0", op, len(ref), len(got)))
	}
}
