package cpu

import (
	"math"

	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// Quantized matmuls: the float32 versions of the kernels in kernels/ref/quant.go, with the same layouts. Every
// one splits its rows across the worker pool; with one token (m = 1) each runs a matrix-vector loop that streams
// the weights once, which is what decode is bound by.

// Q8_0 and Q4_0 block sizes in bytes, and values a block.
const (
	qBlock    = 32
	qQ8_0Size = 34
	qQ4_0Size = 18
)

// GEMMW8A16 computes C = A·Wᵀ with INT8 per-channel weights: c[i*n+j] = sw[j]·Σ_p a[i*k+p]·w[j*k+p], A [m, k]
// float32, W [n, k] int8, sw [n]. Weights are converted as they are read (VPMOVSXBD, VCVTDQ2PS, then VFMADD on
// AVX-512): with m = 1 a row at a time, with m > 1 in tiles of four rows by four tokens, so each converted weight
// serves four tokens.
func GEMMW8A16(m, n, k int, a []float32, w []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A16", m, n, k, len(a), len(w), len(c))
	shape.Len("GEMMW8A16", "sw", len(sw), n, "n")
	if m == 1 {
		qGEMVW8(n, k, a, w, sw, c)
		return
	}
	qGEMMW8(m, n, k, a, w, sw, c)
}

// qGEMVW8 is GEMMW8A16 for one token, rows split across threads.
func qGEMVW8(n, k int, x []float32, w []int8, sw, y []float32) {
	Parallel(n, qRowGrain(k), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			y[j] = sw[j] * qDotI8F32(x, w[j*k:(j+1)*k])
		}
	})
}

// qGEMMW8Go is GEMMW8A16 for m > 1 in pure Go: one GEMV a token.
func qGEMMW8Go(m, n, k int, a []float32, w []int8, sw, c []float32) {
	for i := 0; i < m; i++ {
		qGEMVW8(n, k, a[i*k:(i+1)*k], w, sw, c[i*n:(i+1)*n])
	}
}

// GEMMW4A16 computes C = A·Wᵀ with group-wise INT4 weights: W [n, k] packed two codes a byte (element 2i in the
// low nibble of byte i of its row, 2i+1 in the high nibble), scales s and zero points z [n, k/group], and
// W[j,p] = (q - z)·s for the group of p. Codes are unpacked in registers. With m = 1 each group's 16 possible
// weights (q - z)·s are tabulated and the codes looked up (VPERMPS); with m > 1 tiles of four rows by four tokens
// dequantize each 32 codes once ((q - z)·s as one FMA) and use them for four tokens.
func GEMMW4A16(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	shape.GEMMGroup("GEMMW4A16", m, n, k, group, len(a), len(w), len(s), len(z), len(c))
	if m == 1 {
		qGEMVW4(n, k, group, a, w, s, z, c)
		return
	}
	qGEMMW4(m, n, k, group, a, w, s, z, c)
}

// GEMMW4A8 computes C = A·Wᵀ from per-token INT8 activations (qa, sa, from QuantizeRowsInt8) and group-wise INT4
// weights in GEMMW4A16's layout: c[i*n+j] = sa[i]·Σ_g s[j,g]·Σ_{p in g} (q[j,p] - z[j,g])·qa[i*k+p], each group's
// integer sum exact. With VNNI (groups of a multiple of 32) the codes are unpacked to bytes and multiplied by
// VPDPBUSD, a few instructions per 128 weights where W4A16 needs a conversion and an FMA per weight, so one token
// is bound by memory rather than by arithmetic, as W8A8 is. From 12 tokens on (groups of a multiple of 64) each
// thread unpacks W's codes once for all the tokens and runs a GEMM tile; its float32 sums of the group terms
// are ordered differently from the one-token loop's, so a token's outputs there and alone may differ by a
// rounding (within the conformance suite's bound).
func GEMMW4A8(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32) {
	shape.GEMMGroup("GEMMW4A8", m, n, k, group, len(qa), len(w), len(s), len(z), len(c))
	shape.Len("GEMMW4A8", "sa", len(sa), m, "m")
	qW4A8(m, n, k, group, qa, sa, w, s, z, c)
}

// W4A8Weights is one matrix of GEMMW4A8s: N rows of W in GEMMW4A16's layout (codes, scales, zero points).
type W4A8Weights struct {
	N      int
	Packed []uint8
	Scales []float32
	Zeros  []uint8
}

