// Package half converts between float32 and the two 16-bit float formats that model weights are stored in:
// IEEE 754 binary16 ("F16": 1 sign, 5 exponent, 10 mantissa bits) and bfloat16 ("BF16": 1 sign, 8 exponent,
// 7 mantissa bits, the top half of a float32).
//
// Every conversion is exact where the target can hold the value and otherwise rounds to nearest, ties to even.
// Subnormals are kept (no flush to zero), values past the largest finite value become ±Inf, and a NaN stays a
// NaN: its sign and the top mantissa bits (the payload that fits) are kept and the quiet bit is set, which is
// what the F16C instructions do, so the scalar and the assembly paths agree bit for bit.
//
// The slice functions convert whole buffers; on amd64 they use F16C (VCVTPH2PS/VCVTPS2PH, 8 lanes) or AVX-512
// (16 lanes) when the CPU has them and the build has no noasm tag, and the scalar loop otherwise.
package half

import (
	"math"

	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// F16ToF32 returns the float32 value of the binary16 bits h. Every binary16 value is exactly representable in
// float32, so this never rounds; a signaling NaN comes back quiet.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		if mant != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	case exp != 0: // normal: rebias 15 -> 127
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal mant·2^-24: normalize so the leading 1 lands on bit 10 and becomes the implicit bit.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 returns the binary16 bits nearest to f, ties to even. Magnitudes from 65520 (halfway past the largest
// finite binary16, 65504) up become ±Inf; magnitudes below 2^-14 become subnormals or ±0.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x477ff000: // >= 65520 rounds to Inf (65504 has an odd mantissa, so the tie goes up)
		return sign | 0x7c00
	case abs >= 0x38800000: // normal binary16 range [2^-14, 65520)
		// Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even; a carry out of
		// the mantissa correctly bumps the exponent.
		abs += 0xfff + (abs>>13)&1
		return sign | uint16((abs-112<<23)>>13)
	}
	// Subnormal result: value = mant·2^(e-150) with the implicit bit, in units of 2^-24 that is mant >> (126-e).
	e := abs >> 23
	if e < 102 { // below 2^-25: rounds to 0 (the exact half 2^-25 has e=102 and is handled below)
		return sign
	}
	mant := abs&0x7fffff | 0x800000
	shift := 126 - e
	q := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++ // may carry into 0x400, the encoding of the smallest normal 2^-14: still right
	}
	return sign | uint16(q)
}

// BF16ToF32 returns the float32 value of the bfloat16 bits h: h is the top half of a float32.
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 returns the bfloat16 bits nearest to f, ties to even. Subnormals are kept; a NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16ToF32Slice sets dst[i] = F16ToF32(src[i]). It panics unless len(dst) == len(src).
func F16ToF32Slice(dst []float32, src []uint16) {
	shape.Len("F16ToF32Slice", "dst", len(dst), len(src), "len(src)")
	f16ToF32Bulk(dst, src)
}

// F32ToF16Slice sets dst[i] = F32ToF16(src[i]). It panics unless len(dst) == len(src).
func F32ToF16Slice(dst []uint16, src []float32) {
	shape.Len("F32ToF16Slice", "dst", len(dst), len(src), "len(src)")
	f32ToF16Bulk(dst, src)
}

// BF16ToF32Slice sets dst[i] = BF16ToF32(src[i]). It panics unless len(dst) == len(src).
func BF16ToF32Slice(dst []float32, src []uint16) {
	shape.Len("BF16ToF32Slice", "dst", len(dst), len(src), "len(src)")
	bf16ToF32Bulk(dst, src)
}

// F32ToBF16Slice sets dst[i] = F32ToBF16(src[i]). It panics unless len(dst) == len(src).
func F32ToBF16Slice(dst []uint16, src []float32) {
	shape.Len("F32ToBF16Slice", "dst", len(dst), len(src), "len(src)")
	f32ToBF16Bulk(dst, src)
}

// The scalar loops: the noasm build uses them for whole slices and the assembly build for the tails.

func f16ToF32Generic(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

func f32ToF16Generic(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}

func bf16ToF32Generic(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = BF16ToF32(h)
	}
}

func f32ToBF16Generic(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = F32ToBF16(f)
	}
}
