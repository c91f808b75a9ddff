package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/quant"
)

// maxAbsDiff returns max |a-b| over equal-length slices, and +Inf if either holds a NaN.
func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		x := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(x) {
			return math.Inf(1)
		}
		d = math.Max(d, x)
	}
	return d
}

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(rng.IntN(vocab))
	}
	return t
}

// TestBinAndGGUFLogitsAgree: the llama2.c and GGUF copies of stories260K give the same logits at every position.
func TestBinAndGGUFLogitsAgree(t *testing.T) {
	bin, gguf := loadStories(t, "stories260K.bin"), loadStories(t, "stories260K.gguf")
	toks := randomTokens(rand.New(rand.NewPCG(1, 2)), 100, bin.Config.VocabSize)
	logits := [2][]float32{feedAll(t, bin, toks), feedAll(t, gguf, toks)}
	if d := maxAbsDiff(logits[0], logits[1]); d > 1e-5 {
		t.Fatalf("max |logit(.bin) - logit(.gguf)| = %g, want <= 1e-5", d)
	}
}

// feedAll feeds toks to a fresh Sequence of m and returns a copy of the logits of every position.
func feedAll(t *testing.T, m *Model, toks []int32) []float32 {
	t.Helper()
	seq, err := NewSequence(m, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	logits, err := seq.Feed(toks, true)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), logits...)
}

// step is one forward pass of a batch test: for each sequence, how many tokens it feeds (0: it sits out).
type step []int

// runBatched feeds each sequence's tokens through shared-cache batches as the steps say, with block tables
// drawn from a shuffled pool, and returns every logit row each sequence received, in order.
func runBatched(t *testing.T, m *Model, seqs [][]int32, steps []step, blockSize int) [][]float32 {
	return runBatchedKV(t, m, seqs, steps, blockSize, KVF32)
}

// runBatchedKV is runBatched over a cache of type kv.
func runBatchedKV(t *testing.T, m *Model, seqs [][]int32, steps []step, blockSize int, kv KVType) [][]float32 {
	t.Helper()
	maxLen := 0
	for _, s := range seqs {
		maxLen = max(maxLen, len(s))
	}
	perSeq := (maxLen + blockSize - 1) / blockSize
	pool := rand.New(rand.NewPCG(7, 7)).Perm(perSeq * len(seqs))
	cache := NewKVCacheType(m.Config, perSeq*len(seqs), blockSize, kv)
	var ws Workspace
	fed := make([]int, len(seqs))
	out := make([][]float32, len(seqs))
	for _, st := range steps {
		b := &Batch{MaxBlocksPerSeq: perSeq, QStart: []int32{0}, AllLogits: true}
		var members []int
		for i, n := range st {
			if n == 0 {
				continue
			}
			members = append(members, i)
			b.Tokens = append(b.Tokens, seqs[i][fed[i]:fed[i]+n]...)
			b.QStart = append(b.QStart, int32(len(b.Tokens)))
			b.SeqLens = append(b.SeqLens, int32(fed[i]+n))
			for j := range perSeq {
				b.BlockTables = append(b.BlockTables, int32(pool[i*perSeq+j]))
			}
		}
		logits := make([]float32, b.LogitRows()*m.Config.VocabSize)
		if err := m.Forward(b, cache, &ws, logits, nil); err != nil {
			t.Fatal(err)
		}
		for k, i := range members {
			rows := logits[int(b.QStart[k])*m.Config.VocabSize : int(b.QStart[k+1])*m.Config.VocabSize]
			out[i] = append(out[i], rows...)
			fed[i] += st[i]
		}
	}
	return out
}

