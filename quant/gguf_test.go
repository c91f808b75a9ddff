package quant

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden/quant")

var goldenDir = filepath.Join("..", "testdata", "golden", "quant")

// f16Value decodes binary16 bits from the format's definition, independently of kernels/half: GGUF block scales
// are read with it in these tests.
func f16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, mant := int(h>>10)&0x1f, float64(h&0x3ff)
	switch {
	case exp == 0x1f && mant != 0:
		return math.NaN()
	case exp == 0x1f:
		return math.Inf(int(sign))
	case exp == 0:
		return sign * math.Ldexp(mant/1024, -14)
	}
	return sign * math.Ldexp(1+mant/1024, exp-15)
}

// ggufQ8_0 and ggufQ4_0 decode block bytes with GGUF's formulas, written out from the block definitions:
// Q8_0 y = d·qs[i]; Q4_0 y[j] = d·((qs[j]&15)-8), y[j+16] = d·((qs[j]>>4)-8).
func ggufQ8_0(b []byte) []float64 {
	var out []float64
	for ; len(b) >= 34; b = b[34:] {
		d := f16Value(uint16(b[0]) | uint16(b[1])<<8)
		for i := range 32 {
			out = append(out, d*float64(int8(b[2+i])))
		}
	}
	return out
}

func ggufQ4_0(b []byte) []float64 {
	var out []float64
	for ; len(b) >= 18; b = b[18:] {
		d := f16Value(uint16(b[0]) | uint16(b[1])<<8)
		lo, hi := make([]float64, 16), make([]float64, 16)
		for j := range 16 {
			lo[j] = d * float64(int(b[2+j]&15)-8)
			hi[j] = d * float64(int(b[2+j]>>4)-8)
		}
		out = append(append(out, lo...), hi...)
	}
	return out
}

// goldenInputs are the fixed inputs of the golden files, 8 blocks: smooth values, a block of zeros, a block whose
// largest magnitude is negative, one with a positive maximum and its exact negation (Q4_0's first-wins tie),
// exact Q8_0 rounding ties (x·(1/d) = n + 0.5 when d = 1), tiny subnormal-scale values, and large values.
func goldenInputs() []float32 {
	x := make([]float32, 8*32)
	for i := range 32 {
		x[i] = float32(math.Sin(float64(i) * 0.37))
		x[64+i] = float32(i%7) - 3
		x[96+i] = float32(i) / 8
		x[128+i] = float32(i) - 15.5
		x[160+i] = float32(math.Ldexp(float64(i%5)-2, -20))
		x[192+i] = float32(1000 * math.Cos(float64(i)))
		x[224+i] = float32(i*i%11) - 5
	}
	x[64+5] = -9 // block 2: the largest magnitude is negative
	x[96+3] = -x[96+31]
	x[128] = 127 // block 4: d = 1, the others are exact halves
	return x
}

