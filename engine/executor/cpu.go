package executor

import (
	"fmt"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/quant"
)

// CPUOptions configure a CPU executor.
type CPUOptions struct {
	// Pool is the memory budget that the executor emulates (a GPU's memory at a smaller scale), in KV blocks beside
	// the model at full precision (its layers' formats when NewCPU is called) or in bytes.
	Pool Pool
	// BlockSize is the KV block size in tokens.
	BlockSize int
	// MaxBatchedTokens is the most tokens one step feeds; the workspace is reserved for it.
	MaxBatchedTokens int
	// Attach is the KV blocks attached at the start; 0 attaches every block the budget holds.
	Attach int
	// Start, when set, is each layer's format at the start (each a prepared variant): a policy that quantizes
	// layers from the start (static, selective) loads them so.
	Start []quant.Format
	// KVType is the KV cache's element type: float32 (the zero value), binary16 (half the bytes a block) or int8
	// codes with a scale a row (about a quarter).
	KVType model.KVType
	// Swap is what a layer swap costs. Every variant already sits in host memory, so with the zero value a swap
	// is a pointer switch at the step boundary, and Result.SwapTime is the time that switch took. With a host
	// link, a swap emulates copying the variant over it: a blocking swap sleeps for the transfer inside the step
	// that applies it, an overlapped one takes effect once the transfer would have finished.
	Swap SwapCost
}

// CPU runs steps with the model's forward pass on the CPU kernels (paged attention over the KV cache).
//
// KV storage: the cache is allocated once for the largest block count the budget could ever hold (the budget
// less the smallest prepared variant of every layer, less the workspace). Go's zeroed allocations are committed
// by the OS only when touched, so blocks never attached cost no memory; AttachKV and DetachKV are then logical
// (they move the attached count that the budget accounts and that a batch's block ids must stay below). Variants
// must therefore be prepared (model.AddVariant) before NewCPU.
type CPU struct {
	m     *model.Model
	cache *model.KVCache
	ws    model.Workspace
	opt   CPUOptions

	logits []float32
	tables []int32

	budget     int64
	fullBlocks int

	mu      sync.Mutex // guards the fields below, which SetLayerPrecision, AttachKV and Memory touch
	formats []quant.Format
	swaps   swapQueue
	blocks  int
}

// NewCPU returns an executor over m, whose layers' formats are its full precision, with opt's budget. It fails
// when the budget does not hold the weights, the workspace and opt.Attach blocks, or a starting format is not
// prepared.
func NewCPU(m *model.Model, opt CPUOptions) (*CPU, error) {
	if opt.BlockSize <= 0 || opt.MaxBatchedTokens <= 0 {
		return nil, fmt.Errorf("executor: block size %d and max batched tokens %d, want > 0", opt.BlockSize, opt.MaxBatchedTokens)
	}
	if opt.Start != nil && len(opt.Start) != len(m.Layers) {
		return nil, fmt.Errorf("executor: %d starting formats for %d layers", len(opt.Start), len(m.Layers))
	}
	e := &CPU{m: m, opt: opt, swaps: newSwapQueue(opt.Swap)}
	for _, l := range m.Layers {
		e.formats = append(e.formats, l.Active)
	}
	full := e.memoryLocked()
	var err error
	if e.budget, e.fullBlocks, err = opt.Pool.Budget(full.Weights+full.Workspace, full.BlockBytes); err != nil {
		return nil, err
	}
	for l, f := range opt.Start {
		if err := m.SetPrecision(l, f); err != nil {
			return nil, fmt.Errorf("executor: layer %d starts in %v: %v", l, f, err)
		}
		e.formats[l] = f
	}
	mem := e.memoryLocked()
	minWeights := e.weightBytes(func(l int) quant.Format { return smallestVariant(m.Layers[l]) })
	maxBlocks := int((e.budget - minWeights - mem.Workspace) / mem.BlockBytes)
	if e.blocks, err = attached(mem, opt.Attach); err != nil {
		return nil, err
	}
	e.cache = model.NewKVCacheType(m.Config, maxBlocks, opt.BlockSize, opt.KVType)
	return e, nil
}

