package kerneltest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/ref"
)

// The quantized kernels' conformance tests. Error bounds, and why:
//   - Integer sums (GEMMInt8, the core of W8A8) must equal the reference exactly: int32 accumulation is exact.
//   - W8A8 float outputs: sa·sw·float(acc) takes at most three float32 roundings (the product of the scales, the
//     conversion of acc beyond 2^24, the final product), so |got-ref| <= 2^-22·|ref|, far inside one quantization
//     step sa·sw ("1 LSB").
//   - Float sums (W8A16, W4A16, the GGUF dots): a float32 sum of N terms in any order and grouping, with or without
//     FMA, is within N·2^-24·Σ|term| of the exact sum (Higham's γ_N bound), so each output is checked against
//     (N+c)·2^-24·Σ|term| computed from the same quantized inputs, the terms being single products.
//   - Quantizers: the same scale as the reference bit for bit, and each code the nearest integer to x/scale
//     (halves away from zero), allowing ±1 only where x/scale is within 2^-12 of a half (float32 vs float64).
//   - Quantization error as llama.cpp's test-quantize-fns measures it: a quantized dot product of its synthetic
//     data within 0.02·n (8-bit: Q8_0, W8A16, W8A8) or 0.04·n (4-bit: Q4_0, W4A16) of the float dot product.
// Outputs are poisoned with NaN before every call, and a NaN never passes a bound.

const u32 = 1.0 / (1 << 24) // unit roundoff of float32

var (
	// m, n, k: one token (GEMV paths), a few, and from 32 on (the packed W8A8 GEMM in kernels/cpu); k below,
	// at and past multiples of 4, 16 and 64.
	qGEMMShapes = [][3]int{{1, 1, 1}, {1, 7, 5}, {1, 1025, 67}, {1, 17, 1024}, {7, 17, 67}, {17, 7, 1},
		{17, 1025, 256}, {33, 50, 67}, {40, 1025, 130}, {32, 5, 3}, {7, 1, 1031}, {17, 48, 64}, {9, 33, 1024},
		{36, 1025, 256}, {48, 9, 1024}}
	qBlockShapes = [][2]int{{1, 32}, {7, 96}, {17, 4096}, {1025, 64}, {3, 1056}}
)

func qRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func qFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(2*r.Float64() - 1)
	}
	return x
}

func qInt8s(r *rand.Rand, n int) []int8 {
	x := make([]int8, n)
	for i := range x {
		x[i] = int8(r.IntN(256) - 128)
	}
	return x
}

func qScales(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.001 + 0.1*r.Float64())
	}
	return s
}

func qPoison(c []float32) {
	for i := range c {
		c[i] = float32(math.NaN())
	}
}

func qF64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// qCheck fails t at the first index where got is not within bound[i] of want (NaN fails).
func qCheck(t *testing.T, what string, got []float32, want, bound []float64) {
	t.Helper()
	for i := range want {
		if !(math.Abs(float64(got[i])-want[i]) <= bound[i]) {
			t.Fatalf("%s: [%d] = %v, want %v ± %.3g", what, i, got[i], want[i], bound[i])
		}
	}
}

// qWantPanic fails t unless f panics with a message starting "kernels: op: " and containing what.
func qWantPanic(t *testing.T, op, what string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		msg, _ := r.(string)
		if !strings.HasPrefix(msg, "kernels: "+op+": ") || !strings.Contains(msg, what) {
			t.Errorf("%s with bad %s: recovered %v, want a panic \"kernels: %s: ...%s...\"", op, what, r, op, what)
		}
	}()
	f()
}