// TestBatchMatchesSingle: sequences served together — prompts in chunks, decode steps, sequences joining late,
// block tables scattered over a shared cache — get the same logits as each sequence fed alone with the same
// steps and page size, in every layer format the model can take. At page size 16 "alone" is also Sequence,
// which feeds the whole prompt at once. (Attention tiles follow pages, so a different page size changes
// rounding, not results: that is not what this test is about.)
func TestBatchMatchesSingle(t *testing.T) {
	m := loadStories(t, "stories260K.bin")
	rng := rand.New(rand.NewPCG(3, 4))
	seqs := [][]int32{randomTokens(rng, 40, 512), randomTokens(rng, 23, 512), randomTokens(rng, 9, 512)}
	steps := []step{
		{17, 5, 0},  // two prompt chunks
		{20, 18, 0}, // the rest of sequence 0's prompt, sequence 1 finishes its prompt
		{1, 0, 7},   // decode, and sequence 2 joins with a prompt chunk
		{1, 0, 2},
		{1, 0, 0},
	}
	for _, f := range []quant.Format{quant.F32, quant.F16, quant.Int8, quant.Int4} {
		for l := range m.Layers {
			if _, err := m.AddVariant(l, f); err != nil {
				t.Fatal(err)
			}
			if err := m.SetPrecision(l, f); err != nil {
				t.Fatal(err)
			}
		}
		for _, bs := range []int{1, 16} {
			batched := runBatched(t, m, seqs, steps, bs)
			for i, s := range seqs {
				var own []step
				fed := 0
				for _, st := range steps {
					if st[i] > 0 {
						own = append(own, step{st[i]})
						fed += st[i]
					}
				}
				refs := map[string][]float32{"served alone": runBatched(t, m, [][]int32{s}, own, bs)[0]}
				if bs == sequenceBlock {
					refs["fed to a Sequence"] = feedAll(t, m, s[:fed])
				}
				// Int4 (W4A8) runs a call of 12 tokens or more (groups of a multiple of 64) as a GEMM tile and fewer
				// one token at a time; the two add the scaled group sums in different orders, so Int4 gets twice
				// the bound.
				tol := 1e-5
				if f == quant.Int4 {
					tol = 2e-5
				}
				for name, ref := range refs {
					if d := maxAbsDiff(batched[i], ref); d > tol || len(batched[i]) != len(ref) {
						t.Errorf("%v, page size %d, sequence %d: max |batched - %s| = %g over %d vs %d logits, want <= %g",
							f, bs, i, name, d, len(batched[i]), len(ref), tol)
					}
				}
			}
		}
	}
}

// TestKVReduced serves sequences over binary16 and int8 caches, on stories260K and on a synthetic model of its
// shape: batched they get bit for bit the logits each gets alone over the same cache type (attention over
// binary16 values, or int8 codes times their scales, is exact in float32) where the matrix products are
// token-invariant (cpu.TokenInvariant), and their logits stay within a bound of those over a float32 cache.
func TestKVReduced(t *testing.T) {
	s260, err := ShapeByName("stories260K")
	if err != nil {
		t.Fatal(err)
	}
	synth, err := FromCheckpoint(Synthesize(s260, 8))
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]*Model{"synthetic": synth}
	if _, err := datadir.Path("models/stories260K.bin"); err == nil {
		models["stories260K"] = loadStories(t, "stories260K.bin")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	seqs := [][]int32{randomTokens(rng, 40, 512), randomTokens(rng, 23, 512), randomTokens(rng, 9, 512)}
	steps := []step{{17, 5, 0}, {20, 18, 0}, {1, 0, 7}, {1, 0, 2}, {1, 0, 0}}
	// Where the matrix products are not token-invariant (packed tiles, which sum in an order that depends on the
	// tokens sharing a call: cpu.TokenInvariant), batched and alone agree to float32 rounding of the logits.
	sameAlone := 0.0
	if !cpu.TokenInvariant() {
		sameAlone = 2e-5
	}
	for _, c := range []struct {
		kv    KVType
		bound float64
	}{{KVF16, 0.02}, {KVInt8, 0.6}} { // int8: stories260K's rows are 8 values a scale (its PPL: 5.3749 -> 5.3843)
		for name, m := range models {
			batched := runBatchedKV(t, m, seqs, steps, 16, c.kv)
			exact := runBatchedKV(t, m, seqs, steps, 16, KVF32)
			for i, s := range seqs {
				var own []step
				for _, st := range steps {
					if st[i] > 0 {
						own = append(own, step{st[i]})
					}
				}
				alone := runBatchedKV(t, m, [][]int32{s}, own, 16, c.kv)[0]
				if d := maxAbsDiff(batched[i], alone); d > sameAlone || len(batched[i]) != len(alone) {
					t.Errorf("%s, sequence %d: max |batched - alone| = %g over an %v cache, want <= %g", name, i, d, c.kv, sameAlone)
				}
				d := maxAbsDiff(batched[i], exact[i])
				t.Logf("%s, sequence %d: max |%v cache - f32 cache| = %.3g", name, i, c.kv, d)
				if d > c.bound || d == 0 {
					t.Errorf("%s, sequence %d: max |logit over %v cache - over f32 cache| = %g, want in (0, %g]", name, i,
						c.kv, d, c.bound)
				}
			}
		}
	}
}

