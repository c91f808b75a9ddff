package model

import (
	"fmt"
	"math"

	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/quant"
)

// KVCache is the paged key/value storage of every layer: for layer l, K[l] and V[l] (K16[l] and V16[l] for a
// binary16 cache, K8[l] and V8[l] for an int8 one) are [NumBlocks, BlockSize, NKVHeads, HeadDim] (kernels/ref's
// paged layout), and an int8 cache's KS[l] and VS[l] are [NumBlocks, BlockSize, NKVHeads]: the scale of each
// token's row of each KV head. Which blocks belong to which sequence is not its business: a Batch carries the
// block tables.
type KVCache struct {
	BlockSize, NumBlocks int
	K, V                 [][]float32
	K16, V16             [][]uint16
	K8, V8               [][]int8
	KS, VS               [][]float32
}

// commit writes every element of the cache once, so that its pages are faulted in now rather than by the first
// forward pass that stores into them (llama.cpp likewise clears a context's KV buffer when it makes it).
func (c *KVCache) commit() {
	for l := range c.K {
		clear(c.K[l])
		clear(c.V[l])
	}
	for l := range c.K16 {
		clear(c.K16[l])
		clear(c.V16[l])
	}
	for l := range c.K8 {
		clear(c.K8[l])
		clear(c.V8[l])
		clear(c.KS[l])
		clear(c.VS[l])
	}
}

// Type is the cache's element type.
func (c *KVCache) Type() KVType {
	switch {
	case c.K16 != nil:
		return KVF16
	case c.K8 != nil:
		return KVInt8
	}
	return KVF32
}

// KVType is the element type of a KV cache.
type KVType int

const (
	// KVF32 stores keys and values as float32: exactly what the layer computed.
	KVF32 KVType = iota
	// KVF16 stores them as binary16 (llama.cpp's default cache type): half the bytes, so twice the blocks in a
	// budget and half the reads of decode attention, each key and value rounded to 11 significant bits.
	KVF16
	// KVInt8 stores each token's row of each KV head as int8 codes and a float32 scale (symmetric, as W8A8
	// quantizes a token's activations; llama.cpp's q8_0 cache type quantizes blocks of 32 likewise): a little over
	// a quarter of KVF32's bytes (1 + 4/HeadDim a value), each value within half a step, its row's max/254.
	KVInt8
)

// ParseKVType parses "f32", "f16" or "int8".
func ParseKVType(s string) (KVType, error) {
	switch s {
	case "f32":
		return KVF32, nil
	case "f16":
		return KVF16, nil
	case "int8":
		return KVInt8, nil
	}
	return 0, fmt.Errorf("kv type %q, want f32, f16 or int8", s)
}

func (t KVType) String() string {
	switch t {
	case KVF16:
		return "f16"
	case KVInt8:
		return "int8"
	}
	return "f32"
}

// BytesPerBlock is the memory one cache block of t takes across all layers (keys and values, and an int8
// cache's scales).
func (t KVType) BytesPerBlock(cfg Config, blockSize int) int {
	row := 4 * cfg.KVDim()
	switch t {
	case KVF16:
		row = 2 * cfg.KVDim()
	case KVInt8:
		row = cfg.KVDim() + 4*cfg.NKVHeads
	}
	return 2 * cfg.NLayers * blockSize * row
}

// NewKVCache allocates a float32 cache of numBlocks blocks of blockSize tokens for every layer of cfg.
func NewKVCache(cfg Config, numBlocks, blockSize int) *KVCache {
	return NewKVCacheType(cfg, numBlocks, blockSize, KVF32)
}

// NewKVCacheType is NewKVCache for a cache of type t.
func NewKVCacheType(cfg Config, numBlocks, blockSize int, t KVType) *KVCache {
	c := &KVCache{BlockSize: blockSize, NumBlocks: numBlocks}
	n := numBlocks * blockSize * cfg.KVDim()
	for range cfg.NLayers {
		switch t {
		case KVF16:
			c.K16 = append(c.K16, make([]uint16, n))
			c.V16 = append(c.V16, make([]uint16, n))
		case KVInt8:
			c.K8 = append(c.K8, make([]int8, n))
			c.V8 = append(c.V8, make([]int8, n))
			c.KS = append(c.KS, make([]float32, n/cfg.HeadDim()))
			c.VS = append(c.VS, make([]float32, n/cfg.HeadDim()))
		default:
			c.K = append(c.K, make([]float32, n))
			c.V = append(c.V, make([]float32, n))
		}
	}
	return c
}

