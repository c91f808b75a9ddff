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

// RepackQ8_0 returns the [rows, cols] matrix stored in GGUF Q8_0 blocks (rows·cols/32 of them, row after row)
// in the engine's layout (package doc): the codes as one int8 matrix and the binary16 scales as another, the
// values bit for bit the blocks' own and the memory the blocks' own (34 bytes a block). Sizes that do not match
// are an error.
func RepackQ8_0(blocks []byte, rows, cols int) (*Matrix, error) {
	if err := checkRepack(Q8_0, len(blocks), rows, cols, Q8_0BlockBytes); err != nil {
		return nil, err
	}
	m := &Matrix{Format: Q8_0, Rows: rows, Cols: cols}
	m.Q, m.BlockScales = repackQ8_0(blocks)
	return m, nil
}

// RepackQ4_0 returns the [rows, cols] matrix stored in GGUF Q4_0 blocks in the engine's layout: the codes
// packed two a byte in Int4's nibble order (zero point 8) and the binary16 scales, 18 bytes a block as in the
// file.
func RepackQ4_0(blocks []byte, rows, cols int) (*Matrix, error) {
	if err := checkRepack(Q4_0, len(blocks), rows, cols, Q4_0BlockBytes); err != nil {
		return nil, err
	}
	m := &Matrix{Format: Q4_0, Rows: rows, Cols: cols}
	m.Packed, m.BlockScales = repackQ4_0(blocks)
	return m, nil
}

func checkRepack(f Format, got, rows, cols, blockBytes int) error {
	if err := checkShape(f, rows, cols, 0); err != nil {
		return err
	}
	if want := rows * cols / BlockSize * blockBytes; got != want {
		return fmt.Errorf("quant: %v: %d bytes for [%d, %d], want %d", f, got, rows, cols, want)
	}
	return nil
}

// Blocks returns a Q8_0 or Q4_0 matrix as GGUF blocks, byte for byte the blocks it was repacked from.
func (m *Matrix) Blocks() ([]byte, error) {
	nb := len(m.BlockScales)
	switch m.Format {
	case Q8_0:
		out := make([]byte, nb*Q8_0BlockBytes)
		for b := range nb {
			blk := out[b*Q8_0BlockBytes:][:Q8_0BlockBytes]
			binary.LittleEndian.PutUint16(blk, m.BlockScales[b])
			for i, q := range m.Q[b*BlockSize : (b+1)*BlockSize] {
				blk[2+i] = byte(q)
			}
		}
		return out, nil
	case Q4_0:
		out := make([]byte, nb*Q4_0BlockBytes)
		for b := range nb {
			blk := out[b*Q4_0BlockBytes:][:Q4_0BlockBytes]
			binary.LittleEndian.PutUint16(blk, m.BlockScales[b])
			codes := m.Packed[b*BlockSize/2:][:BlockSize/2]
			for i := range BlockSize {
				q := codes[i/2] >> (4 * (i % 2)) & 0xf
				blk[2+i%16] |= q << (4 * (i / 16))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("quant: %v has no GGUF blocks", m.Format)
}

// repackQ8_0 splits whole Q8_0 blocks into their codes and scales.
func repackQ8_0(blocks []byte) ([]int8, []uint16) {
	nb := len(blocks) / Q8_0BlockBytes
	q, d := make([]int8, nb*BlockSize), make([]uint16, nb)
	for b := range nb {
		blk := blocks[b*Q8_0BlockBytes:][:Q8_0BlockBytes]
		d[b] = binary.LittleEndian.Uint16(blk)
		for i, c := range blk[2:] {
			q[b*BlockSize+i] = int8(c)
		}
	}
	return q, d
}

// repackQ4_0 splits whole Q4_0 blocks into their codes, in Int4's nibble order (element 2i low, 2i+1 high), and
// scales.
func repackQ4_0(blocks []byte) ([]uint8, []uint16) {
	nb := len(blocks) / Q4_0BlockBytes
	w, d := make([]uint8, nb*BlockSize/2), make([]uint16, nb)
	for b := range nb {
		blk := blocks[b*Q4_0BlockBytes:][:Q4_0BlockBytes]
		d[b] = binary.LittleEndian.Uint16(blk)
		out := w[b*BlockSize/2:][:BlockSize/2]
		// Elements 2i and 2i+1 are both low nibbles (i < 8) or both high nibbles of bytes 2i%16 and 2i%16+1.
		for i := range out {
			e := 2 * i
			shift := 4 * (e / 16)
			lo, hi := blk[2+e%16]>>shift&0xf, blk[2+e%16+1]>>shift&0xf
			out[i] = lo | hi<<4
		}
	}
	return w, d
}
