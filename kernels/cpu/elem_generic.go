package cpu

import "math"

// Pure-Go row primitives of the elementwise kernels. They are the specification of their AVX-512 twins in
// elem_amd64.s and the path taken under the noasm tag or on CPUs without AVX-512.

// The sums below accumulate in float64: a long float32 running sum would drift by up to len·2⁻²⁴, where the
// assembly's sixteen lanes of partial sums keep each chain short.

// elemSumSquaresGo returns Σ x[i]².
func elemSumSquaresGo(x []float32) float32 {
	var s float64
	for _, v := range x {
		s += float64(v * v)
	}
	return float32(s)
}

// elemAddSumSquaresGo adds x into res and returns Σ res[i]² of the updated res.
func elemAddSumSquaresGo(res, x []float32) float32 {
	x = x[:len(res)]
	var s float64
	for i := range res {
		res[i] += x[i]
		s += float64(res[i] * res[i])
	}
	return float32(s)
}

// elemScaleMulGo sets out[i] = x[i]·s·w[i].
func elemScaleMulGo(out, x, w []float32, s float32) {
	x, w = x[:len(out)], w[:len(out)]
	for i := range out {
		out[i] = x[i] * s * w[i]
	}
}

// elemSwiGLUGo sets out[i] = gate[i]/(1+e^(-gate[i]))·up[i].
func elemSwiGLUGo(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i := range out {
		g := gate[i]
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// elemMaxGo returns the largest element of x, which is not empty. (A NaN in x need not be returned: Softmax's
// sum turns it into NaN anyway.)
func elemMaxGo(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// elemExpSumGo sets x[i] = e^(x[i]-m) and returns Σ x[i].
func elemExpSumGo(x []float32, m float32) float32 {
	var s float64
	for i, v := range x {
		x[i] = float32(math.Exp(float64(v - m)))
		s += float64(x[i])
	}
	return float32(s)
}

// elemScaleGo sets x[i] *= s.
func elemScaleGo(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// elemRotateGo rotates each head (a run of len(cs) floats) of x by pairs: with cs = (c, c, ...) and
// sn = (-s, s, ...), x[2i], x[2i+1] = x[2i]·c - x[2i+1]·s, x[2i+1]·c + x[2i]·s.
func elemRotateGo(x, cs, sn []float32) {
	d := len(cs)
	for h := 0; h+d <= len(x); h += d {
		head := x[h : h+d]
		for i := 0; i < d; i += 2 {
			a, b := head[i], head[i+1]
			head[i] = a*cs[i] + b*sn[i]
			head[i+1] = b*cs[i+1] + a*sn[i+1]
		}
	}
}