func TestForwardRejectsBadBatches(t *testing.T) {
	m := loadStories(t, "stories260K.bin")
	cache := NewKVCache(m.Config, 4, 16)
	var ws Workspace
	good := func() *Batch {
		return &Batch{Tokens: []int32{1, 2}, QStart: []int32{0, 2}, SeqLens: []int32{2}, BlockTables: []int32{0, 1, 2, 3}, MaxBlocksPerSeq: 4}
	}
	cases := []struct {
		name  string
		edit  func(b *Batch)
		error string
	}{
		{"token out of vocabulary", func(b *Batch) { b.Tokens[1] = 512 }, "token 512"},
		{"QStart too short", func(b *Batch) { b.QStart = []int32{0} }, "QStart"},
		{"more tokens than SeqLens", func(b *Batch) { b.SeqLens[0] = 1 }, "SeqLens=1"},
		{"too long for its blocks", func(b *Batch) { b.SeqLens[0] = 65 }, "exceeds its 4 blocks"},
		{"block table size", func(b *Batch) { b.BlockTables = b.BlockTables[:3] }, "block table"},
	}
	for _, c := range cases {
		b := good()
		c.edit(b)
		err := m.Forward(b, cache, &ws, make([]float32, m.Config.VocabSize), nil)
		if err == nil || !strings.Contains(err.Error(), c.error) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.error)
		}
	}
	if err := m.Forward(good(), cache, &ws, make([]float32, 3), nil); err == nil || !strings.Contains(err.Error(), "len(logits)") {
		t.Errorf("short logits: error %v, want one naming len(logits)", err)
	}
}

// TestOutputFormat: a quantized classifier is counted in WeightBytes on its own, gives logits close to the F32
// classifier's, and F32 makes a tied model's classifier the embedding table again.
func TestOutputFormat(t *testing.T) {
	m := loadStories(t, "stories260K.bin")
	toks := randomTokens(rand.New(rand.NewPCG(5, 6)), 30, m.Config.VocabSize)
	logitsWith := func() []float32 { return feedAll(t, m, toks) }
	base, baseBytes := logitsWith(), m.WeightBytes()
	if err := m.SetOutputFormat(quant.Int8); err != nil {
		t.Fatal(err)
	}
	if got, want := m.WeightBytes(), baseBytes+m.Output.Bytes(); got != want {
		t.Errorf("WeightBytes with an int8 classifier = %d, want %d (embedding kept, classifier added)", got, want)
	}
	if c := quant.Cosine(base, logitsWith()); c < 0.9999 {
		t.Errorf("cosine of int8-classifier logits to f32's = %.6f, want >= 0.9999", c)
	}
	if err := m.SetOutputFormat(quant.F32); err != nil {
		t.Fatal(err)
	}
	if !m.outputIsEmbedding() || m.WeightBytes() != baseBytes {
		t.Errorf("after SetOutputFormat(F32): classifier is the embedding %v, WeightBytes %d, want true, %d", m.outputIsEmbedding(), m.WeightBytes(), baseBytes)
	}
	if d := maxAbsDiff(base, logitsWith()); d != 0 {
		t.Errorf("F32 classifier restored: logits moved by %g, want 0", d)
	}
	if err := m.SetOutputFormat(quant.BF16); err == nil {
		t.Error("a bf16 classifier was accepted; no kernel runs it")
	}
}

// TestMatmulsMatchSeparate: the one-token matmul of q, k, v (and of gate and up) over the matrices' joint rows
// gives what a matmul of each gives, in every format with a row kernel, whatever the thread count.
func TestMatmulsMatchSeparate(t *testing.T) {
	wide := tinyConfig(false)
	wide.Dim, wide.HiddenDim, wide.NHeads, wide.NKVHeads = 256, 384, 8, 2
	for _, cfg := range []Config{tinyConfig(false), wide} {
		m, err := FromCheckpoint(randomCheckpoint(cfg, 3))
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, cfg.Dim)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)))
		}
		for _, f := range []quant.Format{quant.F32, quant.F16, quant.Int8, quant.Int4, quant.Q8_0, quant.Q4_0} {
			w, err := m.AddVariant(0, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 2, 3} {
				prev := cpu.SetThreads(threads)
				for _, mats := range [][]*quant.Matrix{{w.Wq, w.Wk, w.Wv}, {w.W1, w.W3}} {
					var ws Workspace
					ws.grow(cfg, 1)
					got, want := make([][]float32, len(mats)), make([][]float32, len(mats))
					for i, mat := range mats {
						got[i] = make([]float32, mat.Rows)
						want[i] = make([]float32, mat.Rows)
						ws.matmul(1, x, mat, want[i])
					}
					ws.matmuls(1, x, mats, got)
					for i := range mats {
						var scale float64
						for _, v := range want[i] {
							scale = math.Max(scale, math.Abs(float64(v)))
						}
						if d := maxAbsDiff(got[i], want[i]); d > 1e-6*scale {
							t.Errorf("dim %d %v threads %d matrix %d: joint matmul differs by %g (outputs up to %g)",
								cfg.Dim, f, threads, i, d, scale)
						}
					}
				}
				cpu.SetThreads(prev)
			}
		}
	}
}

