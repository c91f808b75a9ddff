//go:build !noasm

package cpu

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
