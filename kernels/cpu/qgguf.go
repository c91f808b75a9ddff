package cpu

import (
	"encoding/binary"
	"math"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// GGUF's Q8_0 and Q4_0 blocks (layouts in kernels/ref/quant.go) and the dot products llama.cpp computes on them:
// the activations are quantized to Q8_0, and each block contributes d_w·d_x·Σ q_w·q_x, its integer sum exact.

// QuantizeRowQ8_0 writes x (a multiple of 32 values) as Q8_0 blocks exactly as GGUF's quantize_row_q8_0_ref does
// in float32: d = max|x|/127, stored as binary16; q = round(x·(1/d)), halves away from zero; 0 for a block of zeros.
func QuantizeRowQ8_0(x []float32, out []byte) {
	shape.Blocks("QuantizeRowQ8_0", "len(x)", len(x), qBlock)
	shape.Len("QuantizeRowQ8_0", "out", len(out), len(x)/qBlock*qQ8_0Size, "len(x)/32*34")
	for b := 0; b < len(x)/qBlock; b++ {
		xs, blk := x[b*qBlock:(b+1)*qBlock], out[b*qQ8_0Size:(b+1)*qQ8_0Size]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(blk, half.F32ToF16(d))
		for i, v := range xs {
			blk[2+i] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

// DotQ8_0 is the dot product of n values (a multiple of 32) stored as Q8_0 blocks in w and x:
// Σ_blocks d_w·d_x·Σ_i q_w[i]·q_x[i] (ggml_vec_dot_q8_0_q8_0).
func DotQ8_0(n int, w, x []byte) float32 {
	shape.Blocks("DotQ8_0", "n", n, qBlock)
	shape.Len("DotQ8_0", "w", len(w), n/qBlock*qQ8_0Size, "n/32*34")
	shape.Len("DotQ8_0", "x", len(x), n/qBlock*qQ8_0Size, "n/32*34")
	return qGGUFRows(x, false)(w)
}

// DotQ4_0Q8_0 is the dot product of n values stored as Q4_0 blocks in w and Q8_0 blocks in x:
// Σ_blocks d_w·d_x·Σ_i (q_w[i]-8)·q_x[i] (ggml_vec_dot_q4_0_q8_0).
func DotQ4_0Q8_0(n int, w, x []byte) float32 {
	shape.Blocks("DotQ4_0Q8_0", "n", n, qBlock)
	shape.Len("DotQ4_0Q8_0", "w", len(w), n/qBlock*qQ4_0Size, "n/32*18")
	shape.Len("DotQ4_0Q8_0", "x", len(x), n/qBlock*qQ8_0Size, "n/32*34")
	return qGGUFRows(x, true)(w)
}

// GEMVQ8_0 computes y = W·x for W [n, k] stored as n rows of k/32 Q8_0 blocks and x as k/32 Q8_0 blocks:
// y[j] = DotQ8_0(k, row j, xq), rows split across threads.
func GEMVQ8_0(n, k int, w, xq []byte, y []float32) {
	shape.Positive("GEMVQ8_0", "n", n)
	shape.Blocks("GEMVQ8_0", "k", k, qBlock)
	row := k / qBlock * qQ8_0Size
	shape.Len("GEMVQ8_0", "w", len(w), n*row, "n*k/32*34")
	shape.Len("GEMVQ8_0", "xq", len(xq), row, "k/32*34")
	shape.Len("GEMVQ8_0", "y", len(y), n, "n")
	dot := qGGUFRows(xq, false)
	Parallel(n, qRowGrain(row), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			y[j] = dot(w[j*row : (j+1)*row])
		}
	})
}

// GEMVQ4_0 computes y = W·x for W [n, k] stored as n rows of k/32 Q4_0 blocks and x as k/32 Q8_0 blocks:
// y[j] = DotQ4_0Q8_0(k, row j, xq), rows split across threads.
func GEMVQ4_0(n, k int, w, xq []byte, y []float32) {
	shape.Positive("GEMVQ4_0", "n", n)
	shape.Blocks("GEMVQ4_0", "k", k, qBlock)
	row := k / qBlock * qQ4_0Size
	shape.Len("GEMVQ4_0", "w", len(w), n*row, "n*k/32*18")
	shape.Len("GEMVQ4_0", "xq", len(xq), k/qBlock*qQ8_0Size, "k/32*34")
	shape.Len("GEMVQ4_0", "y", len(y), n, "n")
	dot := qGGUFRows(xq, true)
	Parallel(n, qRowGrain(row), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			y[j] = dot(w[j*row : (j+1)*row])
		}
	})
}

// GEMMQ8_0A8 computes C = A·Wᵀ from per-token INT8 activations (qa, sa, from QuantizeRowsInt8) and GGUF Q8_0
// weights repacked for it: w [n, k] the int8 codes row after row, d [n, k/32] the binary16 scale of each block
// of 32 along a row: c[i*n+j] = sa[i]·Σ_b d[j,b]·Σ_{p in b} w[j,p]·qa[i*k+p], each block's sum exact. It is
// GEMMW4A8 with int8 codes and blocks for groups: with VNNI, one token streams each row once (VPDPBUSD, a
// conversion and a multiply-add a block), and from 12 tokens on the rows run in W4A8's GEMM tile (k a multiple of
// 64, or the pure-Go loop). Q8_0's own dot product (DotQ8_0) quantizes the activations a block at a time instead;
// its results differ from these by the activations' rounding.
func GEMMQ8_0A8(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32) {
	shape.GEMM("GEMMQ8_0A8", m, n, k, len(qa), len(w), len(c))
	shape.Blocks("GEMMQ8_0A8", "k", k, qBlock)
	shape.Len("GEMMQ8_0A8", "d", len(d), n*k/qBlock, "n*k/32")
	shape.Len("GEMMQ8_0A8", "sa", len(sa), m, "m")
	qQ8_0A8(m, n, k, qa, sa, w, d, c)
}

// GEMMQ4_0A8 computes C = A·Wᵀ from per-token INT8 activations and GGUF Q4_0 weights repacked for it: w [n, k]
// as 4-bit codes q in GEMMW4A16's layout (element 2i in the low nibble of byte i of its row, 2i+1 in the high
// one), zero point 8, and d [n, k/32] the binary16 scale of each block of 32:
// c[i*n+j] = sa[i]·Σ_b d[j,b]·Σ_{p in b} (q[j,p] - 8)·qa[i*k+p], each block's sum exact. It is GEMMW4A8 with
// group 32, binary16 scales and one zero point, so that the weights take Q4_0's 18 bytes a block: one token
// streams each row once (k a multiple of 128, with VNNI), 12 tokens or more run W4A8's GEMM tile.
func GEMMQ4_0A8(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32) {
	shape.GEMM("GEMMQ4_0A8", m, n, k, len(qa), n*k, len(c))
	shape.Blocks("GEMMQ4_0A8", "k", k, qBlock)
	shape.Len("GEMMQ4_0A8", "w", len(w), n*k/2, "n*k/2")
	shape.Len("GEMMQ4_0A8", "d", len(d), n*k/qBlock, "n*k/32")
	shape.Len("GEMMQ4_0A8", "sa", len(sa), m, "m")
	qQ4_0A8(m, n, k, qa, sa, w, d, c)
}
