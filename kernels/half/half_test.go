package half

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// impl is one set of bulk conversions; impls() (per build) lists those this CPU can run.
type impl struct {
	name      string
	f16ToF32  func([]float32, []uint16)
	f32ToF16  func([]uint16, []float32)
	bf16ToF32 func([]float32, []uint16)
	f32ToBF16 func([]uint16, []float32)
}

// f16Value is the float64 value of binary16 bits h by the definition of the format (NaN for any NaN).
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

// roundRef rounds x to the nearest value of a binary format with p significand bits (implicit bit included),
// minimum normal exponent emin and largest finite value maxFinite, ties to even, in float64 arithmetic: x is
// split into a multiple of its ulp, rounded with math.RoundToEven, and overflows to ±Inf when the rounded value
// passes maxFinite.
func roundRef(x float64, p, emin int, maxFinite float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	_, e := math.Frexp(x) // |x| in [2^(e-1), 2^e)
	e--
	ulp := math.Ldexp(1, max(e, emin)-(p-1))
	r := math.RoundToEven(x/ulp) * ulp
	if math.Abs(r) > maxFinite {
		return math.Inf(int(math.Copysign(1, x)))
	}
	if r == 0 {
		return math.Copysign(0, x)
	}
	return r
}

func f16Ref(f float32) float64  { return roundRef(float64(f), 11, -14, 65504) }
func bf16Ref(f float32) float64 { return roundRef(float64(f), 8, -126, math.Ldexp(2-1.0/128, 127)) }

// sameValue reports whether got equals want including the sign of zero, treating all NaNs as equal.
func sameValue(got, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return got == want && math.Signbit(got) == math.Signbit(want)
}

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToF32(h)
		if want := f16Value(h); !sameValue(float64(f), want) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, f, want)
		}
		// Round trip: exact, except that a signaling NaN comes back with its quiet bit set.
		want := h
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			want |= 0x200
		}
		if got := F32ToF16(f); got != want {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x, want %#04x", h, got, want)
		}
	}
}

// f32Edges are float32 inputs at the boundaries of binary16 and bfloat16: around the largest finite values, the
// overflow thresholds, the smallest normals and subnormals, exact ties and their neighbours.
func f32Edges() []float32 {
	var out []float32
	add := func(f float32) {
		b := math.Float32bits(f)
		out = append(out, f, -f, math.Float32frombits(b+1), math.Float32frombits(b-1))
	}
	for _, v := range []float64{0, 1, 65504, 65519.99, 65520, 65536, 1e10, math.Ldexp(1, -14), math.Ldexp(1, -24),
		math.Ldexp(1, -25), math.Ldexp(3, -26), math.Ldexp(1, -26), math.Ldexp(1023, -24), math.Ldexp(2047, -25),
		math.Ldexp(1, -126), math.Ldexp(1, -149), math.MaxFloat32, math.Ldexp(2-1.0/128, 127), 1.0 / 3, -2.5} {
		add(float32(v))
	}
	// Every tie between two neighbouring binary16 values (exact in float32: 12 significant bits).
	for i := range 0x7bff {
		lo, hi := f16Value(uint16(i)), f16Value(uint16(i+1))
		add(float32((lo + hi) / 2))
	}
	out = append(out, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffa00000), math.Float32frombits(0x7fffffff))
	return out
}

// randomF32 returns n float32 values: half with uniformly random bits (every class, all exponents), half spread
// over the binary16 range, where rounding matters most.
func randomF32(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		if i%2 == 0 {
			out[i] = math.Float32frombits(rng.Uint32())
		} else {
			out[i] = float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(44)-26))
		}
	}
	return out
}

func checkF32ToF16(t *testing.T, f float32) {
	t.Helper()
	h := F32ToF16(f)
	if !sameValue(f16Value(h), f16Ref(f)) {
		t.Fatalf("F32ToF16(%v = %#08x) = %#04x (%v), want %v", f, math.Float32bits(f), h, f16Value(h), f16Ref(f))
	}
	if math.IsNaN(float64(f)) {
		b := math.Float32bits(f)
		if want := uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff; h != want {
			t.Fatalf("F32ToF16(NaN %#08x) = %#04x, want quiet NaN %#04x", b, h, want)
		}
	}
}

func TestF32ToF16(t *testing.T) {
	for _, f := range f32Edges() {
		checkF32ToF16(t, f)
	}
	for _, f := range randomF32(1<<20, 1) {
		checkF32ToF16(t, f)
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		want := h
		if f != f {
			want |= 0x40
		}
		if got := F32ToBF16(f); got != want {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x, want %#04x", h, got, want)
		}
	}
}

