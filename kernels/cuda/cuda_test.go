//go:build cuda

package cuda

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
	"github.com/morphlab/morphlab/kernels/ref"
)

var dev *Device

var figuresPath = flag.String("figures", "", "write every benchmark's median time and rate to this JSON file")

func TestMain(m *testing.M) {
	var err error
	if dev, err = Open(0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if *figuresPath != "" {
		if err := writeFigures(*figuresPath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	dev.Close()
	os.Exit(code)
}

func funcs(h Host) kerneltest.Funcs {
	return kerneltest.Funcs{
		GEMM:            h.GEMM,
		RMSNorm:         h.RMSNorm,
		AddRMSNorm:      h.AddRMSNorm,
		RoPE:            h.RoPE,
		SwiGLU:          h.SwiGLU,
		Softmax:         h.Softmax,
		CausalAttention: h.CausalAttention,
		KVAppend:        h.KVAppend,
		PagedAttention:  h.PagedAttention,
	}
}

// TestConformance runs the shared suite and the golden files on the float32 kernels.
func TestConformance(t *testing.T) { kerneltest.TestAll(t, funcs(dev.Host(F32))) }

// unitRoundoff is u of a storage type: half the spacing of its values at 1 (2^-24, 2^-11, 2^-8).
func unitRoundoff(t DType) float64 {
	return map[DType]float64{F32: 0x1p-24, F16: 0x1p-11, BF16: 0x1p-8}[t]
}

// tensorCoreScale widens the float32 GEMM tolerance for the tensor cores' truncating accumulation (TestReduced).
const tensorCoreScale = 16

// tensorCoreTol is the float32 GEMM tolerance 64·k·2^-48 times tensorCoreScale: the bound of a float32
// accumulation of k exact products on tensor cores.
func tensorCoreTol(k int) float64 { return tensorCoreScale * 64 * float64(k) * 0x1p-48 }

// tensorCoreShapes reach the tensor-core GEMM (m > 8, k % 8 == 0) past one block tile in m and k (m > 128,
// k > 128) and, on any GPU with more than a few SMs, split-K: a decode batch of 16 and of 128 through a
// 4096 x 4096 projection, and tails in every dimension.
var tensorCoreShapes = []kerneltest.GEMMShape{
	{M: 9, N: 130, K: 136}, {M: 129, N: 257, K: 264}, {M: 200, N: 257, K: 512}, {M: 300, N: 520, K: 1032},
	{M: 16, N: 4096, K: 4096}, {M: 128, N: 1024, K: 2048},
}

// TestReduced runs the shared suite on the float16 and bfloat16 kernels of every op. The inputs are rounded to
// the type first, so that the reference sees the numbers the kernel sees, and the tolerances follow the float32
// suite's reasoning with the type's unit roundoff u:
//   - RMSNorm, AddRMSNorm, RoPE, SwiGLU, Softmax compute in float32 and store their outputs in the type, an
//     error of u relative (nMSE u²/3); AddRMSNorm also stores the residual before normalizing it, one more
//     rounding. The tolerance is 8u² (f16 1.9e-6, bf16 1.2e-4), which a wrong element in a row of 1025
//     (nMSE ~1e-3) or a missing eps still fails.
//   - GEMM: products of 16-bit inputs are exact in float32 and the sums are float32, so the float32 GEMM
//     tolerance (64·k·2^-48) would do but for the tensor cores' accumulation, which truncates toward zero once
//     every few products (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021): a bias growing like
//     k, not like the √k of round-to-nearest. With a whole ulp (2^-23) lost every 4 products, nMSE reaches
//     (k/4·2^-23)², which 16 times the float32 tolerance covers up to k = 4096 (tensorCoreTol); a dropped term
//     (nMSE ~1/k) still fails by four orders of magnitude.
//   - CausalAttention, PagedAttention: the FlashAttention rule against a naive baseline that stores its scores,
//     probabilities and output in the type.
//   - KVAppend copies: exact.
func TestReduced(t *testing.T) {
	for _, dt := range []DType{F16, BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			h := dev.Host(dt)
			u := unitRoundoff(dt)
			in := kerneltest.Options{InputRounding: dt.Round}
			gemm := kerneltest.Options{InputRounding: dt.Round, ToleranceScale: tensorCoreScale}
			elem := kerneltest.Options{InputRounding: dt.Round, ToleranceScale: 8 * u * u / kerneltest.ElementwiseTol}
			attn := kerneltest.Options{InputRounding: dt.Round, BaselineRounding: dt.Round}
			t.Run("GEMM", func(t *testing.T) { kerneltest.TestGEMMWith(t, h.GEMM, gemm) })
			t.Run("GEMMTensorCores", func(t *testing.T) { kerneltest.TestGEMMShapes(t, h.GEMM, gemm, tensorCoreShapes) })
			t.Run("RMSNorm", func(t *testing.T) { kerneltest.TestRMSNormWith(t, h.RMSNorm, elem) })
			t.Run("AddRMSNorm", func(t *testing.T) { kerneltest.TestAddRMSNormWith(t, h.AddRMSNorm, elem) })
			t.Run("RoPE", func(t *testing.T) { kerneltest.TestRoPEWith(t, h.RoPE, elem) })
			t.Run("SwiGLU", func(t *testing.T) { kerneltest.TestSwiGLUWith(t, h.SwiGLU, elem) })
			t.Run("Softmax", func(t *testing.T) { kerneltest.TestSoftmaxWith(t, h.Softmax, elem) })
			t.Run("CausalAttention", func(t *testing.T) { kerneltest.TestCausalAttentionWith(t, h.CausalAttention, attn) })
			t.Run("KVAppend", func(t *testing.T) { kerneltest.TestKVAppendWith(t, h.KVAppend, in) })
			t.Run("PagedAttention", func(t *testing.T) { kerneltest.TestPagedAttentionWith(t, h.PagedAttention, attn) })
		})
	}
}

// TestQuant runs the shared quantized-GEMM tests: float32 activations for W8A16 and W4A16 (dot kernels),
// tensor cores or dp4a for W8A8 and the int32 GEMM, on the shared shapes and on shapes past one block tile
// (through the tensor cores, split-K included).
func TestQuant(t *testing.T) {
	h := dev.Host(F32)
	t.Run("GEMMW8A16", func(t *testing.T) { kerneltest.TestGEMMW8A16(t, h.GEMMW8A16) })
	t.Run("GEMMW4A16", func(t *testing.T) { kerneltest.TestGEMMW4A16(t, h.GEMMW4A16) })
	t.Run("GEMMW8A8", func(t *testing.T) { kerneltest.TestGEMMW8A8(t, h.GEMMW8A8) })
	t.Run("GEMMInt8", func(t *testing.T) { kerneltest.TestGEMMInt8(t, h.GEMMInt8) })
	t.Run("Int8TensorCores", func(t *testing.T) {
		for si, sh := range [][3]int{{200, 257, 512}, {16, 1024, 2048}, {130, 136, 1040}} {
			m, n, k := sh[0], sh[1], sh[2]
			r := rand.New(rand.NewPCG(uint64(si), 11))
			a, w := randInt8(r, m*k), randInt8(r, n*k)
			c := make([]int32, m*n)
			for i := range c {
				c[i] = math.MinInt32
			}
			h.GEMMInt8(m, n, k, a, w, c)
			for i := range m {
				for j := range n {
					var want int32
					for p := range k {
						want += int32(a[i*k+p]) * int32(w[j*k+p])
					}
					if c[i*n+j] != want {
						t.Fatalf("m=%d n=%d k=%d: c[%d,%d] = %d, want %d (exact)", m, n, k, i, j, c[i*n+j], want)
					}
				}
			}
			sa, sw := randScales(r, m), randScales(r, n)
			cf := nanSlice(m * n)
			h.GEMMW8A8(m, n, k, a, sa, w, sw, cf)
			want := make([]float64, m*n)
			for i := range m {
				for j := range n {
					want[i*n+j] = float64(sa[i]) * float64(sw[j]) * float64(c[i*n+j])
				}
			}
			// The int32 sums are exact; the scales and the split partials add a few float32 roundings.
			checkNMSE(t, fmt.Sprintf("W8A8 m=%d n=%d k=%d", m, n, k), cf, want, 1e-12)
		}
	})
}

// TestQuantReduced checks the f16- and bf16-activation W8A16 and W4A16 kernels (tensor cores for m > 8) against
// the float64 reference on activations rounded to the type, which the shared suite (float32 bounds) cannot take.
// Tolerances, as normalized MSE: W8A16 multiplies 16-bit activations by int8 codes exactly (in registers, or as
// 16-bit values on the tensor cores: |q| <= 128 is exact in both types) and sums in float32, so its error is a
// float32 sum's on tensor cores, tensorCoreTol(k) (as TestReduced's GEMM); W4A16 also rounds each dequantized
// weight (q-z)·s to the type on the tensor cores (relative error up to u, nMSE about u²/3), so the larger of 4u²
// (f16 9.5e-7, bf16 6.1e-5) and that. A wrong nibble order, group or zero point gives nMSE near 1.
func TestQuantReduced(t *testing.T) {
	// Dot kernels (m <= 8) vectorized and not (k = 40), tensor cores past one block tile and with split-K.
	shapes := [][3]int{{1, 33, 256}, {5, 130, 384}, {33, 130, 256}, {200, 257, 512}, {9, 17, 48}, {130, 129, 64},
		{3, 20, 80}, {2, 24, 40}, {16, 1024, 2048}}
	for _, dt := range []DType{F16, BF16} {
		h := dev.Host(dt)
		u := unitRoundoff(dt)
		for si, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			r := rand.New(rand.NewPCG(uint64(si), 7))
			a := make([]float32, m*k)
			for i := range a {
				a[i] = dt.Round(float32(r.NormFloat64()))
			}
			w8 := randInt8(r, n*k)
			sw := randScales(r, n)
			c := nanSlice(m * n)
			h.GEMMW8A16(m, n, k, a, w8, sw, c)
			want := make([]float64, m*n)
			ref.GEMMW8A16(m, n, k, f64(a), w8, f64(sw), want)
			checkNMSE(t, fmt.Sprintf("W8A16 %v m=%d n=%d k=%d", dt, m, n, k), c, want, tensorCoreTol(k))

			group := 128
			for k%group != 0 {
				group /= 2
			}
			w4 := make([]uint8, n*k/2)
			for i := range w4 {
				w4[i] = uint8(r.IntN(256))
			}
			s := randScales(r, n*k/group)
			z := make([]uint8, n*k/group)
			for i := range z {
				z[i] = uint8(r.IntN(16))
			}
			c = nanSlice(m * n)
			h.GEMMW4A16(m, n, k, group, a, w4, s, z, c)
			ref.GEMMW4A16(m, n, k, group, f64(a), w4, f64(s), z, want)
			checkNMSE(t, fmt.Sprintf("W4A16 %v m=%d n=%d k=%d group=%d", dt, m, n, k, group), c, want,
				max(4*u*u, tensorCoreTol(k)))
		}
	}
}

