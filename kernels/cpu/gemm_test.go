package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/kerneltest"
	"github.com/morphlab/morphlab/kernels/ref"
)

// gemmShapes are (m, n, k) with awkward sizes on every axis: 1 and primes that leave partial tiles (7, 17, 1025,
// 5137), sizes around the micro-kernel tiles (13, 14, 15, 31, 32, 33) and the cache blocks (k = 255, 256, 257,
// 513; m > gemmMC; n > gemmNC).
var gemmShapes = [][3]int{
	{1, 1, 1}, {1, 7, 17}, {2, 1, 1}, {7, 17, 1}, {17, 7, 5137}, {14, 32, 256}, {13, 31, 255}, {15, 33, 257},
	{28, 64, 513}, {29, 65, 100}, {64, 1025, 64}, {1025, 17, 33}, {500, 70, 300}, {3, 5137, 7}, {33, 2100, 40},
}

// gemmShortShapes are the subset run under -short and under the race detector.
var gemmShortShapes = [][3]int{{1, 7, 17}, {7, 17, 1}, {13, 31, 255}, {15, 33, 257}, {29, 65, 100}, {3, 517, 7}, {70, 33, 300}}

func gemmTestShapes() [][3]int {
	if testing.Short() || gemmRace {
		return gemmShortShapes
	}
	return gemmShapes
}

func gemmRandom(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.Float32() - 1
	}
	return x
}

func gemmPoisoned(n int) []float32 {
	c := make([]float32, n)
	for i := range c {
		c[i] = float32(math.NaN())
	}
	return c
}

// gemmCheck compares got with the float64 reference C = A·Wᵀ. Two bounds, both derived rather than tuned:
//
//   - Each element: any float32 summation of k products, in any order, with or without fused multiply-adds, is
//     within γ(k+1)·Σ_p |a_p·w_p| of the exact sum, γ(j) = j·u/(1-j·u), u = 2⁻²⁴ (Higham, Accuracy and Stability
//     of Numerical Algorithms, §3.1). A wrong or missing term is of the size of one |a_p·w_p| and fails it.
//   - Normalized MSE Σ(got-ref)²/Σref² < 5e-4, the matmul class of DESIGN.md: a loose guard that also catches a
//     whole tile of garbage when the per-element bound is large.
//
// NaN fails both (the comparisons are written so that NaN is never "within").
func gemmCheck(t *testing.T, name string, m, n, k int, a, w []float64, got []float32) {
	t.Helper()
	want := make([]float64, m*n)
	ref.GEMM(m, n, k, a, w, want)
	const u = 1.0 / (1 << 24)
	gamma := float64(k+1) * u / (1 - float64(k+1)*u)
	var errSq, refSq float64
	bad := 0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var abs float64
			for p := 0; p < k; p++ {
				abs += math.Abs(a[i*k+p] * w[j*k+p])
			}
			g, r := float64(got[i*n+j]), want[i*n+j]
			d := g - r
			errSq += d * d
			refSq += r * r
			if !(math.Abs(d) <= gamma*abs) {
				if bad < 5 {
					t.Errorf("%s: c[%d,%d] = %v, want %v ± %.3g", name, i, j, g, r, gamma*abs)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs outside the rounding bound", name, bad, m*n)
	}
	if nmse := errSq / refSq; !(nmse < 5e-4) {
		t.Errorf("%s: normalized MSE %.3g, want < 5e-4", name, nmse)
	}
}

func gemmWiden(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// gemmEachPath runs f once per implementation this machine can run (AVX-512, AVX2, pure Go) and thread count
// (1 thread, 2, and 3: more threads than cores, uneven splits).
func gemmEachPath(t *testing.T, f func(t *testing.T)) { gemmEachPathThreads(t, []int{1, 2, 3}, f) }

func gemmEachPathThreads(t *testing.T, threadCounts []int, f func(t *testing.T)) {
	for _, impl := range gemmImpls() {
		for _, threads := range threadCounts {
			t.Run(fmt.Sprintf("impl=%s/threads=%d", impl, threads), func(t *testing.T) {
				defer gemmUse(impl)()
				defer SetThreads(SetThreads(threads))
				f(t)
			})
		}
	}
}

func TestGEMM(t *testing.T) {
	gemmEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, s := range gemmTestShapes() {
			m, n, k := s[0], s[1], s[2]
			a, w := gemmRandom(r, m*k), gemmRandom(r, n*k)
			c := gemmPoisoned(m * n)
			GEMM(m, n, k, a, w, c)
			gemmCheck(t, fmt.Sprintf("GEMM m=%d n=%d k=%d", m, n, k), m, n, k, gemmWiden(a), gemmWiden(w), c)
		}
	})
}