// GEMMW4A8s computes cs[i] = A·Wᵢᵀ as GEMMW4A8 does, bit for bit, for matrices that share the activations (a
// layer's q, k and v; gate and up), in one call: from 12 tokens on, the tokens are packed once and the tiles of
// all the matrices are split over the threads together, so that the matrices pay one packing and one fork and
// join instead of one each.
func GEMMW4A8s(m, k, group int, qa []int8, sa []float32, ws []W4A8Weights, cs [][]float32) {
	shape.Len("GEMMW4A8s", "cs", len(cs), len(ws), "len(ws)")
	for i, w := range ws {
		shape.GEMMGroup("GEMMW4A8s", m, w.N, k, group, len(qa), len(w.Packed), len(w.Scales), len(w.Zeros), len(cs[i]))
	}
	shape.Len("GEMMW4A8s", "sa", len(sa), m, "m")
	if qTileW4A8s(m, k, group, qa, sa, ws, cs) {
		return
	}
	for i, w := range ws {
		qW4A8(m, w.N, k, group, qa, sa, w.Packed, w.Scales, w.Zeros, cs[i])
	}
}

// qGEMMW4Go is GEMMW4A16 for m > 1 without the tile kernel: one GEMV a token.
func qGEMMW4Go(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	for i := 0; i < m; i++ {
		qGEMVW4(n, k, group, a[i*k:(i+1)*k], w, s, z, c[i*n:(i+1)*n])
	}
}

// qRowGrain is how many rows of length k make a chunk worth handing to another thread.
func qRowGrain(k int) int { return 1<<16/k + 1 }

// GEMMInt8 is the integer core of W8A8: c[i*n+j] = Σ_p a[i*k+p]·w[j*k+p] in int32, exact as long as the result fits
// an int32 (intermediate sums wrap modulo 2^32 and come back). On AVX-512 VNNI it runs VPDPBUSD, which multiplies
// unsigned by signed bytes: the weights are offset by 128 (w^0x80 = w+128, unsigned) and the excess 128·Σ_p a[i,p]
// is subtracted afterwards. This offsets the weights rather than the activations, as the equivalent
// Σ(a+128)·w - 128·Σ w would, so the correction needs the row sums of the activations (m·k work, per call) and
// no precomputed sums of the weights.
func GEMMInt8(m, n, k int, a, w []int8, c []int32) {
	shape.GEMM("GEMMInt8", m, n, k, len(a), len(w), len(c))
	qInt8(m, n, k, a, w, &qInt8Out{n: n, ci: c})
}

// GEMMW8A8 computes C = A·Wᵀ from per-token INT8 activations and per-channel INT8 weights:
// c[i*n+j] = sa[i]·sw[j]·Σ_p qa[i*k+p]·qw[j*k+p], the sum exact in int32 (GEMMInt8) and the scaling
// float32(sum)·(sa[i]·sw[j]).
func GEMMW8A8(m, n, k int, qa []int8, sa []float32, qw []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A8", m, n, k, len(qa), len(qw), len(c))
	shape.Len("GEMMW8A8", "sa", len(sa), m, "m")
	shape.Len("GEMMW8A8", "sw", len(sw), n, "n")
	qInt8(m, n, k, qa, qw, &qInt8Out{n: n, cf: c, sa: sa, sw: sw})
}

// W8A8Weights is one matrix of GEMMW8A8s: N rows of per-channel INT8 weights and their scales.
type W8A8Weights struct {
	N      int
	Q      []int8
	Scales []float32
}

// GEMMW8A8s computes cs[i] = A·Wᵢᵀ as GEMMW8A8 does, bit for bit, for matrices that share the activations, in
// one call: from 12 to 48 tokens (the W8A8 tile), the tokens are packed once and the tiles of all the matrices
// are split over the threads together.
func GEMMW8A8s(m, k int, qa []int8, sa []float32, ws []W8A8Weights, cs [][]float32) {
	shape.Len("GEMMW8A8s", "cs", len(cs), len(ws), "len(ws)")
	for i, w := range ws {
		shape.GEMM("GEMMW8A8s", m, w.N, k, len(qa), len(w.Q), len(cs[i]))
		shape.Len("GEMMW8A8s", "Scales", len(w.Scales), w.N, "N")
	}
	shape.Len("GEMMW8A8s", "sa", len(sa), m, "m")
	if qTileW8A8s(m, k, qa, sa, ws, cs) {
		return
	}
	for i, w := range ws {
		qInt8(m, w.N, k, qa, w.Q, &qInt8Out{n: w.N, cf: cs[i], sa: sa, sw: w.Scales})
	}
}

// qInt8Out is where qInt8 writes C [m, n]: the int32 sums into ci, or, when cf is set, float32(sum)·(sa[i]·sw[j])
// into cf.
type qInt8Out struct {
	n      int
	ci     []int32
	cf     []float32
	sa, sw []float32
}

// store writes the sums of row i for columns j0..j0+len(acc)-1, given as acc[j]-bias (the VNNI kernels leave their
// correction to the store, which does it in the same pass).
func (o *qInt8Out) store(i, j0 int, acc []int32, bias int32) {
	if o.cf != nil {
		qStoreScaled(o.cf[i*o.n+j0:i*o.n+j0+len(acc)], acc, bias, o.sa[i], o.sw[j0:j0+len(acc)])
		return
	}
	qStoreInt32(o.ci[i*o.n+j0:i*o.n+j0+len(acc)], acc, bias)
}

