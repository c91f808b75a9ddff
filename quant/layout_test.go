package quant

import (
	"math"
	"testing"

	"github.com/morphlab/morphlab/kernels/ref"
)

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestLayoutsMatchRef feeds quantized matrices to kernels/ref's quantized kernels, which read the layouts on their
// own, and checks they compute the product of the dequantized weights: the two sides agree on every byte's meaning.
func TestLayoutsMatchRef(t *testing.T) {
	const m, n, k = 3, 8, 256
	w, a := gaussian(n*k, 4), gaussian(m*k, 5)
	af := f64s(a)
	check := func(name string, got []float64, mat *Matrix) {
		t.Helper()
		// Dequantize rounds each weight to float32 (relative 2^-24); the ref kernels do not.
		want, mag := make([]float64, m*n), make([]float64, m*n)
		deq := f64s(mat.Dequantize())
		ref.GEMM(m, n, k, af, deq, want)
		ref.GEMM(m, n, k, absAll(af), absAll(deq), mag)
		for i := range want {
			if math.Abs(got[i]-want[i]) > 0x1p-23*mag[i] {
				t.Fatalf("%s: c[%d] = %v from the ref kernel, %v from Dequantize", name, i, got[i], want[i])
			}
		}
	}

	i8, _ := Quantize(Int8, w, n, k, nil)
	c := make([]float64, m*n)
	ref.GEMMW8A16(m, n, k, af, i8.Q, f64s(i8.Scales), c)
	check("int8", c, i8)

	i4, _ := Quantize(Int4, w, n, k, &Options{Group: 64})
	ref.GEMMW4A16(m, n, k, 64, af, i4.Packed, f64s(i4.Scales), i4.Zeros, c)
	check("int4", c, i4)

	// GGUF: activations as Q8_0 blocks, so the float reference is the product of the decoded activations.
	xq := make([]byte, m*k/32*34)
	QuantizeQ8_0(xq, a)
	af = f64s(must(DecodeQ8_0(xq)))
	for _, f := range []Format{Q8_0, Q4_0} {
		q, _ := Quantize(f, w, n, k, nil)
		blocks := must(q.Blocks())
		row := len(blocks) / n
		for i := range m {
			for j := range n {
				x := xq[i*k/32*34 : (i+1)*k/32*34]
				if f == Q8_0 {
					c[i*n+j] = ref.DotQ8_0(k, blocks[j*row:(j+1)*row], x)
				} else {
					c[i*n+j] = ref.DotQ4_0Q8_0(k, blocks[j*row:(j+1)*row], x)
				}
			}
		}
		check(f.String(), c, q)
	}
	// The repacked layout: the kernels of per-token int8 activations read Q and BlockScales (Q8_0), Packed and
	// BlockScales (Q4_0) as the values Dequantize gives, against the decoded activations.
	qa, sa := make([]int8, m*k), make([]float64, m)
	ref.QuantizeRowsInt8(m, k, f64s(a), qa, sa)
	for i := range af {
		af[i] = float64(qa[i]) * sa[i/k]
	}
	q8, _ := Quantize(Q8_0, w, n, k, nil)
	ref.GEMMQ8_0A8(m, n, k, qa, sa, q8.Q, q8.BlockScales, c)
	check("q8_0 repacked", c, q8)
	q4, _ := Quantize(Q4_0, w, n, k, nil)
	ref.GEMMQ4_0A8(m, n, k, qa, sa, q4.Packed, q4.BlockScales, c)
	check("q4_0 repacked", c, q4)
}

// TestInt8MatchesRef: QuantizeRowsInt8 gives exactly kernels/ref's int8 codes and scales.
func TestInt8MatchesRef(t *testing.T) {
	const m, k = 16, 100
	x := gaussian(m*k, 6)
	q, s := make([]int8, m*k), make([]float32, m)
	QuantizeRowsInt8(x, m, k, q, s)
	rq, rs := make([]int8, m*k), make([]float64, m)
	ref.QuantizeRowsInt8(m, k, f64s(x), rq, rs)
	for i := range q {
		if q[i] != rq[i] {
			t.Fatalf("q[%d] = %d, ref %d", i, q[i], rq[i])
		}
	}
	for i := range s {
		if s[i] != float32(rs[i]) {
			t.Fatalf("s[%d] = %v, ref %v", i, s[i], rs[i])
		}
	}
}

func absAll(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Abs(v)
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