func smallestVariant(l *model.Layer) quant.Format {
	best := l.Active
	for f, v := range l.Variants {
		if v.Bytes() < l.Variants[best].Bytes() {
			best = f
		}
	}
	return best
}

// WorkspaceBytes is the workspace a step of tokens tokens over cfg needs: the forward pass's activations (as
// model.Workspace allocates them: residual, normed, query, attention, scratch rows [tokens, Dim]; keys and values
// [tokens, KVDim]; the two SwiGLU inputs [tokens, HiddenDim]; positions and slots; int8 activations and their
// scales) and at most one logit row per token.
func WorkspaceBytes(cfg model.Config, tokens int) int64 {
	t := int64(tokens)
	dim, kv, hid, voc := int64(cfg.Dim), int64(cfg.KVDim()), int64(cfg.HiddenDim), int64(cfg.VocabSize)
	f32 := 5*t*dim + 2*t*kv + 2*t*hid + t*voc
	return 4*f32 + 4*2*t + t*max(dim, hid) + 4*t
}

func (e *CPU) weightBytes(format func(l int) quant.Format) int64 {
	n := int64(e.m.WeightBytes())
	for l, layer := range e.m.Layers {
		n += int64(layer.Variants[format(l)].Bytes() - layer.Weights().Bytes())
	}
	return n
}

func (e *CPU) memoryLocked() Memory {
	cfg := e.m.Config
	bb := int64(e.opt.KVType.BytesPerBlock(cfg, e.opt.BlockSize))
	return Memory{
		Budget:         e.budget,
		FullBlocks:     e.fullBlocks,
		Weights:        e.weightBytes(func(l int) quant.Format { return e.formats[l] }),
		KV:             int64(e.blocks) * bb,
		Workspace:      WorkspaceBytes(cfg, e.opt.MaxBatchedTokens),
		PendingWeights: e.weightBytes(func(l int) quant.Format { return e.swaps.format(l, e.formats[l]) }),
		BlockBytes:     bb,
		Blocks:         e.blocks,
	}
}

// Memory reports the budget and its parts.
func (e *CPU) Memory() Memory {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.memoryLocked()
}

