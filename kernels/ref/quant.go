package ref

import (
	"encoding/binary"
	"math"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// Quantized matmuls. Weights keep the [out, in] layout of GEMM; what changes is how a weight is stored:
//   - INT8 per channel (W8A16, W8A8): w int8 [n, k] with one float scale per row, sw[n]: W[j,p] = w[j*k+p]·sw[j].
//   - INT8 per token (W8A8 activations): qa int8 [m, k] with sa[m]: A[i,p] = qa[i*k+p]·sa[i].
//   - INT4 group-wise with zero points (W4A16): w uint8 [n, k/2], byte i of a row holding element 2i in its low
//     nibble and 2i+1 in its high nibble; scales s and zero points z (0..15) [n, k/group]:
//     W[j,p] = (q - z[j*k/group+p/group])·s[j*k/group+p/group].
//   - GGUF Q8_0: blocks of 32 values, 34 bytes: a little-endian binary16 scale d, then 32 int8 q; value = q·d.
//   - GGUF Q4_0: blocks of 32 values, 18 bytes: binary16 d, then 16 bytes; byte j holds element j in its low nibble
//     and element j+16 in its high nibble; value = (q-8)·d.
// Integer parts are summed exactly (in int64 here; every implementation's int32 sums must agree with these).

// Q8_0 and Q4_0 block geometry.
const (
	QBlock      = 32  // values a block
	Q8_0Bytes   = 34  // bytes of a Q8_0 block
	Q4_0Bytes   = 18  // bytes of a Q4_0 block
	int8Largest = 127 // symmetric int8 quantization maps max|x| to ±127
)

// GEMMW8A16 computes C = A·Wᵀ with INT8 per-channel weights: c[i*n+j] = sw[j]·Σ_p a[i*k+p]·w[j*k+p].
func GEMMW8A16(m, n, k int, a []float64, w []int8, sw []float64, c []float64) {
	shape.GEMM("GEMMW8A16", m, n, k, len(a), len(w), len(c))
	shape.Len("GEMMW8A16", "sw", len(sw), n, "n")
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += a[i*k+p] * float64(w[j*k+p])
			}
			c[i*n+j] = s * sw[j]
		}
	}
}

// GEMMInt8 is the integer core of W8A8: c[i*n+j] = Σ_p a[i*k+p]·w[j*k+p], exact. It panics if a sum does not fit
// an int32 (k > 131072 can overflow: 128·128·131072 = 2^31), since every fast implementation accumulates in int32.
func GEMMInt8(m, n, k int, a, w []int8, c []int32) {
	shape.GEMM("GEMMInt8", m, n, k, len(a), len(w), len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			c[i*n+j] = dotInt8(a[i*k:][:k], w[j*k:][:k])
		}
	}
}

func dotInt8(a, w []int8) int32 {
	var s int64
	for p := range a {
		s += int64(a[p]) * int64(w[p])
	}
	if s != int64(int32(s)) {
		panic("kernels: GEMMInt8: int32 accumulator overflow")
	}
	return int32(s)
}

// GEMMW8A8 computes C = A·Wᵀ with per-token INT8 activations and per-channel INT8 weights:
// c[i*n+j] = sa[i]·sw[j]·Σ_p qa[i*k+p]·qw[j*k+p], the sum exact (GEMMInt8).
func GEMMW8A8(m, n, k int, qa []int8, sa []float64, qw []int8, sw []float64, c []float64) {
	shape.GEMM("GEMMW8A8", m, n, k, len(qa), len(qw), len(c))
	shape.Len("GEMMW8A8", "sa", len(sa), m, "m")
	shape.Len("GEMMW8A8", "sw", len(sw), n, "n")
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			c[i*n+j] = sa[i] * sw[j] * float64(dotInt8(qa[i*k:][:k], qw[j*k:][:k]))
		}
	}
}