// TestPagedSplit checks the split-KV path (partials and merge) on a context long enough to be split, against
// the reference on the same (rounded) inputs. Float32: a float32 softmax over 5000 keys and its merge, a few ulps
// of relative error, nMSE far below 1e-10. Bfloat16: the output is stored in bf16, nMSE about u²/3; 4u².
func TestPagedSplit(t *testing.T) {
	const L, bs, nHeads, nKV, hd = 5000, 16, 8, 2, 128
	plan := dev.PlanPaged(1, nHeads, nKV, hd, L)
	if plan.Splits < 2 {
		t.Fatalf("PlanPaged(1 row, %d keys) = %+v, want a split", L, plan)
	}
	for _, dt := range []DType{F32, BF16} {
		r := rand.New(rand.NewPCG(1, 2))
		nBlocks := (L + bs - 1) / bs
		bt := make([]int32, nBlocks)
		for i, b := range r.Perm(nBlocks) {
			bt[i] = int32(b)
		}
		kc, vc := randSlice(r, nBlocks*bs*nKV*hd, dt), randSlice(r, nBlocks*bs*nKV*hd, dt)
		q := randSlice(r, nHeads*hd, dt)
		out := nanSlice(nHeads * hd)
		scale := float32(1 / math.Sqrt(hd))
		dev.Host(dt).PagedAttention(out, q, kc, vc, []int32{0, 1}, []int32{L}, bt, nBlocks, bs, nHeads, nKV, hd, scale)
		want := make([]float64, len(out))
		ref.PagedAttention(want, f64(q), f64(kc), f64(vc), []int32{0, 1}, []int32{L}, bt, nBlocks, bs, nHeads, nKV, hd,
			float64(scale))
		tol := 1e-10
		if dt != F32 {
			tol = 4 * unitRoundoff(dt) * unitRoundoff(dt)
		}
		checkNMSE(t, "PagedAttention split "+dt.String(), out, want, tol)
	}
}