func TestGolden(t *testing.T) {
	x := goldenInputs()
	for _, tc := range []struct {
		name       string
		blockBytes int
		quantize   func([]byte, []float32)
		decode     func([]byte) ([]float32, error)
		gguf       func([]byte) []float64
		repack     func([]byte, int, int) (*Matrix, error)
	}{
		{"q8_0.bin", Q8_0BlockBytes, QuantizeQ8_0, DecodeQ8_0, ggufQ8_0, RepackQ8_0},
		{"q4_0.bin", Q4_0BlockBytes, QuantizeQ4_0, DecodeQ4_0, ggufQ4_0, RepackQ4_0},
	} {
		got := make([]byte, len(x)/32*tc.blockBytes)
		tc.quantize(got, x)
		path := filepath.Join(goldenDir, tc.name)
		if *update {
			if err := os.MkdirAll(goldenDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./quant -run TestGolden -update to write it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: quantized bytes differ from the golden file", tc.name)
		}
		dec, err := tc.decode(want)
		if err != nil {
			t.Fatal(err)
		}
		ref := tc.gguf(want)
		for i := range ref {
			if float64(dec[i]) != ref[i] {
				t.Fatalf("%s: value %d decodes to %v, GGUF formula gives %v", tc.name, i, dec[i], ref[i])
			}
		}
		// The golden blocks repacked into the engine's layout (one row) hold the same values and give the same
		// bytes back.
		m, err := tc.repack(want, 1, len(x))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range m.Dequantize() {
			if float64(v) != ref[i] {
				t.Fatalf("%s repacked: value %d is %v, GGUF formula gives %v", tc.name, i, v, ref[i])
			}
		}
		if back, err := m.Blocks(); err != nil || !bytes.Equal(back, want) {
			t.Errorf("%s repacked: Blocks differs from the golden file (%v)", tc.name, err)
		}
	}
}

// TestQ8_0Block checks one block by hand: max|x| = 127 gives d = 1 (binary16 0x3c00) and q = round(x), halves
// away from zero.
func TestQ8_0Block(t *testing.T) {
	x := make([]float32, 32)
	want := []byte{0x00, 0x3c}
	for i := range x {
		x[i] = float32(i) - 15.5
		q := i - 15
		if i < 16 {
			q = i - 16
		}
		want = append(want, byte(int8(q)))
	}
	x[0], want[2] = -127, byte(0x81)
	got := make([]byte, 34)
	QuantizeQ8_0(got, x)
	if !bytes.Equal(got, want) {
		t.Errorf("Q8_0 block\n got % x\nwant % x", got, want)
	}
}

// TestQ4_0Block checks one block by hand: the largest magnitude is -8, so d = -8/-8 = 1 (0x3c00) and
// q = min(15, trunc(x + 8.5)); element j goes in the low nibble of byte j, element j+16 in the high nibble.
func TestQ4_0Block(t *testing.T) {
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(i%16) - 7.5 // -7.5 .. 7.5: trunc(x + 8.5) = i%16 + 1, or 16 -> 15
	}
	x[0] = -8
	want := []byte{0x00, 0x3c}
	for j := range 16 {
		lo := min(15, j+1)
		if j == 0 {
			lo = 0
		}
		want = append(want, byte(lo|min(15, j+1)<<4))
	}
	got := make([]byte, 18)
	QuantizeQ4_0(got, x)
	if !bytes.Equal(got, want) {
		t.Errorf("Q4_0 block\n got % x\nwant % x", got, want)
	}
	// With +8 as the largest magnitude d = -1: the sign flips and +8 itself maps to q = 0.
	x[0] = 8
	QuantizeQ4_0(got, x)
	if got[0] != 0x00 || got[1] != 0xbc || got[2]&0xf != 0 {
		t.Errorf("Q4_0 block with max +8: % x, want d = 0xbc00 and q[0] = 0", got[:3])
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, n := range []int{1, 33, 35, 17, 19} {
		if _, err := DecodeQ8_0(make([]byte, n)); err == nil && n%34 != 0 {
			t.Errorf("DecodeQ8_0(%d bytes) accepted", n)
		}
		if _, err := DecodeQ4_0(make([]byte, n)); err == nil && n%18 != 0 {
			t.Errorf("DecodeQ4_0(%d bytes) accepted", n)
		}
	}
}

// fuzzDecode checks a decoder of external bytes: whole blocks decode to GGUF's formula values (NaN where those
// are NaN), anything else is an error.
func fuzzDecode(f *testing.F, blockBytes int, decode func([]byte) ([]float32, error), gguf func([]byte) []float64) {
	x := goldenInputs()
	q := make([]byte, len(x)/32*blockBytes)
	if blockBytes == Q8_0BlockBytes {
		QuantizeQ8_0(q, x)
	} else {
		QuantizeQ4_0(q, x)
	}
	f.Add(q)
	f.Add(q[:blockBytes])
	f.Add(q[:blockBytes+1])
	f.Add(q[:blockBytes-1])
	f.Add([]byte{})
	f.Add(append([]byte{0x00, 0x7c}, q[2:blockBytes]...)) // d = +Inf
	f.Add(append([]byte{0x01, 0x7c}, q[2:blockBytes]...)) // d = NaN
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := decode(b)
		if len(b)%blockBytes != 0 {
			if err == nil {
				t.Fatalf("%d bytes decoded without error", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ref := gguf(b)
		if len(out) != len(ref) {
			t.Fatalf("%d values, want %d", len(out), len(ref))
		}
		for i := range ref {
			if float64(out[i]) != ref[i] && !(math.IsNaN(ref[i]) && math.IsNaN(float64(out[i]))) {
				t.Fatalf("value %d = %v, want %v", i, out[i], ref[i])
			}
		}
	})
}

func FuzzDecodeQ8_0(f *testing.F) { fuzzDecode(f, Q8_0BlockBytes, DecodeQ8_0, ggufQ8_0) }
func FuzzDecodeQ4_0(f *testing.F) { fuzzDecode(f, Q4_0BlockBytes, DecodeQ4_0, ggufQ4_0) }

// fuzzRepack checks that any whole rows of GGUF blocks repack to a matrix whose values are the GGUF formula's,
// bit for bit (NaN for NaN), that takes the blocks' bytes and gives them back, and that sizes which are not whole
// rows of blocks are an error.
func fuzzRepack(f *testing.F, format Format, blockBytes int, repack func([]byte, int, int) (*Matrix, error), gguf func([]byte) []float64) {
	x := goldenInputs()
	q := make([]byte, len(x)/32*blockBytes)
	if format == Q8_0 {
		QuantizeQ8_0(q, x)
	} else {
		QuantizeQ4_0(q, x)
	}
	f.Add(q, 2)
	f.Add(q[:blockBytes], 1)
	f.Add(q[:blockBytes+1], 1)
	f.Add(q, 0)
	f.Add(q, 3)
	f.Add(append([]byte{0x01, 0x7c}, q[2:blockBytes]...), 1) // d = NaN
	f.Fuzz(func(t *testing.T, b []byte, rows int) {
		if rows <= 0 || len(b) == 0 || len(b)%(rows*blockBytes) != 0 {
			if _, err := repack(b, rows, 32); err == nil {
				t.Fatalf("%d bytes as %d rows of one block repacked without error", len(b), rows)
			}
			return
		}
		cols := len(b) / (rows * blockBytes) * 32
		m, err := repack(b, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		if m.Bytes() != len(b) {
			t.Fatalf("repacked matrix takes %d bytes, the blocks %d", m.Bytes(), len(b))
		}
		back, err := m.Blocks()
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("Blocks gives other bytes than the repacked ones (%v)", err)
		}
		ref, got := gguf(b), m.Dequantize()
		for i := range ref {
			if float64(got[i]) != ref[i] && !(math.IsNaN(ref[i]) && math.IsNaN(float64(got[i]))) {
				t.Fatalf("value %d = %v, want %v", i, got[i], ref[i])
			}
		}
		row := make([]float32, cols)
		m.DequantizeRow(rows-1, row)
		if !bytes.Equal(f32Bytes(row), f32Bytes(got[(rows-1)*cols:])) {
			t.Fatal("DequantizeRow differs from Dequantize's last row")
		}
	})
}

func f32Bytes(x []float32) []byte {
	var b bytes.Buffer
	for _, v := range x {
		u := math.Float32bits(v)
		b.Write([]byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)})
	}
	return b.Bytes()
}