// QuantizeRowsInt8 quantizes each row of x [m, k] symmetrically to int8 (per-token dynamic quantization for W8A8):
// s[i] = max_p |x[i,p]| / 127 and q[i,p] = round(x[i,p] / s[i]), rounding halves away from zero, so the largest
// magnitude maps to ±127 and -128 is never used. A row of zeros gets s = 0 and q = 0.
func QuantizeRowsInt8(m, k int, x []float64, q []int8, s []float64) {
	shape.Positive("QuantizeRowsInt8", "m", m, "k", k)
	shape.Len("QuantizeRowsInt8", "x", len(x), m*k, "m*k")
	shape.Len("QuantizeRowsInt8", "q", len(q), m*k, "m*k")
	shape.Len("QuantizeRowsInt8", "s", len(s), m, "m")
	for i := 0; i < m; i++ {
		row := x[i*k:][:k]
		var amax float64
		for _, v := range row {
			amax = math.Max(amax, math.Abs(v))
		}
		s[i] = amax / int8Largest
		for p, v := range row {
			if amax == 0 {
				q[i*k+p] = 0
				continue
			}
			q[i*k+p] = int8(math.Round(v / s[i]))
		}
	}
}

// GEMMW4A16 computes C = A·Wᵀ with group-wise INT4 weights (layout above):
// c[i*n+j] = Σ_p a[i*k+p]·(q[j,p] - z[j,p/group])·s[j,p/group].
func GEMMW4A16(m, n, k, group int, a []float64, w []uint8, s []float64, z []uint8, c []float64) {
	shape.GEMMGroup("GEMMW4A16", m, n, k, group, len(a), len(w), len(s), len(z), len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float64
			for p := 0; p < k; p++ {
				g := j*(k/group) + p/group
				acc += a[i*k+p] * float64(int(Nibble(w[j*k/2:], p))-int(z[g])) * s[g]
			}
			c[i*n+j] = acc
		}
	}
}

// GEMMW4A8 computes C = A·Wᵀ with per-token INT8 activations (qa, sa, as W8A8's) and group-wise INT4 weights
// (layout above), the integer part of each group exact:
// c[i*n+j] = sa[i]·Σ_g s[j,g]·Σ_{p in g} (q[j,p] - z[j,g])·qa[i*k+p].
// It is how llama.cpp runs Q4_0 weights (against Q8_0 activations): the products are integer dot products.
func GEMMW4A8(m, n, k, group int, qa []int8, sa []float64, w []uint8, s []float64, z []uint8, c []float64) {
	shape.GEMMGroup("GEMMW4A8", m, n, k, group, len(qa), len(w), len(s), len(z), len(c))
	shape.Len("GEMMW4A8", "sa", len(sa), m, "m")
	gpr := k / group
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float64
			for g := 0; g < gpr; g++ {
				var d int64
				for p := g * group; p < (g+1)*group; p++ {
					d += int64(int(Nibble(w[j*k/2:], p))-int(z[j*gpr+g])) * int64(qa[i*k+p])
				}
				acc += s[j*gpr+g] * float64(d)
			}
			c[i*n+j] = sa[i] * acc
		}
	}
}

// Nibble returns element p of a W4A16 row packed two a byte: the low nibble of byte p/2 for even p, the high one
// for odd p.
func Nibble(row []uint8, p int) uint8 {
	return row[p/2] >> (4 * (p % 2)) & 0xf
}

// QuantizeRowQ8_0 writes x (a multiple of 32 values) as Q8_0 blocks, as GGUF's quantize_row_q8_0_ref does:
// d = max|x|/127 stored as binary16, q = round(x/d) halves away from zero (0 for a block of zeros).
func QuantizeRowQ8_0(x []float64, out []byte) {
	shape.Blocks("QuantizeRowQ8_0", "len(x)", len(x), QBlock)
	shape.Len("QuantizeRowQ8_0", "out", len(out), len(x)/QBlock*Q8_0Bytes, "len(x)/32*34")
	for b := 0; b < len(x)/QBlock; b++ {
		xs := x[b*QBlock:][:QBlock]
		blk := out[b*Q8_0Bytes:][:Q8_0Bytes]
		var amax float64
		for _, v := range xs {
			amax = math.Max(amax, math.Abs(v))
		}
		d := amax / int8Largest
		binary.LittleEndian.PutUint16(blk, half.F32ToF16(float32(d)))
		for i, v := range xs {
			if d == 0 {
				blk[2+i] = 0
				continue
			}
			blk[2+i] = byte(int8(math.Round(v / d)))
		}
	}
}

// blockScale is the binary16 scale at the front of a GGUF block, as float64.
func blockScale(blk []byte) float64 {
	return float64(half.F16ToF32(binary.LittleEndian.Uint16(blk)))
}

