package kerneltest

import (
	"sync"
	"testing"

	"github.com/morphlab/morphlab/kernels/ref"
)

// shortWork is the largest shape, in multiply-adds or elements, that runs under -short: it trims the one or two
// largest shapes of each op so that a -race run stays quick.
const shortWork = 1 << 22

// run runs one shape of a conformance test as a sub-test.
func run(t *testing.T, name string, work int, check func() error) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if testing.Short() && work > shortWork {
			t.Skip("large shape, skipped under -short")
		}
		if err := check(); err != nil {
			t.Error(err)
		}
	})
}

// expected is what a random case is checked against: the reference outputs and, for attention, the naive
// baseline's error.
type expected struct {
	want  map[string][]float64
	naive float64
}

// expectations memoizes expected values by op and shape under the default Options (the same seeds give the same
// inputs): a package that runs the suite once per code path (Go, AVX2, AVX-512) pays for the float64 reference
// once. Checks only read them.
var expectations sync.Map

func expect(op, shape string, o Options, compute func() expected) expected {
	if o.InputRounding != nil || o.BaselineRounding != nil {
		return compute()
	}
	key := op + "/" + shape
	if e, ok := expectations.Load(key); ok {
		return e.(expected)
	}
	e := compute()
	expectations.Store(key, e)
	return e
}

// referenceOnly is the expected value of a case checked against the reference alone.
func referenceOnly(c refCase) func() expected {
	return func() expected { return expected{want: c.reference()} }
}

func runBadSizes(t *testing.T, calls []badCall) {
	t.Helper()
	t.Run("bad_sizes", func(t *testing.T) {
		if err := checkPanics(calls); err != nil {
			t.Error(err)
		}
	})
}

// TestGEMM checks f against ref.GEMM on GEMMShapes (nMSE <= gemmTol(k)) and checks that bad sizes panic with the
// shape checks' message.
func TestGEMM(t *testing.T, f GEMMFunc) { TestGEMMWith(t, f, Options{}) }

// TestGEMMWith is TestGEMM for an implementation of another precision.
func TestGEMMWith(t *testing.T, f GEMMFunc, o Options) {
	t.Helper()
	TestGEMMShapes(t, f, o, GEMMShapes)
	runBadSizes(t, gemmBadCalls(f))
}

// TestGEMMShapes is TestGEMMWith on the given shapes (an implementation's own, such as those that reach its
// tiled path), without the bad-sizes check.
func TestGEMMShapes(t *testing.T, f GEMMFunc, o Options, shapes []GEMMShape) {
	t.Helper()
	for _, s := range shapes {
		run(t, s.Name(), s.work(), func() error { return checkGEMM(f, s, o) })
	}
}

func checkGEMM(f GEMMFunc, s GEMMShape, o Options) error {
	c := newGEMMCase(s, newRand("GEMM", s.Name()), o)
	return c.check(f, expect("GEMM", s.Name(), o, referenceOnly(c)).want, o)
}

func gemmBadCalls(f GEMMFunc) []badCall {
	bad := func(name string, m, n, k, la, lw, lc int) badCall {
		return badCall{name,
			func() { f(m, n, k, make([]float32, la), make([]float32, lw), make([]float32, lc)) },
			func() { ref.GEMM(m, n, k, make([]float64, la), make([]float64, lw), make([]float64, lc)) }}
	}
	return []badCall{bad("m=0", 0, 3, 4, 0, 12, 0), bad("short_w", 2, 3, 4, 8, 11, 6), bad("short_c", 2, 3, 4, 8, 12, 5)}
}

// TestRMSNorm checks f against ref.RMSNorm on RowsShapes (rows of scales 1e-3 to 3, so eps matters in some).
func TestRMSNorm(t *testing.T, f RMSNormFunc) { TestRMSNormWith(t, f, Options{}) }