// KVBytesPerBlock is the memory one float32 cache block takes across all layers (keys and values).
func KVBytesPerBlock(cfg Config, blockSize int) int { return KVF32.BytesPerBlock(cfg, blockSize) }

// Batch is the work of one forward pass: for each sequence, its next tokens (a prompt chunk, or one decode token),
// how many tokens its cache holds once these are appended, and its block table. Sequence i's tokens are
// Tokens[QStart[i]:QStart[i+1]] at positions SeqLens[i]-n .. SeqLens[i]-1 (n its token count).
type Batch struct {
	Tokens          []int32
	QStart          []int32 // len = sequences + 1, QStart[0] = 0
	SeqLens         []int32
	BlockTables     []int32 // [sequences, MaxBlocksPerSeq]
	MaxBlocksPerSeq int
	// AllLogits asks for the logits of every token (perplexity); otherwise only each sequence's last token's.
	AllLogits bool
}

// Seqs is the number of sequences in the batch.
func (b *Batch) Seqs() int { return len(b.SeqLens) }

// LogitRows is the number of rows Forward writes into logits: every token with AllLogits, else one a sequence.
func (b *Batch) LogitRows() int {
	if b.AllLogits {
		return len(b.Tokens)
	}
	return b.Seqs()
}

// check validates the batch against the model and cache, naming the first bad field.
func (b *Batch) check(cfg Config, cache *KVCache) error {
	ns := len(b.SeqLens)
	switch {
	case ns == 0:
		return fmt.Errorf("batch: no sequences")
	case len(b.QStart) != ns+1 || b.QStart[0] != 0:
		return fmt.Errorf("batch: QStart has %d entries, want %d starting at 0", len(b.QStart), ns+1)
	case int(b.QStart[ns]) != len(b.Tokens):
		return fmt.Errorf("batch: QStart ends at %d, want len(Tokens)=%d", b.QStart[ns], len(b.Tokens))
	case len(b.BlockTables) != ns*b.MaxBlocksPerSeq:
		return fmt.Errorf("batch: %d block table entries, want sequences*MaxBlocksPerSeq=%d", len(b.BlockTables), ns*b.MaxBlocksPerSeq)
	}
	for i := range ns {
		n, L := b.QStart[i+1]-b.QStart[i], b.SeqLens[i]
		if n < 1 || n > L {
			return fmt.Errorf("batch: sequence %d has %d tokens and SeqLens=%d, want 1 <= tokens <= SeqLens", i, n, L)
		}
		if int(L) > b.MaxBlocksPerSeq*cache.BlockSize {
			return fmt.Errorf("batch: sequence %d: SeqLens=%d exceeds its %d blocks of %d", i, L, b.MaxBlocksPerSeq, cache.BlockSize)
		}
		if int(L) > cfg.SeqLen {
			return fmt.Errorf("batch: sequence %d: SeqLens=%d exceeds the model's context of %d", i, L, cfg.SeqLen)
		}
	}
	for _, t := range b.Tokens {
		if t < 0 || int(t) >= cfg.VocabSize {
			return fmt.Errorf("batch: token %d out of the vocabulary [0, %d)", t, cfg.VocabSize)
		}
	}
	return nil
}

// Workspace holds the activations of a forward pass, grown to the largest batch seen and reused after.
type Workspace struct {
	tokens                      int
	x, xb, q, k, v, att, h1, h3 []float32
	pos, slots                  []int32
	qa                          []int8 // activations quantized per token for the integer matmuls
	sa                          []float32
	rows                        []float32
	w8                          []cpu.W8A8Weights // the matrices of a joint Int8 matmul of several tokens
	w4                          []cpu.W4A8Weights // and of Int4
	wf                          []cpu.GEMMWeights // and of F32 or F16
}

func (ws *Workspace) grow(cfg Config, tokens int) {
	if tokens <= ws.tokens {
		return
	}
	ws.tokens = tokens
	dim, kv, hid := cfg.Dim, cfg.KVDim(), cfg.HiddenDim
	ws.x, ws.xb, ws.q, ws.att = make([]float32, tokens*dim), make([]float32, tokens*dim), make([]float32, tokens*dim), make([]float32, tokens*dim)
	ws.k, ws.v = make([]float32, tokens*kv), make([]float32, tokens*kv)
	ws.h1, ws.h3 = make([]float32, tokens*hid), make([]float32, tokens*hid)
	ws.pos, ws.slots = make([]int32, tokens), make([]int32, tokens)
	ws.rows = make([]float32, tokens*dim)
}