// TestLauncherErrors checks that the launchers refuse, with an error and no launch, what their kernels cannot
// take: a misaligned view of a buffer, a head dimension the paged kernel's lanes cannot split.
func TestLauncherErrors(t *testing.T) {
	err := dev.Do(func() error {
		b, err := Alloc(1 << 20)
		if err != nil {
			return err
		}
		defer b.Free()
		odd := Buffer{Ptr: b.Ptr + 2, Bytes: b.Bytes - 2}
		if err := dev.FlashPrefillOn(BF16, b, odd, b, b, 64, 64, 1, 1, 64, 1); err == nil {
			t.Error("FlashPrefillOn with q at an offset of 2 bytes: no error")
		}
		plan := dev.PlanPaged(1, 1, 1, 12, 16)
		if err := dev.PagedAttentionOn(BF16, plan, b, b, b, b, b, b, b, Buffer{}, 1, 1, 1, 1, 1, 1, 12, 1); err == nil {
			t.Error("PagedAttentionOn bf16 with headDim 12: no error")
		}
		if err := dev.GEMMOn(F16, 16, 16, 16, Buffer{Ptr: b.Ptr + 1}, b, b); err == nil {
			t.Error("GEMMOn f16 with a at an odd address: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
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

// randSlice returns n normal samples rounded to dt.
func randSlice(r *rand.Rand, n int, dt DType) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = dt.Round(float32(r.NormFloat64()))
	}
	return x
}

func randInt8(r *rand.Rand, n int) []int8 {
	x := make([]int8, n)
	for i := range x {
		x[i] = int8(r.IntN(255) - 127)
	}
	return x
}

func randScales(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.01 + r.Float32()*0.02
	}
	return x
}

// figure is one benchmark's result as the figures file holds it.
type figure struct {
	Name     string  `json:"name"`
	N        int     `json:"n"`
	MedianUS float64 `json:"median_us"`
	TFLOPS   float64 `json:"tflops,omitempty"`
	GBPS     float64 `json:"gbps,omitempty"`
}

// figures holds the last (largest b.N) run of every benchmark, by name.
var figures = map[string]figure{}

func writeFigures(path string) error {
	list := make([]figure, 0, len(figures))
	for _, f := range figures {
		list = append(list, f)
	}
	slices.SortFunc(list, func(a, b figure) int { return strings.Compare(a.Name, b.Name) })
	data, err := json.MarshalIndent(map[string]any{
		"device": dev.Name, "compute_capability": fmt.Sprintf("%d.%d", dev.Major, dev.Minor), "sms": dev.SMs,
		"ptx": fmt.Sprintf("sm_%d", dev.Arch), "benchmarks": list,
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