// TestRMSNormWith is TestRMSNorm for an implementation of another precision.
func TestRMSNormWith(t *testing.T, f RMSNormFunc, o Options) {
	t.Helper()
	for _, s := range RowsShapes {
		run(t, s.Name(), s.work(), func() error { return checkRMSNorm(f, s, o) })
	}
	bad := func(name string, lout, lx, lw, dim int) badCall {
		return badCall{name,
			func() { f(make([]float32, lout), make([]float32, lx), make([]float32, lw), dim, 1e-5) },
			func() { ref.RMSNorm(make([]float64, lout), make([]float64, lx), make([]float64, lw), dim, 1e-5) }}
	}
	runBadSizes(t, []badCall{bad("dim=0", 4, 4, 0, 0), bad("x_not_rows", 7, 7, 4, 4), bad("short_out", 7, 8, 4, 4),
		bad("short_weight", 8, 8, 3, 4)})
}

func checkRMSNorm(f RMSNormFunc, s RowsShape, o Options) error {
	c := newRMSNormCase(s, newRand("RMSNorm", s.Name()), o)
	return c.check(f, expect("RMSNorm", s.Name(), o, referenceOnly(c)).want, o)
}

// TestAddRMSNorm checks f against ref.AddRMSNorm on RowsShapes: both the updated residual and the output.
func TestAddRMSNorm(t *testing.T, f AddRMSNormFunc) { TestAddRMSNormWith(t, f, Options{}) }

// TestAddRMSNormWith is TestAddRMSNorm for an implementation of another precision.
func TestAddRMSNormWith(t *testing.T, f AddRMSNormFunc, o Options) {
	t.Helper()
	for _, s := range RowsShapes {
		run(t, s.Name(), s.work(), func() error { return checkAddRMSNorm(f, s, o) })
	}
	bad := func(name string, lout, lres, lx, lw, dim int) badCall {
		return badCall{name,
			func() {
				f(make([]float32, lout), make([]float32, lres), make([]float32, lx), make([]float32, lw), dim, 1e-5)
			},
			func() {
				ref.AddRMSNorm(make([]float64, lout), make([]float64, lres), make([]float64, lx), make([]float64, lw), dim, 1e-5)
			}}
	}
	runBadSizes(t, []badCall{bad("short_x", 8, 8, 7, 4, 4), bad("short_weight", 8, 8, 8, 5, 4),
		bad("residual_not_rows", 6, 6, 6, 4, 4)})
}

func checkAddRMSNorm(f AddRMSNormFunc, s RowsShape, o Options) error {
	c := newAddRMSNormCase(s, newRand("AddRMSNorm", s.Name()), o)
	return c.check(f, expect("AddRMSNorm", s.Name(), o, referenceOnly(c)).want, o)
}

// TestRoPE checks f against ref.RoPE on RoPEShapes at positions up to 4096.
func TestRoPE(t *testing.T, f RoPEFunc) { TestRoPEWith(t, f, Options{}) }

// TestRoPEWith is TestRoPE for an implementation of another precision.
func TestRoPEWith(t *testing.T, f RoPEFunc, o Options) {
	t.Helper()
	for _, s := range RoPEShapes {
		run(t, s.Name(), s.work(), func() error { return checkRoPE(f, s, o) })
	}
	bad := func(name string, lx, npos, nHeads, headDim int) badCall {
		return badCall{name,
			func() { f(make([]float32, lx), make([]int32, npos), nHeads, headDim, 10000) },
			func() { ref.RoPE(make([]float64, lx), make([]int32, npos), nHeads, headDim, 10000) }}
	}
	runBadSizes(t, []badCall{bad("odd_headDim", 6, 2, 1, 3), bad("short_x", 15, 2, 2, 4), bad("no_tokens", 0, 0, 2, 4)})
}

func checkRoPE(f RoPEFunc, s RoPEShape, o Options) error {
	c := newRoPECase(s, newRand("RoPE", s.Name()), o)
	return c.check(f, expect("RoPE", s.Name(), o, referenceOnly(c)).want, o)
}

// TestSwiGLU checks f against ref.SwiGLU on vectors of RowsShapes' sizes.
func TestSwiGLU(t *testing.T, f SwiGLUFunc) { TestSwiGLUWith(t, f, Options{}) }

