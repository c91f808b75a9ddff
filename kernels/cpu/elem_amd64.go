//go:build !noasm

package cpu

import xcpu "golang.org/x/sys/cpu"

// elemAVX512 selects the AVX-512 primitives of elem_amd64.s (they use F for the arithmetic and masked tails, DQ
// for 256-bit extracts in the reductions). Tests clear it to check the pure-Go path on the same machine.
var elemAVX512 = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512DQ

func elemSumSquares(x []float32) float32 {
	if elemAVX512 {
		return elemSumSquaresAVX512(x)
	}
	return elemSumSquaresGo(x)
}

func elemAddSumSquares(res, x []float32) float32 {
	if elemAVX512 {
		return elemAddSumSquaresAVX512(res, x[:len(res)])
	}
	return elemAddSumSquaresGo(res, x)
}

func elemScaleMul(out, x, w []float32, s float32) {
	if elemAVX512 {
		elemScaleMulAVX512(out, x[:len(out)], w[:len(out)], s)
		return
	}
	elemScaleMulGo(out, x, w, s)
}

func elemSwiGLU(out, gate, up []float32) {
	if elemAVX512 {
		elemSwiGLUAVX512(out, gate[:len(out)], up[:len(out)])
		return
	}
	elemSwiGLUGo(out, gate, up)
}

func elemMax(x []float32) float32 {
	if elemAVX512 {
		return elemMaxAVX512(x)
	}
	return elemMaxGo(x)
}

func elemExpSum(x []float32, m float32) float32 {
	if elemAVX512 {
		return elemExpSumAVX512(x, m)
	}
	return elemExpSumGo(x, m)
}

func elemScale(x []float32, s float32) {
	if elemAVX512 {
		elemScaleAVX512(x, s)
		return
	}
	elemScaleGo(x, s)
}

func elemRotate(x, cs, sn []float32) {
	if elemAVX512 {
		elemRotateAVX512(x, cs, sn[:len(cs)])
		return
	}
	elemRotateGo(x, cs, sn)
}

// The AVX-512 twins of the elem*Go loops (same docs); slices are non-empty where the Go loop needs it, and the
// wrappers above reslice the operands to the length of the first.

//go:noescape
func elemSumSquaresAVX512(x []float32) float32

//go:noescape
func elemAddSumSquaresAVX512(res, x []float32) float32

//go:noescape
func elemScaleMulAVX512(out, x, w []float32, s float32)

//go:noescape
func elemSwiGLUAVX512(out, gate, up []float32)

//go:noescape
func elemMaxAVX512(x []float32) float32

//go:noescape
func elemExpSumAVX512(x []float32, m float32) float32

//go:noescape
func elemScaleAVX512(x []float32, s float32)

//go:noescape
func elemRotateAVX512(x, cs, sn []float32)