// TestGEMMW8A16 checks f against ref.GEMMW8A16.
func TestGEMMW8A16(t *testing.T, f GEMMW8A16Func) {
	for si, sh := range qGEMMShapes {
		m, n, k := sh[0], sh[1], sh[2]
		r := qRand(uint64(si))
		a, w, sw := qFloats(r, m*k), qInt8s(r, n*k), qScales(r, n)
		c := make([]float32, m*n)
		qPoison(c)
		f(m, n, k, a, w, sw, c)
		want := make([]float64, m*n)
		ref.GEMMW8A16(m, n, k, qF64(a), w, qF64(sw), want)
		bound := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := 0; p < k; p++ {
					s += math.Abs(float64(a[i*k+p]) * float64(w[j*k+p]))
				}
				bound[i*n+j] = float64(k+2) * u32 * s * float64(sw[j])
			}
		}
		qCheck(t, fmt.Sprintf("GEMMW8A16 m=%d n=%d k=%d", m, n, k), c, want, bound)
	}
	qGEMMError(t, "GEMMW8A16", 0.02, func(m, n, k int, a, w, c []float32) {
		qw, sw := qQuantizeRowsRTN(n, k, w)
		f(m, n, k, a, qw, sw, c)
	})
	qWantPanic(t, "GEMMW8A16", "len(sw)", func() {
		f(2, 3, 4, make([]float32, 8), make([]int8, 12), make([]float32, 2), make([]float32, 6))
	})
	qWantPanic(t, "GEMMW8A16", "len(w)", func() {
		f(2, 3, 4, make([]float32, 8), make([]int8, 11), make([]float32, 3), make([]float32, 6))
	})
}

// TestGEMMInt8 checks that f's int32 sums equal ref.GEMMInt8's, including the extreme -128·-128 products.
func TestGEMMInt8(t *testing.T, f GEMMInt8Func) {
	for si, sh := range append(qGEMMShapes, [3]int{3, 5, 4096}) {
		m, n, k := sh[0], sh[1], sh[2]
		r := qRand(uint64(100 + si))
		a, w := qInt8s(r, m*k), qInt8s(r, n*k)
		if si == len(qGEMMShapes) { // the largest sums an int8 GEMM of this k can produce, both signs
			for p := range a {
				a[p], w[p] = -128, -128
			}
			for p := 0; p < k; p++ {
				w[k+p] = 127
			}
		}
		c := make([]int32, m*n)
		for i := range c {
			c[i] = math.MinInt32 + 12345
		}
		f(m, n, k, a, w, c)
		want := make([]int32, m*n)
		ref.GEMMInt8(m, n, k, a, w, want)
		for i := range want {
			if c[i] != want[i] {
				t.Fatalf("GEMMInt8 m=%d n=%d k=%d: [%d] = %d, want %d", m, n, k, i, c[i], want[i])
			}
		}
	}
	qWantPanic(t, "GEMMInt8", "len(c)", func() { f(2, 3, 4, make([]int8, 8), make([]int8, 12), make([]int32, 5)) })
}

// TestGEMMW8A8 checks f against ref.GEMMW8A8 within 2^-22 relative (see the bounds above).
func TestGEMMW8A8(t *testing.T, f GEMMW8A8Func) {
	for si, sh := range qGEMMShapes {
		m, n, k := sh[0], sh[1], sh[2]
		r := qRand(uint64(200 + si))
		qa, sa, qw, sw := qInt8s(r, m*k), qScales(r, m), qInt8s(r, n*k), qScales(r, n)
		c := make([]float32, m*n)
		qPoison(c)
		f(m, n, k, qa, sa, qw, sw, c)
		want := make([]float64, m*n)
		ref.GEMMW8A8(m, n, k, qa, qF64(sa), qw, qF64(sw), want)
		bound := make([]float64, m*n)
		for i, v := range want {
			bound[i] = math.Abs(v) / (1 << 22)
		}
		qCheck(t, fmt.Sprintf("GEMMW8A8 m=%d n=%d k=%d", m, n, k), c, want, bound)
	}
	qGEMMError(t, "GEMMW8A8", 0.02, func(m, n, k int, a, w, c []float32) {
		qw, sw := qQuantizeRowsRTN(n, k, w)
		qa, sa := qQuantizeRowsRTN(m, k, a)
		f(m, n, k, qa, sa, qw, sw, c)
	})
	qWantPanic(t, "GEMMW8A8", "len(sa)", func() {
		f(2, 3, 4, make([]int8, 8), make([]float32, 3), make([]int8, 12), make([]float32, 3), make([]float32, 6))
	})
}