// TestParseKVType round-trips every cache type through its name and rejects others with an error naming them all.
func TestParseKVType(t *testing.T) {
	for _, kv := range []KVType{KVF32, KVF16, KVInt8} {
		if got, err := ParseKVType(kv.String()); err != nil || got != kv {
			t.Errorf("ParseKVType(%q) = %v, %v, want %v", kv.String(), got, err, kv)
		}
	}
	if _, err := ParseKVType("q4"); err == nil || !strings.Contains(err.Error(), `"q4"`) ||
		!strings.Contains(err.Error(), "f32, f16 or int8") {
		t.Errorf("ParseKVType(q4): error %v, want one naming it and the types", err)
	}
}

// TestGGUFQuantizedForward runs GGUF Q8_0 and Q4_0 files, whose blocks the load repacks, against the F32 model of
// the same values (the file converted back to F32). Their activations are quantized per token, as W8A8's are,
// and only those: the logits (24 prompt tokens, the GEMM tile) are closer to the F32 model's than those of the
// engine's Int8 (W8A8) variant of the same weights, which also rounds the weights (relative RMS; on this random
// model W8A8 is about 4% off, Q8_0 and Q4_0 about 3%). The prompt fed whole gives the logits fed a token at a time
// (the row kernels), up to the rounding of the tile's different summation order.
func TestGGUFQuantizedForward(t *testing.T) {
	cfg := Config{Dim: 256, HiddenDim: 512, NLayers: 2, NHeads: 8, NKVHeads: 4, VocabSize: 300, SeqLen: 64,
		RopeTheta: 10000, NormEps: 1e-5}
	src := Synthesize(cfg, 9)
	toks := randomTokens(rand.New(rand.NewPCG(9, 10)), 24, cfg.VocabSize)
	for _, typ := range []TensorType{Q8_0, Q4_0} {
		q, err := ConvertLayers(src, typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ConvertLayers(q, F32, nil)
		if err != nil {
			t.Fatal(err)
		}
		mq, err := FromCheckpoint(q)
		if err != nil {
			t.Fatal(err)
		}
		mf, err := FromCheckpoint(back)
		if err != nil {
			t.Fatal(err)
		}
		if f := mq.Layers[0].Base; f.String() != strings.ToLower(typ.String()) {
			t.Fatalf("%v file: layers load as %v", typ, f)
		}
		whole, exact := feedAll(t, mq, toks), feedAll(t, mf, toks)
		for l := range mf.Layers {
			if _, err := mf.AddVariant(l, quant.Int8); err != nil {
				t.Fatal(err)
			}
			if err := mf.SetPrecision(l, quant.Int8); err != nil {
				t.Fatal(err)
			}
		}
		int8Err := relRMS(feedAll(t, mf, toks), exact)
		if e := relRMS(whole, exact); !(e < int8Err) {
			t.Errorf("%v: logits %.4f relative RMS from the F32 model of the same weights, want below W8A8's %.4f", typ, e, int8Err)
		}
		seq, err := NewSequence(mq, len(toks))
		if err != nil {
			t.Fatal(err)
		}
		var single []float32
		for _, tok := range toks {
			logits, err := seq.Feed([]int32{tok}, true)
			if err != nil {
				t.Fatal(err)
			}
			single = append(single, logits...)
		}
		if e := relRMS(whole, single); !(e < 1e-5) {
			t.Errorf("%v: prompt fed whole vs a token at a time: relative RMS %.3g, want < 1e-5", typ, e)
		}
	}
}

// relRMS is ‖a - b‖ / ‖b‖.
func relRMS(a, b []float32) float64 {
	var num, den float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}
