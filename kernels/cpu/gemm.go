package cpu

import (
	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// GEMM computes C = A·Wᵀ: c[i*n+j] = Σ_p a[i*k+p]·w[j*k+p], with A [m, k], W [n, k] ([out, in]) and C [m, n],
// overwriting c. It is kernels/ref.GEMM in float32. With m = 1 it is the matrix-vector product and runs GEMV's
// bandwidth-bound loop; with AVX-512 and m <= 64 it runs GEMVs of up to four tokens, which read W once and give
// each token bit for bit its one-token result; otherwise it runs the packed, cache-blocked micro-kernels of
// gemm_amd64.s (AVX-512 or AVX2+FMA) split across the worker pool, or the pure-Go loop under noasm.
func GEMM(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	if m == 1 {
		gemv(n, k, w, a, c)
		return
	}
	gemm(m, n, k, a, w, c)
}

// GEMV computes y = W·x: y[j] = Σ_p w[j*k+p]·x[p], with W [n, k] and x [k]. It is GEMM with m = 1: it streams
// W once, several rows at a time, split across the worker pool, so its speed is that of reading W from memory.
func GEMV(n, k int, w, x, y []float32) {
	shape.GEMV("GEMV", n, k, len(w), len(x), len(y))
	gemv(n, k, w, x, y)
}

// GEMMF16 is GEMM with the weights stored as IEEE binary16 bits (half.F16ToF32 gives their values); the
// products and sums are float32. Weights are widened as they are read (VCVTPH2PS on amd64), so W stays half the
// size in memory.
func GEMMF16(m, n, k int, a []float32, w []uint16, c []float32) {
	shape.GEMM("GEMMF16", m, n, k, len(a), len(w), len(c))
	if m == 1 {
		gemvF16(n, k, w, a, c)
		return
	}
	gemmF16(m, n, k, a, w, c)
}

// GEMMWeights is one matrix of GEMMs: N rows of weights, float32 (F32) or binary16 (F16); exactly one is set.
type GEMMWeights struct {
	N   int
	F32 []float32
	F16 []uint16
}

// GEMMs computes cs[i] = A·Wᵢᵀ for matrices that share A [m, k] (q, k and v; gate and up), each as GEMM (F32)
// or GEMMF16 (F16) computes it, bit for bit, in one call: where GEMM runs its few-token GEMVs (AVX-512, 2 to 64
// tokens), the tokens are packed once and the rows of all the matrices are split over the threads together, so
// the threads meet once instead of once a matrix.
func GEMMs(m, k int, a []float32, ws []GEMMWeights, cs [][]float32) {
	shape.Len("GEMMs", "cs", len(cs), len(ws), "len(ws)")
	for i, w := range ws {
		shape.GEMM("GEMMs", m, w.N, k, len(a), len(w.F32)+len(w.F16), len(cs[i])) // one of F32, F16 set
	}
	if m > 1 && gemms(m, k, a, ws, cs) {
		return
	}
	for i, w := range ws {
		if w.F32 != nil {
			GEMM(m, w.N, k, a, w.F32, cs[i])
		} else {
			GEMMF16(m, w.N, k, a, w.F16, cs[i])
		}
	}
}

// gemmMinWork is the fewest multiply-adds worth handing to another thread: below it the hand-off costs more than
// it saves.
const gemmMinWork = 1 << 16

// gemmGo is the pure-Go GEMM: each output is a dot product of a row of A and a row of W (both contiguous in
// memory), columns of C split across threads. Row j of W stays in L1 while the rows of A pass it.
func gemmGo(m, n, k int, a, w, c []float32) {
	Parallel(n, gemmMinWork/(m*k)+1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			wj := w[j*k : (j+1)*k]
			for i := 0; i < m; i++ {
				c[i*n+j] = gemmDot(a[i*k:(i+1)*k], wj)
			}
		}
	})
}

// gemmF16Go is gemmGo with binary16 weights: each row of W is widened once into a buffer, then used for every
// row of A.
func gemmF16Go(m, n, k int, a []float32, w []uint16, c []float32) {
	Parallel(n, gemmMinWork/(m*k)+1, func(lo, hi int) {
		wj := make([]float32, k)
		for j := lo; j < hi; j++ {
			half.F16ToF32Slice(wj, w[j*k:(j+1)*k])
			for i := 0; i < m; i++ {
				c[i*n+j] = gemmDot(a[i*k:(i+1)*k], wj)
			}
		}
	})
}

// gemvGo is the pure-Go GEMV: y[j] = gemmDot(w[j*k:(j+1)*k], x), rows split across threads.
func gemvGo(n, k int, w, x, y []float32) {
	Parallel(n, gemmMinWork/k+1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			y[j] = gemmDot(w[j*k:(j+1)*k], x)
		}
	})
}

// gemvF16Go is gemvGo with binary16 weights, widened a row at a time.
func gemvF16Go(n, k int, w []uint16, x, y []float32) {
	Parallel(n, gemmMinWork/k+1, func(lo, hi int) {
		wj := make([]float32, k)
		for j := lo; j < hi; j++ {
			half.F16ToF32Slice(wj, w[j*k:(j+1)*k])
			y[j] = gemmDot(wj, x)
		}
	})
}

// gemmDot returns Σ_p x[p]·y[p] over len(x), summed in four interleaved partial sums (so that four additions are
// in flight at once, and the rounding error grows with len(x)/4 rather than len(x)).
func gemmDot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	p := 0
	for ; p+4 <= len(x); p += 4 {
		s0 += x[p] * y[p]
		s1 += x[p+1] * y[p+1]
		s2 += x[p+2] * y[p+2]
		s3 += x[p+3] * y[p+3]
	}
	for ; p < len(x); p++ {
		s0 += x[p] * y[p]
	}
	return (s0 + s1) + (s2 + s3)
}
