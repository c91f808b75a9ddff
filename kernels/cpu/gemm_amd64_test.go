//go:build !noasm

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
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

// TestGEMMFewMatchesPacked checks that the few-token GEMM (W copied, tokens packed) gives bit for bit what the
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
			gemmFew(arch, m, n, k, a, few, gemmFewW{f32: w})
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