// DotQ8_0 is the dot product of n values (a multiple of 32) stored as Q8_0 blocks in w and x, as ggml's
// ggml_vec_dot_q8_0_q8_0 defines it: Σ_blocks d_w·d_x·Σ_i q_w[i]·q_x[i], the inner sums exact.
func DotQ8_0(n int, w, x []byte) float64 {
	shape.Blocks("DotQ8_0", "n", n, QBlock)
	shape.Len("DotQ8_0", "w", len(w), n/QBlock*Q8_0Bytes, "n/32*34")
	shape.Len("DotQ8_0", "x", len(x), n/QBlock*Q8_0Bytes, "n/32*34")
	return dotQ8_0(n, w, x)
}

func dotQ8_0(n int, w, x []byte) float64 {
	var sum float64
	for b := 0; b < n/QBlock; b++ {
		wb, xb := w[b*Q8_0Bytes:][:Q8_0Bytes], x[b*Q8_0Bytes:][:Q8_0Bytes]
		var isum int64
		for i := 0; i < QBlock; i++ {
			isum += int64(int8(wb[2+i])) * int64(int8(xb[2+i]))
		}
		sum += blockScale(wb) * blockScale(xb) * float64(isum)
	}
	return sum
}

// DotQ4_0Q8_0 is the dot product of n values stored as Q4_0 blocks in w and Q8_0 blocks in x, as ggml's
// ggml_vec_dot_q4_0_q8_0 defines it: Σ_blocks d_w·d_x·Σ_i (q_w[i]-8)·q_x[i], the inner sums exact.
func DotQ4_0Q8_0(n int, w, x []byte) float64 {
	shape.Blocks("DotQ4_0Q8_0", "n", n, QBlock)
	shape.Len("DotQ4_0Q8_0", "w", len(w), n/QBlock*Q4_0Bytes, "n/32*18")
	shape.Len("DotQ4_0Q8_0", "x", len(x), n/QBlock*Q8_0Bytes, "n/32*34")
	return dotQ4_0Q8_0(n, w, x)
}

func dotQ4_0Q8_0(n int, w, x []byte) float64 {
	var sum float64
	for b := 0; b < n/QBlock; b++ {
		wb, xb := w[b*Q4_0Bytes:][:Q4_0Bytes], x[b*Q8_0Bytes:][:Q8_0Bytes]
		var isum int64
		for i := 0; i < QBlock/2; i++ {
			lo, hi := int64(wb[2+i]&0xf)-8, int64(wb[2+i]>>4)-8
			isum += lo*int64(int8(xb[2+i])) + hi*int64(int8(xb[2+i+QBlock/2]))
		}
		sum += blockScale(wb) * blockScale(xb) * float64(isum)
	}
	return sum
}

// GEMVQ8_0 computes y = W·x for W [n, k] stored as n rows of k/32 Q8_0 blocks and x as k/32 Q8_0 blocks:
// y[j] = DotQ8_0(k, row j, x).
func GEMVQ8_0(n, k int, w, xq []byte, y []float64) {
	shape.Positive("GEMVQ8_0", "n", n)
	shape.Blocks("GEMVQ8_0", "k", k, QBlock)
	row := k / QBlock * Q8_0Bytes
	shape.Len("GEMVQ8_0", "w", len(w), n*row, "n*k/32*34")
	shape.Len("GEMVQ8_0", "xq", len(xq), row, "k/32*34")
	shape.Len("GEMVQ8_0", "y", len(y), n, "n")
	for j := range y {
		y[j] = dotQ8_0(k, w[j*row:][:row], xq)
	}
}

// GEMVQ4_0 computes y = W·x for W [n, k] stored as n rows of k/32 Q4_0 blocks and x as k/32 Q8_0 blocks:
// y[j] = DotQ4_0Q8_0(k, row j, x).
func GEMVQ4_0(n, k int, w, xq []byte, y []float64) {
	shape.Positive("GEMVQ4_0", "n", n)
	shape.Blocks("GEMVQ4_0", "k", k, QBlock)
	row := k / QBlock * Q4_0Bytes
	shape.Len("GEMVQ4_0", "w", len(w), n*row, "n*k/32*18")
	shape.Len("GEMVQ4_0", "xq", len(xq), k/QBlock*Q8_0Bytes, "k/32*34")
	shape.Len("GEMVQ4_0", "y", len(y), n, "n")
	for j := range y {
		y[j] = dotQ4_0Q8_0(k, w[j*row:][:row], xq)
	}
}

