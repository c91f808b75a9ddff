package kerneltest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
)

// Options adapts the suite to an implementation that computes at reduced precision, such as a CUDA kernel that
// takes float16 inputs. The zero Options is the float32 default that TestX uses.
type Options struct {
	// InputRounding, if set, rounds every float input of a case before anything runs (to float16, say), so that
	// the implementation, the float64 reference and the naive baseline see the same numbers and the comparison
	// measures only the implementation's arithmetic.
	InputRounding func(float32) float32
	// BaselineRounding, if set, rounds the intermediates of the naive attention baseline (scores, probabilities,
	// the output) as a naive implementation at the implementation's precision would store them, so that the
	// attention rule "at most 2x the error of the naive baseline" compares like with like.
	BaselineRounding func(float32) float32
	// ToleranceScale multiplies the fixed tolerances of the non-attention ops (0 means 1): an implementation whose
	// outputs are stored in float16 has an error floor about 2^26 times that of float32.
	ToleranceScale float64
}

func (o Options) tol(t float64) float64 {
	if o.ToleranceScale > 0 {
		return t * o.ToleranceScale
	}
	return t
}

func (o Options) round(x []float32) []float32 {
	if o.InputRounding != nil {
		for i, v := range x {
			x[i] = o.InputRounding(v)
		}
	}
	return x
}

// Tolerances, as normalized MSE Σ(got-want)²/Σwant² against the float64 reference.
const (
	// unitRoundoff2 is u² for float32 (u = 2^-24): the normalized MSE of merely storing an exact result in float32
	// is about u²/3.
	unitRoundoff2 = 0x1p-48

	// ElementwiseTol is for RMSNorm, AddRMSNorm, RoPE, SwiGLU and Softmax: each output is a few float32 operations
	// (and a correctly rounded or polynomial exp/rsqrt/sincos) away from the exact value, an error of a few u,
	// that is nMSE ~1e-14. 1e-7 (the design's class) leaves room for a vectorized exp or a Newton-refined rsqrt
	// and still fails a wrong element in a row of 1025, a wrong row, or a missing eps.
	ElementwiseTol = 1e-7

	// attentionFloor keeps the attention bound from reaching 0 where the naive baseline happens to be exact
	// (one key: out = v): a few float32 ulps of RMS error.
	attentionFloor = 16 * unitRoundoff2
)

// gemmTol is the tolerance of a float32 GEMM with inner dimension k. Summing k random products in float32 makes
// rounding errors that add up like a random walk: nMSE ≈ k·u²/2 for sequential accumulation, less for blocked or
// pairwise orders. The tolerance allows 64 times that, at least 1e-12, and at most the design's 5e-4 class; a
// kernel that drops one of the k terms has nMSE ≈ 1/k and fails.
func gemmTol(k int) float64 {
	return min(5e-4, max(1e-12, 64*float64(k)*unitRoundoff2))
}

// nmse returns Σ(got-want)²/Σwant², or an error naming the first output that is NaN or infinite where the
// reference is finite (an output the implementation never wrote keeps its NaN poison).
func nmse(name string, got []float32, want []float64) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%s: %d outputs, want %d", name, len(got), len(want))
	}
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return 0, fmt.Errorf("%s[%d] = %v, want %.8g (output not written, or overflow)", name, i, g, w)
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	if den == 0 {
		return num, nil
	}
	return num / den, nil
}

// compare checks got against the float64 reference want: no NaN or Inf, and nMSE <= tol.
func compare(name string, got []float32, want []float64, tol float64) error {
	e, err := nmse(name, got, want)
	if err != nil {
		return err
	}
	if !(e <= tol) {
		worst := 0
		for i := range want {
			if math.Abs(float64(got[i])-want[i]) > math.Abs(float64(got[worst])-want[worst]) {
				worst = i
			}
		}
		return fmt.Errorf("%s: normalized MSE %.3g > tolerance %.3g (worst: [%d] = %.8g, want %.8g)",
			name, e, tol, worst, got[worst], want[worst])
	}
	return nil
}

// compareExact checks that got is bit for bit the float32 rounding of want, NaN where want is NaN: for KVAppend,
// which only copies.
func compareExact(name string, got []float32, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if math.IsNaN(w) != math.IsNaN(float64(g)) || (!math.IsNaN(w) && g != float32(w)) {
			return fmt.Errorf("%s[%d] = %v, want %v", name, i, g, float32(w))
		}
	}
	return nil
}

// unchanged checks that an implementation left an input as it was given.
func unchanged(name string, got, orig []float32) error {
	for i := range orig {
		if math.Float32bits(got[i]) != math.Float32bits(orig[i]) {
			return fmt.Errorf("input %s[%d] changed from %v to %v", name, i, orig[i], got[i])
		}
	}
	return nil
}

// call runs fn and turns a panic into an error, so that a crashing implementation fails its case, not the run.
func call(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	fn()
	return nil
}

// panicMessage runs fn and returns what it panicked with ("" if it returned).
func panicMessage(fn func()) (msg string, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			msg, panicked = fmt.Sprint(r), true
		}
	}()
	fn()
	return "", false
}

// badCall is a call with bad sizes: impl calls the implementation, spec calls the kernels/internal/shape check
// that every implementation must call, whose panic message the implementation must repeat.
type badCall struct {
	name string
	impl func()
	spec func()
}

func checkPanics(calls []badCall) error {
	var errs []string
	for _, c := range calls {
		want, ok := panicMessage(c.spec)
		if !ok || !strings.HasPrefix(want, "kernels: ") {
			panic("kerneltest: bad call " + c.name + " does not fail the shape check")
		}
		got, ok := panicMessage(c.impl)
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: did not panic, want panic %q", c.name, want))
		case got != want:
			errs = append(errs, fmt.Sprintf("%s: panicked with %q, want %q", c.name, got, want))
		}
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// newRand returns the generator for one case: fixed seeds derived from the op and the case name, so a failure
// reproduces and adding a case changes no other case's data.
func newRand(op, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(op + "/" + name))
	return rand.New(rand.NewPCG(h.Sum64(), 0x6d6f7270686c6162))
}

// normal returns n samples of N(0, σ²), rounded as o says. Exact zeros are replaced (they would hide a missing
// multiplication), which leaves the distribution unchanged in practice.
func normal(rng *rand.Rand, n int, sigma float64, o Options) []float32 {
	x := make([]float32, n)
	for i := range x {
		for x[i] == 0 {
			x[i] = float32(rng.NormFloat64() * sigma)
		}
	}
	return o.round(x)
}

// poisoned returns n NaNs: the output buffer handed to an implementation, so an output it never writes fails.
func poisoned(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return x
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