// qCheckCodes checks int8 codes q of x against the scale s: each the nearest integer to x/s, halves away from zero,
// with ±1 allowed within 2^-12 of a half.
func qCheckCodes(t *testing.T, what string, x []float32, q []int8, s float64) {
	t.Helper()
	for p, v := range x {
		want := 0.0
		if s != 0 {
			want = math.Round(float64(v) / s)
		}
		tie := s != 0 && math.Abs(math.Abs(float64(v)/s-math.Trunc(float64(v)/s))-0.5) < 1.0/4096
		if d := math.Abs(float64(q[p]) - want); d != 0 && !(tie && d == 1) || q[p] == -128 {
			t.Fatalf("%s: q[%d] = %d for x=%v, scale %v, want %v", what, p, q[p], v, s, want)
		}
	}
}

// TestQuantizeRowsInt8 checks f against ref.QuantizeRowsInt8, with a row of zeros and a row with an outlier.
func TestQuantizeRowsInt8(t *testing.T, f QuantizeRowsInt8Func) {
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {17, 1025}, {2, 4096}} {
		m, k := sh[0], sh[1]
		r := qRand(uint64(m*k + 300))
		x := qFloats(r, m*k)
		x[k/2] = 1000 // an outlier channel in row 0
		if m > 1 {
			clear(x[k : 2*k])
		}
		q, s := make([]int8, m*k), make([]float32, m)
		qPoison(s)
		f(m, k, x, q, s)
		wantS := make([]float64, m)
		ref.QuantizeRowsInt8(m, k, qF64(x), make([]int8, m*k), wantS)
		for i := 0; i < m; i++ {
			if s[i] != float32(wantS[i]) {
				t.Fatalf("QuantizeRowsInt8 m=%d k=%d: s[%d] = %v, want %v", m, k, i, s[i], float32(wantS[i]))
			}
			what := fmt.Sprintf("QuantizeRowsInt8 m=%d k=%d row %d", m, k, i)
			qCheckCodes(t, what, x[i*k:(i+1)*k], q[i*k:(i+1)*k], float64(s[i]))
		}
	}
	qWantPanic(t, "QuantizeRowsInt8", "len(s)", func() { f(2, 3, make([]float32, 6), make([]int8, 6), make([]float32, 1)) })
}

// qInt4 returns random W4A16 weights for [n, k] with the given group: packed codes, scales, zero points.
func qInt4(r *rand.Rand, n, k, group int) ([]uint8, []float32, []uint8) {
	w := make([]uint8, n*k/2)
	for i := range w {
		w[i] = uint8(r.IntN(256))
	}
	z := make([]uint8, n*k/group)
	for i := range z {
		z[i] = uint8(r.IntN(16))
	}
	return w, qScales(r, n*k/group), z
}

// TestGEMMW4A16 checks f against ref.GEMMW4A16 for groups 32 and 128 (and 2, the smallest).
func TestGEMMW4A16(t *testing.T, f GEMMW4A16Func) {
	shapes := [][4]int{{1, 1, 128, 128}, {1, 1025, 256, 128}, {1, 17, 4096, 128}, {7, 17, 96, 32}, {17, 7, 1024, 128},
		{17, 33, 384, 128}, {3, 5, 6, 2}, {9, 64, 512, 32}}
	for si, sh := range shapes {
		m, n, k, g := sh[0], sh[1], sh[2], sh[3]
		r := qRand(uint64(400 + si))
		a := qFloats(r, m*k)
		w, s, z := qInt4(r, n, k, g)
		c := make([]float32, m*n)
		qPoison(c)
		f(m, n, k, g, a, w, s, z, c)
		want := make([]float64, m*n)
		ref.GEMMW4A16(m, n, k, g, qF64(a), w, qF64(s), z, want)
		bound := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var sum float64
				for p := 0; p < k; p++ {
					gi := j*(k/g) + p/g
					sum += math.Abs(float64(a[i*k+p]) * float64(int(ref.Nibble(w[j*k/2:], p))-int(z[gi])) * float64(s[gi]))
				}
				bound[i*n+j] = float64(k+2) * u32 * sum
			}
		}
		qCheck(t, fmt.Sprintf("GEMMW4A16 m=%d n=%d k=%d group=%d", m, n, k, g), c, want, bound)
	}
	qGEMMError(t, "GEMMW4A16", 0.04, func(m, n, k int, a, w, c []float32) {
		qw, s, z := qQuantizeInt4(n, k, 128, w)
		f(m, n, k, 128, a, qw, s, z, c)
	})
	qWantPanic(t, "GEMMW4A16", "group=40", func() {
		f(1, 1, 96, 40, make([]float32, 96), make([]uint8, 48), make([]float32, 2), make([]uint8, 2), make([]float32, 1))
	})
	qWantPanic(t, "GEMMW4A16", "len(z)", func() {
		f(1, 2, 64, 32, make([]float32, 64), make([]uint8, 64), make([]float32, 4), make([]uint8, 3), make([]float32, 2))
	})
}