// qInt8 computes the int32 sums Σ_p a[i*k+p]·w[j*k+p] and writes them to out, from several threads at once for
// disjoint outputs. Where the architecture has a few-token W8A8 tile (qTileW8A8) it takes the calls it covers.
// Otherwise below qGEMMMinM tokens it runs GEMVs, each block of four rows of W serving every token while it is in
// L1; from qGEMMMinM on, the packed GEMM, whose packing of W pays off over many tokens.
func qInt8(m, n, k int, a, w []int8, out *qInt8Out) {
	if qTileW8A8(m, n, k, a, w, out) {
		return
	}
	if m < qGEMMMinM {
		qGEMVInt8(m, n, k, a, w, out)
		return
	}
	qGEMMInt8(m, n, k, a, w, out)
}

// qGEMMMinM is the fewest tokens for which qInt8 packs W for the GEMM micro-kernel.
const qGEMMMinM = 32

// qGEMVInt8 is qInt8 as GEMVs. One token reads W one row after another (qDotI8Rows), one sequential stream; more
// tokens take rows of W four at a time against every token, so that each block serves every token while it is in
// L1. Rows are split across threads.
func qGEMVInt8(m, n, k int, a, w []int8, out *qInt8Out) {
	asum, asumBuf := scratchI32(m)
	defer asumBuf.release()
	for i := range asum {
		asum[i] = qSumI8(a[i*k : (i+1)*k])
	}
	if m == 1 {
		Parallel(n, qRowGrain(k), func(lo, hi int) {
			var acc [64]int32
			for j := lo; j < hi; j += len(acc) {
				c := min(len(acc), hi-j)
				bias := qDotI8Rows(w[j*k:(j+c)*k], a, asum[0], acc[:c])
				out.store(0, j, acc[:c], bias)
			}
		})
		return
	}
	Parallel((n+3)/4, qRowGrain(4*k*m), func(lo, hi int) {
		var acc [4]int32
		for j := 4 * lo; j < min(4*hi, n); j += 4 {
			for i := 0; i < m; i++ {
				ai := a[i*k : (i+1)*k]
				if j+4 <= n {
					qDotI8x4(w[j*k:(j+4)*k], ai, asum[i], &acc)
					out.store(i, j, acc[:], 0)
					continue
				}
				for r := j; r < n; r++ {
					acc[r-j] = qDotI8Go(w[r*k:(r+1)*k], ai)
				}
				out.store(i, j, acc[:n-j], 0)
			}
		}
	})
}

// QuantizeRowsInt8 quantizes each row of x [m, k] to int8 for W8A8 (per-token dynamic quantization):
// s[i] = max_p |x[i,p]| / 127 and q[i,p] = round(x[i,p]·(127/max_p |x[i,p]|)), halves away from zero, in float32
// (a multiplication, not a division per element; the codes are kernels/ref's round(x/s) but for ±1 where x/s is
// within a few float32 roundings of a half). Codes span -127..127; a row of zeros gets s = 0 and q = 0.
func QuantizeRowsInt8(m, k int, x []float32, q []int8, s []float32) {
	shape.Positive("QuantizeRowsInt8", "m", m, "k", k)
	shape.Len("QuantizeRowsInt8", "x", len(x), m*k, "m*k")
	shape.Len("QuantizeRowsInt8", "q", len(q), m*k, "m*k")
	shape.Len("QuantizeRowsInt8", "s", len(s), m, "m")
	Parallel(m, qRowGrain(k), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s[i] = qQuantizeRow(x[i*k:(i+1)*k], q[i*k:(i+1)*k])
		}
	})
}

// qQuantizeRow quantizes row into qr symmetrically (QuantizeRowsInt8's rule for one row) and returns its scale.
func qQuantizeRow(row []float32, qr []int8) float32 {
	amax := qMaxAbs(row)
	if amax == 0 {
		clear(qr)
		return 0
	}
	qRoundRow(row, qr, 127/amax)
	return amax / 127
}

// qGEMVW4 is GEMMW4A16 for one token: y[j] = Σ_p x[p]·(q[j,p] - z[j,g])·s[j,g], g the group of p.
func qGEMVW4(n, k, group int, x []float32, w []uint8, s []float32, z []uint8, y []float32) {
	gpr := k / group
	row := qW4Rows(k, group, x)
	Parallel(n, qRowGrain(k/2), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			y[j] = row(w[j*k/2:(j+1)*k/2], s[j*gpr:(j+1)*gpr], z[j*gpr:(j+1)*gpr])
		}
	})
}

// qRoundInt8 rounds y (|y| < 127.5) to the nearest integer, halves away from zero, as math.Round does but
// without its general cases: in float64 y ± 0.5 is exact, and the conversion truncates toward zero.
func qRoundInt8(y float32) int8 {
	return int8(float64(y) + math.Copysign(0.5, float64(y)))
}