func TestF32ToBF16(t *testing.T) {
	fs := append(f32Edges(), randomF32(1<<20, 2)...)
	for i := range 0x7f7f { // every tie between neighbouring bfloat16 values
		fs = append(fs, math.Float32frombits(uint32(i)<<16|0x8000))
	}
	for _, f := range fs {
		h := F32ToBF16(f)
		if got, want := float64(BF16ToF32(h)), bf16Ref(f); !sameValue(got, want) {
			t.Fatalf("F32ToBF16(%v = %#08x) = %#04x (%v), want %v", f, math.Float32bits(f), h, got, want)
		}
	}
}

// TestBulk checks every implementation this CPU runs against the scalar functions bit for bit, at lengths around
// the assembly block sizes so that both the blocks and the scalar tails are exercised.
func TestBulk(t *testing.T) {
	all16 := make([]uint16, 1<<16)
	for i := range all16 {
		all16[i] = uint16(i)
	}
	f32s := append(f32Edges(), randomF32(1<<16, 3)...)
	for _, im := range impls() {
		for _, n := range []int{0, 1, 7, 31, 32, 33, 63, 64, 65, 127, 1000, len(all16)} {
			src16 := all16[len(all16)-n:]
			got32 := make([]float32, n)
			im.f16ToF32(got32, src16)
			for i, h := range src16 {
				if math.Float32bits(got32[i]) != math.Float32bits(F16ToF32(h)) {
					t.Fatalf("%s f16ToF32 n=%d: [%d] %#04x -> %#08x, want %#08x", im.name, n, i, h,
						math.Float32bits(got32[i]), math.Float32bits(F16ToF32(h)))
				}
			}
			im.bf16ToF32(got32, src16)
			for i, h := range src16 {
				if math.Float32bits(got32[i]) != math.Float32bits(BF16ToF32(h)) {
					t.Fatalf("%s bf16ToF32 n=%d: [%d] %#04x -> %#08x", im.name, n, i, h, math.Float32bits(got32[i]))
				}
			}
			src32 := f32s[len(f32s)-n:]
			got16 := make([]uint16, n)
			im.f32ToF16(got16, src32)
			for i, f := range src32 {
				if got16[i] != F32ToF16(f) {
					t.Fatalf("%s f32ToF16 n=%d: [%d] %#08x -> %#04x, want %#04x", im.name, n, i,
						math.Float32bits(f), got16[i], F32ToF16(f))
				}
			}
			im.f32ToBF16(got16, src32)
			for i, f := range src32 {
				if got16[i] != F32ToBF16(f) {
					t.Fatalf("%s f32ToBF16 n=%d: [%d] %#08x -> %#04x, want %#04x", im.name, n, i,
						math.Float32bits(f), got16[i], F32ToBF16(f))
				}
			}
		}
	}
}

func TestSliceLengthPanics(t *testing.T) {
	defer func() {
		want := "kernels: F16ToF32Slice: len(dst)=3, want len(src)=4"
		if r := recover(); r != want {
			t.Fatalf("panic %v, want %q", r, want)
		}
	}()
	F16ToF32Slice(make([]float32, 3), make([]uint16, 4))
}

var benchSizes = []int{4096, 1 << 20, 16 << 20}

// benchWiden and benchNarrow time a conversion over each of benchSizes, reporting bytes read plus written
// per second (6 per element).
func benchWiden(b *testing.B, convert func([]float32, []uint16)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			src, dst := make([]uint16, n), make([]float32, n)
			b.SetBytes(int64(6 * n))
			for b.Loop() {
				convert(dst, src)
			}
		})
	}
}

func benchNarrow(b *testing.B, convert func([]uint16, []float32)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			src, dst := make([]float32, n), make([]uint16, n)
			b.SetBytes(int64(6 * n))
			for b.Loop() {
				convert(dst, src)
			}
		})
	}
}

func BenchmarkF16ToF32(b *testing.B)  { benchWiden(b, F16ToF32Slice) }
func BenchmarkF32ToF16(b *testing.B)  { benchNarrow(b, F32ToF16Slice) }
func BenchmarkBF16ToF32(b *testing.B) { benchWiden(b, BF16ToF32Slice) }
func BenchmarkF32ToBF16(b *testing.B) { benchNarrow(b, F32ToBF16Slice) }

// BenchmarkCopy is the bandwidth yardstick for the conversions: copy() of n float32, 8 bytes read+written each.
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			src, dst := make([]float32, n), make([]float32, n)
			b.SetBytes(int64(8 * n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