// TestGEMMW4A8 checks f against ref.GEMMW4A8 for groups 2, 32, 64, 96, 128 and 256. A float32 implementation sums the
// integer group sums (or partial sums of each group, at most 16 a group) after scaling each by its group's
// scale, one rounding a term; the bound is (terms+4)·2^-24·sa·Σ_g s_g·(Σ_p q·|qa| + z·|Σ_p qa|).
func TestGEMMW4A8(t *testing.T, f GEMMW4A8Func) {
	shapes := [][4]int{{1, 1, 128, 128}, {1, 1025, 256, 128}, {1, 17, 4096, 128}, {7, 17, 96, 32}, {17, 7, 1024, 128},
		{17, 33, 384, 128}, {3, 5, 6, 2}, {9, 64, 512, 32}, {40, 70, 768, 128}, {2, 9, 512, 256}, {5, 33, 192, 64},
		{1, 7, 64, 64}, {3, 5, 64, 32}, {2, 3, 96, 96}, {33, 13, 256, 64}, {16, 9, 512, 256}, {37, 131, 256, 64},
		{2, 11, 2432, 128}, {1, 12, 768, 128}}
	for si, sh := range shapes {
		m, n, k, g := sh[0], sh[1], sh[2], sh[3]
		r := qRand(uint64(700 + si))
		qa, sa := qInt8s(r, m*k), qScales(r, m)
		w, s, z := qInt4(r, n, k, g)
		c := make([]float32, m*n)
		qPoison(c)
		f(m, n, k, g, qa, sa, w, s, z, c)
		want := make([]float64, m*n)
		ref.GEMMW4A8(m, n, k, g, qa, qF64(sa), w, qF64(s), z, want)
		gpr := k / g
		bound := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var sum float64
				for gi := 0; gi < gpr; gi++ {
					var qx, xs float64
					for p := gi * g; p < (gi+1)*g; p++ {
						qx += float64(ref.Nibble(w[j*k/2:], p)) * math.Abs(float64(qa[i*k+p]))
						xs += float64(qa[i*k+p])
					}
					sum += float64(s[j*gpr+gi]) * (qx + float64(z[j*gpr+gi])*math.Abs(xs))
				}
				bound[i*n+j] = float64(17*gpr+4) * u32 * float64(sa[i]) * sum
			}
		}
		qCheck(t, fmt.Sprintf("GEMMW4A8 m=%d n=%d k=%d group=%d", m, n, k, g), c, want, bound)
	}
	qGEMMError(t, "GEMMW4A8", 0.04, func(m, n, k int, a, w, c []float32) {
		qw, s, z := qQuantizeInt4(n, k, 128, w)
		qa, sa := qQuantizeRowsRTN(m, k, a)
		f(m, n, k, 128, qa, sa, qw, s, z, c)
	})
	qWantPanic(t, "GEMMW4A8", "group=40", func() {
		f(1, 1, 96, 40, make([]int8, 96), make([]float32, 1), make([]uint8, 48), make([]float32, 2), make([]uint8, 2),
			make([]float32, 1))
	})
	qWantPanic(t, "GEMMW4A8", "len(sa)", func() {
		f(2, 2, 64, 32, make([]int8, 128), make([]float32, 1), make([]uint8, 64), make([]float32, 4), make([]uint8, 4),
			make([]float32, 4))
	})
}

// qQ8_0 returns random Q8_0 blocks for n values: binary16 scales in [0.001, 0.1], codes over all of int8.
func qQ8_0(r *rand.Rand, n int) []byte {
	b := make([]byte, n/ref.QBlock*ref.Q8_0Bytes)
	for i := 0; i < len(b); i += ref.Q8_0Bytes {
		binary.LittleEndian.PutUint16(b[i:], half.F32ToF16(float32(0.001+0.1*r.Float64())))
		for j := 2; j < ref.Q8_0Bytes; j++ {
			b[i+j] = byte(r.IntN(256))
		}
	}
	return b
}