// SetLayerPrecision asks for layer to run in f from the next step; see Executor.
func (e *CPU) SetLayerPrecision(layer int, f quant.Format) error {
	if layer < 0 || layer >= len(e.m.Layers) {
		return fmt.Errorf("executor: layer %d out of range [0, %d)", layer, len(e.m.Layers))
	}
	if _, ok := e.m.Layers[layer].Variants[f]; !ok {
		return fmt.Errorf("executor: layer %d has no %v variant prepared", layer, f)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.swaps.ask(layer, f, int64(e.m.Layers[layer].Variants[f].Bytes()), e.memoryLocked)
	return err
}

// AttachKV grows the attached KV blocks; see Executor.
func (e *CPU) AttachKV(blocks int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	mem := e.memoryLocked()
	if blocks <= 0 || blocks > mem.Attachable() || e.blocks+blocks > e.cache.NumBlocks {
		return fmt.Errorf("executor: attach %d KV blocks, room for %d", blocks, min(mem.Attachable(), e.cache.NumBlocks-e.blocks))
	}
	e.blocks += blocks
	return nil
}

// DetachKV shrinks the attached KV blocks; see Executor.
func (e *CPU) DetachKV(blocks int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if blocks <= 0 || blocks > e.blocks {
		return fmt.Errorf("executor: detach %d KV blocks of %d attached", blocks, e.blocks)
	}
	e.blocks -= blocks
	return nil
}

// applyPending makes the swaps that are due at a step starting at now active; it returns the formats the step
// runs with, the attached block count, the layers swapped in order, and their transfer time.
func (e *CPU) applyPending(now time.Duration) ([]quant.Format, int, []int, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	swapped, formats, transfer := e.swaps.due(now, nil)
	for i, l := range swapped {
		if err := e.m.SetPrecision(l, formats[i]); err != nil {
			panic(err) // SetLayerPrecision checked the variant exists
		}
		e.formats[l] = formats[i]
	}
	return append([]quant.Format(nil), e.formats...), e.blocks, swapped, transfer
}

// Step applies pending swaps, then runs the batch through the model and picks each asked-for next token.
func (e *CPU) Step(b *Batch) (Result, error) {
	start := time.Now()
	formats, blocks, swapped, transfer := e.applyPending(b.Now)
	res := Result{Formats: formats, Swapped: swapped, SwapTime: transfer}
	if e.opt.Swap.HostLink == 0 {
		res.SwapTime = time.Since(start)
	} else if e.opt.Swap.Blocking && transfer > 0 {
		time.Sleep(transfer) // the copy the step waits for
	}
	defer func() { e.setLastEnd(b.Now + res.Duration) }()
	n := len(b.Seqs)
	if n == 0 {
		return res, fmt.Errorf("executor: empty batch")
	}
	if t := b.Tokens(); t > e.opt.MaxBatchedTokens {
		return res, fmt.Errorf("executor: batch of %d tokens, the workspace holds %d", t, e.opt.MaxBatchedTokens)
	}
	mb := 0
	for _, s := range b.Seqs {
		mb = max(mb, len(s.Table))
	}
	fb := model.Batch{QStart: make([]int32, 1, n+1), SeqLens: make([]int32, n), MaxBlocksPerSeq: mb}
	e.tables = append(e.tables[:0], make([]int32, n*mb)...)
	for i, s := range b.Seqs {
		fb.Tokens = append(fb.Tokens, s.Tokens...)
		fb.QStart = append(fb.QStart, int32(len(fb.Tokens)))
		fb.SeqLens[i] = int32(s.SeqLen)
		if len(s.Tokens) == 0 || len(s.Tokens) > s.SeqLen || s.SeqLen > len(s.Table)*e.opt.BlockSize {
			return res, fmt.Errorf("executor: sequence %d feeds %d tokens up to position %d, its table of %d blocks of %d holds %d",
				i, len(s.Tokens), s.SeqLen, len(s.Table), e.opt.BlockSize, len(s.Table)*e.opt.BlockSize)
		}
		for _, id := range s.Table {
			if id < 0 || int(id) >= blocks {
				return res, fmt.Errorf("executor: sequence %d uses block %d, %d attached", i, id, blocks)
			}
		}
		copy(e.tables[i*mb:], s.Table)
	}
	fb.BlockTables = e.tables
	voc := e.m.Config.VocabSize
	if cap(e.logits) < n*voc {
		e.logits = make([]float32, n*voc)
	}
	logits := e.logits[:n*voc]
	if err := e.m.Forward(&fb, e.cache, &e.ws, logits, nil); err != nil {
		return res, err
	}
	row := func(i int) []float32 { return logits[i*voc : (i+1)*voc] }
	res.Next = nextTokens(b.Seqs, row, func(i int) int32 { return int32(sample.Argmax(row(i))) })
	res.Duration = time.Since(start)
	return res, nil
}

// nextTokens picks each sequence's next token: -1 where none is asked for, its sampler's draw from its logit row,
// or the greedy token.
func nextTokens(seqs []SeqWork, row func(i int) []float32, greedy func(i int) int32) []int32 {
	next := make([]int32, len(seqs))
	for i, s := range seqs {
		switch {
		case !s.Sample:
			next[i] = -1
		case s.Sampler != nil:
			next[i] = int32(s.Sampler.Sample(row(i), s.SeqLen))
		default:
			next[i] = greedy(i)
		}
	}
	return next
}

func (e *CPU) setLastEnd(t time.Duration) {
	e.mu.Lock()
	e.swaps.lastEnd = max(e.swaps.lastEnd, t)
	e.mu.Unlock()
}

// Geometry reports the executor's block size and tokens per step and the model's context and vocabulary.
func (e *CPU) Geometry() Geometry {
	c := e.m.Config
	return Geometry{BlockSize: e.opt.BlockSize, MaxBatchedTokens: e.opt.MaxBatchedTokens, Context: c.SeqLen, Vocab: c.VocabSize, Layers: c.NLayers}
}

// LayerBytes reports each layer's bytes in each prepared variant.
func (e *CPU) LayerBytes() []LayerBytes {
	out := make([]LayerBytes, len(e.m.Layers))
	for l, layer := range e.m.Layers {
		out[l] = LayerBytes{}
		for f, v := range layer.Variants {
			out[l][f] = int64(v.Bytes())
		}
	}
	return out
}
