package kerneltest

import (
	"errors"
	"math"
	"math/rand/v2"

	"github.com/morphlab/morphlab/kernels/ref"
)

// A case is one op's inputs. Its reference method computes the float64 outputs with kernels/ref; its check method
// runs an implementation on copies of the inputs (outputs NaN-poisoned) and compares. The same cases are built
// from random shapes by TestX and read from the golden files by TestGolden, so their fields are exported for JSON.

type gemmCase struct {
	M, N, K int
	A, W    []float32
}

func newGEMMCase(s GEMMShape, rng *rand.Rand, o Options) *gemmCase {
	return &gemmCase{M: s.M, N: s.N, K: s.K, A: normal(rng, s.M*s.K, 1, o), W: normal(rng, s.N*s.K, 1, o)}
}

func (c *gemmCase) reference() map[string][]float64 {
	out := make([]float64, c.M*c.N)
	ref.GEMM(c.M, c.N, c.K, to64(c.A), to64(c.W), out)
	return map[string][]float64{"c": out}
}

func (c *gemmCase) check(f GEMMFunc, want map[string][]float64, o Options) error {
	a, w, out := clone(c.A), clone(c.W), poisoned(c.M*c.N)
	if err := call(func() { f(c.M, c.N, c.K, a, w, out) }); err != nil {
		return err
	}
	return errors.Join(unchanged("a", a, c.A), unchanged("w", w, c.W), compare("c", out, want["c"], o.tol(gemmTol(c.K))))
}

type rmsNormCase struct {
	Dim       int
	Eps       float32
	X, Weight []float32
}

// rowScaled returns rows×dim normal samples whose rows have scales spread over 10^-3..10^0.5, so that some rows
// are dominated by eps (a kernel that drops eps fails) and some are not.
func rowScaled(rng *rand.Rand, rows, dim int, o Options) []float32 {
	x := normal(rng, rows*dim, 1, Options{})
	for r := 0; r < rows; r++ {
		s := float32(math.Pow(10, -3+3.5*rng.Float64()))
		for i := range x[r*dim : (r+1)*dim] {
			x[r*dim+i] *= s
		}
	}
	return o.round(x)
}

func newRMSNormCase(s RowsShape, rng *rand.Rand, o Options) *rmsNormCase {
	return &rmsNormCase{Dim: s.Dim, Eps: 1e-5, X: rowScaled(rng, s.Rows, s.Dim, o), Weight: normal(rng, s.Dim, 1, o)}
}

func (c *rmsNormCase) reference() map[string][]float64 {
	out := make([]float64, len(c.X))
	ref.RMSNorm(out, to64(c.X), to64(c.Weight), c.Dim, float64(c.Eps))
	return map[string][]float64{"out": out}
}

func (c *rmsNormCase) check(f RMSNormFunc, want map[string][]float64, o Options) error {
	x, w, out := clone(c.X), clone(c.Weight), poisoned(len(c.X))
	if err := call(func() { f(out, x, w, c.Dim, c.Eps) }); err != nil {
		return err
	}
	return errors.Join(unchanged("x", x, c.X), unchanged("weight", w, c.Weight), compare("out", out, want["out"], o.tol(ElementwiseTol)))
}

type addRMSNormCase struct {
	Dim                 int
	Eps                 float32
	Residual, X, Weight []float32
}

func newAddRMSNormCase(s RowsShape, rng *rand.Rand, o Options) *addRMSNormCase {
	return &addRMSNormCase{Dim: s.Dim, Eps: 1e-5, Residual: rowScaled(rng, s.Rows, s.Dim, o),
		X: rowScaled(rng, s.Rows, s.Dim, o), Weight: normal(rng, s.Dim, 1, o)}
}

func (c *addRMSNormCase) reference() map[string][]float64 {
	out, res := make([]float64, len(c.X)), to64(c.Residual)
	ref.AddRMSNorm(out, res, to64(c.X), to64(c.Weight), c.Dim, float64(c.Eps))
	return map[string][]float64{"out": out, "residual": res}
}

