package quant

import (
	"fmt"

	"github.com/morphlab/morphlab/kernels/half"
)

// Format is a weight number format; the package doc gives each one's layout.
type Format int

// The formats.
const (
	F32 Format = iota
	F16
	BF16
	Int8
	Q8_0
	Q4_0
	Int4
)

var formatNames = [...]string{F32: "f32", F16: "f16", BF16: "bf16", Int8: "int8", Q8_0: "q8_0", Q4_0: "q4_0", Int4: "int4"}

// String returns the format's name as ParseFormat reads it: f32, f16, bf16, int8, q8_0, q4_0, int4.
func (f Format) String() string {
	if f < 0 || int(f) >= len(formatNames) {
		return fmt.Sprintf("Format(%d)", int(f))
	}
	return formatNames[f]
}

// ParseFormat returns the format named s (as String writes it).
func ParseFormat(s string) (Format, error) {
	for f, name := range formatNames {
		if name == s {
			return Format(f), nil
		}
	}
	return 0, fmt.Errorf("quant: unknown format %q", s)
}

// DefaultGroup is the Int4 group size used when Options.Group is 0.
const DefaultGroup = 128

// Options tune Quantize. The zero value means the defaults.
type Options struct {
	// Group is the Int4 group size along k (DefaultGroup when 0). It must divide k and be even.
	Group int
}

func (o *Options) group() int {
	if o == nil || o.Group == 0 {
		return DefaultGroup
	}
	return o.Group
}

// Matrix is a weight matrix W [Rows, Cols] = [out, in] held in one format. Only the fields of its format are set:
//
//	F32:       F32 [Rows*Cols]
//	F16, BF16: Half [Rows*Cols]
//	Int8:      Q [Rows*Cols], Scales [Rows]
//	Q8_0:      Q [Rows*Cols], BlockScales [Rows*Cols/32] (GGUF's blocks repacked, RepackQ8_0)
//	Q4_0:      Packed [Rows*Cols/2] (zero point 8), BlockScales [Rows*Cols/32] (RepackQ4_0)
//	Int4:      Packed [Rows*Cols/2], Scales and Zeros [Rows*Cols/Group]
type Matrix struct {
	Format     Format
	Rows, Cols int
	Group      int // Int4 only

	F32    []float32
	Half   []uint16
	Q      []int8
	Packed []byte
	Scales []float32
	Zeros  []uint8
	// BlockScales are Q8_0's and Q4_0's binary16 scales, one a block of 32 along a row.
	BlockScales []uint16
}

// checkShape reports whether format f can hold an [n, k] matrix with Int4 group size group.
func checkShape(f Format, n, k, group int) error {
	if n <= 0 || k <= 0 {
		return fmt.Errorf("quant: %v: shape [%d, %d], want positive sizes", f, n, k)
	}
	switch f {
	case F32, F16, BF16, Int8:
	case Q8_0, Q4_0:
		if k%BlockSize != 0 {
			return fmt.Errorf("quant: %v: k=%d, want a multiple of %d", f, k, BlockSize)
		}
	case Int4:
		if group <= 0 || group%2 != 0 || k%group != 0 {
			return fmt.Errorf("quant: int4: group=%d with k=%d, want an even group dividing k", group, k)
		}
	default:
		return fmt.Errorf("quant: unknown format %v", f)
	}
	return nil
}