// Tap observes activations during a forward pass, for calibration and profiling: at each point of each layer it
// gets the [tokens, width] activations that the named weights read. It must not keep or modify x.
type Tap func(layer int, point TapPoint, x []float32, tokens int)

// TapPoint names where in a decoder layer a Tap sees activations.
type TapPoint int

// The tap points, in forward order.
const (
	TapLayerIn   TapPoint = iota // the residual stream entering the layer [tokens, Dim]
	TapAttnIn                    // the attention norm's output, read by Wq, Wk, Wv [tokens, Dim]
	TapAttnOut                   // attention's output, read by Wo [tokens, Dim]
	TapFFNIn                     // the FFN norm's output, read by W1, W3 [tokens, Dim]
	TapFFNHidden                 // SwiGLU's output, read by W2 [tokens, HiddenDim]
	TapLayerOut                  // the residual stream leaving the layer [tokens, Dim]
)

// Forward runs the batch through the model: it appends every token's key and value to the cache at the slots
// its block table gives, and writes the logits ([b.LogitRows(), VocabSize]) into logits. tap may be nil.
func (m *Model) Forward(b *Batch, cache *KVCache, ws *Workspace, logits []float32, tap Tap) error {
	cfg := m.Config
	if err := b.check(cfg, cache); err != nil {
		return err
	}
	if len(logits) != b.LogitRows()*cfg.VocabSize {
		return fmt.Errorf("forward: len(logits)=%d, want %d rows of %d", len(logits), b.LogitRows(), cfg.VocabSize)
	}
	T, dim, kvDim, hd := len(b.Tokens), cfg.Dim, cfg.KVDim(), cfg.HeadDim()
	ws.grow(cfg, T)
	x, xb := ws.x[:T*dim], ws.xb[:T*dim]
	q, k, v, att := ws.q[:T*dim], ws.k[:T*kvDim], ws.v[:T*kvDim], ws.att[:T*dim]
	h1, h3 := ws.h1[:T*cfg.HiddenDim], ws.h3[:T*cfg.HiddenDim]
	pos, slots := ws.pos[:T], ws.slots[:T]
	for i := range b.Seqs() {
		n := b.QStart[i+1] - b.QStart[i]
		table := b.BlockTables[i*b.MaxBlocksPerSeq:]
		for j := range n {
			p := b.SeqLens[i] - n + j
			t := b.QStart[i] + j
			pos[t] = p
			slots[t] = table[int(p)/cache.BlockSize]*int32(cache.BlockSize) + p%int32(cache.BlockSize)
		}
	}
	for t, tok := range b.Tokens {
		m.Embedding.DequantizeRow(int(tok), x[t*dim:(t+1)*dim])
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	for l, layer := range m.Layers {
		w := layer.Weights()
		if tap != nil {
			tap(l, TapLayerIn, x, T)
		}
		cpu.RMSNorm(xb, x, w.AttnNorm, dim, cfg.NormEps)
		if tap != nil {
			tap(l, TapAttnIn, xb, T)
		}
		ws.matmuls(T, xb, []*quant.Matrix{w.Wq, w.Wk, w.Wv}, [][]float32{q, k, v})
		cpu.RoPE(q, pos, cfg.NHeads, hd, float32(cfg.RopeTheta))
		cpu.RoPE(k, pos, cfg.NKVHeads, hd, float32(cfg.RopeTheta))
		switch cache.Type() {
		case KVF16:
			cpu.KVAppendF16(cache.K16[l], cache.V16[l], k, v, slots, cfg.NKVHeads, hd)
			cpu.PagedAttentionF16(att, q, cache.K16[l], cache.V16[l], b.QStart, b.SeqLens, b.BlockTables,
				b.MaxBlocksPerSeq, cache.BlockSize, cfg.NHeads, cfg.NKVHeads, hd, scale)
		case KVInt8:
			cpu.KVAppendInt8(cache.K8[l], cache.V8[l], cache.KS[l], cache.VS[l], k, v, slots, cfg.NKVHeads, hd)
			cpu.PagedAttentionInt8(att, q, cache.K8[l], cache.V8[l], cache.KS[l], cache.VS[l], b.QStart, b.SeqLens,
				b.BlockTables, b.MaxBlocksPerSeq, cache.BlockSize, cfg.NHeads, cfg.NKVHeads, hd, scale)
		default:
			cpu.KVAppend(cache.K[l], cache.V[l], k, v, slots, cfg.NKVHeads, hd)
			cpu.PagedAttention(att, q, cache.K[l], cache.V[l], b.QStart, b.SeqLens, b.BlockTables,
				b.MaxBlocksPerSeq, cache.BlockSize, cfg.NHeads, cfg.NKVHeads, hd, scale)
		}
		if tap != nil {
			tap(l, TapAttnOut, att, T)
		}
		ws.matmul(T, att, w.Wo, q)
		cpu.AddRMSNorm(xb, x, q, w.FFNNorm, dim, cfg.NormEps)
		if tap != nil {
			tap(l, TapFFNIn, xb, T)
		}
		ws.matmuls(T, xb, []*quant.Matrix{w.W1, w.W3}, [][]float32{h1, h3})
		cpu.SwiGLU(h1, h1, h3)
		if tap != nil {
			tap(l, TapFFNHidden, h1, T)
		}
		ws.matmul(T, h1, w.W2, q)
		for i, d := range q {
			x[i] += d
		}
		if tap != nil {
			tap(l, TapLayerOut, x, T)
		}
	}
	rows := b.LogitRows()
	final := ws.rows[:rows*dim]
	if b.AllLogits {
		copy(final, x)
	} else {
		for i := range b.Seqs() {
			last := int(b.QStart[i+1]) - 1
			copy(final[i*dim:(i+1)*dim], x[last*dim:(last+1)*dim])
		}
	}
	cpu.RMSNorm(final, final, m.FinalNorm, dim, cfg.NormEps)
	ws.matmul(rows, final, m.Output, logits)
	return nil
}

// matmul computes y = x·Wᵀ for tokens rows of x with the kernel that runs on w's format. Int8 and Int4 weights run
// as W8A8 and W4A8 (activations quantized per token, integer dot products), as llama.cpp runs Q8_0 and Q4_0
// weights with Q8_0 activations: W4A16, which widens every weight to float32, is bound by arithmetic, not memory.
// Q8_0 and Q4_0 weights run the same way (cpu.GEMMQ8_0A8, GEMMQ4_0A8: their blocks' scales for groups of 32);
// their products differ from llama.cpp's by the activations' rounding, a token's row here, a block there.
func (ws *Workspace) matmul(tokens int, x []float32, w *quant.Matrix, y []float32) {
	n, k := w.Rows, w.Cols
	x, y = x[:tokens*k], y[:tokens*n]
	switch w.Format {
	case quant.F32:
		cpu.GEMM(tokens, n, k, x, w.F32, y)
	case quant.F16:
		cpu.GEMMF16(tokens, n, k, x, w.Half, y)
	case quant.Int8:
		qa, sa := ws.quantizeRows(tokens, k, x)
		cpu.GEMMW8A8(tokens, n, k, qa, sa, w.Q, w.Scales, y)
	case quant.Int4:
		qa, sa := ws.quantizeRows(tokens, k, x)
		cpu.GEMMW4A8(tokens, n, k, w.Group, qa, sa, w.Packed, w.Scales, w.Zeros, y)
	case quant.Q8_0:
		qa, sa := ws.quantizeRows(tokens, k, x)
		cpu.GEMMQ8_0A8(tokens, n, k, qa, sa, w.Q, w.BlockScales, y)
	case quant.Q4_0:
		qa, sa := ws.quantizeRows(tokens, k, x)
		cpu.GEMMQ4_0A8(tokens, n, k, qa, sa, w.Packed, w.BlockScales, y)
	default:
		panic(fmt.Sprintf("model: no kernel for %v weights", w.Format))
	}
}

// matmuls computes ys[i] = x·Wᵢᵀ for matrices that read the same activations (q, k and v; gate and up). For one
// token in a format whose kernels run a row at a time, the activations are quantized once and the rows of all the
// matrices are split into one chunk a thread (each chunk's kernel calls then run on that thread, the pool's nesting
// rule), so the threads do not meet at the end of every matrix: a decode step's small matmuls cost a few µs of
// fixed time apiece. Each row is computed as the single matmul computes it (bit for bit with AVX-512; the AVX2 GEMV
// sums the last rows of a call, up to three, differently). Matrices of several tokens run as one cpu.GEMMs (F32,
// F16), cpu.GEMMW8A8s or cpu.GEMMW4A8s, which quantize and pack the activations once for all of them (bit for bit
// the separate calls) and split all their rows over the threads as one range.
func (ws *Workspace) matmuls(tokens int, x []float32, mats []*quant.Matrix, ys [][]float32) {
	f, k := mats[0].Format, mats[0].Cols
	same := sameShape(mats)
	if tokens > 1 && same {
		// Several tokens: one call for all the matrices, the activations quantized (Int8, Int4) once and, on the
		// tile paths, packed once, with the matrices' rows split over the threads together.
		switch f {
		case quant.Int8:
			qa, sa := ws.quantizeRows(tokens, k, x)
			ws.w8 = ws.w8[:0]
			for _, w := range mats {
				ws.w8 = append(ws.w8, cpu.W8A8Weights{N: w.Rows, Q: w.Q, Scales: w.Scales})
			}
			cpu.GEMMW8A8s(tokens, k, qa, sa, ws.w8, ys)
			return
		case quant.Int4:
			qa, sa := ws.quantizeRows(tokens, k, x)
			ws.w4 = ws.w4[:0]
			for _, w := range mats {
				ws.w4 = append(ws.w4, cpu.W4A8Weights{N: w.Rows, Packed: w.Packed, Scales: w.Scales, Zeros: w.Zeros})
			}
			cpu.GEMMW4A8s(tokens, k, mats[0].Group, qa, sa, ws.w4, ys)
			return
		case quant.F32, quant.F16:
			ws.wf = ws.wf[:0]
			for _, w := range mats {
				ws.wf = append(ws.wf, cpu.GEMMWeights{N: w.Rows, F32: w.F32, F16: w.Half})
			}
			cpu.GEMMs(tokens, k, x[:tokens*k], ws.wf, ys)
			return
		}
	}
	fused := tokens == 1 && same
	switch f {
	case quant.F32, quant.F16, quant.Int8, quant.Int4, quant.Q8_0, quant.Q4_0:
	default:
		fused = false
	}
	if !fused {
		for i, w := range mats {
			ws.matmul(tokens, x, w, ys[i])
		}
		return
	}
	x = x[:k]
	var qa []int8
	var sa []float32
	if f != quant.F32 && f != quant.F16 {
		qa, sa = ws.quantizeRows(1, k, x)
	}
	rows := 0
	for _, w := range mats {
		rows += w.Rows
	}
	// Rows j of the concatenation belong to the matrix whose range holds j; each chunk runs its share of each.
	cpu.Parallel(rows, 1, func(lo, hi int) {
		base := 0
		for i, w := range mats {
			a, b := max(lo-base, 0), min(hi-base, w.Rows)
			base += w.Rows
			if a >= b {
				continue
			}
			y := ys[i][a:b]
			switch f {
			case quant.F32:
				cpu.GEMV(b-a, k, w.F32[a*k:b*k], x, y)
			case quant.F16:
				cpu.GEMMF16(1, b-a, k, x, w.Half[a*k:b*k], y)
			case quant.Int8:
				cpu.GEMMW8A8(1, b-a, k, qa, sa, w.Q[a*k:b*k], w.Scales[a:b], y)
			case quant.Int4:
				gpr := k / w.Group
				cpu.GEMMW4A8(1, b-a, k, w.Group, qa, sa, w.Packed[a*k/2:b*k/2], w.Scales[a*gpr:b*gpr],
					w.Zeros[a*gpr:b*gpr], y)
			case quant.Q8_0:
				cpu.GEMMQ8_0A8(1, b-a, k, qa, sa, w.Q[a*k:b*k], w.BlockScales[a*k/32:b*k/32], y)
			case quant.Q4_0:
				cpu.GEMMQ4_0A8(1, b-a, k, qa, sa, w.Packed[a*k/2:b*k/2], w.BlockScales[a*k/32:b*k/32], y)
			}
		}
	})
}

// sameShape reports whether the matrices share their format, their columns and (Int4) their group.
func sameShape(mats []*quant.Matrix) bool {
	for _, w := range mats {
		if w.Format != mats[0].Format || w.Cols != mats[0].Cols || (w.Format == quant.Int4 && w.Group != mats[0].Group) {
			return false
		}
	}
	return true
}

// quantizeRows quantizes tokens rows of x [tokens, k] to int8 per token (cpu.QuantizeRowsInt8) into the
// workspace and returns the codes and scales.
func (ws *Workspace) quantizeRows(tokens, k int, x []float32) ([]int8, []float32) {
	if len(ws.qa) < tokens*k {
		ws.qa = make([]int8, tokens*k)
	}
	if len(ws.sa) < tokens {
		ws.sa = make([]float32, tokens)
	}
	qa, sa := ws.qa[:tokens*k], ws.sa[:tokens]
	cpu.QuantizeRowsInt8(tokens, k, x[:tokens*k], qa, sa)
	return qa, sa
}
