//go:build noasm || !amd64

package half

func f16ToF32Bulk(dst []float32, src []uint16)  { f16ToF32Generic(dst, src) }
func f32ToF16Bulk(dst []uint16, src []float32)  { f32ToF16Generic(dst, src) }
func bf16ToF32Bulk(dst []float32, src []uint16) { bf16ToF32Generic(dst, src) }
func f32ToBF16Bulk(dst []uint16, src []float32) { f32ToBF16Generic(dst, src) }
