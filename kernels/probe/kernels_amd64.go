//go:build !noasm

package probe

import "golang.org/x/sys/cpu"

// Assembly twins of the loops in kernels.go (see kernels_amd64.s). The sum kernels take whole blocks (64 words
// for AVX-512, 32 for AVX2); the wrappers below pass the blocks and finish the tail in Go.

//go:noescape
func probeSumAVX512(p *uint64, n int) uint64

//go:noescape
func probeSumAVX2(p *uint64, n int) uint64

//go:noescape
func probeFMAAVX512(acc *float32, a, b float32, n int)

//go:noescape
func probeFMAAVX2(acc *float32, a, b float32, n int)

//go:noescape
func probeDotVNNI512(acc *int32, u, s uint32, n int)

//go:noescape
func probeDotAVXVNNI(acc *int32, u, s uint32, n int)

//go:noescape
func probeDotAVX2(acc *int32, u, s uint32, n int)

// blockSum returns a sum function that hands the whole blocks of block words to kernel and adds the tail in Go.
func blockSum(kernel func(p *uint64, n int) uint64, block int) func(p []uint64) uint64 {
	return func(p []uint64) uint64 {
		n := len(p) &^ (block - 1)
		s := sumWordsGo(p[n:])
		if n > 0 {
			s += kernel(&p[0], n)
		}
		return s
	}
}

// The kernels this CPU can run, fastest first; Measure uses the first of each list, the tests check them all.
var readKernels, fmaKernels, dotKernels = amd64Kernels()

func amd64Kernels() ([]readKernel, []fmaKernel, []dotKernel) {
	var (
		reads []readKernel
		fmas  []fmaKernel
		dots  []dotKernel
	)
	// AVX-512: 16 accumulator registers (latency 4 x 2 FMA pipes = 8 would do on current cores; 16 leaves room).
	if cpu.X86.HasAVX512F {
		reads = append(reads, readKernel{name: "avx512", sum: blockSum(probeSumAVX512, 64)})
		fmas = append(fmas, fmaKernel{name: "avx512", accLen: 16 * 16, flopsPerIter: 2 * 16 * 16,
			run: func(acc []float32, a, b float32, n int) { probeFMAAVX512(&acc[0], a, b, n) }})
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VNNI {
		dots = append(dots, dotKernel{name: "avx512vnni", accLen: 16 * 16, opsPerIter: 2 * 64 * 16,
			run: func(acc []int32, u, s uint32, n int) { probeDotVNNI512(&acc[0], u, s, n) }})
	}
	if cpu.X86.HasAVXVNNI {
		dots = append(dots, dotKernel{name: "avxvnni", accLen: 12 * 8, opsPerIter: 2 * 32 * 12,
			run: func(acc []int32, u, s uint32, n int) { probeDotAVXVNNI(&acc[0], u, s, n) }})
	}
	if cpu.X86.HasAVX2 {
		reads = append(reads, readKernel{name: "avx2", sum: blockSum(probeSumAVX2, 32)})
		dots = append(dots, dotKernel{name: "avx2", accLen: 6 * 8, opsPerIter: 2 * 32 * 6,
			run: func(acc []int32, u, s uint32, n int) { probeDotAVX2(&acc[0], u, s, n) }})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		fmas = append(fmas, fmaKernel{name: "avx2fma", accLen: 12 * 8, flopsPerIter: 2 * 12 * 8,
			run: func(acc []float32, a, b float32, n int) { probeFMAAVX2(&acc[0], a, b, n) }})
	}
	return append(reads, readGo), append(fmas, fmaGoK), append(dots, dotGoK)
}
