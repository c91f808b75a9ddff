//go:build !noasm

package half

import "golang.org/x/sys/cpu"

// The assembly kernels convert n elements, n a multiple of their block (64 for AVX-512, 32 for F16C/AVX2); the Go
// wrappers below pass the whole blocks and finish the tail with the scalar loop.

//go:noescape
func halfF16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func halfF32ToF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func halfBF16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func halfF32ToBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func halfF16ToF32F16C(dst *float32, src *uint16, n int)

//go:noescape
func halfF32ToF16F16C(dst *uint16, src *float32, n int)

//go:noescape
func halfBF16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func halfF32ToBF16AVX2(dst *uint16, src *float32, n int)

var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	hasF16C   = cpu.X86.HasAVX && cpu.X86.HasF16C
	hasAVX2   = cpu.X86.HasAVX2
)

// widen and narrow run an assembly kernel over the whole blocks of src and the scalar loop over the rest.
func widen(dst []float32, src []uint16, block int, asm func(*float32, *uint16, int), tail func([]float32, []uint16)) {
	n := len(src) / block * block
	if n > 0 {
		asm(&dst[0], &src[0], n)
	}
	tail(dst[n:], src[n:])
}

func narrow(dst []uint16, src []float32, block int, asm func(*uint16, *float32, int), tail func([]uint16, []float32)) {
	n := len(src) / block * block
	if n > 0 {
		asm(&dst[0], &src[0], n)
	}
	tail(dst[n:], src[n:])
}

func f16ToF32AVX512(dst []float32, src []uint16) {
	widen(dst, src, 64, halfF16ToF32AVX512, f16ToF32Generic)
}
func f32ToF16AVX512(dst []uint16, src []float32) {
	narrow(dst, src, 64, halfF32ToF16AVX512, f32ToF16Generic)
}
func bf16ToF32AVX512(dst []float32, src []uint16) {
	widen(dst, src, 64, halfBF16ToF32AVX512, bf16ToF32Generic)
}
func f32ToBF16AVX512(dst []uint16, src []float32) {
	narrow(dst, src, 64, halfF32ToBF16AVX512, f32ToBF16Generic)
}
func f16ToF32F16C(dst []float32, src []uint16) {
	widen(dst, src, 32, halfF16ToF32F16C, f16ToF32Generic)
}
func f32ToF16F16C(dst []uint16, src []float32) {
	narrow(dst, src, 32, halfF32ToF16F16C, f32ToF16Generic)
}
func bf16ToF32AVX2(dst []float32, src []uint16) {
	widen(dst, src, 32, halfBF16ToF32AVX2, bf16ToF32Generic)
}
func f32ToBF16AVX2(dst []uint16, src []float32) {
	narrow(dst, src, 32, halfF32ToBF16AVX2, f32ToBF16Generic)
}

// The bulk conversions the slice functions call, picked once from the CPU's features.
var (
	f16ToF32Bulk  = pick(hasAVX512, f16ToF32AVX512, hasF16C, f16ToF32F16C, f16ToF32Generic)
	f32ToF16Bulk  = pick(hasAVX512, f32ToF16AVX512, hasF16C, f32ToF16F16C, f32ToF16Generic)
	bf16ToF32Bulk = pick(hasAVX512, bf16ToF32AVX512, hasAVX2, bf16ToF32AVX2, bf16ToF32Generic)
	f32ToBF16Bulk = pick(hasAVX512, f32ToBF16AVX512, hasAVX2, f32ToBF16AVX2, f32ToBF16Generic)
)

func pick[F any](wide bool, wideF F, narrow bool, narrowF F, generic F) F {
	switch {
	case wide:
		return wideF
	case narrow:
		return narrowF
	}
	return generic
}