// GGUF's Q8_0 and Q4_0 repacked for the W8A8/W4A8-style kernels (GEMMQ8_0A8, GEMMQ4_0A8): the blocks' codes as
// one matrix and their binary16 scales d [n, k/32] as another. Q8_0: w int8 [n, k], value = w·d. Q4_0: w uint8
// [n, k/2] in the W4A16 nibble order above, zero point 8, value = (q-8)·d. The values are the blocks' own.

// RepackQ8_0 splits rows of Q8_0 blocks into codes and scales (the layout above).
func RepackQ8_0(blocks []byte) (w []int8, d []uint16) {
	shape.Blocks("RepackQ8_0", "len(blocks)", len(blocks), Q8_0Bytes)
	nb := len(blocks) / Q8_0Bytes
	w, d = make([]int8, nb*QBlock), make([]uint16, nb)
	for b := range nb {
		blk := blocks[b*Q8_0Bytes:][:Q8_0Bytes]
		d[b] = binary.LittleEndian.Uint16(blk)
		for i := range QBlock {
			w[b*QBlock+i] = int8(blk[2+i])
		}
	}
	return w, d
}

// RepackQ4_0 splits rows of Q4_0 blocks into codes, packed in the W4A16 nibble order, and scales.
func RepackQ4_0(blocks []byte) (w []uint8, d []uint16) {
	shape.Blocks("RepackQ4_0", "len(blocks)", len(blocks), Q4_0Bytes)
	nb := len(blocks) / Q4_0Bytes
	w, d = make([]uint8, nb*QBlock/2), make([]uint16, nb)
	for b := range nb {
		blk := blocks[b*Q4_0Bytes:][:Q4_0Bytes]
		d[b] = binary.LittleEndian.Uint16(blk)
		for i := range QBlock {
			q := blk[2+i%16] >> (4 * (i / 16)) & 0xf // element i: low nibbles first, then high
			w[b*QBlock/2+i/2] |= q << (4 * (i % 2))
		}
	}
	return w, d
}

// GEMMQ8_0A8 computes C = A·Wᵀ with per-token INT8 activations (qa, sa) and repacked Q8_0 weights (w, d), the
// integer part of each block exact: c[i*n+j] = sa[i]·Σ_b d[j,b]·Σ_{p in b} w[j*k+p]·qa[i*k+p].
func GEMMQ8_0A8(m, n, k int, qa []int8, sa []float64, w []int8, d []uint16, c []float64) {
	shape.GEMM("GEMMQ8_0A8", m, n, k, len(qa), len(w), len(c))
	shape.Blocks("GEMMQ8_0A8", "k", k, QBlock)
	shape.Len("GEMMQ8_0A8", "d", len(d), n*k/QBlock, "n*k/32")
	shape.Len("GEMMQ8_0A8", "sa", len(sa), m, "m")
	nb := k / QBlock
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float64
			for b := 0; b < nb; b++ {
				var s int64
				for p := b * QBlock; p < (b+1)*QBlock; p++ {
					s += int64(w[j*k+p]) * int64(qa[i*k+p])
				}
				acc += float64(half.F16ToF32(d[j*nb+b])) * float64(s)
			}
			c[i*n+j] = sa[i] * acc
		}
	}
}

// GEMMQ4_0A8 computes C = A·Wᵀ with per-token INT8 activations and repacked Q4_0 weights, the integer part of
// each block exact: c[i*n+j] = sa[i]·Σ_b d[j,b]·Σ_{p in b} (q[j,p] - 8)·qa[i*k+p].
func GEMMQ4_0A8(m, n, k int, qa []int8, sa []float64, w []uint8, d []uint16, c []float64) {
	shape.GEMM("GEMMQ4_0A8", m, n, k, len(qa), n*k, len(c))
	shape.Blocks("GEMMQ4_0A8", "k", k, QBlock)
	shape.Len("GEMMQ4_0A8", "w", len(w), n*k/2, "n*k/2")
	shape.Len("GEMMQ4_0A8", "d", len(d), n*k/QBlock, "n*k/32")
	shape.Len("GEMMQ4_0A8", "sa", len(sa), m, "m")
	nb := k / QBlock
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float64
			for b := 0; b < nb; b++ {
				var s int64
				for p := b * QBlock; p < (b+1)*QBlock; p++ {
					s += (int64(Nibble(w[j*k/2:], p)) - 8) * int64(qa[i*k+p])
				}
				acc += float64(half.F16ToF32(d[j*nb+b])) * float64(s)
			}
			c[i*n+j] = sa[i] * acc
		}
	}
}
