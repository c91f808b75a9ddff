package kerneltest

import (
	"fmt"
	"math"
	"testing"

	"github.com/morphlab/morphlab/kernels/ref"
)

// qRepackedShapes are the m, n, k of the repacked GGUF matmuls: one token and a few (the row kernels), 12 and more
// (the GEMM tile: partial tiles of rows and of tokens), k a multiple of 128 (every fast path), of 64 (Q8_0's
// only) and of 32 (neither), and stories110M's and Llama-2-7B's widths.
var qRepackedShapes = [][3]int{{1, 1, 128}, {1, 67, 768}, {3, 70, 2048}, {7, 17, 96}, {1, 5, 64}, {2, 9, 192},
	{12, 13, 256}, {17, 33, 384}, {40, 70, 768}, {33, 7, 4096}, {64, 12, 512}, {13, 6, 11008}, {11, 5, 640}}

// testRepacked checks a repacked GGUF matmul against its reference on random blocks and random activations. A
// float32 implementation sums each block's exact integer sum (or parts of it, split over a vector's lanes) after
// scaling it by the block's scale, one rounding a term, and scales by sa at the end; the bound is
// (blocks+5)·2^-24·sa·Σ_b |d_b|·Σ_{p in b} |c_p·qa_p|, c the signed code (q for Q8_0, q-8 for Q4_0), +5 for the
// final reduction of up to 16 lanes and the scaling.
func testRepacked(t *testing.T, op string, blockBytes int, blocks func(r uint64, n int) []byte,
	code func(blocks []byte, j, k, p int) int,
	run func(m, n, k int, qa []int8, sa []float32, w []byte, c []float32), want func(m, n, k int, qa []int8, sa []float64, w []byte, c []float64)) {
	t.Helper()
	for si, sh := range qRepackedShapes {
		m, n, k := sh[0], sh[1], sh[2]
		r := qRand(uint64(900 + si))
		qa, sa := qInt8s(r, m*k), qScales(r, m)
		w := blocks(uint64(950+si), n*k)
		c := make([]float32, m*n)
		qPoison(c)
		run(m, n, k, qa, sa, w, c)
		exact := make([]float64, m*n)
		want(m, n, k, qa, qF64(sa), w, exact)
		nb := k / ref.QBlock
		row := nb * blockBytes
		bound := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var sum float64
				for b := 0; b < nb; b++ {
					d := qScale(w[j*row+b*blockBytes:])
					var s float64
					for p := b * ref.QBlock; p < (b+1)*ref.QBlock; p++ {
						s += math.Abs(float64(code(w, j, k, p)) * float64(qa[i*k+p]))
					}
					sum += math.Abs(d) * s
				}
				bound[i*n+j] = float64(nb+5) * u32 * float64(sa[i]) * sum
			}
		}
		qCheck(t, fmt.Sprintf("%s m=%d n=%d k=%d", op, m, n, k), c, exact, bound)
	}
}

// TestGEMMQ8_0A8 checks f against ref.GEMMQ8_0A8 on Q8_0 blocks repacked by ref.RepackQ8_0, and that with
// activations quantized per token it is as close to the float product as llama.cpp's own tests require of
// Q8_0's dot product with Q8_0 activations (test-quantize-fns: 0.02 a value).
func TestGEMMQ8_0A8(t *testing.T, f GEMMQ8_0A8Func) {
	run := func(m, n, k int, qa []int8, sa []float32, blocks []byte, c []float32) {
		w, d := ref.RepackQ8_0(blocks)
		f(m, n, k, qa, sa, w, d, c)
	}
	testRepacked(t, "GEMMQ8_0A8", ref.Q8_0Bytes, func(r uint64, n int) []byte { return qQ8_0(qRand(r), n) },
		func(b []byte, j, k, p int) int { return int(int8(b[(j*k+p)/ref.QBlock*ref.Q8_0Bytes+2+p%ref.QBlock])) },
		run, func(m, n, k int, qa []int8, sa []float64, blocks []byte, c []float64) {
			w, d := ref.RepackQ8_0(blocks)
			ref.GEMMQ8_0A8(m, n, k, qa, sa, w, d, c)
		})
	qGEMMError(t, "GEMMQ8_0A8", 0.02, func(m, n, k int, a, w, c []float32) {
		qa, sa := qQuantizeRowsRTN(m, k, a)
		run(m, n, k, qa, sa, qQuantizeQ8_0(w), c)
	})
	qWantPanic(t, "GEMMQ8_0A8", "k=48", func() {
		f(1, 1, 48, make([]int8, 48), make([]float32, 1), make([]int8, 48), make([]uint16, 1), make([]float32, 1))
	})
	qWantPanic(t, "GEMMQ8_0A8", "len(d)", func() {
		f(1, 2, 64, make([]int8, 64), make([]float32, 1), make([]int8, 128), make([]uint16, 3), make([]float32, 2))
	})
}

// TestGEMMQ4_0A8 checks f against ref.GEMMQ4_0A8 on Q4_0 blocks repacked by ref.RepackQ4_0, and its error
// against the float product with activations quantized per token (0.04 a value, as TestDotQ4_0Q8_0 allows).
func TestGEMMQ4_0A8(t *testing.T, f GEMMQ4_0A8Func) {
	run := func(m, n, k int, qa []int8, sa []float32, blocks []byte, c []float32) {
		w, d := ref.RepackQ4_0(blocks)
		f(m, n, k, qa, sa, w, d, c)
	}
	testRepacked(t, "GEMMQ4_0A8", ref.Q4_0Bytes, func(r uint64, n int) []byte { return qQ4_0(qRand(r), n) },
		func(b []byte, j, k, p int) int { return q4Code(b[(j*k+p)/ref.QBlock*ref.Q4_0Bytes:], p%ref.QBlock) },
		run, func(m, n, k int, qa []int8, sa []float64, blocks []byte, c []float64) {
			w, d := ref.RepackQ4_0(blocks)
			ref.GEMMQ4_0A8(m, n, k, qa, sa, w, d, c)
		})
	qGEMMError(t, "GEMMQ4_0A8", 0.04, func(m, n, k int, a, w, c []float32) {
		qa, sa := qQuantizeRowsRTN(m, k, a)
		run(m, n, k, qa, sa, qQuantizeQ4_0(w), c)
	})
	qWantPanic(t, "GEMMQ4_0A8", "len(w)", func() {
		f(1, 1, 64, make([]int8, 64), make([]float32, 1), make([]uint8, 31), make([]uint16, 2), make([]float32, 1))
	})
}