func FuzzRepackQ8_0(f *testing.F) { fuzzRepack(f, Q8_0, Q8_0BlockBytes, RepackQ8_0, ggufQ8_0) }
func FuzzRepackQ4_0(f *testing.F) { fuzzRepack(f, Q4_0, Q4_0BlockBytes, RepackQ4_0, ggufQ4_0) }

func TestRepackErrors(t *testing.T) {
	for _, tc := range []struct {
		n, rows, cols int
		want          string
	}{
		{34, 1, 48, "k=48, want a multiple of 32"},
		{68, 1, 32, "68 bytes for [1, 32], want 34"},
		{34, 0, 32, "want positive sizes"},
	} {
		if _, err := RepackQ8_0(make([]byte, tc.n), tc.rows, tc.cols); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RepackQ8_0(%d bytes, %d, %d): %v, want an error containing %q", tc.n, tc.rows, tc.cols, err, tc.want)
		}
	}
	if _, err := RepackQ4_0(make([]byte, 17), 1, 32); err == nil || !strings.Contains(err.Error(), "17 bytes for [1, 32], want 18") {
		t.Errorf("RepackQ4_0(17 bytes): %v", err)
	}
	if _, err := (&Matrix{Format: Int8}).Blocks(); err == nil {
		t.Error("Blocks of an int8 matrix: no error")
	}
}
