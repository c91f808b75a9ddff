package ref_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
	"github.com/morphlab/morphlab/kernels/ref"
)

// Tests of the specification itself against values computed by hand. Importing kerneltest also makes this test
// binary accept the -update flag of `go test ./kernels/... -update`.

func near(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= tol) {
			t.Errorf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

func TestGEMM(t *testing.T) {
	a := []float64{1, 2, 3, 4}             // [2, 2]
	w := []float64{5, 6, 7, 8, 9, 10}      // [3, 2]: rows are outputs
	c := []float64{-1, -1, -1, -1, -1, -1} // [2, 3]
	ref.GEMM(2, 3, 2, a, w, c)             // c[i][j] = a[i]·w[j]
	near(t, "c", c, []float64{17, 23, 29, 39, 53, 67}, 0)

	y := make([]float64, 3)
	ref.GEMM(1, 3, 2, a[:2], w, y) // GEMV: y = W·x
	near(t, "y", y, []float64{17, 23, 29}, 0)
}

func TestRMSNorm(t *testing.T) {
	// x = (3, 4): mean(x²) = 12.5, so out = x/√12.5 ⊙ weight.
	out := make([]float64, 4)
	ref.RMSNorm(out, []float64{3, 4, 3, 4}, []float64{1, 2}, 2, 0)
	r := math.Sqrt(12.5)
	near(t, "out", out, []float64{3 / r, 8 / r, 3 / r, 8 / r}, 1e-15)

	// eps is added to the mean square: x = (0.003, 0.004) with eps = 1e-5 gives out = x/√(1.25e-5 + 1e-5).
	ref.RMSNorm(out[:2], []float64{0.003, 0.004}, []float64{1, 1}, 2, 1e-5)
	r = math.Sqrt(2.25e-5)
	near(t, "out with eps", out[:2], []float64{0.003 / r, 0.004 / r}, 1e-15)
}

func TestAddRMSNorm(t *testing.T) {
	residual := []float64{1, 2}
	out := make([]float64, 2)
	ref.AddRMSNorm(out, residual, []float64{2, 2}, []float64{1, 2}, 2, 0)
	near(t, "residual", residual, []float64{3, 4}, 0)
	r := math.Sqrt(12.5)
	near(t, "out", out, []float64{3 / r, 8 / r}, 1e-15)
}

func TestRoPE(t *testing.T) {
	// headDim 4: pair 0 turns by pos, pair 1 by pos·theta^(-1/2). theta = 4/π² makes pair 1 turn by π/2 at
	// pos 1, (a, b) -> (-b, a); pos 0 leaves everything in place.
	theta := 4 / (math.Pi * math.Pi)
	x := []float64{1, 2, 3, 4, 1, 2, 3, 4}
	ref.RoPE(x, []int32{0, 1}, 1, 4, theta)
	s, c := math.Sincos(1)
	near(t, "x", x, []float64{1, 2, 3, 4, c - 2*s, s + 2*c, -4, 3}, 1e-15)
}

func TestSwiGLU(t *testing.T) {
	out := make([]float64, 3)
	ref.SwiGLU(out, []float64{0, 1, -800}, []float64{5, 2, 3})
	near(t, "out", out, []float64{0, 2 / (1 + math.Exp(-1)), 0}, 1e-15)
}

func TestSoftmax(t *testing.T) {
	// softmax(0, ln 3) = (1/4, 3/4), and adding 1000 to a row (exp overflows float64 without the max
	// subtraction) changes nothing but the rounding of 1000 + ln 3 (an error of about 1e-13).
	x := []float64{0, math.Log(3), 1000, 1000 + math.Log(3)}
	ref.Softmax(x, 2, 2)
	near(t, "x", x[:2], []float64{0.25, 0.75}, 1e-15)
	near(t, "x+1000", x[2:], []float64{0.25, 0.75}, 1e-12)

	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float64, 1025)
	for i := range row {
		row[i] = 10 * rng.NormFloat64()
	}
	ref.Softmax(row, 1, len(row))
	var sum float64
	for _, p := range row {
		if p < 0 || p > 1 {
			t.Fatalf("probability %v outside [0, 1]", p)
		}
		sum += p
	}
	if math.Abs(sum-1) > 1e-13 {
		t.Errorf("softmax sums to %.17g, want 1", sum)
	}
}