// qQ4_0 returns random Q4_0 blocks for n values.
func qQ4_0(r *rand.Rand, n int) []byte {
	b := make([]byte, n/ref.QBlock*ref.Q4_0Bytes)
	for i := 0; i < len(b); i += ref.Q4_0Bytes {
		binary.LittleEndian.PutUint16(b[i:], half.F32ToF16(float32(0.001+0.1*r.Float64())))
		for j := 2; j < ref.Q4_0Bytes; j++ {
			b[i+j] = byte(r.IntN(256))
		}
	}
	return b
}

func qScale(blk []byte) float64 { return float64(half.F16ToF32(binary.LittleEndian.Uint16(blk))) }

// qDotBound is the float32 summation bound of a GGUF dot: (blocks+5)·2^-24·Σ_blocks |d_w·d_x|·Σ |q_w·q_x|. The
// terms are the single products, not the blocks' sums, because a vector kernel keeps each block's integer sum
// split across lanes (exact) and sums the lanes' scaled parts in float32 (llama.cpp does the same); the +5
// covers the final reduction of up to 16 lanes.
func qDotBound(n int, w, x []byte, wBytes int, code func(blk []byte, i int) int) float64 {
	nb := n / ref.QBlock
	var s float64
	for b := 0; b < nb; b++ {
		wb, xb := w[b*wBytes:], x[b*ref.Q8_0Bytes:]
		var isum int
		for i := 0; i < ref.QBlock; i++ {
			isum += qAbs(code(wb, i) * int(int8(xb[2+i])))
		}
		s += math.Abs(qScale(wb)*qScale(xb)) * float64(isum)
	}
	return float64(nb+5) * u32 * s
}

func q8Code(blk []byte, i int) int { return int(int8(blk[2+i])) }

func q4Code(blk []byte, i int) int {
	if i < ref.QBlock/2 {
		return int(blk[2+i]&0xf) - 8
	}
	return int(blk[2+i-ref.QBlock/2]>>4) - 8
}

// qSynthetic is llama.cpp's test data: 0.1 + 2·cos(i + offset).
func qSynthetic(n int, offset float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(0.1 + 2*math.Cos(float64(i)+offset))
	}
	return x
}

