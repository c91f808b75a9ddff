package quant

import (
	"math"
	"testing"
)

func TestSizes(t *testing.T) {
	const n, k = 8, 256
	w := gaussian(n*k, 1)
	for _, tc := range []struct {
		f     Format
		bytes int
		bpw   float64
	}{
		{F32, 4 * n * k, 32},
		{F16, 2 * n * k, 16},
		{BF16, 2 * n * k, 16},
		{Int8, n*k + 4*n, 8 + 32.0/k},
		{Q8_0, n * k / 32 * 34, 8.5},
		{Q4_0, n * k / 32 * 18, 4.5},
		{Int4, n*k/2 + 5*n*k/128, 4 + 40.0/128},
	} {
		m, err := Quantize(tc.f, w, n, k, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Bytes() != tc.bytes || m.BitsPerWeight() != tc.bpw {
			t.Errorf("%v: %d bytes, %v bpw; want %d, %v", tc.f, m.Bytes(), m.BitsPerWeight(), tc.bytes, tc.bpw)
		}
		if got, err := ParseFormat(tc.f.String()); err != nil || got != tc.f {
			t.Errorf("ParseFormat(%q) = %v, %v", tc.f.String(), got, err)
		}
	}
	m, _ := Quantize(Int4, w, n, k, &Options{Group: 32})
	if want := 4 + 40.0/32; m.BitsPerWeight() != want {
		t.Errorf("int4 group 32: %v bpw, want %v", m.BitsPerWeight(), want)
	}
}

// TestRoundTrip quantizes N(0, 1) weights [64, 512] in every format and bounds the round-trip error two ways: the
// SQNR of the whole matrix (bounds a little under what each format reaches: about 6 dB per bit of precision), and
// each element against its own quantization step.
func TestRoundTrip(t *testing.T) {
	const n, k = 64, 512
	w := gaussian(n*k, 2)
	for _, tc := range []struct {
		f       Format
		minSQNR float64
	}{
		{F32, math.Inf(1)}, {F16, 72}, {BF16, 54}, {Int8, 41}, {Q8_0, 44}, {Q4_0, 20.5}, {Int4, 19},
	} {
		m, err := Quantize(tc.f, w, n, k, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := m.Dequantize()
		sqnr := SQNR(w, d)
		if sqnr < tc.minSQNR {
			t.Errorf("%v: SQNR %.2f dB, want >= %v", tc.f, sqnr, tc.minSQNR)
		}
		t.Logf("%-5v RMSE %.3g  SQNR %6.2f dB  cos %.6f  max %.3g  (%.4g bpw)", tc.f, RMSE(w, d), sqnr,
			Cosine(w, d), MaxAbsErr(w, d), m.BitsPerWeight())
		for i, v := range w {
			if e := math.Abs(float64(v - d[i])); e > stepBound(m, i, v) {
				t.Fatalf("%v: element %d: %v -> %v, error %g over bound %g", tc.f, i, v, d[i], e, stepBound(m, i, v))
			}
		}
	}
}

// stepBound is the largest round-trip error allowed for element i (value v) of m: half a step of its format,
// with the scale's own binary16 rounding for GGUF blocks, and a whole step for Q4_0, whose grid reaches only +7d
// on the side opposite the block maximum (+8d rounds down to 7d).
func stepBound(m *Matrix, i int, v float32) float64 {
	const slack = 1 + 1e-6
	a := math.Abs(float64(v))
	switch m.Format {
	case F32:
		return 0
	case F16:
		return math.Max(a*math.Ldexp(1, -11), math.Ldexp(1, -25))
	case BF16:
		return a * math.Ldexp(1, -8)
	case Int8:
		return float64(m.Scales[i/m.Cols]) / 2 * slack
	case Int4:
		g := (i/m.Cols)*(m.Cols/m.Group) + i%m.Cols/m.Group
		return float64(m.Scales[g]) / 2 * slack
	case Q8_0:
		return blockD(m, i)/2*slack + a*math.Ldexp(1, -10)
	case Q4_0:
		return blockD(m, i)*slack + a*math.Ldexp(1, -10)
	}
	panic("unknown format")
}

// blockD is |d| of the GGUF block holding element i.
func blockD(m *Matrix, i int) float64 {
	return math.Abs(f16Value(m.BlockScales[i/BlockSize]))
}

func TestQuantizeErrors(t *testing.T) {
	w := make([]float32, 4*96)
	for _, tc := range []struct {
		f    Format
		n, k int
		opts *Options
	}{
		{Q8_0, 4, 96 - 1, nil}, // len(w) != n*k
		{Q8_0, 8, 48, nil},     // k not a multiple of 32
		{Int4, 4, 96, nil},     // group 128 does not divide 96
		{Int4, 4, 96, &Options{Group: 3}},
		{F16, 0, 96, nil},
		{Format(99), 4, 96, nil},
	} {
		if _, err := Quantize(tc.f, w, tc.n, tc.k, tc.opts); err == nil {
			t.Errorf("Quantize(%v, n=%d, k=%d) accepted", tc.f, tc.n, tc.k)
		}
	}
	if _, err := Quantize(Int4, w, 4, 96, &Options{Group: 32}); err != nil {
		t.Errorf("Quantize(int4, group 32, k=96): %v", err)
	}
	if _, err := ParseFormat("q5_k"); err == nil {
		t.Error("ParseFormat(q5_k) accepted")
	}
}