// Quantize stores w [n, k] in format f, rounding to nearest (RTN). opts may be nil.
func Quantize(f Format, w []float32, n, k int, opts *Options) (*Matrix, error) {
	group := opts.group()
	if err := checkShape(f, n, k, group); err != nil {
		return nil, err
	}
	if len(w) != n*k {
		return nil, fmt.Errorf("quant: %v: len(w)=%d, want n*k=%d", f, len(w), n*k)
	}
	m := &Matrix{Format: f, Rows: n, Cols: k}
	switch f {
	case F32:
		m.F32 = append([]float32(nil), w...)
	case F16:
		m.Half = make([]uint16, n*k)
		half.F32ToF16Slice(m.Half, w)
	case BF16:
		m.Half = make([]uint16, n*k)
		half.F32ToBF16Slice(m.Half, w)
	case Int8:
		m.Q, m.Scales = make([]int8, n*k), make([]float32, n)
		QuantizeRowsInt8(w, n, k, m.Q, m.Scales)
	case Q8_0:
		blocks := make([]byte, n*k/BlockSize*Q8_0BlockBytes)
		QuantizeQ8_0(blocks, w)
		m.Q, m.BlockScales = repackQ8_0(blocks)
	case Q4_0:
		blocks := make([]byte, n*k/BlockSize*Q4_0BlockBytes)
		QuantizeQ4_0(blocks, w)
		m.Packed, m.BlockScales = repackQ4_0(blocks)
	case Int4:
		m.Group = group
		m.Packed = make([]byte, n*k/2)
		m.Scales, m.Zeros = make([]float32, n*k/group), make([]uint8, n*k/group)
		quantizeInt4(m, w, nil)
	}
	return m, nil
}

// Dequantize returns the float32 values the matrix stands for, [Rows*Cols].
func (m *Matrix) Dequantize() []float32 {
	out := make([]float32, m.Rows*m.Cols)
	switch m.Format {
	case F32:
		copy(out, m.F32)
	case F16:
		half.F16ToF32Slice(out, m.Half)
	case BF16:
		half.BF16ToF32Slice(out, m.Half)
	case Int8:
		for j := range m.Rows {
			s := m.Scales[j]
			for p, q := range m.Q[j*m.Cols : (j+1)*m.Cols] {
				out[j*m.Cols+p] = float32(q) * s
			}
		}
	case Q8_0, Q4_0:
		for j := range m.Rows {
			m.DequantizeRow(j, out[j*m.Cols:(j+1)*m.Cols])
		}
	case Int4:
		dequantizeInt4(out, m)
	}
	return out
}

// DequantizeRow writes the float32 values of row j into dst (Cols values): what Dequantize gives for the row,
// without widening the rest (an embedding lookup).
func (m *Matrix) DequantizeRow(j int, dst []float32) {
	k := m.Cols
	dst = dst[:k]
	switch m.Format {
	case F32:
		copy(dst, m.F32[j*k:(j+1)*k])
	case F16:
		half.F16ToF32Slice(dst, m.Half[j*k:(j+1)*k])
	case BF16:
		half.BF16ToF32Slice(dst, m.Half[j*k:(j+1)*k])
	case Int8:
		s := m.Scales[j]
		for p, q := range m.Q[j*k : (j+1)*k] {
			dst[p] = float32(q) * s
		}
	case Q8_0:
		for p, q := range m.Q[j*k : (j+1)*k] {
			dst[p] = float32(q) * half.F16ToF32(m.BlockScales[(j*k+p)/BlockSize])
		}
	case Q4_0:
		for p := range dst {
			q := m.Packed[(j*k+p)/2] >> (4 * (p % 2)) & 0xf
			dst[p] = float32(int(q)-8) * half.F16ToF32(m.BlockScales[(j*k+p)/BlockSize])
		}
	case Int4:
		row := &Matrix{Format: Int4, Rows: 1, Cols: k, Group: m.Group, Packed: m.Packed[j*k/2 : (j+1)*k/2],
			Scales: m.Scales[j*k/m.Group : (j+1)*k/m.Group], Zeros: m.Zeros[j*k/m.Group : (j+1)*k/m.Group]}
		dequantizeInt4(dst, row)
	}
}

// Bytes is the storage the matrix needs: its packed values plus scales and zero points.
func (m *Matrix) Bytes() int {
	return 4*len(m.F32) + 2*len(m.Half) + len(m.Q) + len(m.Packed) + 4*len(m.Scales) + len(m.Zeros) + 2*len(m.BlockScales)
}

// BitsPerWeight is Bytes·8 per weight.
func (m *Matrix) BitsPerWeight() float64 {
	return float64(8*m.Bytes()) / float64(m.Rows*m.Cols)
}