// qQuantizeQ4_0 is GGUF's quantize_row_q4_0_ref, for the Q4_0 weights of the error tests: d = -max/8 where max is
// the value of largest magnitude, q = min(15, trunc(x/d + 8.5)).
func qQuantizeQ4_0(x []float32) []byte {
	out := make([]byte, len(x)/ref.QBlock*ref.Q4_0Bytes)
	for b := 0; b < len(x)/ref.QBlock; b++ {
		xs, blk := x[b*ref.QBlock:][:ref.QBlock], out[b*ref.Q4_0Bytes:]
		var amax, mx float32
		for _, v := range xs {
			if abs := float32(math.Abs(float64(v))); abs > amax {
				amax, mx = abs, v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(blk, half.F32ToF16(d))
		for j := 0; j < ref.QBlock/2; j++ {
			lo := min(15, int8(xs[j]*id+8.5))
			hi := min(15, int8(xs[j+ref.QBlock/2]*id+8.5))
			blk[2+j] = byte(lo) | byte(hi)<<4
		}
	}
	return out
}

// TestQuantizeRowQ8_0 checks f against ref.QuantizeRowQ8_0: identical scale bytes, codes as qCheckCodes says.
func TestQuantizeRowQ8_0(t *testing.T, f QuantizeRowQ8_0Func) {
	for _, n := range []int{32, 96, 4096} {
		x := qFloats(qRand(uint64(500+n)), n)
		x[5] = 30 // an outlier in block 0
		clear(x[n-32:])
		out := make([]byte, n/32*34)
		for i := range out {
			out[i] = 0xa5
		}
		f(x, out)
		want := make([]byte, len(out))
		ref.QuantizeRowQ8_0(qF64(x), want)
		for b := 0; b < n/32; b++ {
			blk := out[b*34:][:34]
			if blk[0] != want[b*34] || blk[1] != want[b*34+1] {
				t.Fatalf("QuantizeRowQ8_0 n=%d block %d: scale % x, want % x", n, b, blk[:2], want[b*34:b*34+2])
			}
			q := make([]int8, 32)
			for i := range q {
				q[i] = int8(blk[2+i])
			}
			var amax float32
			for _, v := range x[b*32 : b*32+32] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			qCheckCodes(t, fmt.Sprintf("QuantizeRowQ8_0 n=%d block %d", n, b), x[b*32:b*32+32], q, float64(amax/127))
		}
	}
	qWantPanic(t, "QuantizeRowQ8_0", "len(x)", func() { f(make([]float32, 33), make([]byte, 34)) })
	qWantPanic(t, "QuantizeRowQ8_0", "len(out)", func() { f(make([]float32, 64), make([]byte, 34)) })
}

// TestDotQ8_0 checks f against ref.DotQ8_0 on random blocks, and its quantization error on llama.cpp's data.
func TestDotQ8_0(t *testing.T, f DotQFunc) {
	for _, sh := range qBlockShapes {
		n := sh[1]
		r := qRand(uint64(600 + n))
		w, x := qQ8_0(r, n), qQ8_0(r, n)
		got, want := f(n, w, x), ref.DotQ8_0(n, w, x)
		bound := qDotBound(n, w, x, ref.Q8_0Bytes, q8Code)
		qCheck(t, fmt.Sprintf("DotQ8_0 n=%d", n), []float32{got}, []float64{want}, []float64{bound})
	}
	qDotError(t, "DotQ8_0", f, func(x []float32) []byte { return qQuantizeQ8_0(x) }, 0.02)
	qWantPanic(t, "DotQ8_0", "len(x)", func() { f(64, make([]byte, 68), make([]byte, 34)) })
}

// TestDotQ4_0Q8_0 checks f against ref.DotQ4_0Q8_0 on random blocks, and its quantization error on llama.cpp's data.
func TestDotQ4_0Q8_0(t *testing.T, f DotQFunc) {
	for _, sh := range qBlockShapes {
		n := sh[1]
		r := qRand(uint64(700 + n))
		w, x := qQ4_0(r, n), qQ8_0(r, n)
		got, want := f(n, w, x), ref.DotQ4_0Q8_0(n, w, x)
		bound := qDotBound(n, w, x, ref.Q4_0Bytes, q4Code)
		qCheck(t, fmt.Sprintf("DotQ4_0Q8_0 n=%d", n), []float32{got}, []float64{want}, []float64{bound})
	}
	qDotError(t, "DotQ4_0Q8_0", f, qQuantizeQ4_0, 0.04)
	qWantPanic(t, "DotQ4_0Q8_0", "len(w)", func() { f(64, make([]byte, 34), make([]byte, 68)) })
}

func qQuantizeQ8_0(x []float32) []byte {
	out := make([]byte, len(x)/32*34)
	ref.QuantizeRowQ8_0(qF64(x), out)
	return out
}

// qDotError is test-quantize-fns' dot_product_error: quantize its synthetic w (with quantW) and x (to Q8_0), and
// require |dot - float dot| / n <= maxErr.
func qDotError(t *testing.T, op string, f DotQFunc, quantW func([]float32) []byte, maxErr float64) {
	t.Helper()
	const n = 4096
	w, x := qSynthetic(n, 0), qSynthetic(n, 1)
	var exact float64
	for i := range w {
		exact += float64(w[i]) * float64(x[i])
	}
	got := f(n, quantW(w), qQuantizeQ8_0(x))
	if e := math.Abs(float64(got)-exact) / n; !(e <= maxErr) {
		t.Errorf("%s: dot product error %.4g per element, want <= %g", op, e, maxErr)
	}
}

// testGEMVQ checks a GGUF GEMV against its reference row by row.
func testGEMVQ(t *testing.T, op string, f GEMVQFunc, refF func(n, k int, w, xq []byte, y []float64), wBytes int,
	blocks func(*rand.Rand, int) []byte, code func([]byte, int) int) {
	for si, sh := range qBlockShapes {
		n, k := sh[0], sh[1]
		r := qRand(uint64(800 + si))
		w, x := blocks(r, n*k), qQ8_0(r, k)
		y := make([]float32, n)
		qPoison(y)
		f(n, k, w, x, y)
		want := make([]float64, n)
		refF(n, k, w, x, want)
		row := k / ref.QBlock * wBytes
		bound := make([]float64, n)
		for j := range bound {
			bound[j] = qDotBound(k, w[j*row:][:row], x, wBytes, code)
		}
		qCheck(t, fmt.Sprintf("%s n=%d k=%d", op, n, k), y, want, bound)
	}
	qWantPanic(t, op, "k=48", func() { f(1, 48, make([]byte, 64), make([]byte, 64), make([]float32, 1)) })
	qWantPanic(t, op, "len(y)", func() { f(2, 32, make([]byte, 2*wBytes), make([]byte, 34), make([]float32, 1)) })
}

// TestGEMVQ8_0 checks f against ref.GEMVQ8_0.
func TestGEMVQ8_0(t *testing.T, f GEMVQFunc) {
	testGEMVQ(t, "GEMVQ8_0", f, ref.GEMVQ8_0, ref.Q8_0Bytes, qQ8_0, q8Code)
}

// TestGEMVQ4_0 checks f against ref.GEMVQ4_0.
func TestGEMVQ4_0(t *testing.T, f GEMVQFunc) {
	testGEMVQ(t, "GEMVQ4_0", f, ref.GEMVQ4_0, ref.Q4_0Bytes, qQ4_0, q4Code)
}

func qAbs(v int) int { return max(v, -v) }

// qGEMMError is test-quantize-fns' dot_product_error for a quantized GEMM: run quantizes its float inputs (rows of
// llama.cpp's synthetic data, each with its own offset) and multiplies them; every output must be within
// maxErr·k of the float product.
func qGEMMError(t *testing.T, op string, maxErr float64, run func(m, n, k int, a, w, c []float32)) {
	t.Helper()
	const m, n, k = 5, 6, 4096
	a, w := make([]float32, 0, m*k), make([]float32, 0, n*k)
	for i := 0; i < m; i++ {
		a = append(a, qSynthetic(k, float64(i))...)
	}
	for j := 0; j < n; j++ {
		w = append(w, qSynthetic(k, float64(10+j))...)
	}
	c := make([]float32, m*n)
	qPoison(c)
	run(m, n, k, a, w, c)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var exact float64
			for p := 0; p < k; p++ {
				exact += float64(a[i*k+p]) * float64(w[j*k+p])
			}
			if e := math.Abs(float64(c[i*n+j])-exact) / k; !(e <= maxErr) {
				t.Errorf("%s: quantization error of [%d,%d] %.4g per element, want <= %g", op, i, j, e, maxErr)
			}
		}
	}
}

