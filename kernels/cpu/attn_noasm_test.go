//go:build noasm || !amd64

package cpu

// attnAsmPaths lists the micro-kernel sets the attention tests run: without assembly, only the Go loops.
func attnAsmPaths() []bool { return []bool{false} }

// attnUseAsm has nothing to switch without assembly.
func attnUseAsm(bool) (restore func()) { return func() {} }