func (c *addRMSNormCase) check(f AddRMSNormFunc, want map[string][]float64, o Options) error {
	res, x, w, out := clone(c.Residual), clone(c.X), clone(c.Weight), poisoned(len(c.X))
	if err := call(func() { f(out, res, x, w, c.Dim, c.Eps) }); err != nil {
		return err
	}
	return errors.Join(unchanged("x", x, c.X), unchanged("weight", w, c.Weight),
		compare("residual", res, want["residual"], o.tol(ElementwiseTol)), compare("out", out, want["out"], o.tol(ElementwiseTol)))
}

type ropeCase struct {
	NHeads, HeadDim int
	Theta           float32
	Pos             []int32
	X               []float32
}

func newRoPECase(s RoPEShape, rng *rand.Rand, o Options) *ropeCase {
	pos := make([]int32, s.Tokens)
	for i := range pos {
		pos[i] = rng.Int32N(4096)
	}
	return &ropeCase{NHeads: s.NHeads, HeadDim: s.HeadDim, Theta: s.Theta, Pos: pos,
		X: normal(rng, s.Tokens*s.NHeads*s.HeadDim, 1, o)}
}

func (c *ropeCase) reference() map[string][]float64 {
	x := to64(c.X)
	ref.RoPE(x, c.Pos, c.NHeads, c.HeadDim, float64(c.Theta))
	return map[string][]float64{"x": x}
}

func (c *ropeCase) check(f RoPEFunc, want map[string][]float64, o Options) error {
	x, pos := clone(c.X), clone(c.Pos)
	if err := call(func() { f(x, pos, c.NHeads, c.HeadDim, c.Theta) }); err != nil {
		return err
	}
	return compare("x", x, want["x"], o.tol(ElementwiseTol))
}

type swigluCase struct{ Gate, Up []float32 }

// newSwiGLUCase draws gates with σ = 4, so that silu's saturating tails (g ≪ 0, g ≫ 0) are exercised.
func newSwiGLUCase(s RowsShape, rng *rand.Rand, o Options) *swigluCase {
	return &swigluCase{Gate: normal(rng, s.Rows*s.Dim, 4, o), Up: normal(rng, s.Rows*s.Dim, 1, o)}
}

func (c *swigluCase) reference() map[string][]float64 {
	out := make([]float64, len(c.Gate))
	ref.SwiGLU(out, to64(c.Gate), to64(c.Up))
	return map[string][]float64{"out": out}
}

func (c *swigluCase) check(f SwiGLUFunc, want map[string][]float64, o Options) error {
	g, u, out := clone(c.Gate), clone(c.Up), poisoned(len(c.Gate))
	if err := call(func() { f(out, g, u) }); err != nil {
		return err
	}
	return errors.Join(unchanged("gate", g, c.Gate), unchanged("up", u, c.Up), compare("out", out, want["out"], o.tol(ElementwiseTol)))
}

type softmaxCase struct {
	Rows, Cols int
	X          []float32
}

// newSoftmaxCase draws logits with σ = 4 around a per-row offset of up to ±120, beyond which exp overflows
// float32: a softmax that does not subtract the row's maximum fails.
func newSoftmaxCase(s RowsShape, rng *rand.Rand, o Options) *softmaxCase {
	x := normal(rng, s.Rows*s.Dim, 4, Options{})
	for r := 0; r < s.Rows; r++ {
		off := float32(240*rng.Float64() - 120)
		for i := r * s.Dim; i < (r+1)*s.Dim; i++ {
			x[i] += off
		}
	}
	return &softmaxCase{Rows: s.Rows, Cols: s.Dim, X: o.round(x)}
}

func (c *softmaxCase) reference() map[string][]float64 {
	x := to64(c.X)
	ref.Softmax(x, c.Rows, c.Cols)
	return map[string][]float64{"x": x}
}

func (c *softmaxCase) check(f SoftmaxFunc, want map[string][]float64, o Options) error {
	x := clone(c.X)
	if err := call(func() { f(x, c.Rows, c.Cols) }); err != nil {
		return err
	}
	return compare("x", x, want["x"], o.tol(ElementwiseTol))
}

type attentionCase struct {
	NQ, KVLen, NHeads, NKVHeads, HeadDim int
	Scale                                float32
	Q, K, V                              []float32
}