// qQuantizeRowsRTN is symmetric per-row int8 round-to-nearest (the W8A16 and W8A8 formats): s = max|x|/127.
func qQuantizeRowsRTN(rows, k int, x []float32) ([]int8, []float32) {
	q, s := make([]int8, rows*k), make([]float64, rows)
	ref.QuantizeRowsInt8(rows, k, qF64(x), q, s)
	s32 := make([]float32, rows)
	for i, v := range s {
		s32[i] = float32(v)
	}
	return q, s32
}

// qQuantizeInt4 is asymmetric group-wise INT4 round-to-nearest in the W4A16 layout: per group s = (max-min)/15,
// z = round(-min/s) clamped to 0..15, q = clamp(round(x/s) + z, 0, 15).
func qQuantizeInt4(n, k, group int, x []float32) ([]uint8, []float32, []uint8) {
	w, s, z := make([]uint8, n*k/2), make([]float32, n*k/group), make([]uint8, n*k/group)
	for g := range s {
		xs := x[g*group : (g+1)*group]
		lo, hi := xs[0], xs[0]
		for _, v := range xs {
			lo, hi = min(lo, v), max(hi, v)
		}
		s[g] = (hi - lo) / 15
		z[g] = uint8(min(15, max(0, math.Round(float64(-lo/s[g])))))
		for i, v := range xs {
			q := uint8(min(15, max(0, math.Round(float64(v/s[g]))+float64(z[g]))))
			p := g*group + i
			w[p/2] |= q << (4 * (p % 2))
		}
	}
	return w, s, z
}