func TestCausalAttention(t *testing.T) {
	// One key: the output is its value whatever the query.
	out := make([]float64, 2)
	ref.CausalAttention(out, []float64{3, -7}, []float64{0.5, 2}, []float64{4, 5}, 1, 1, 1, 1, 2, 1)
	near(t, "one key", out, []float64{4, 5}, 0)

	// Two tokens, both queries, a zero query: scores are equal, so token 0 returns v0 and token 1 the mean of
	// v0 and v1 (it does not see the future; the first does not see the second).
	k := []float64{1, 2, 3, 4}
	v := []float64{2, 4, 6, 8}
	out = make([]float64, 4)
	ref.CausalAttention(out, []float64{0, 0, 0, 0}, k, v, 2, 2, 1, 1, 2, 1)
	near(t, "causal", out, []float64{2, 4, 4, 6}, 1e-15)

	// A chunk of one query after one cached token sees both: q·k = (1, 2)·(1, 0) = 1 vs (1, 2)·(0, 1) = 2,
	// weights e/(e+e²) and e²/(e+e²).
	out = make([]float64, 2)
	ref.CausalAttention(out, []float64{1, 2}, []float64{1, 0, 0, 1}, []float64{1, 0, 0, 1}, 1, 2, 1, 1, 2, 1)
	p0 := 1 / (1 + math.E)
	near(t, "chunk", out, []float64{p0, 1 - p0}, 1e-15)

	// GQA: 2 query heads share one KV head, so with one key both heads return it.
	out = make([]float64, 4)
	ref.CausalAttention(out, []float64{1, 2, 3, 4}, []float64{1, 1}, []float64{7, 9}, 1, 1, 2, 1, 2, 1)
	near(t, "gqa", out, []float64{7, 9, 7, 9}, 0)
}

func TestPagedAttentionMatchesCausal(t *testing.T) {
	// Two sequences (prefill of 5 tokens, and a 2-query chunk over 7 tokens) with 4 query heads over 2 KV heads
	// of 4, in blocks of 3 tokens placed in a shuffled order in the cache, against CausalAttention of each
	// sequence on contiguous keys and values.
	const nHeads, nKVHeads, hd, bs, maxBlocks = 4, 2, 4, 3, 3
	rng := rand.New(rand.NewPCG(3, 4))
	randn := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		return x
	}
	lens, nqs := []int32{5, 7}, []int{5, 2}
	tables := []int32{4, 1, -1, 0, 5, 2}
	row := nKVHeads * hd
	kCache, vCache := randn(6*bs*row), randn(6*bs*row)
	q := randn((5 + 2) * nHeads * hd)
	out := make([]float64, len(q))
	ref.PagedAttention(out, q, kCache, vCache, []int32{0, 5, 7}, lens, tables, maxBlocks, bs, nHeads, nKVHeads, hd, 0.5)

	qOff := 0
	for i, L := range lens {
		k, v := make([]float64, int(L)*row), make([]float64, int(L)*row)
		for s := 0; s < int(L); s++ {
			slot := int(tables[i*maxBlocks+s/bs])*bs + s%bs
			copy(k[s*row:(s+1)*row], kCache[slot*row:])
			copy(v[s*row:(s+1)*row], vCache[slot*row:])
		}
		n := nqs[i] * nHeads * hd
		want := make([]float64, n)
		ref.CausalAttention(want, q[qOff:qOff+n], k, v, nqs[i], int(L), nHeads, nKVHeads, hd, 0.5)
		near(t, "sequence", out[qOff:qOff+n], want, 1e-14)
		qOff += n
	}
}

func TestKVAppend(t *testing.T) {
	// Three tokens of one KV head of 2 into a 3-slot cache: token 1 is skipped (slot -1).
	kc, vc := []float64{-1, -1, -1, -1, -1, -1}, []float64{-2, -2, -2, -2, -2, -2}
	ref.KVAppend(kc, vc, []float64{1, 2, 3, 4, 5, 6}, []float64{7, 8, 9, 10, 11, 12}, []int32{2, -1, 0}, 1, 2)
	near(t, "kCache", kc, []float64{5, 6, -1, -1, 1, 2}, 0)
	near(t, "vCache", vc, []float64{11, 12, -2, -2, 7, 8}, 0)
}

func TestBadSizePanics(t *testing.T) {
	for _, tc := range []struct {
		want string
		fn   func()
	}{
		{"kernels: GEMM: len(c)=5, want m*n=6", func() { ref.GEMM(2, 3, 1, make([]float64, 2), make([]float64, 3), make([]float64, 5)) }},
		{"kernels: RoPE: headDim=3, want an even number", func() { ref.RoPE(make([]float64, 3), []int32{0}, 1, 3, 1e4) }},
		{"kernels: KVAppend: slots[1]=2, want < 2 (cache slots)", func() {
			ref.KVAppend(make([]float64, 4), make([]float64, 4), make([]float64, 4), make([]float64, 4), []int32{0, 2}, 1, 2)
		}},
	} {
		func() {
			defer func() {
				if got := recover(); got != tc.want {
					t.Errorf("panic %v, want %q", got, tc.want)
				}
			}()
			tc.fn()
		}()
	}
}

// TestGoldenFiles checks that the golden files in testdata/golden are what this reference computes from their
// inputs: a changed reference or a damaged file fails here (regenerate with go test ./kernels/... -update).
func TestGoldenFiles(t *testing.T) {
	dir, err := kerneltest.GoldenDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := kerneltest.VerifyGoldenFiles(dir); err != nil {
		t.Fatal(err)
	}
}
