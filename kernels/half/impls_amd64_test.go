//go:build !noasm

package half

// impls lists the generic loop and each assembly path this CPU supports.
func impls() []impl {
	out := []impl{{"generic", f16ToF32Generic, f32ToF16Generic, bf16ToF32Generic, f32ToBF16Generic}}
	if hasF16C && hasAVX2 {
		out = append(out, impl{"f16c+avx2", f16ToF32F16C, f32ToF16F16C, bf16ToF32AVX2, f32ToBF16AVX2})
	}
	if hasAVX512 {
		out = append(out, impl{"avx512", f16ToF32AVX512, f32ToF16AVX512, bf16ToF32AVX512, f32ToBF16AVX512})
	}
	return out
}
