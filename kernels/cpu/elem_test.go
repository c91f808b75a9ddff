package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/morphlab/morphlab/kernels/ref"
)

// Tolerances of the elementwise kernels against the float64 reference, as normalized MSE
// Σ(got-want)²/Σwant². Each output is a handful of float32 roundings of exactly representable inputs (plus a sum
// over a row for the norms and Softmax, and a 1-2 ulp exp), so its relative error is a few times 2⁻²⁴ ≈ 6e-8 and
// the squared error ratio is below 1e-13; elemTol leaves a margin of 10 for long rows' sums. A wrong lane, a
// missed tail or a wrong pairing costs O(1) on some element and fails by many orders of magnitude.
const elemTol = 1e-12

// elemShapes are the row lengths the tests sweep: a single float, odd sizes that leave masked tails, one more
// than a vector loop, and one that spans several threads' chunks.
var elemShapes = []int{1, 7, 17, 1025, 5137}

func elemRand(rng *rand.Rand, n int, scale float64) ([]float32, []float64) {
	f := make([]float32, n)
	d := make([]float64, n)
	for i := range f {
		f[i] = float32(rng.NormFloat64() * scale)
		d[i] = float64(f[i])
	}
	return f, d
}

// elemPoisoned returns n NaNs: an output a kernel forgets to write stays NaN and fails the comparison.
func elemPoisoned(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return out
}

// elemNMSE returns Σ(got-want)²/Σwant², or +Inf if got holds a NaN.
func elemNMSE(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) {
			return math.Inf(1)
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	if den == 0 {
		return num
	}
	return num / den
}

// elemPaths runs test once with the pure-Go loops and once with the AVX-512 primitives (where the build and CPU
// have them), with two threads so that big inputs are split.
func elemPaths(t *testing.T, test func(t *testing.T)) {
	prevThreads := SetThreads(2)
	defer SetThreads(prevThreads)
	for _, asm := range elemAsmPaths() {
		name := "go"
		if asm {
			name = "avx512"
		}
		t.Run("path="+name, func(t *testing.T) {
			defer elemUseAsm(asm)()
			test(t)
		})
	}
}

func TestRMSNorm(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, dim := range elemShapes {
			for _, rows := range []int{1, 3, 17} {
				x, x64 := elemRand(rng, rows*dim, 1)
				w, w64 := elemRand(rng, dim, 1)
				want := make([]float64, rows*dim)
				ref.RMSNorm(want, x64, w64, dim, 1e-5)
				got := elemPoisoned(rows * dim)
				RMSNorm(got, x, w, dim, 1e-5)
				if e := elemNMSE(got, want); e > elemTol {
					t.Errorf("rows=%d dim=%d: nMSE %.3g > %.0g", rows, dim, e, elemTol)
				}
			}
		}
	})
}

func TestAddRMSNorm(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, dim := range elemShapes {
			for _, rows := range []int{1, 3, 17} {
				res, res64 := elemRand(rng, rows*dim, 1)
				x, x64 := elemRand(rng, rows*dim, 1)
				w, w64 := elemRand(rng, dim, 1)
				want := make([]float64, rows*dim)
				ref.AddRMSNorm(want, res64, x64, w64, dim, 1e-6)
				got := elemPoisoned(rows * dim)
				AddRMSNorm(got, res, x, w, dim, 1e-6)
				if e := elemNMSE(got, want); e > elemTol {
					t.Errorf("rows=%d dim=%d: out nMSE %.3g > %.0g", rows, dim, e, elemTol)
				}
				if e := elemNMSE(res, res64); e > elemTol {
					t.Errorf("rows=%d dim=%d: residual nMSE %.3g > %.0g", rows, dim, e, elemTol)
				}
			}
		}
	})
}

func TestSwiGLU(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, n := range append(elemShapes, 1<<17+3) {
			gate, gate64 := elemRand(rng, n, 4)
			up, up64 := elemRand(rng, n, 1)
			want := make([]float64, n)
			ref.SwiGLU(want, gate64, up64)
			got := elemPoisoned(n)
			SwiGLU(got, gate, up)
			if e := elemNMSE(got, want); e > elemTol {
				t.Errorf("n=%d: nMSE %.3g > %.0g", n, e, elemTol)
			}
		}
	})
}

