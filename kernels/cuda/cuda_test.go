//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
	"github.com/morphlab/morphlab/kernels/ref"
)

var dev *Device

func TestMain(m *testing.M) {
	var err error
	if dev, err = Open(0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	dev.Close()
	os.Exit(code)
}

// TestConformance runs the shared suite and the golden files on the float32 kernels.
func TestConformance(t *testing.T) {
	kerneltest.TestAll(t, kerneltest.Funcs{
		GEMM:            dev.GEMM,
		RMSNorm:         dev.RMSNorm,
		AddRMSNorm:      dev.AddRMSNorm,
		RoPE:            dev.RoPE,
		SwiGLU:          dev.SwiGLU,
		Softmax:         dev.Softmax,
		CausalAttention: dev.CausalAttention,
		KVAppend:        dev.KVAppend,
		PagedAttention:  dev.PagedAttention,
	})
}

// TestF16 runs the suite on the float16 tensor-core kernels, with the inputs rounded to float16 first (so the
// reference sees the same numbers) and the naive attention baseline storing its intermediates in float16.
func TestF16(t *testing.T) {
	o := kerneltest.Options{InputRounding: RoundF16, BaselineRounding: RoundF16}
	t.Run("GEMM", func(t *testing.T) { kerneltest.TestGEMMWith(t, dev.GEMMF16, o) })
	t.Run("CausalAttention", func(t *testing.T) { kerneltest.TestCausalAttentionWith(t, dev.CausalAttentionF16, o) })
}

// TestQuant runs the shared quantized-GEMM tests: float32 activations for W8A16 and W4A16 (dot kernels),
// tensor cores or dp4a for W8A8 and the int32 GEMM.
func TestQuant(t *testing.T) {
	t.Run("GEMMW8A16", func(t *testing.T) { kerneltest.TestGEMMW8A16(t, dev.GEMMW8A16) })
	t.Run("GEMMW4A16", func(t *testing.T) { kerneltest.TestGEMMW4A16(t, dev.GEMMW4A16) })
	t.Run("GEMMW8A8", func(t *testing.T) { kerneltest.TestGEMMW8A8(t, dev.GEMMW8A8) })
	t.Run("GEMMInt8", func(t *testing.T) { kerneltest.TestGEMMInt8(t, dev.GEMMInt8) })
}

// TestQuantF16 checks the f16-activation W8A16 and W4A16 kernels (tensor cores for m > 8) against the float64
// reference on activations rounded to float16, which the shared suite (float32 bounds) cannot take. Tolerances,
// as normalized MSE: W8A16 multiplies f16 activations by int8 codes exactly and sums in float32, so its error is
// a float32 sum's, far below 1e-9; W4A16 rounds each dequantized weight (q-z)·s to float16 (relative error up to
// 2^-11, nMSE about 2^-22/3 = 8e-8), so 1e-6. A wrong nibble order, group or zero point gives nMSE near 1.
func TestQuantF16(t *testing.T) {
	shapes := [][3]int{{1, 33, 256}, {5, 130, 384}, {33, 130, 256}, {200, 257, 512}, {9, 17, 48}, {130, 129, 64}, {3, 20, 80}}
	for si, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		r := rand.New(rand.NewPCG(uint64(si), 7))
		a := make([]float32, m*k)
		for i := range a {
			a[i] = RoundF16(float32(r.NormFloat64()))
		}
		w8 := make([]int8, n*k)
		for i := range w8 {
			w8[i] = int8(r.IntN(255) - 127)
		}
		sw := make([]float32, n)
		for i := range sw {
			sw[i] = 0.01 + r.Float32()*0.02
		}
		c := nanSlice(m * n)
		dev.GEMMW8A16F16(m, n, k, a, w8, sw, c)
		want := make([]float64, m*n)
		ref.GEMMW8A16(m, n, k, f64(a), w8, f64(sw), want)
		checkNMSE(t, fmt.Sprintf("W8A16F16 m=%d n=%d k=%d", m, n, k), c, want, 1e-9)

		group := 128
		if k%group != 0 {
			group = 16
		}
		w4 := make([]uint8, n*k/2)
		for i := range w4 {
			w4[i] = uint8(r.IntN(256))
		}
		s := make([]float32, n*k/group)
		z := make([]uint8, n*k/group)
		for i := range s {
			s[i] = 0.01 + r.Float32()*0.02
			z[i] = uint8(r.IntN(16))
		}
		c = nanSlice(m * n)
		dev.GEMMW4A16F16(m, n, k, group, a, w4, s, z, c)
		ref.GEMMW4A16(m, n, k, group, f64(a), w4, f64(s), z, want)
		checkNMSE(t, fmt.Sprintf("W4A16F16 m=%d n=%d k=%d group=%d", m, n, k, group), c, want, 1e-6)
	}
}

// TestPagedSplit checks the split-KV path (partials and merge) on a context long enough to be split, against
// the single-split result of the reference.
func TestPagedSplit(t *testing.T) {
	const L, bs, nHeads, nKV, hd = 5000, 16, 8, 2, 128
	plan := dev.PlanPaged(1, nHeads, nKV, hd, L)
	if plan.Splits < 2 {
		t.Fatalf("PlanPaged(1 row, %d keys) = %+v, want a split", L, plan)
	}
	r := rand.New(rand.NewPCG(1, 2))
	nBlocks := (L + bs - 1) / bs
	table := r.Perm(nBlocks)
	bt := make([]int32, nBlocks)
	for i, b := range table {
		bt[i] = int32(b)
	}
	kc, vc := randSlice(r, nBlocks*bs*nKV*hd), randSlice(r, nBlocks*bs*nKV*hd)
	q := randSlice(r, nHeads*hd)
	out := nanSlice(nHeads * hd)
	scale := float32(1 / math.Sqrt(hd))
	dev.PagedAttention(out, q, kc, vc, []int32{0, 1}, []int32{L}, bt, nBlocks, bs, nHeads, nKV, hd, scale)
	want := make([]float64, len(out))
	ref.PagedAttention(want, f64(q), f64(kc), f64(vc), []int32{0, 1}, []int32{L}, bt, nBlocks, bs, nHeads, nKV, hd,
		float64(scale))
	// A float32 softmax over 5000 keys and its merge: a few ulps of relative error, nMSE far below 1e-10.
	checkNMSE(t, "PagedAttention split", out, want, 1e-10)
}

func checkNMSE(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) {
			t.Errorf("%s: element %d is NaN", name, i)
			return
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	if nmse := num / den; !(nmse <= tol) {
		t.Errorf("%s: normalized MSE %.3g, want <= %g", name, nmse, tol)
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func nanSlice(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return x
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}
