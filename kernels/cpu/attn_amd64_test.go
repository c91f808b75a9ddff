//go:build !noasm

package cpu

// attnAsmPaths lists the micro-kernel sets the attention tests run: the Go loops, and AVX-512 where available.
func attnAsmPaths() []bool {
	if attnAVX512 {
		return []bool{false, true}
	}
	return []bool{false}
}

// attnUseAsm switches the AVX-512 attention micro-kernels on or off and returns the function that restores it.
func attnUseAsm(on bool) (restore func()) {
	prev := attnAVX512
	attnAVX512 = on
	return func() { attnAVX512 = prev }
}
