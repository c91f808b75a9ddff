package quant

import (
	"fmt"
	"math"
)

// QuantizeRowsInt8 quantizes each row of x [m, k] symmetrically to int8: s[i] = max_p |x[i,p]|/127 and
// q[i,p] = round(x[i,p]/s[i]) with halves away from zero, so the largest magnitude maps to ±127 and -128 is never
// used; a row of zeros gets s = 0 and q = 0. The division is done in float64 from the float32 inputs, which is
// kernels/ref's QuantizeRowsInt8 exactly.
//
// The same rule serves the Int8 weight format (rows are output channels, W8A16 and W8A8) and the W8A8 activations
// (rows are tokens, quantized dynamically at run time). It panics on sizes that do not fit.
func QuantizeRowsInt8(x []float32, m, k int, q []int8, s []float32) {
	if m <= 0 || k <= 0 || len(x) != m*k || len(q) != m*k || len(s) != m {
		panic(fmt.Sprintf("quant: QuantizeRowsInt8: m=%d k=%d len(x)=%d len(q)=%d len(s)=%d, want m*k, m*k, m",
			m, k, len(x), len(q), len(s)))
	}
	for i := range m {
		row := x[i*k : (i+1)*k]
		var amax float64
		for _, v := range row {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		scale := amax / 127
		s[i] = float32(scale)
		for p, v := range row {
			if scale == 0 {
				q[i*k+p] = 0
				continue
			}
			q[i*k+p] = int8(math.Round(float64(v) / scale))
		}
	}
}

// DequantizeRowsInt8 is the inverse map: x[i,p] = q[i,p]·s[i] (len(x) = len(q) = m·k, m = len(s)).
func DequantizeRowsInt8(x []float32, q []int8, s []float32) {
	if len(s) == 0 || len(q)%len(s) != 0 || len(x) != len(q) {
		panic(fmt.Sprintf("quant: DequantizeRowsInt8: len(x)=%d len(q)=%d len(s)=%d, want len(x)=len(q), a multiple of len(s)",
			len(x), len(q), len(s)))
	}
	k := len(q) / len(s)
	for i, scale := range s {
		for p := i * k; p < (i+1)*k; p++ {
			x[p] = float32(q[p]) * scale
		}
	}
}
