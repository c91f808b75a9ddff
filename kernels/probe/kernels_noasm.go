//go:build noasm || !amd64

package probe

// Without assembly the probe measures the pure-Go loops: the ceilings of the noasm build.
var (
	readKernels = []readKernel{readGo}
	fmaKernels  = []fmaKernel{fmaGoK}
	dotKernels  = []dotKernel{dotGoK}
)
