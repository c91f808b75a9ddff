package cpu

import (
	"encoding/binary"
	"math"

	"github.com/morphlab/morphlab/kernels/half"
)

// The pure-Go inner loops of the quantized kernels: the whole computation under noasm, the reference for the
// assembly in the tests, and the edges the assembly leaves.

// qMaxAbsGo returns max_p |x[p]| (0 for no x).
func qMaxAbsGo(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
	}
	return m
}

// qRoundRowGo sets q[p] = qRoundInt8(x[p]·inv).
func qRoundRowGo(x []float32, q []int8, inv float32) {
	q = q[:len(x)]
	for p, v := range x {
		q[p] = qRoundInt8(v * inv)
	}
}

// qDotI8F32Go returns Σ_p x[p]·float32(w[p]) in four interleaved partial sums.
func qDotI8F32Go(x []float32, w []int8) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	p := 0
	for ; p+4 <= len(w); p += 4 {
		s0 += x[p] * float32(w[p])
		s1 += x[p+1] * float32(w[p+1])
		s2 += x[p+2] * float32(w[p+2])
		s3 += x[p+3] * float32(w[p+3])
	}
	for ; p < len(w); p++ {
		s0 += x[p] * float32(w[p])
	}
	return (s0 + s1) + (s2 + s3)
}

// qDotI8Go returns Σ_p w[p]·a[p] in int32 (wrapping, like the hardware).
func qDotI8Go(w, a []int8) int32 {
	a = a[:len(w)]
	var s int32
	for p, v := range w {
		s += int32(v) * int32(a[p])
	}
	return s
}

// qW4A8Go is GEMMW4A8 in pure Go: each output one row's groups, each group's integer sum exact, then scaled
// and summed in float32 in group order; rows split across threads.
func qW4A8Go(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32) {
	gpr := k / group
	Parallel(n, qRowGrain(k/2), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			row, sj, zj := w[j*k/2:(j+1)*k/2], s[j*gpr:(j+1)*gpr], z[j*gpr:(j+1)*gpr]
			for i := 0; i < m; i++ {
				c[i*n+j] = sa[i] * qDotW4A8Go(row, qa[i*k:(i+1)*k], sj, zj, group)
			}
		}
	})
}

// qDotW4A8Go returns Σ_g s[g]·Σ_{p in g} (q[p] - z[g])·a[p] for one row of packed codes w.
func qDotW4A8Go(w []uint8, a []int8, s []float32, z []uint8, group int) float32 {
	var acc float32
	for g := range s {
		zg := int32(z[g])
		var d int32
		for p := g * group; p < (g+1)*group; p += 2 {
			b := w[p/2]
			d += (int32(b&0xf)-zg)*int32(a[p]) + (int32(b>>4)-zg)*int32(a[p+1])
		}
		acc += s[g] * float32(d)
	}
	return acc
}

// qDotI8RowsGo sets acc[r] = Σ_p w[r*k+p]·a[p] for the len(acc) rows of w (k = len(a)) and returns 0, the bias
// its exact sums need no correction for.
func qDotI8RowsGo(w, a []int8, acc []int32) int32 {
	k := len(a)
	for r := range acc {
		acc[r] = qDotI8Go(w[r*k:(r+1)*k], a)
	}
	return 0
}

// qSumI8Go returns Σ_p a[p].
func qSumI8Go(a []int8) int32 {
	var s int32
	for _, v := range a {
		s += int32(v)
	}
	return s
}

// qDotI8x4Go sets acc[r] = Σ_p w[r*k+p]·a[p] for the four rows of w (k = len(a)).
func qDotI8x4Go(w, a []int8, acc *[4]int32) {
	k := len(a)
	for r := range acc {
		acc[r] = qDotI8Go(w[r*k:(r+1)*k], a)
	}
}

// qGEMMInt8Go is qInt8 for m > 1 in pure Go: columns split across threads, each output one dot product.
func qGEMMInt8Go(m, n, k int, a, w []int8, out *qInt8Out) {
	Parallel(n, gemmMinWork/(m*k)+1, func(lo, hi int) {
		acc := make([]int32, hi-lo)
		for i := 0; i < m; i++ {
			for j := lo; j < hi; j++ {
				acc[j-lo] = qDotI8Go(w[j*k:(j+1)*k], a[i*k:(i+1)*k])
			}
			out.store(i, lo, acc, 0)
		}
	})
}

// qStoreInt32Go sets dst[j] = acc[j] - bias.
func qStoreInt32Go(dst, acc []int32, bias int32) {
	acc = acc[:len(dst)]
	for j, v := range acc {
		dst[j] = v - bias
	}
}

// qStoreScaledGo sets dst[j] = float32(acc[j] - bias)·(sa·sw[j]).
func qStoreScaledGo(dst []float32, acc []int32, bias int32, sa float32, sw []float32) {
	acc, sw = acc[:len(dst)], sw[:len(dst)]
	for j, v := range acc {
		dst[j] = float32(v-bias) * (sa * sw[j])
	}
}

