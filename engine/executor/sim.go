package executor

import (
	"fmt"
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/internal/splitmix"
	"github.com/morphlab/morphlab/quant"
)

// SimOptions configure a simulated executor.
type SimOptions struct {
	// Cost gives each step's duration; its Config is the model simulated and its KV the cache's element type.
	Cost *costmodel.Model
	// Formats are the weight formats prepared for every decoder layer; layers start in the first unless Start
	// says otherwise.
	Formats []quant.Format
	// Start, when set, is each layer's format at the start (each one of Formats): a policy that quantizes layers
	// from the start (static, selective) loads them so.
	Start []quant.Format
	// Outer is the embedding's and classifier's format (F32 or F16; F32 with tied embeddings shares the table).
	Outer quant.Format
	// Pool, BlockSize, MaxBatchedTokens and Attach are as in CPUOptions; the full precision is Formats[0].
	Pool             Pool
	BlockSize        int
	MaxBatchedTokens int
	Attach           int
	// Swap is what a layer swap's transfer costs; its zero value makes swaps free. Transfers are timed on the
	// engine's clock (Batch.Now), as the CPU executor times them.
	Swap SwapCost
	// Seed chooses the tokens drawn.
	Seed uint64
	// StopRate is the probability that a sampled token is the stop token (id 2, </s> in Llama vocabularies);
	// 0 never draws it, so that requests run to their length limit as a trace prescribes.
	StopRate float64
}

// simFirstToken is the smallest token a Sim draws besides the stop token: ids 0-2 are <unk>, <s> and </s> in
// Llama vocabularies.
const (
	simFirstToken = 3
	simStopToken  = 2
)

// Sim is an executor without weights: it keeps the CPU executor's memory accounting (weights by each layer's
// format, attached KV blocks, the workspace of the largest step as WorkspaceBytes counts it, in float32
// activations) and checks every batch as the CPU executor does (and that each table covers its positions), but
// a step's duration comes from the cost model and its tokens are drawn deterministically: a hash of the seed,
// the position sampled and the token fed last (a SeqWork's Sampler is not used), so that a sequence recomputed
// after preemption draws the same tokens again, and identical runs are identical.
//
// Swaps are transfers over the host link (SwapCost): each moves the layer's new variant (prebuilt in host
// memory) onto the device. Overlapped transfers go one after another in the order asked, each starting no
// earlier than the end of the last step; a blocking one adds its transfer to the step that applies it. Asking
// a layer for the format it runs in cancels a swap still pending for it (the link time already booked stays
// booked).
type Sim struct {
	opt        SimOptions
	cfg        model.Config
	layerBytes map[quant.Format]int64
	outer      int64

	formats []quant.Format // never changed once published in a Result: a swap makes a new slice
	counts  []costmodel.LayerFormat
	swaps   swapQueue
	blocks  int

	budget     int64
	fullBlocks int
}

// NewSim returns a simulated executor. It fails when the options are inconsistent or the budget does not hold
// the weights, the workspace and opt.Blocks blocks.
func NewSim(opt SimOptions) (*Sim, error) {
	if opt.Cost == nil {
		return nil, fmt.Errorf("executor: sim without a cost model")
	}
	if opt.BlockSize <= 0 || opt.MaxBatchedTokens <= 0 {
		return nil, fmt.Errorf("executor: block size %d and max batched tokens %d, want > 0", opt.BlockSize, opt.MaxBatchedTokens)
	}
	if len(opt.Formats) == 0 {
		return nil, fmt.Errorf("executor: sim with no weight formats prepared")
	}
	if !(opt.StopRate >= 0 && opt.StopRate <= 1) {
		return nil, fmt.Errorf("executor: stop rate %g, want 0..1", opt.StopRate)
	}
	cfg := opt.Cost.Config
	if cfg.VocabSize <= simFirstToken {
		return nil, fmt.Errorf("executor: vocabulary of %d tokens, a sim draws from %d on", cfg.VocabSize, simFirstToken)
	}
	if opt.Outer != quant.F32 && opt.Outer != quant.F16 {
		return nil, fmt.Errorf("executor: embedding format %v, want f32 or f16", opt.Outer)
	}
	e := &Sim{opt: opt, cfg: cfg, layerBytes: map[quant.Format]int64{}, outer: costmodel.OuterBytes(cfg, opt.Outer), swaps: newSwapQueue(opt.Swap)}
	for _, f := range opt.Formats {
		if _, err := quant.ParseFormat(f.String()); err != nil {
			return nil, fmt.Errorf("executor: sim: %v", err)
		}
		e.layerBytes[f] = costmodel.LayerBytes(cfg, f)
	}
	if c := opt.Cost.Calibration; c != nil {
		if err := c.Check(cfg, opt.Formats); err != nil {
			return nil, fmt.Errorf("executor: sim: %v", err)
		}
	}
	e.formats = slices.Repeat([]quant.Format{opt.Formats[0]}, cfg.NLayers)
	full := e.Memory()
	var err error
	if e.budget, e.fullBlocks, err = opt.Pool.Budget(full.Weights+full.Workspace, full.BlockBytes); err != nil {
		return nil, err
	}
	if opt.Start != nil {
		if len(opt.Start) != cfg.NLayers {
			return nil, fmt.Errorf("executor: sim: %d starting formats for %d layers", len(opt.Start), cfg.NLayers)
		}
		for l, f := range opt.Start {
			if _, ok := e.layerBytes[f]; !ok {
				return nil, fmt.Errorf("executor: sim: layer %d starts in %v, which is not prepared (%v)", l, f, opt.Formats)
			}
		}
		e.formats = slices.Clone(opt.Start)
	}
	e.recount()
	mem := e.Memory()
	if e.blocks, err = attached(mem, opt.Attach); err != nil {
		return nil, err
	}
	return e, nil
}

