//go:build noasm || !amd64

package cpu

// elemAsmPaths lists the primitive sets the tests run: without assembly, only the Go loops.
func elemAsmPaths() []bool { return []bool{false} }

// elemUseAsm has nothing to switch without assembly.
func elemUseAsm(bool) (restore func()) { return func() {} }
