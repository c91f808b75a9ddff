package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/morphlab/morphlab/kernels/half"
)

// GGUF block geometry.
const (
	BlockSize      = 32 // weights a Q8_0 or Q4_0 block
	Q8_0BlockBytes = 34 // binary16 d + 32 int8
	Q4_0BlockBytes = 18 // binary16 d + 16 bytes of nibbles
)

// QuantizeQ8_0 writes src (a multiple of 32 values) as GGUF Q8_0 blocks into dst, byte for byte what ggml's
// quantize_row_q8_0_ref writes: all arithmetic in float32, d = amax/127, q = round(x·(1/d)) with halves away
// from zero, d stored as binary16 rounded to nearest even. It panics on sizes that do not fit.
func QuantizeQ8_0(dst []byte, src []float32) {
	checkBlocks("QuantizeQ8_0", len(src), len(dst), Q8_0BlockBytes)
	for b := range len(src) / BlockSize {
		x := src[b*BlockSize:][:BlockSize]
		blk := dst[b*Q8_0BlockBytes:][:Q8_0BlockBytes]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(blk, half.F32ToF16(d))
		for i, v := range x {
			blk[2+i] = byte(roundClamp(float32(v*id), -128, 127))
		}
	}
}

// QuantizeQ4_0 writes src (a multiple of 32 values) as GGUF Q4_0 blocks into dst, byte for byte what ggml's
// quantize_row_q4_0_ref writes: m is the block's value of largest magnitude (the first one on ties, sign kept),
// d = m/-8, so m itself maps to q = 0 and values of the opposite sign reach up to q = 15 (16 clamped);
// q = min(15, trunc(x·(1/d) + 8.5)), all in float32. It panics on sizes that do not fit.
func QuantizeQ4_0(dst []byte, src []float32) {
	checkBlocks("QuantizeQ4_0", len(src), len(dst), Q4_0BlockBytes)
	for b := range len(src) / BlockSize {
		x := src[b*BlockSize:][:BlockSize]
		blk := dst[b*Q4_0BlockBytes:][:Q4_0BlockBytes]
		var amax, m float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, m = a, v
			}
		}
		d := m / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(blk, half.F32ToF16(d))
		for j := range BlockSize / 2 {
			lo := truncClamp(float32(x[j]*id)+8.5, 0, 15)
			hi := truncClamp(float32(x[j+BlockSize/2]*id)+8.5, 0, 15)
			blk[2+j] = byte(lo) | byte(hi)<<4
		}
	}
}

// DecodeQ8_0 returns the values of GGUF Q8_0 block bytes (value = q·d). Bytes that are not whole blocks are an
// error.
func DecodeQ8_0(src []byte) ([]float32, error) {
	if len(src)%Q8_0BlockBytes != 0 {
		return nil, fmt.Errorf("quant: Q8_0: %d bytes is not a whole number of %d-byte blocks", len(src), Q8_0BlockBytes)
	}
	dst := make([]float32, len(src)/Q8_0BlockBytes*BlockSize)
	dequantizeQ8_0(dst, src)
	return dst, nil
}

// DecodeQ4_0 returns the values of GGUF Q4_0 block bytes (value = (q-8)·d). Bytes that are not whole blocks are
// an error.
func DecodeQ4_0(src []byte) ([]float32, error) {
	if len(src)%Q4_0BlockBytes != 0 {
		return nil, fmt.Errorf("quant: Q4_0: %d bytes is not a whole number of %d-byte blocks", len(src), Q4_0BlockBytes)
	}
	dst := make([]float32, len(src)/Q4_0BlockBytes*BlockSize)
	dequantizeQ4_0(dst, src)
	return dst, nil
}

// dequantizeQ8_0 decodes whole blocks; len(dst) is len(src)/34*32.
func dequantizeQ8_0(dst []float32, src []byte) {
	for b := range len(src) / Q8_0BlockBytes {
		blk := src[b*Q8_0BlockBytes:][:Q8_0BlockBytes]
		y := dst[b*BlockSize:][:BlockSize]
		d := half.F16ToF32(binary.LittleEndian.Uint16(blk))
		for i := range y {
			y[i] = float32(int8(blk[2+i])) * d
		}
	}
}

// dequantizeQ4_0 decodes whole blocks; len(dst) is len(src)/18*32.
func dequantizeQ4_0(dst []float32, src []byte) {
	for b := range len(src) / Q4_0BlockBytes {
		blk := src[b*Q4_0BlockBytes:][:Q4_0BlockBytes]
		y := dst[b*BlockSize:][:BlockSize]
		d := half.F16ToF32(binary.LittleEndian.Uint16(blk))
		for j := range BlockSize / 2 {
			y[j] = float32(int(blk[2+j]&0xf)-8) * d
			y[j+BlockSize/2] = float32(int(blk[2+j]>>4)-8) * d
		}
	}
}

// checkBlocks panics unless n values are whole blocks and fill exactly got bytes of blockBytes-byte blocks.
func checkBlocks(op string, n, got, blockBytes int) {
	if n%BlockSize != 0 {
		panic(fmt.Sprintf("quant: %s: len(src)=%d, want a multiple of %d", op, n, BlockSize))
	}
	if want := n / BlockSize * blockBytes; got != want {
		panic(fmt.Sprintf("quant: %s: len(dst)=%d, want len(src)/%d*%d=%d", op, got, BlockSize, blockBytes, want))
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundClamp rounds v to the nearest integer, halves away from zero (C's roundf), and clamps it to [lo, hi]; NaN
// gives 0. Inputs of finite weights never reach the clamp; it keeps Inf and NaN weights from undefined conversions.
func roundClamp(v float32, lo, hi int) int {
	r := math.Round(float64(v))
	switch {
	case r != r:
		return 0
	case r < float64(lo):
		return lo
	case r > float64(hi):
		return hi
	}
	return int(r)
}

// truncClamp truncates v toward zero (C's float to int conversion) and clamps it to [lo, hi]; NaN gives lo.
func truncClamp(v float32, lo, hi int) int {
	t := math.Trunc(float64(v))
	switch {
	case !(t >= float64(lo)):
		return lo
	case t > float64(hi):
		return hi
	}
	return int(t)
}