func TestSoftmax(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, cols := range elemShapes {
			for _, rows := range []int{1, 3, 17} {
				x, x64 := elemRand(rng, rows*cols, 5)
				ref.Softmax(x64, rows, cols)
				Softmax(x, rows, cols)
				if e := elemNMSE(x, x64); e > elemTol {
					t.Errorf("rows=%d cols=%d: nMSE %.3g > %.0g", rows, cols, e, elemTol)
				}
			}
		}
	})
}

// TestSoftmaxExtremes checks rows whose exponents underflow to 0 (scores 100 apart) and -Inf scores (a masked
// position), which must come out as exact zeros.
func TestSoftmaxExtremes(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		x := []float32{0, -100, float32(math.Inf(-1)), 3, -200, 1, float32(math.Inf(-1)), 2, 0, 0, 0, 0, 0, 0, 0, 0, -1e30}
		x64 := make([]float64, len(x))
		for i, v := range x {
			x64[i] = float64(v)
		}
		ref.Softmax(x64, 1, len(x))
		Softmax(x, 1, len(x))
		if e := elemNMSE(x, x64); e > elemTol {
			t.Errorf("nMSE %.3g > %.0g: got %v", e, elemTol, x)
		}
		for _, i := range []int{2, 6, 16} {
			if x[i] != 0 {
				t.Errorf("x[%d] = %g, want 0", i, x[i])
			}
		}
	})
}

func TestRoPE(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, tc := range []struct{ tokens, nHeads, headDim int }{
			{1, 1, 2}, {7, 3, 6}, {17, 4, 18}, {5, 2, 64}, {33, 8, 128}, {300, 32, 128},
		} {
			if testing.Short() && tc.tokens*tc.nHeads*tc.headDim > 1<<16 {
				continue // keeps -race -short quick; the shape adds threads, not new code paths
			}
			pos := make([]int32, tc.tokens)
			for i := range pos {
				pos[i] = int32(rng.IntN(4096))
			}
			n := tc.tokens * tc.nHeads * tc.headDim
			x, x64 := elemRand(rng, n, 1)
			ref.RoPE(x64, pos, tc.nHeads, tc.headDim, 10000)
			RoPE(x, pos, tc.nHeads, tc.headDim, 10000)
			if e := elemNMSE(x, x64); e > elemTol {
				t.Errorf("tokens=%d nHeads=%d headDim=%d: nMSE %.3g > %.0g", tc.tokens, tc.nHeads, tc.headDim, e, elemTol)
			}
		}
	})
}

// refPanic returns the message ref's implementation of an op panics with, which every implementation must share.
func refPanic(t *testing.T, f func()) string {
	t.Helper()
	msg := panicMessage(f)
	if !strings.HasPrefix(msg, "kernels: ") {
		t.Fatalf("reference did not panic with a shape message: %q", msg)
	}
	return msg
}

func panicMessage(f func()) (msg string) {
	defer func() { msg = fmt.Sprint(recover()) }()
	f()
	return "no panic"
}

func TestElemBadSizes(t *testing.T) {
	f32, f64 := make([]float32, 12), make([]float64, 12)
	cases := []struct {
		name       string
		impl, spec func()
	}{
		{"RMSNorm/x", func() { RMSNorm(f32[:8], f32[:7], f32[:4], 4, 1e-5) }, func() { ref.RMSNorm(f64[:8], f64[:7], f64[:4], 4, 1e-5) }},
		{"RMSNorm/weight", func() { RMSNorm(f32[:8], f32[:8], f32[:3], 4, 1e-5) }, func() { ref.RMSNorm(f64[:8], f64[:8], f64[:3], 4, 1e-5) }},
		{"AddRMSNorm/out", func() { AddRMSNorm(f32[:4], f32[:8], f32[:8], f32[:4], 4, 1e-5) }, func() { ref.AddRMSNorm(f64[:4], f64[:8], f64[:8], f64[:4], 4, 1e-5) }},
		{"SwiGLU/up", func() { SwiGLU(f32[:5], f32[:5], f32[:4]) }, func() { ref.SwiGLU(f64[:5], f64[:5], f64[:4]) }},
		{"SwiGLU/empty", func() { SwiGLU(nil, nil, nil) }, func() { ref.SwiGLU(nil, nil, nil) }},
		{"Softmax/len", func() { Softmax(f32[:11], 3, 4) }, func() { ref.Softmax(f64[:11], 3, 4) }},
		{"Softmax/cols", func() { Softmax(f32[:0], 3, 0) }, func() { ref.Softmax(f64[:0], 3, 0) }},
		{"RoPE/odd", func() { RoPE(f32[:6], []int32{0, 1}, 1, 3, 1e4) }, func() { ref.RoPE(f64[:6], []int32{0, 1}, 1, 3, 1e4) }},
		{"RoPE/len", func() { RoPE(f32[:6], []int32{0, 1}, 1, 4, 1e4) }, func() { ref.RoPE(f64[:6], []int32{0, 1}, 1, 4, 1e4) }},
	}
	for _, c := range cases {
		want := refPanic(t, c.spec)
		if got := panicMessage(c.impl); got != want {
			t.Errorf("%s: panic %q, want %q", c.name, got, want)
		}
	}
}