func TestGEMV(t *testing.T) {
	gemmEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, s := range gemmTestShapes() {
			n, k := s[1], s[2]
			w, x := gemmRandom(r, n*k), gemmRandom(r, k)
			y := gemmPoisoned(n)
			GEMV(n, k, w, x, y)
			gemmCheck(t, fmt.Sprintf("GEMV n=%d k=%d", n, k), 1, n, k, gemmWiden(x), gemmWiden(w), y)

			// GEMM with one row is the same call.
			c := gemmPoisoned(n)
			GEMM(1, n, k, x, w, c)
			for j := range c {
				if c[j] != y[j] {
					t.Fatalf("GEMM(1, %d, %d)[%d] = %v, GEMV gave %v", n, k, j, c[j], y[j])
				}
			}
		}
	})
}

func TestGEMMF16(t *testing.T) {
	gemmEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, s := range gemmTestShapes() {
			for _, m := range []int{1, s[0]} {
				n, k := s[1], s[2]
				a := gemmRandom(r, m*k)
				wh := make([]uint16, n*k)
				w := make([]float64, n*k)
				for i, v := range gemmRandom(r, n*k) {
					wh[i] = half.F32ToF16(v)
					w[i] = float64(half.F16ToF32(wh[i]))
				}
				c := gemmPoisoned(m * n)
				GEMMF16(m, n, k, a, wh, c)
				gemmCheck(t, fmt.Sprintf("GEMMF16 m=%d n=%d k=%d", m, n, k), m, n, k, gemmWiden(a), w, c)
			}
		}
	})
}

// TestGEMMs checks that one call over several matrices, float32 and binary16 mixed, gives bit for bit what a
// GEMM or GEMMF16 call a matrix gives, on every path and thread count: one token, the row-at-a-time few-token
// kernels, the tiles (matrices of several blocks, whole and partial tiles, a thread's rows crossing from one
// matrix into the next) and the packed GEMM above them.
func TestGEMMs(t *testing.T) {
	gemmEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(27, 28))
		ns := []int{200, 64, 7, 1, 131}
		for _, tc := range []struct{ m, k int }{{1, 40}, {3, 768}, {8, 40}, {33, 100}, {70, 48}} {
			m, k := tc.m, tc.k
			a := gemmRandom(r, m*k)
			ws, cs, want := make([]GEMMWeights, len(ns)), make([][]float32, len(ns)), make([][]float32, len(ns))
			for i, n := range ns {
				w := gemmRandom(r, n*k)
				want[i], cs[i] = gemmPoisoned(m*n), gemmPoisoned(m*n)
				if i%2 == 0 {
					ws[i] = GEMMWeights{N: n, F32: w}
					GEMM(m, n, k, a, w, want[i])
					continue
				}
				wh := make([]uint16, n*k)
				for j, v := range w {
					wh[j] = half.F32ToF16(v)
				}
				ws[i] = GEMMWeights{N: n, F16: wh}
				GEMMF16(m, n, k, a, wh, want[i])
			}
			GEMMs(m, k, a, ws, cs)
			for i := range ns {
				for j := range cs[i] {
					if math.Float32bits(cs[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("m=%d k=%d: matrix %d: c[%d] = %v, want %v (a call a matrix)", m, k, i, j, cs[i][j], want[i][j])
					}
				}
			}
		}
	})
}

// TestConformanceGEMM runs the shared suite (kernels/kerneltest) on every implementation.
func TestConformanceGEMM(t *testing.T) {
	gemmEachPathThreads(t, []int{2}, func(t *testing.T) { kerneltest.TestGEMM(t, GEMM) })
}

// TestGEMMNaN checks that a NaN in the inputs reaches the outputs it feeds (the kernels must not drop terms).
func TestGEMMNaN(t *testing.T) {
	gemmEachPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		const m, n, k = 20, 40, 300
		a, w := gemmRandom(r, m*k), gemmRandom(r, n*k)
		a[5*k+299] = float32(math.NaN())
		w[33*k+7] = float32(math.NaN())
		c := make([]float32, m*n)
		GEMM(m, n, k, a, w, c)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				if isNaN := math.IsNaN(float64(c[i*n+j])); isNaN != (i == 5 || j == 33) {
					t.Fatalf("c[%d,%d] = %v: NaN must reach exactly row 5 and column 33", i, j, c[i*n+j])
				}
			}
		}
	})
}