// recount tallies the layers in each format, for the cost model.
func (e *Sim) recount() {
	e.counts = e.counts[:0]
	for _, f := range e.opt.Formats {
		if n := countFormat(e.formats, f); n > 0 {
			e.counts = append(e.counts, costmodel.LayerFormat{Format: f, Layers: n})
		}
	}
}

func countFormat(fs []quant.Format, f quant.Format) int {
	n := 0
	for _, g := range fs {
		if g == f {
			n++
		}
	}
	return n
}

func (e *Sim) weights(format func(l int) quant.Format) int64 {
	n := e.outer
	for l := range e.cfg.NLayers {
		n += e.layerBytes[format(l)]
	}
	return n
}

// Memory reports the budget and its parts, as the CPU executor counts them.
func (e *Sim) Memory() Memory {
	bb := int64(e.opt.Cost.KV.BytesPerBlock(e.cfg, e.opt.BlockSize))
	return Memory{
		Budget:         e.budget,
		FullBlocks:     e.fullBlocks,
		Weights:        e.weights(func(l int) quant.Format { return e.formats[l] }),
		KV:             int64(e.blocks) * bb,
		Workspace:      WorkspaceBytes(e.cfg, e.opt.MaxBatchedTokens),
		PendingWeights: e.weights(func(l int) quant.Format { return e.swaps.format(l, e.formats[l]) }),
		BlockBytes:     bb,
		Blocks:         e.blocks,
	}
}

// SetLayerPrecision asks for layer to run in f once its transfer is done; see Executor and SwapCost.
func (e *Sim) SetLayerPrecision(layer int, f quant.Format) error {
	if layer < 0 || layer >= e.cfg.NLayers {
		return fmt.Errorf("executor: layer %d out of range [0, %d)", layer, e.cfg.NLayers)
	}
	if _, ok := e.layerBytes[f]; !ok {
		return fmt.Errorf("executor: layer %d has no %v variant prepared", layer, f)
	}
	if f == e.formats[layer] {
		delete(e.swaps.pending, layer)
		return nil
	}
	_, err := e.swaps.ask(layer, f, e.layerBytes[f], e.Memory)
	return err
}

// AttachKV grows the attached KV blocks; see Executor.
func (e *Sim) AttachKV(blocks int) error {
	mem := e.Memory()
	if blocks <= 0 || blocks > mem.Attachable() {
		return fmt.Errorf("executor: attach %d KV blocks, room for %d", blocks, mem.Attachable())
	}
	e.blocks += blocks
	return nil
}

// DetachKV shrinks the attached KV blocks; see Executor.
func (e *Sim) DetachKV(blocks int) error {
	if blocks <= 0 || blocks > e.blocks {
		return fmt.Errorf("executor: detach %d KV blocks of %d attached", blocks, e.blocks)
	}
	e.blocks -= blocks
	return nil
}

