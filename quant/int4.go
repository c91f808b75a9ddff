package quant

import "math"

// int4Group quantizes one group of weights asymmetrically to 4 bits, writing the codes to q (len(w)): the range
// [lo, hi] is the group's min and max widened to include 0 (so 0 stays exact and a constant group is exact) and,
// for the clipping search, narrowed to [-bound, bound]; s = (hi-lo)/15, z = round(-lo/s) in 0..15 and
// q = clamp(round(w/s) + z, 0, 15). Pass bound = +Inf for plain round-to-nearest.
func int4Group(w []float32, bound float64, q []uint8) (s float32, z uint8) {
	var lo, hi float64
	for _, v := range w {
		lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
	}
	lo, hi = math.Max(lo, -bound), math.Min(hi, bound)
	scale := (hi - lo) / 15
	if scale == 0 {
		clear(q)
		return 0, 0
	}
	s = float32(scale)
	zero := min(15, max(0, math.Round(-lo/scale)))
	for i, v := range w {
		q[i] = uint8(min(15, max(0, math.Round(float64(v)/float64(s))+zero)))
	}
	return s, uint8(zero)
}

// quantizeInt4 fills m's Packed, Scales and Zeros from w [Rows, Cols]. bounds, when not nil, holds one clipping
// bound per group ([Rows, Cols/Group], from the AWQ clipping search); nil means no clipping.
func quantizeInt4(m *Matrix, w []float32, bounds []float64) {
	k, g := m.Cols, m.Group
	q := make([]uint8, g)
	for j := range m.Rows {
		for gi := range k / g {
			idx := j*(k/g) + gi
			bound := math.Inf(1)
			if bounds != nil {
				bound = bounds[idx]
			}
			m.Scales[idx], m.Zeros[idx] = int4Group(w[j*k+gi*g:][:g], bound, q)
			packed := m.Packed[(j*k+gi*g)/2:][:g/2]
			for i := range packed {
				packed[i] = q[2*i] | q[2*i+1]<<4
			}
		}
	}
}

// dequantizeInt4 writes (q - z)·s for every weight of m into out [Rows*Cols].
func dequantizeInt4(out []float32, m *Matrix) {
	k, g := m.Cols, m.Group
	for j := range m.Rows {
		for p := range k {
			b := m.Packed[(j*k+p)/2] >> (4 * (p % 2)) & 0xf
			idx := j*(k/g) + p/g
			out[j*k+p] = float32(int(b)-int(m.Zeros[idx])) * m.Scales[idx]
		}
	}
}