// qW4RowsGo returns the pure-Go row function of qGEMVW4 for activations x: one output from a packed row, its
// scales and its zero points, Σ_p x[p]·T_g[q[p]] with each group's table T_g[q] = (q - z[g])·s[g].
func qW4RowsGo(k, group int, x []float32) func(w []uint8, s []float32, z []uint8) float32 {
	return func(w []uint8, s []float32, z []uint8) float32 {
		var y0, y1 float32
		var t [16]float32
		for g := range s {
			for q := range t {
				t[q] = (float32(q) - float32(z[g])) * s[g]
			}
			for p := g * group; p < (g+1)*group; p += 2 {
				b := w[p/2]
				y0 += t[b&0xf] * x[p]
				y1 += t[b>>4] * x[p+1]
			}
		}
		return y0 + y1
	}
}

// qBlockScales returns the binary16 scales of a w block and an x block multiplied: exact in float32, since each
// has an 11-bit significand.
func qBlockScales(wb, xb []byte) float32 {
	return half.F16ToF32(binary.LittleEndian.Uint16(wb)) * half.F16ToF32(binary.LittleEndian.Uint16(xb))
}

// qGGUFRowsGo returns the pure-Go dot product of a row of GGUF blocks (Q4_0 if q4, else Q8_0) with xq.
func qGGUFRowsGo(xq []byte, q4 bool) func(w []byte) float32 {
	if q4 {
		return func(w []byte) float32 { return qDotQ4_0Q8_0Go(w, xq) }
	}
	return func(w []byte) float32 { return qDotQ8_0Go(w, xq) }
}

// qDotQ8_0Go is DotQ8_0 over the blocks of x.
func qDotQ8_0Go(w, x []byte) float32 {
	var sum float32
	for b := 0; b < len(x)/qQ8_0Size; b++ {
		wb, xb := w[b*qQ8_0Size:(b+1)*qQ8_0Size], x[b*qQ8_0Size:(b+1)*qQ8_0Size]
		var isum int32
		for i := 2; i < qQ8_0Size; i++ {
			isum += int32(int8(wb[i])) * int32(int8(xb[i]))
		}
		sum += qBlockScales(wb, xb) * float32(isum)
	}
	return sum
}

// qDotQ4_0Q8_0Go is DotQ4_0Q8_0 over the blocks of x.
func qDotQ4_0Q8_0Go(w, x []byte) float32 {
	var sum float32
	for b := 0; b < len(x)/qQ8_0Size; b++ {
		wb, xb := w[b*qQ4_0Size:(b+1)*qQ4_0Size], x[b*qQ8_0Size:(b+1)*qQ8_0Size]
		var isum int32
		for i := 0; i < qBlock/2; i++ {
			isum += (int32(wb[2+i]&0xf)-8)*int32(int8(xb[2+i])) + (int32(wb[2+i]>>4)-8)*int32(int8(xb[2+i+qBlock/2]))
		}
		sum += qBlockScales(wb, xb) * float32(isum)
	}
	return sum
}

// qQ8_0A8Go is GEMMQ8_0A8 in pure Go: each output its row's blocks, each block's integer sum exact, then scaled
// and summed in float32 in block order; rows split across threads.
func qQ8_0A8Go(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32) {
	nb := k / qBlock
	Parallel(n, qRowGrain(k), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			for i := 0; i < m; i++ {
				c[i*n+j] = sa[i] * qDotQ8_0A8Go(w[j*k:(j+1)*k], qa[i*k:(i+1)*k], d[j*nb:(j+1)*nb])
			}
		}
	})
}

// qDotQ8_0A8Go returns Σ_b d[b]·Σ_{p in b} w[p]·a[p] over the blocks of one row.
func qDotQ8_0A8Go(w, a []int8, d []uint16) float32 {
	var acc float32
	for b, h := range d {
		var s int32
		for p := b * qBlock; p < (b+1)*qBlock; p++ {
			s += int32(w[p]) * int32(a[p])
		}
		acc += half.F16ToF32(h) * float32(s)
	}
	return acc
}

// qQ4_0A8Go is GEMMQ4_0A8 in pure Go, as qQ8_0A8Go is GEMMQ8_0A8.
func qQ4_0A8Go(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32) {
	nb := k / qBlock
	Parallel(n, qRowGrain(k/2), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			for i := 0; i < m; i++ {
				c[i*n+j] = sa[i] * qDotQ4_0A8Go(w[j*k/2:(j+1)*k/2], qa[i*k:(i+1)*k], d[j*nb:(j+1)*nb])
			}
		}
	})
}

// qDotQ4_0A8Go returns Σ_b d[b]·Σ_{p in b} (q[p] - 8)·a[p] over the blocks of one row of packed codes w.
func qDotQ4_0A8Go(w []uint8, a []int8, d []uint16) float32 {
	var acc float32
	for b, h := range d {
		var s int32
		for p := b * qBlock; p < (b+1)*qBlock; p += 2 {
			v := w[p/2]
			s += (int32(v&0xf)-8)*int32(a[p]) + (int32(v>>4)-8)*int32(a[p+1])
		}
		acc += half.F16ToF32(h) * float32(s)
	}
	return acc
}
