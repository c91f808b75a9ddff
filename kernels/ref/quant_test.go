package ref

import (
	"bytes"
	"strings"
	"testing"
)

// Small cases worked by hand: they pin the layouts, which the conformance suite then takes as given.

func TestGEMMW8A16Small(t *testing.T) {
	// W = [[1,-2],[3,4]] with row scales 0.5 and 2; x = [10, 1].
	c := make([]float64, 2)
	GEMMW8A16(1, 2, 2, []float64{10, 1}, []int8{1, -2, 3, 4}, []float64{0.5, 2}, c)
	if c[0] != 4 || c[1] != 68 {
		t.Fatalf("got %v, want [4 68]", c)
	}
}

func TestGEMMW8A8Small(t *testing.T) {
	qa := []int8{127, -128, 5, 0}
	qw := []int8{-128, -128, 1, 2}
	ci := make([]int32, 4)
	GEMMInt8(2, 2, 2, qa, qw, ci)
	want := []int32{127*-128 + -128*-128, 127 - 256, 5 * -128, 5}
	for i := range want {
		if ci[i] != want[i] {
			t.Fatalf("GEMMInt8 = %v, want %v", ci, want)
		}
	}
	c := make([]float64, 4)
	GEMMW8A8(2, 2, 2, qa, []float64{1, 0.5}, qw, []float64{2, 0.25}, c)
	if c[0] != 2*float64(want[0]) || c[3] != 0.125*5 {
		t.Fatalf("GEMMW8A8 = %v", c)
	}
}

func TestGEMMInt8Overflow(t *testing.T) {
	k := 133200 // 128·128·k > 2^31
	a, w := make([]int8, k), make([]int8, k)
	for i := range a {
		a[i], w[i] = -128, -128
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "overflow") {
			t.Fatalf("recovered %v, want an overflow panic", r)
		}
	}()
	GEMMInt8(1, 1, k, a, w, make([]int32, 1))
}

func TestQuantizeRowsInt8Small(t *testing.T) {
	x := []float64{-2.54, 1.27, 0.01, 0.015, 0, 0}
	q := make([]int8, 6)
	s := make([]float64, 2)
	QuantizeRowsInt8(2, 3, x, q, s)
	if s[0] != 2.54/127 || s[1] != 0.015/127 {
		t.Fatalf("scales %v", s)
	}
	// 1.27/0.02 = 63.5 rounds away from zero to 64; 0.01/0.02 = 0.5 to 1 (up to float64 rounding of the inputs).
	want := []int8{-127, 64, 1, 127, 0, 0}
	for i := range want {
		if q[i] != want[i] {
			t.Fatalf("q = %v, want %v", q, want)
		}
	}
}

func TestGEMMW4A16Small(t *testing.T) {
	// One row, k = 4, group 2: elements 1, 15 | 0, 9 packed low nibble first; zero points 1 and 8.
	w := []uint8{0xf1, 0x90}
	c := make([]float64, 1)
	GEMMW4A16(1, 1, 4, 2, []float64{1, 2, 3, 4}, w, []float64{0.5, 2}, []uint8{1, 8}, c)
	want := 1*(1-1)*0.5 + 2*(15-1)*0.5 + 3*(0-8)*2.0 + 4*(9-8)*2.0
	if c[0] != want {
		t.Fatalf("got %v, want %v", c[0], want)
	}
}

func TestGEMMW4A8Small(t *testing.T) {
	// The row of TestGEMMW4A16Small against int8 activations 1, 2, -3, 4 with scale 0.25.
	w := []uint8{0xf1, 0x90}
	c := make([]float64, 1)
	GEMMW4A8(1, 1, 4, 2, []int8{1, 2, -3, 4}, []float64{0.25}, w, []float64{0.5, 2}, []uint8{1, 8}, c)
	want := 0.25 * (0.5*float64(1*(1-1)+2*(15-1)) + 2*float64(-3*(0-8)+4*(9-8)))
	if c[0] != want {
		t.Fatalf("got %v, want %v", c[0], want)
	}
}

func TestQ8_0Layout(t *testing.T) {
	x := make([]float64, 32)
	for i := range x {
		x[i] = float64(i - 16)
	}
	out := make([]byte, Q8_0Bytes)
	QuantizeRowQ8_0(x, out)
	// d = 16/127, stored as binary16 0x3008 (0.12597656); q = round(x·127/16).
	if !bytes.Equal(out[:4], []byte{0x08, 0x30, 0x81, 0x89}) { // -127, -119
		t.Fatalf("block starts % x", out[:4])
	}
	if got := DotQ8_0(32, out, out); got < 0.99*sumSquares(x) || got > 1.01*sumSquares(x) {
		t.Fatalf("DotQ8_0(x, x) = %v, want about %v", got, sumSquares(x))
	}
}

func TestQ4_0Layout(t *testing.T) {
	// d = 1 (binary16 0x3c00); byte j = element j (low) | element j+16 (high) with q = 8 + j%8 and 8 - j%8.
	w := []byte{0x00, 0x3c}
	x := []byte{0x00, 0x3c}
	var want float64
	for j := 0; j < 16; j++ {
		lo, hi := 8+j%8, 8-j%8
		w = append(w, byte(lo|hi<<4))
		want += float64(lo-8)*float64(j) + float64(hi-8)*float64(j+16)
	}
	for i := 0; i < 32; i++ {
		x = append(x, byte(i))
	}
	if got := DotQ4_0Q8_0(32, w, x); got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func sumSquares(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return s
}
