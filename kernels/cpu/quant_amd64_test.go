//go:build !noasm

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// qWithoutAsm runs f with the quantized assembly switched off.
func qWithoutAsm(f func()) {
	vnni, avx, avx2 := qVNNI, qAVX512, qAVX2
	qVNNI, qAVX512, qAVX2 = false, false, false
	defer func() { qVNNI, qAVX512, qAVX2 = vnni, avx, avx2 }()
	f()
}

// TestQuantGo runs the conformance suite on the pure-Go paths of this build.
func TestQuantGo(t *testing.T) { qWithoutAsm(func() { testQuant(t) }) }

// TestQuantAVX2 runs the conformance suite with AVX-512 switched off, on the AVX2 kernels that a machine without
// it takes.
func TestQuantAVX2(t *testing.T) {
	if !qAVX2 {
		t.Skip("no AVX2 and FMA")
	}
	vnni, avx := qVNNI, qAVX512
	qVNNI, qAVX512 = false, false
	defer func() { qVNNI, qAVX512 = vnni, avx }()
	testQuant(t)
}

// TestQuantAsmMatchesGo compares the assembly with the pure-Go loops on the same inputs: integer results
// exactly, float results within 2^-20·Σ|terms| (both are sums of the same float32 products in different orders;
// the worst-case bound of either against the exact sum is k·2^-24·Σ|terms|, 256 times more at k = 4096).
func TestQuantAsmMatchesGo(t *testing.T) {
	if !qVNNI || !qAVX512 {
		t.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(7, 7))
	const n, k = 67, 4096
	x := make([]float32, 5*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w8 := make([]int8, n*k)
	for i := range w8 {
		w8[i] = int8(r.IntN(256) - 128)
	}
	w4 := make([]uint8, n*k/2)
	for i := range w4 {
		w4[i] = uint8(r.IntN(256))
	}
	ones := make([]float32, n*k)
	for i := range ones {
		ones[i] = 1
	}
	z := make([]uint8, n*k/64)
	for i := range z {
		z[i] = uint8(r.IntN(16))
	}
	both := func(f func(c []float32), m int) (fast, slow []float32) {
		fast, slow = make([]float32, m*n), make([]float32, m*n)
		f(fast)
		qWithoutAsm(func() { f(slow) })
		return fast, slow
	}
	absX := make([]float64, 5)
	for i := range absX {
		for _, v := range x[i*k : (i+1)*k] {
			absX[i] += math.Abs(float64(v))
		}
	}
	check := func(name string, fast, slow []float32, m int, maxW float64) {
		for i, v := range fast {
			if bound := absX[i/n] * maxW / (1 << 20); !(math.Abs(float64(v-slow[i])) <= bound) {
				t.Fatalf("%s: [%d] asm %v, Go %v, want within %.3g", name, i, v, slow[i], bound)
			}
		}
	}
	for _, m := range []int{1, 5} {
		fast, slow := both(func(c []float32) { GEMMW8A16(m, n, k, x[:m*k], w8, ones[:n], c) }, m)
		check("GEMMW8A16", fast, slow, m, 128)
		for _, g := range []int{64, 128} {
			fast, slow = both(func(c []float32) { GEMMW4A16(m, n, k, g, x[:m*k], w4, ones[:n*k/g], z[:n*k/g], c) }, m)
			check("GEMMW4A16", fast, slow, m, 15)
		}
	}
	// GGUF rows: scale 1/64 on both sides; the largest |d_w·d_x·q_w·q_x| is 2^-12·128·128 = 4.
	for _, bs := range []int{qQ8_0Size, qQ4_0Size} {
		wq := make([]byte, n*k/qBlock*bs)
		xq := make([]byte, k/qBlock*qQ8_0Size)
		for i := range wq {
			wq[i] = byte(r.IntN(256))
		}
		for i := range xq {
			xq[i] = byte(r.IntN(256))
		}
		for _, blocks := range [][]byte{wq, xq} {
			size := bs
			if len(blocks) == len(xq) {
				size = qQ8_0Size
			}
			for i := 0; i < len(blocks); i += size {
				blocks[i], blocks[i+1] = 0x00, 0x24 // binary16 2^-6
			}
		}
		gemv := GEMVQ8_0
		if bs == qQ4_0Size {
			gemv = GEMVQ4_0
		}
		fast, slow := make([]float32, n), make([]float32, n)
		gemv(n, k, wq, xq, fast)
		qWithoutAsm(func() { gemv(n, k, wq, xq, slow) })
		for i := range fast {
			if bound := 4.0 * k / (1 << 20); !(math.Abs(float64(fast[i]-slow[i])) <= bound) {
				t.Fatalf("GEMVQ block size %d: [%d] asm %v, Go %v, want within %.3g", bs, i, fast[i], slow[i], bound)
			}
		}
	}
	// Per-token quantization: codes and scales identical; with max|x| = 127 the halves are exact and must round
	// away from zero.
	for i := 0; i < 2*k; i++ {
		x[i] = float32(i%253-126) + 0.5*float32(i%2)
	}
	x[0], x[k] = 127, -127
	qf, qs := make([]int8, 2*k), make([]int8, 2*k)
	sf, ss := make([]float32, 2), make([]float32, 2)
	QuantizeRowsInt8(2, k, x[:2*k], qf, sf)
	qWithoutAsm(func() { QuantizeRowsInt8(2, k, x[:2*k], qs, ss) })
	for i := range qf {
		want := int8(math.Round(float64(x[i])))
		if qf[i] != qs[i] || qf[i] != want || sf[i/k] != ss[i/k] {
			t.Fatalf("QuantizeRowsInt8: [%d] x=%v asm %d (scale %v), Go %d (scale %v), want %d",
				i, x[i], qf[i], sf[i/k], qs[i], ss[i/k], want)
		}
	}
	a8 := w8[:5*k]
	fast, slow := make([]int32, 5*n), make([]int32, 5*n)
	GEMMInt8(5, n, k, a8, w8, fast)
	qWithoutAsm(func() { GEMMInt8(5, n, k, a8, w8, slow) })
	for i := range fast {
		if fast[i] != slow[i] {
			t.Fatalf("GEMMInt8: [%d] asm %d, Go %d", i, fast[i], slow[i])
		}
	}
}

// TestQFewInt8MatchesPacked checks that the few-token int8 GEMMs (tokens packed, W read in place: qFewInt8's
// int32 sums, qW8A8Tile's scaled float32) give bit for bit what the packed-W path and the GEMVs give, over partial
// tiles, partial and second token panels and extreme codes: the engine relies on a token's logits not depending
// on the batch size.
func TestQFewInt8MatchesPacked(t *testing.T) {
	if !qVNNI {
		t.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, s := range [][3]int{{1, 8, 4}, {32, 45, 512}, {33, 17, 100}, {48, 1025, 768}, {40, 3, 2048}, {12, 45, 512},
		{17, 7, 768}} {
		m, n, k := s[0], s[1], s[2]
		a, w := make([]int8, m*k), make([]int8, n*k)
		for i := range a {
			a[i] = int8(r.IntN(255) - 127)
		}
		for i := range w {
			w[i] = int8(r.IntN(256) - 128)
		}
		w[0], w[len(w)-1] = -128, 127
		sa, sw := make([]float32, m), make([]float32, n)
		for i := range sa {
			sa[i] = float32(r.Float64()) / 127
		}
		for j := range sw {
			sw[j] = float32(r.Float64()) / 127
		}
		fewI, packedI := make([]int32, m*n), make([]int32, m*n)
		fewF, packedF := make([]float32, m*n), make([]float32, m*n)
		qFewInt8(m, n, k, a, w, &qInt8Out{n: n, ci: fewI})
		qPackedInt8(m, n, k, a, w, &qInt8Out{n: n, ci: packedI})
		qW8A8Tile(m, k, a, sa, []W8A8Weights{{n, w, sw}}, [][]float32{fewF})
		qPackedInt8(m, n, k, a, w, &qInt8Out{n: n, cf: packedF, sa: sa, sw: sw})
		gemvF := make([]float32, m*n)
		qGEMVInt8(m, n, k, a, w, &qInt8Out{n: n, cf: gemvF, sa: sa, sw: sw})
		for i := range fewI {
			if fewI[i] != packedI[i] || math.Float32bits(fewF[i]) != math.Float32bits(packedF[i]) ||
				math.Float32bits(fewF[i]) != math.Float32bits(gemvF[i]) {
				t.Fatalf("m=%d n=%d k=%d: C[%d] = %d, %v few; %d, %v packed; %v GEMV", m, n, k, i, fewI[i], fewF[i],
					packedI[i], packedF[i], gemvF[i])
			}
		}
	}
}

// TestQW4A8TileBatchIndependent checks that in the W4A8 tile path a token's outputs do not depend on the other
// tokens of the call: token 37 of a 56-token call (second panel, partial) gives bit for bit what it gives as the
// first of a 12-token call, on a partial last tile of rows.
func TestQW4A8TileBatchIndependent(t *testing.T) {
	if !qVNNI {
		t.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(11, 11))
	const m, n, k, group, tok = 56, 29, 384, 128, 37
	qa, sa := make([]int8, m*k), make([]float32, m)
	for i := range qa {
		qa[i] = int8(r.IntN(255) - 127)
	}
	for i := range sa {
		sa[i] = float32(r.Float64()) / 127
	}
	gpr := k / group
	w, s, z := make([]uint8, n*k/2), make([]float32, n*gpr), make([]uint8, n*gpr)
	for i := range w {
		w[i] = uint8(r.IntN(256))
	}
	for i := range s {
		s[i], z[i] = float32(r.Float64())/15, uint8(r.IntN(16))
	}
	all := make([]float32, m*n)
	GEMMW4A8(m, n, k, group, qa, sa, w, s, z, all)
	const m2 = qW4TileMinM
	few := make([]float32, m2*n)
	GEMMW4A8(m2, n, k, group, qa[tok*k:(tok+m2)*k], sa[tok:tok+m2], w, s, z, few)
	for j := range n {
		if math.Float32bits(all[tok*n+j]) != math.Float32bits(few[j]) {
			t.Fatalf("c[%d]: %v in a call of %d tokens, %v in a call of %d", j, all[tok*n+j], m, few[j], m2)
		}
	}
}

// BenchmarkW8A8Few runs W8A8's two paths for a few tokens at stories110M's gate/up shape, the GEMVs and the tile,
// on which qW8TileMinM rests:
//
//	go test -run '^$' -bench W8A8Few -count 3 ./kernels/cpu
func BenchmarkW8A8Few(b *testing.B) {
	if !qVNNI {
		b.Skip("no AVX-512 VNNI")
	}
	const n, k = 4096, 768
	r := rand.New(rand.NewPCG(3, 3))
	w := make([]int8, n*k)
	for i := range w {
		w[i] = int8(r.IntN(255) - 127)
	}
	sw := make([]float32, n)
	for _, m := range []int{8, 16, 24, 32} {
		a := make([]int8, m*k)
		for i := range a {
			a[i] = int8(r.IntN(255) - 127)
		}
		out := &qInt8Out{n: n, cf: make([]float32, m*n), sa: make([]float32, m), sw: sw}
		for _, path := range []struct {
			name string
			run  func(m, n, k int, a, w []int8, out *qInt8Out)
		}{{"gemv", qGEMVInt8}, {"tile", func(m, n, k int, a, w []int8, out *qInt8Out) {
			qW8A8Tile(m, k, a, out.sa, []W8A8Weights{{n, w, out.sw}}, [][]float32{out.cf})
		}}} {
			b.Run(fmt.Sprintf("m=%d/path=%s", m, path.name), func(b *testing.B) {
				for b.Loop() {
					path.run(m, n, k, a, w, out)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
			})
		}
	}
}

// TestQU8ToF32 checks the zero points' widening for the W4A8 tile at every count up to 40 (whole vectors and
// masked tails), over all byte values, and that it writes nothing past n.
func TestQU8ToF32(t *testing.T) {
	if !qAVX512 {
		t.Skip("no AVX-512")
	}
	src := make([]uint8, 256)
	for i := range src {
		src[i] = uint8(255 - i)
	}
	for n := 1; n <= 40; n++ {
		for off := 0; off+n <= len(src); off += 37 {
			dst := make([]float32, n+1)
			dst[n] = -1
			qU8ToF32AVX512(&dst[0], &src[off], n)
			for i := range n {
				if dst[i] != float32(src[off+i]) {
					t.Fatalf("n=%d off=%d: dst[%d] = %v, want %d", n, off, i, dst[i], src[off+i])
				}
			}
			if dst[n] != -1 {
				t.Fatalf("n=%d off=%d: wrote dst[n] = %v", n, off, dst[n])
			}
		}
	}
}

func TestQDeinterleave(t *testing.T) {
	if !qVNNI {
		t.Skip("no AVX-512 BW")
	}
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{128, 256, 3 * 768} {
		src := make([]int8, n)
		for i := range src {
			src[i] = int8(r.IntN(256) - 128)
		}
		got, want := make([]int8, n+1), make([]int8, n)
		got[n] = 99
		qDeinterleaveAVX512(&got[0], &src[0], n)
		for c := 0; c < n; c += 128 {
			qDeinterleave(want[c:c+128], src[c:c+128])
		}
		if !slices.Equal(got[:n], want) {
			t.Fatalf("n=%d: qDeinterleaveAVX512 differs from qDeinterleave", n)
		}
		if got[n] != 99 {
			t.Fatalf("n=%d: wrote past n", n)
		}
	}
	// The Go reference itself: evens, then odds.
	a, r2 := []int8{0, 1, 2, 3, 4, 5}, make([]int8, 6)
	qDeinterleave(r2, a)
	if !slices.Equal(r2, []int8{0, 2, 4, 1, 3, 5}) {
		t.Fatalf("qDeinterleave(0..5) = %v, want [0 2 4 1 3 5]", r2)
	}
}

// TestW4A8AVX2Tokens checks that the AVX2 W4A8 kernels give a token, bit for bit, the same outputs among four, or
// five, or nine tokens as alone, over groups of one, two, three and four chunks.
func TestW4A8AVX2Tokens(t *testing.T) {
	if !qAVX2 {
		t.Skip("no AVX2 and FMA")
	}
	vnni, avx := qVNNI, qAVX512
	qVNNI, qAVX512 = false, false
	defer func() { qVNNI, qAVX512 = vnni, avx }()
	r := rand.New(rand.NewPCG(31, 32))
	for _, tc := range []struct{ m, n, k, group int }{{4, 70, 256, 32}, {5, 67, 384, 64}, {9, 130, 768, 128}, {6, 3, 192, 96}} {
		m, n, k, g := tc.m, tc.n, tc.k, tc.group
		qa := make([]int8, m*k)
		for i := range qa {
			qa[i] = int8(r.IntN(256) - 128)
		}
		sa := make([]float32, m)
		for i := range sa {
			sa[i] = r.Float32() + 0.5
		}
		w := make([]uint8, n*k/2)
		for i := range w {
			w[i] = uint8(r.IntN(256))
		}
		s, z := make([]float32, n*k/g), make([]uint8, n*k/g)
		for i := range s {
			s[i], z[i] = r.Float32()/64, uint8(r.IntN(16))
		}
		all := make([]float32, m*n)
		GEMMW4A8(m, n, k, g, qa, sa, w, s, z, all)
		for i := range m {
			one := make([]float32, n)
			GEMMW4A8(1, n, k, g, qa[i*k:(i+1)*k], sa[i:i+1], w, s, z, one)
			for j := range n {
				if math.Float32bits(all[i*n+j]) != math.Float32bits(one[j]) {
					t.Fatalf("m=%d n=%d k=%d group=%d: token %d, C[%d] = %v among the others, %v alone", m, n, k, g, i, j, all[i*n+j], one[j])
				}
			}
		}
	}
}