// TestSwiGLUWith is TestSwiGLU for an implementation of another precision.
func TestSwiGLUWith(t *testing.T, f SwiGLUFunc, o Options) {
	t.Helper()
	for _, s := range RowsShapes {
		run(t, s.Name(), s.work(), func() error { return checkSwiGLU(f, s, o) })
	}
	bad := func(name string, lout, lg, lu int) badCall {
		return badCall{name,
			func() { f(make([]float32, lout), make([]float32, lg), make([]float32, lu)) },
			func() { ref.SwiGLU(make([]float64, lout), make([]float64, lg), make([]float64, lu)) }}
	}
	runBadSizes(t, []badCall{bad("empty", 0, 0, 0), bad("short_up", 5, 5, 4), bad("short_out", 4, 5, 5)})
}

func checkSwiGLU(f SwiGLUFunc, s RowsShape, o Options) error {
	c := newSwiGLUCase(s, newRand("SwiGLU", s.Name()), o)
	return c.check(f, expect("SwiGLU", s.Name(), o, referenceOnly(c)).want, o)
}

// TestSoftmax checks f against ref.Softmax on RowsShapes (rows × dim columns) with logits offset by up to ±120.
func TestSoftmax(t *testing.T, f SoftmaxFunc) { TestSoftmaxWith(t, f, Options{}) }

// TestSoftmaxWith is TestSoftmax for an implementation of another precision.
func TestSoftmaxWith(t *testing.T, f SoftmaxFunc, o Options) {
	t.Helper()
	for _, s := range RowsShapes {
		run(t, s.Name(), s.work(), func() error { return checkSoftmax(f, s, o) })
	}
	bad := func(name string, lx, rows, cols int) badCall {
		return badCall{name,
			func() { f(make([]float32, lx), rows, cols) },
			func() { ref.Softmax(make([]float64, lx), rows, cols) }}
	}
	runBadSizes(t, []badCall{bad("rows=0", 0, 0, 3), bad("short_x", 5, 2, 3)})
}

func checkSoftmax(f SoftmaxFunc, s RowsShape, o Options) error {
	c := newSoftmaxCase(s, newRand("Softmax", s.Name()), o)
	return c.check(f, expect("Softmax", s.Name(), o, referenceOnly(c)).want, o)
}

// TestCausalAttention checks f against ref.CausalAttention on AttentionShapes: RMS error at most twice that of a
// naive float32 implementation on the same inputs.
func TestCausalAttention(t *testing.T, f CausalAttentionFunc) {
	TestCausalAttentionWith(t, f, Options{})
}

// TestCausalAttentionWith is TestCausalAttention for an implementation of another precision: set the Options'
// InputRounding and BaselineRounding to that precision.
func TestCausalAttentionWith(t *testing.T, f CausalAttentionFunc, o Options) {
	t.Helper()
	for _, s := range AttentionShapes {
		run(t, s.Name(), s.work(), func() error { return checkCausalAttention(f, s, o) })
	}
	bad := func(name string, s AttentionShape, dq, dk int) badCall {
		lq := s.NQ*s.NHeads*s.HeadDim + dq
		lk := s.KVLen*s.NKVHeads*s.HeadDim + dk
		return badCall{name,
			func() {
				f(make([]float32, lq), make([]float32, lq), make([]float32, lk), make([]float32, lk),
					s.NQ, s.KVLen, s.NHeads, s.NKVHeads, s.HeadDim, 1)
			},
			func() {
				ref.CausalAttention(make([]float64, lq), make([]float64, lq), make([]float64, lk), make([]float64, lk),
					s.NQ, s.KVLen, s.NHeads, s.NKVHeads, s.HeadDim, 1)
			}}
	}
	runBadSizes(t, []badCall{
		bad("nq>kvLen", AttentionShape{3, 2, 2, 1, 4}, 0, 0),
		bad("heads_not_multiple", AttentionShape{2, 2, 3, 2, 4}, 0, 0),
		bad("short_q", AttentionShape{2, 3, 2, 1, 4}, -1, 0),
		bad("short_kv", AttentionShape{2, 3, 2, 1, 4}, 0, -4),
	})
}

func checkCausalAttention(f CausalAttentionFunc, s AttentionShape, o Options) error {
	c := newAttentionCase(s, newRand("CausalAttention", s.Name()), o)
	e := expect("CausalAttention", s.Name(), o, func() expected {
		want := c.reference()
		return expected{want, c.naiveError(want, o)}
	})
	return c.check(f, e.want, e.naive)
}