// newAttentionCase draws q with σ = 2 so that the softmax is peaked (scores of σ ≈ 2 after scaling), not flat.
func newAttentionCase(s AttentionShape, rng *rand.Rand, o Options) *attentionCase {
	return &attentionCase{NQ: s.NQ, KVLen: s.KVLen, NHeads: s.NHeads, NKVHeads: s.NKVHeads, HeadDim: s.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(s.HeadDim))),
		Q:     normal(rng, s.NQ*s.NHeads*s.HeadDim, 2, o),
		K:     normal(rng, s.KVLen*s.NKVHeads*s.HeadDim, 1, o),
		V:     normal(rng, s.KVLen*s.NKVHeads*s.HeadDim, 1, o)}
}

func (c *attentionCase) reference() map[string][]float64 {
	out := make([]float64, len(c.Q))
	ref.CausalAttention(out, to64(c.Q), to64(c.K), to64(c.V), c.NQ, c.KVLen, c.NHeads, c.NKVHeads, c.HeadDim, float64(c.Scale))
	return map[string][]float64{"out": out}
}

// naiveError is the nMSE of the naive attention baseline on this case (see naive.go).
func (c *attentionCase) naiveError(want map[string][]float64, o Options) float64 {
	base := poisoned(len(c.Q))
	naiveCausalAttention(base, c.Q, c.K, c.V, c.NQ, c.KVLen, c.NHeads, c.NKVHeads, c.HeadDim, c.Scale, o.BaselineRounding)
	return naiveNMSE(base, want["out"])
}

// check compares with the attention rule, given the naive baseline's error on this case.
func (c *attentionCase) check(f CausalAttentionFunc, want map[string][]float64, naive float64) error {
	q, k, v, out := clone(c.Q), clone(c.K), clone(c.V), poisoned(len(c.Q))
	if err := call(func() { f(out, q, k, v, c.NQ, c.KVLen, c.NHeads, c.NKVHeads, c.HeadDim, c.Scale) }); err != nil {
		return err
	}
	if err := errors.Join(unchanged("q", q, c.Q), unchanged("k", k, c.K), unchanged("v", v, c.V)); err != nil {
		return err
	}
	return compareAttention(out, want["out"], naive)
}

type kvAppendCase struct {
	NKVHeads, HeadDim int
	Slots             []int32
	KCache, VCache    []float32
	K, V              []float32
}

// newKVAppendCase writes the tokens into distinct random slots of the cache, every third token skipped with slot
// -1. With poison the cache is NaN-filled (a slot written by mistake shows), else random (for the golden files,
// where JSON has no NaN).
func newKVAppendCase(s KVAppendShape, rng *rand.Rand, o Options, poison bool) *kvAppendCase {
	row := s.NKVHeads * s.HeadDim
	perm := rng.Perm(s.CacheSlots)
	slots := make([]int32, s.Tokens)
	for t := range slots {
		slots[t] = int32(perm[t])
		if t%3 == 2 {
			slots[t] = -1
		}
	}
	c := &kvAppendCase{NKVHeads: s.NKVHeads, HeadDim: s.HeadDim, Slots: slots,
		KCache: poisoned(s.CacheSlots * row), VCache: poisoned(s.CacheSlots * row),
		K: normal(rng, s.Tokens*row, 1, o), V: normal(rng, s.Tokens*row, 1, o)}
	if !poison {
		c.KCache, c.VCache = normal(rng, len(c.KCache), 1, o), normal(rng, len(c.VCache), 1, o)
	}
	return c
}

func (c *kvAppendCase) reference() map[string][]float64 {
	kc, vc := to64(c.KCache), to64(c.VCache)
	ref.KVAppend(kc, vc, to64(c.K), to64(c.V), c.Slots, c.NKVHeads, c.HeadDim)
	return map[string][]float64{"kCache": kc, "vCache": vc}
}

func (c *kvAppendCase) check(f KVAppendFunc, want map[string][]float64, o Options) error {
	kc, vc, k, v := clone(c.KCache), clone(c.VCache), clone(c.K), clone(c.V)
	slots := clone(c.Slots)
	if err := call(func() { f(kc, vc, k, v, slots, c.NKVHeads, c.HeadDim) }); err != nil {
		return err
	}
	return errors.Join(compareExact("kCache", kc, want["kCache"]), compareExact("vCache", vc, want["vCache"]))
}

type pagedCase struct {
	BlockSize, MaxBlocksPerSeq, NHeads, NKVHeads, HeadDim int
	Scale                                                 float32
	QStart, SeqLens, BlockTables                          []int32
	Q, KCache, VCache                                     []float32
}

