//go:build !noasm

package cpu

// gemmImpls names the GEMM/GEMV implementations this machine can run: "avx512" (the 14×32 micro-kernel and the
// AVX-512 GEMV), "avx2" (the 6×16 micro-kernel, pure-Go GEMV) and "go".
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
	prevGEMM, prevGEMV := gemmActive, gemvASM
	switch impl {
	case "avx512":
		gemmActive, gemvASM = &gemmAVX512, true
	case "avx2":
		gemmActive, gemvASM = &gemmAVX2, false
	case "go":
		gemmActive, gemvASM = nil, false
	default:
		panic("gemmUse: unknown implementation " + impl)
	}
	return func() { gemmActive, gemvASM = prevGEMM, prevGEMV }
}