// TestKVAppend checks f against ref.KVAppend on KVAppendShapes: the written slots hold exactly the rows, and
// every other slot (NaN) and every skipped token (slot -1) is left alone.
func TestKVAppend(t *testing.T, f KVAppendFunc) { TestKVAppendWith(t, f, Options{}) }

// TestKVAppendWith is TestKVAppend with inputs rounded as the Options say.
func TestKVAppendWith(t *testing.T, f KVAppendFunc, o Options) {
	t.Helper()
	for _, s := range KVAppendShapes {
		run(t, s.Name(), s.Tokens*s.NKVHeads*s.HeadDim, func() error { return checkKVAppend(f, s, o) })
	}
	bad := func(name string, cacheSlots, tokens, dk int, slots []int32) badCall {
		const row = 2 * 4
		lc, lk := cacheSlots*row, tokens*row+dk
		return badCall{name,
			func() {
				f(make([]float32, lc), make([]float32, lc), make([]float32, lk), make([]float32, lk), slots, 2, 4)
			},
			func() {
				ref.KVAppend(make([]float64, lc), make([]float64, lc), make([]float64, lk), make([]float64, lk), slots, 2, 4)
			}}
	}
	runBadSizes(t, []badCall{bad("slot_out_of_cache", 2, 2, 0, []int32{0, 2}), bad("short_k", 4, 2, -1, []int32{0, 1}),
		bad("no_tokens", 4, 0, 0, nil)})
}

func checkKVAppend(f KVAppendFunc, s KVAppendShape, o Options) error {
	c := newKVAppendCase(s, newRand("KVAppend", s.Name()), o, true)
	return c.check(f, expect("KVAppend", s.Name(), o, referenceOnly(c)).want, o)
}

// TestPagedAttention checks f against ref.PagedAttention on PagedShapes (shuffled block tables, cache slots
// outside every sequence NaN): RMS error at most twice that of a naive float32 implementation.
func TestPagedAttention(t *testing.T, f PagedAttentionFunc) { TestPagedAttentionWith(t, f, Options{}) }

// TestPagedAttentionWith is TestPagedAttention for an implementation of another precision: set the Options'
// InputRounding and BaselineRounding to that precision.
func TestPagedAttentionWith(t *testing.T, f PagedAttentionFunc, o Options) {
	t.Helper()
	for _, s := range PagedShapes {
		run(t, s.Name(), s.work(), func() error { return checkPagedAttention(f, s, o) })
	}
	// Two sequences (lengths 3 and 5, one and two queries) in blocks of 2 tokens, one KV head of 4, 2 query heads.
	bad := func(name string, numBlocks int, qStart, seqLens, tables []int32) badCall {
		lq, lc := int(qStart[len(qStart)-1])*2*4, numBlocks*2*4
		return badCall{name,
			func() {
				f(make([]float32, lq), make([]float32, lq), make([]float32, lc), make([]float32, lc), qStart, seqLens, tables,
					3, 2, 2, 1, 4, 1)
			},
			func() {
				ref.PagedAttention(make([]float64, lq), make([]float64, lq), make([]float64, lc), make([]float64, lc),
					qStart, seqLens, tables, 3, 2, 2, 1, 4, 1)
			}}
	}
	runBadSizes(t, []badCall{
		bad("block_out_of_cache", 5, []int32{0, 1, 3}, []int32{3, 5}, []int32{4, 0, -1, 1, 5, 2}),
		bad("seq_longer_than_table", 6, []int32{0, 1, 3}, []int32{3, 7}, []int32{4, 0, -1, 1, 5, 2}),
		bad("seq_without_queries", 6, []int32{0, 1, 1}, []int32{3, 5}, []int32{4, 0, -1, 1, 5, 2}),
		bad("more_queries_than_tokens", 6, []int32{0, 4, 5}, []int32{3, 5}, []int32{4, 0, -1, 1, 5, 2}),
	})
}

func checkPagedAttention(f PagedAttentionFunc, s PagedShape, o Options) error {
	c := newPagedCase(s, newRand("PagedAttention", s.Name()), o, true)
	e := expect("PagedAttention", s.Name(), o, func() expected {
		want := c.reference()
		return expected{want, c.naiveError(want, o)}
	})
	return c.check(f, e.want, e.naive)
}
