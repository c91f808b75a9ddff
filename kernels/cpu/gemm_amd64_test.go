//go:build !noasm

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
)

// gemmImpls names the GEMM/GEMV implementations this machine can run: "avx512" (the 14×32 micro-kernel and the
// AVX-512 GEMV), "avx2" (the 6×16 micro-kernel and the AVX2 GEMV) and "go".
func gemmImpls() []string {
	var impls []string
	if hasGEMMAVX512 {
		impls = append(impls, "avx512")
	}
	if hasGEMMAVX2 {
		impls = append(impls, "avx2")
	}
	return append(impls, "go")
}

// gemmUse selects the implementation impl and returns a function that restores the previous one.
func gemmUse(impl string) (restore func()) {
	prevGEMM, prevGEMV := gemmActive, gemvActive
	switch impl {
	case "avx512":
		gemmActive, gemvActive = &gemmAVX512, &gemvAVX512Arch
	case "avx2":
		gemmActive, gemvActive = &gemmAVX2, &gemvAVX2Arch
	case "go":
		gemmActive, gemvActive = nil, nil
	default:
		panic("gemmUse: unknown implementation " + impl)
	}
	return func() { gemmActive, gemvActive = prevGEMM, prevGEMV }
}

// TestGEMMFewMatchesPacked checks that the few-token GEMM (W rows broadcast, tokens packed) gives bit for bit what the
// packed-W loop nest gives: the engine relies on a token's logits not depending on the batch size.
func TestGEMMFewMatchesPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, arch := range []*gemmArch{&gemmAVX512, &gemmAVX2} {
		if (arch == &gemmAVX512 && !hasGEMMAVX512) || (arch == &gemmAVX2 && !hasGEMMAVX2) {
			continue
		}
		for _, s := range [][3]int{{2, 31, 300}, {13, 70, 256}, {32, 45, 513}, {33, 17, 100}, {64, 29, 1025}} {
			m, n, k := s[0], s[1], s[2]
			a, w := gemmRandom(r, m*k), gemmRandom(r, n*k)
			few, packed := gemmPoisoned(m*n), gemmPoisoned(m*n)
			gemmFew(arch, m, n, k, a, few, GEMMWeights{F32: w})
			gemmRun(arch, m, n, k, a, packed, func(u *gemmArch, dst, _ []float32, j, pc, rows, kc int) {
				u.packB(dst, w[j*k+pc:], k, rows, kc)
			})
			for i := range few {
				if math.Float32bits(few[i]) != math.Float32bits(packed[i]) {
					t.Fatalf("%s m=%d n=%d k=%d: C[%d] = %v few, %v packed", arch.name, m, n, k, i, few[i], packed[i])
				}
			}
		}
	}
}

// TestGEMMTokensMatchGEMV checks that GEMM for 2-64 tokens, run as GEMVs of up to four tokens, gives each token bit
// for bit what a one-token GEMV gives it, float32 and binary16 weights, over k with and without tails of 64 and
// 16 steps and at 2048 steps and more: a token's logits then do not depend on how many tokens share its step.
func TestGEMMTokensMatchGEMV(t *testing.T) {
	if gemvActive == nil || gemvActive.tokens32 == nil {
		t.Skip("no few-token GEMV kernels")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{2, 37, 64}, {3, 17, 300}, {4, 40, 768}, {5, 9, 17}, {8, 33, 1031}, {7, 1, 5}, {37, 21, 200},
		{64, 70, 64}, {9, 13, 2061}, {33, 8, 2048}, {3, 263, 1031}, // W over gemvFarBytes (1 MiB)
		{32, 300, 96}, {9, 200, 40}, // several blocks of gemvTokensRows a thread
		{16, 70, 2061}, {16, 70, 3100}} { // calls of the tile kernels over gemvTileK steps, inner and outer order
		m, n, k := s[0], s[1], s[2]
		if !gemvActive.takesTokens(m, k) {
			continue // the packed products (AVX2, more than four tokens over a long k)
		}
		a, w := gemmRandom(r, m*k), gemmRandom(r, n*k)
		w16 := make([]uint16, n*k)
		for i, v := range w {
			w16[i] = half.F32ToF16(v)
		}
		many, many16 := gemmPoisoned(m*n), gemmPoisoned(m*n)
		GEMM(m, n, k, a, w, many)
		GEMMF16(m, n, k, a, w16, many16)
		for i := range m {
			one, one16 := gemmPoisoned(n), gemmPoisoned(n)
			GEMV(n, k, w, a[i*k:(i+1)*k], one)
			GEMMF16(1, n, k, a[i*k:(i+1)*k], w16, one16)
			for j := range n {
				if math.Float32bits(many[i*n+j]) != math.Float32bits(one[j]) ||
					math.Float32bits(many16[i*n+j]) != math.Float32bits(one16[j]) {
					t.Fatalf("m=%d n=%d k=%d: token %d, C[%d] = %v, %v (f16) with the others, %v, %v alone",
						m, n, k, i, j, many[i*n+j], many16[i*n+j], one[j], one16[j])
				}
			}
		}
	}
}

// TestGEMVFar checks that the GEMV for W that streams from memory (gemvFarAVX512, its prefetches) gives bit for
// bit gemvAVX512's outputs, over four-row blocks and single rows, whole and partial 64- and 16-step chunks.
func TestGEMVFar(t *testing.T) {
	if !hasGEMMAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range [][2]int{{1, 16}, {3, 5}, {4, 64}, {7, 100}, {9, 768}, {13, 1031}, {64, 2048}} {
		n, k := s[0], s[1]
		w, x := gemmRandom(r, n*k), gemmRandom(r, k)
		far, near := gemmPoisoned(n), gemmPoisoned(n)
		gemvFarAVX512(n, k, &w[0], &x[0], &far[0])
		gemvAVX512(n, k, &w[0], &x[0], &near[0])
		for j := range n {
			if math.Float32bits(far[j]) != math.Float32bits(near[j]) {
				t.Fatalf("n=%d k=%d: y[%d] = %v, want %v", n, k, j, far[j], near[j])
			}
		}
	}
}

// BenchmarkGEMMFew runs gemmFew, GEMM's path for up to gemmFewMaxM tokens where the few-token GEMV kernels are
// missing, at stories110M's batched-decode shapes, to set against GEMM's few-token GEMVs at the same shapes:
//
//	go test -run '^$' -bench 'GEMM(f32|Few)/m=(8|32)/' -benchtime 30x ./kernels/cpu
func BenchmarkGEMMFew(b *testing.B) {
	if gemmActive == nil {
		b.Skip("no GEMM micro-kernel")
	}
	for _, s := range [][3]int{{8, 4096, 768}, {32, 4096, 768}, {32, 768, 2048}, {32, 32000, 768}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("m=%d/n=%d/k=%d", m, n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, w, c := gemmRandom(r, m*k), gemmRandom(r, n*k), make([]float32, m*n)
			for b.Loop() {
				gemmFew(gemmActive, m, n, k, a, c, GEMMWeights{F32: w})
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
