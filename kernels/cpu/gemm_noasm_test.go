//go:build noasm || !amd64

package cpu

// gemmImpls names the GEMM/GEMV implementations of this build: only the pure-Go loops.
func gemmImpls() []string { return []string{"go"} }

// gemmUse selects the implementation impl; there is only "go" to select.
func gemmUse(impl string) (restore func()) {
	if impl != "go" {
		panic("gemmUse: unknown implementation " + impl)
	}
	return func() {}
}