// newPagedCase lays the batch out in a cache of shuffled blocks (block tables are not contiguous, and unused
// table entries are -1) with three blocks to spare. With poison, every cache slot that no sequence owns is NaN:
// an implementation must not read past a sequence's length, not even to multiply by zero.
func newPagedCase(s PagedShape, rng *rand.Rand, o Options, poison bool) *pagedCase {
	nSeqs := len(s.Seqs)
	blocksOf := func(n int) int { return (n + s.BlockSize - 1) / s.BlockSize }
	maxBlocks, total := 0, 0
	for _, q := range s.Seqs {
		maxBlocks = max(maxBlocks, blocksOf(q.Len))
		total += blocksOf(q.Len)
	}
	maxBlocks++
	numBlocks := total + 3
	perm := rng.Perm(numBlocks)
	c := &pagedCase{BlockSize: s.BlockSize, MaxBlocksPerSeq: maxBlocks, NHeads: s.NHeads, NKVHeads: s.NKVHeads,
		HeadDim: s.HeadDim, Scale: float32(1 / math.Sqrt(float64(s.HeadDim))),
		QStart: make([]int32, nSeqs+1), SeqLens: make([]int32, nSeqs), BlockTables: make([]int32, nSeqs*maxBlocks)}
	row := s.NKVHeads * s.HeadDim
	c.KCache = normal(rng, numBlocks*s.BlockSize*row, 1, o)
	c.VCache = normal(rng, numBlocks*s.BlockSize*row, 1, o)
	used := make([]bool, numBlocks*s.BlockSize)
	next := 0
	for i, q := range s.Seqs {
		c.SeqLens[i] = int32(q.Len)
		c.QStart[i+1] = c.QStart[i] + int32(q.NQ)
		table := c.BlockTables[i*maxBlocks : (i+1)*maxBlocks]
		for b := range table {
			table[b] = -1
			if b < blocksOf(q.Len) {
				table[b] = int32(perm[next])
				next++
			}
		}
		for t := 0; t < q.Len; t++ {
			used[int(table[t/s.BlockSize])*s.BlockSize+t%s.BlockSize] = true
		}
	}
	if poison {
		for slot, u := range used {
			if !u {
				copy(c.KCache[slot*row:(slot+1)*row], poisoned(row))
				copy(c.VCache[slot*row:(slot+1)*row], poisoned(row))
			}
		}
	}
	c.Q = normal(rng, int(c.QStart[nSeqs])*s.NHeads*s.HeadDim, 2, o)
	return c
}

func (c *pagedCase) reference() map[string][]float64 {
	out := make([]float64, len(c.Q))
	ref.PagedAttention(out, to64(c.Q), to64(c.KCache), to64(c.VCache), c.QStart, c.SeqLens, c.BlockTables,
		c.MaxBlocksPerSeq, c.BlockSize, c.NHeads, c.NKVHeads, c.HeadDim, float64(c.Scale))
	return map[string][]float64{"out": out}
}

// naiveError is the nMSE of the naive attention baseline on this case (see naive.go).
func (c *pagedCase) naiveError(want map[string][]float64, o Options) float64 {
	base := poisoned(len(c.Q))
	naivePagedAttention(base, c, o.BaselineRounding)
	return naiveNMSE(base, want["out"])
}

// check compares with the attention rule, given the naive baseline's error on this case.
func (c *pagedCase) check(f PagedAttentionFunc, want map[string][]float64, naive float64) error {
	q, kc, vc, out := clone(c.Q), clone(c.KCache), clone(c.VCache), poisoned(len(c.Q))
	qStart, seqLens, tables := clone(c.QStart), clone(c.SeqLens), clone(c.BlockTables)
	if err := call(func() {
		f(out, q, kc, vc, qStart, seqLens, tables, c.MaxBlocksPerSeq, c.BlockSize, c.NHeads, c.NKVHeads, c.HeadDim, c.Scale)
	}); err != nil {
		return err
	}
	if err := errors.Join(unchanged("q", q, c.Q), unchanged("kCache", kc, c.KCache), unchanged("vCache", vc, c.VCache)); err != nil {
		return err
	}
	return compareAttention(out, want["out"], naive)
}

func clone[T any](x []T) []T { return append([]T(nil), x...) }