// applySwaps makes the swaps due at a step starting at now active (all of them when swaps block or are free),
// and returns the layers swapped, their transfer time and the part of it that blocks this step.
func (e *Sim) applySwaps(now time.Duration) (swapped []int, transfer, blocking time.Duration) {
	swapped, to, transfer := e.swaps.due(now, nil)
	if len(swapped) == 0 {
		return nil, 0, 0
	}
	formats := slices.Clone(e.formats)
	for i, l := range swapped {
		formats[l] = to[i]
	}
	e.formats = formats
	e.recount()
	if e.opt.Swap.Blocking {
		blocking = transfer
	}
	return swapped, transfer, blocking
}

// Step applies the swaps that are due, checks the batch, and returns the cost model's duration and a drawn
// token for each sequence that asked for one. Of a sequence's table it checks the blocks the step writes: the
// blocks before them were checked by the steps that wrote them, and a simulated step reads nothing.
func (e *Sim) Step(b *Batch) (Result, error) {
	swapped, transfer, blocking := e.applySwaps(b.Now)
	res := Result{Formats: e.formats, Swapped: swapped, SwapTime: transfer}
	defer func() { e.swaps.lastEnd = b.Now + res.Duration }()
	n := len(b.Seqs)
	if n == 0 {
		return res, fmt.Errorf("executor: empty batch")
	}
	if t := b.Tokens(); t > e.opt.MaxBatchedTokens {
		return res, fmt.Errorf("executor: batch of %d tokens, the workspace holds %d", t, e.opt.MaxBatchedTokens)
	}
	var w costmodel.Work
	for i, s := range b.Seqs {
		switch {
		case len(s.Tokens) == 0:
			return res, fmt.Errorf("executor: sequence %d feeds no tokens", i)
		case s.SeqLen < len(s.Tokens) || s.SeqLen > e.cfg.SeqLen:
			return res, fmt.Errorf("executor: sequence %d feeds %d tokens to reach %d positions, want %d..%d",
				i, len(s.Tokens), s.SeqLen, len(s.Tokens), e.cfg.SeqLen)
		case len(s.Table)*e.opt.BlockSize < s.SeqLen:
			return res, fmt.Errorf("executor: sequence %d holds %d positions, its table of %d blocks %d",
				i, s.SeqLen, len(s.Table), len(s.Table)*e.opt.BlockSize)
		}
		limit := uint32(e.blocks)
		for _, id := range s.Table[(s.SeqLen-len(s.Tokens))/e.opt.BlockSize : (s.SeqLen-1)/e.opt.BlockSize+1] {
			if uint32(id) >= limit { // a negative id too
				return res, fmt.Errorf("executor: sequence %d uses block %d, %d attached", i, id, e.blocks)
			}
		}
		w.AddSeq(len(s.Tokens), s.SeqLen, s.Sample)
	}
	next := make([]int32, n)
	for i, s := range b.Seqs {
		next[i] = -1
		if s.Sample {
			next[i] = e.draw(s.SeqLen, s.Tokens[len(s.Tokens)-1])
		}
	}
	res.Next = next
	res.Duration = e.opt.Cost.StepTime(w, e.counts) + blocking
	return res, nil
}

// draw is the token sampled at position pos after token last: a splitmix64 hash of (seed, pos, last) mapped onto
// [simFirstToken, vocab), or the stop token with probability StopRate.
func (e *Sim) draw(pos int, last int32) int32 {
	h := splitmix.Hash(e.opt.Seed ^ splitmix.Hash(uint64(pos)*splitmix.Gamma^uint64(uint32(last))))
	if e.opt.StopRate > 0 && float64(h>>11)/(1<<53) < e.opt.StopRate {
		return simStopToken
	}
	span := uint64(e.cfg.VocabSize - simFirstToken)
	return int32(simFirstToken + splitmix.Hash(h)%span)
}

// Geometry reports the executor's block size and tokens per step and the model's context and vocabulary.
func (e *Sim) Geometry() Geometry {
	c := e.cfg
	return Geometry{BlockSize: e.opt.BlockSize, MaxBatchedTokens: e.opt.MaxBatchedTokens, Context: c.SeqLen, Vocab: c.VocabSize, Layers: c.NLayers}
}

// LayerBytes reports each layer's bytes in each prepared format.
func (e *Sim) LayerBytes() []LayerBytes {
	out := make([]LayerBytes, e.cfg.NLayers)
	for l := range out {
		out[l] = LayerBytes{}
		for f, n := range e.layerBytes {
			out[l][f] = n
		}
	}
	return out
}