func TestGEMMBadSizes(t *testing.T) {
	f := make([]float32, 12)
	h := make([]uint16, 12)
	for _, tc := range []struct {
		call func()
		want string
	}{
		{func() { GEMM(0, 3, 4, f[:0], f, f[:0]) }, "kernels: GEMM: m=0, want > 0"},
		{func() { GEMM(2, 3, 4, f[:7], f, f[:6]) }, "kernels: GEMM: len(a)=7, want m*k=8"},
		{func() { GEMM(2, 3, 4, f[:8], f[:11], f[:6]) }, "kernels: GEMM: len(w)=11, want n*k=12"},
		{func() { GEMM(2, 3, 4, f[:8], f, f[:7]) }, "kernels: GEMM: len(c)=7, want m*n=6"},
		{func() { GEMV(3, 4, f, f[:5], f[:3]) }, "kernels: GEMV: len(x)=5, want k=4"},
		{func() { GEMV(3, -1, f, f[:4], f[:3]) }, "kernels: GEMV: k=-1, want > 0"},
		{func() { GEMV(3, 4, f, f[:4], f[:2]) }, "kernels: GEMV: len(y)=2, want n=3"},
		{func() { GEMMF16(2, 3, 4, f[:8], h[:10], f[:6]) }, "kernels: GEMMF16: len(w)=10, want n*k=12"},
		{func() { GEMMs(2, 4, f[:8], []GEMMWeights{{N: 3, F32: f}}, nil) }, "kernels: GEMMs: len(cs)=0, want len(ws)=1"},
		{func() { GEMMs(2, 4, f[:8], []GEMMWeights{{N: 3}}, [][]float32{f[:6]}) }, "kernels: GEMMs: len(w)=0, want n*k=12"},
		{func() { GEMMs(2, 4, f[:8], []GEMMWeights{{N: 3, F32: f, F16: h}}, [][]float32{f[:6]}) },
			"kernels: GEMMs: len(w)=24, want n*k=12"},
		{func() { GEMMs(2, 4, f[:8], []GEMMWeights{{N: 3, F16: h}}, [][]float32{f[:5]}) }, "kernels: GEMMs: len(c)=5, want m*n=6"},
	} {
		func() {
			defer func() {
				if got := fmt.Sprint(recover()); got != tc.want {
					t.Errorf("panic %q, want %q", got, tc.want)
				}
			}()
			tc.call()
		}()
	}
}

func BenchmarkGEMMf32(b *testing.B) {
	// The m=8 and m=32 shapes are stories110M's batched decode: gate/up, down, the classifier.
	for _, s := range [][3]int{{1024, 1024, 1024}, {256, 4096, 4096}, {64, 4096, 4096}, {16, 4096, 4096}, {2048, 2048, 2048},
		{8, 4096, 768}, {32, 4096, 768}, {32, 768, 2048}, {32, 32000, 768}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("m=%d/n=%d/k=%d", m, n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, w, c := gemmRandom(r, m*k), gemmRandom(r, n*k), make([]float32, m*n)
			for b.Loop() {
				GEMM(m, n, k, a, w, c)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkGEMMF16(b *testing.B) {
	for _, s := range [][3]int{{1024, 1024, 1024}, {1, 4096, 4096}, {8, 4096, 768}, {32, 4096, 768}, {32, 768, 2048}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("m=%d/n=%d/k=%d", m, n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, c := gemmRandom(r, m*k), make([]float32, m*n)
			w := make([]uint16, n*k)
			for i, v := range gemmRandom(r, n*k) {
				w[i] = half.F32ToF16(v)
			}
			b.SetBytes(int64(2 * n * k))
			for b.Loop() {
				GEMMF16(m, n, k, a, w, c)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkGEMV(b *testing.B) {
	for _, s := range [][2]int{{4096, 4096}, {11008, 4096}, {4096, 11008}} {
		n, k := s[0], s[1]
		b.Run(fmt.Sprintf("n=%d/k=%d", n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			w, x, y := gemmRandom(r, n*k), gemmRandom(r, k), make([]float32, n)
			b.SetBytes(int64(4 * n * k))
			for b.Loop() {
				GEMV(n, k, w, x, y)
			}
			b.ReportMetric(2*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