// elemBenchFloats is the size of the elementwise benchmarks' main operand: 8M floats (32 MiB), far beyond the
// caches, so that they measure memory bandwidth. Under -short it is 64K floats.
func elemBenchFloats() int {
	if testing.Short() {
		return 1 << 16
	}
	return 1 << 23
}

// elemReport sets bytes per op (the bytes the op must read and write, once each) and reports GB/s.
func elemReport(b *testing.B, bytes int) {
	b.SetBytes(int64(bytes))
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkElemCopy is the bandwidth ceiling the elementwise kernels are measured against: copy() of the same
// size, 8 bytes a float (read and write).
func BenchmarkElemCopy(b *testing.B) {
	n := elemBenchFloats()
	src, dst := make([]float32, n), make([]float32, n)
	threads := Threads()
	b.Run(fmt.Sprintf("n=%d/threads=%d", n, threads), func(b *testing.B) {
		for b.Loop() {
			Parallel(n, elemGrain, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
		}
		elemReport(b, 8*n)
	})
}

func BenchmarkSoftmax(b *testing.B) {
	n := elemBenchFloats()
	for _, cols := range []int{512, 4096} {
		x, _ := elemRand(rand.New(rand.NewPCG(1, 1)), n, 1)
		b.Run(fmt.Sprintf("rows=%d/cols=%d", n/cols, cols), func(b *testing.B) {
			for b.Loop() {
				Softmax(x, n/cols, cols)
			}
			elemReport(b, 8*n)
		})
	}
}

func BenchmarkRoPE(b *testing.B) {
	n := elemBenchFloats()
	for _, hd := range []int{64, 128} {
		nHeads := 4096 / hd
		tokens := n / 4096
		x, _ := elemRand(rand.New(rand.NewPCG(1, 1)), n, 1)
		pos := make([]int32, tokens)
		for i := range pos {
			pos[i] = int32(i)
		}
		b.Run(fmt.Sprintf("tokens=%d/nHeads=%d/headDim=%d", tokens, nHeads, hd), func(b *testing.B) {
			for b.Loop() {
				RoPE(x, pos, nHeads, hd, 10000)
			}
			elemReport(b, 8*n)
		})
	}
}

// TestRoPETableGrowth rotates from several goroutines at once while the position table grows (run it with -race),
// and checks that a position's row in the table is bit for bit the row computed on the fly, as it is for
// positions past ropeMaxPos.
func TestRoPETableGrowth(t *testing.T) {
	const nHeads, headDim, theta = 2, 34, 500 // a (headDim, theta) no other test uses: its table starts empty
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for round := range 20 {
				pos := make([]int32, 3)
				for i := range pos {
					pos[i] = int32(rng.IntN(64 << round % 5000))
				}
				x, x64 := elemRand(rng, len(pos)*nHeads*headDim, 1)
				ref.RoPE(x64, pos, nHeads, headDim, theta)
				RoPE(x, pos, nHeads, headDim, theta)
				if e := elemNMSE(x, x64); e > elemTol {
					t.Errorf("goroutine %d round %d: nMSE %.3g > %.0g", g, round, e, elemTol)
				}
			}
		}()
	}
	wg.Wait()
	r := ropeTable(headDim, theta, []int32{100})
	cs, sn := make([]float32, headDim), make([]float32, headDim)
	r.fill(100, cs, sn)
	c, s := r.at(100, nil, nil)
	if !slices.Equal(c, cs) || !slices.Equal(s, sn) {
		t.Errorf("position 100: table row differs from the row computed on the fly")
	}
}
