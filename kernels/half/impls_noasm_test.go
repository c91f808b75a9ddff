//go:build noasm || !amd64

package half

func impls() []impl {
	return []impl{{"generic", f16ToF32Generic, f32ToF16Generic, bf16ToF32Generic, f32ToBF16Generic}}
}
