// Package executor runs the engine's iterations. An Executor takes one batch (each sequence's next tokens, its cache
// length and block table), runs the model over it and returns each sequence's next token and how long the step
// took. It owns the weights and the KV storage; the kv.Manager above it owns only block ids. The scheduler and the
// morphing controller see only this interface, so a real (CPU) and a simulated executor run the same engine code.
//
// NewCPU runs the model's forward pass on the CPU kernels; NewSim holds no weights and takes each step's time
// from engine/executor/costmodel (a roofline fitted to measured GPU operator times, or this CPU's calibration), with
// the CPU executor's memory accounting and swap semantics. Package exectest is the behaviour suite both pass.
package executor

import (
	"fmt"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/quant"
)

// SeqWork is one sequence's share of a step: Tokens are appended at positions SeqLen-len(Tokens) .. SeqLen-1 of its
// cache, whose blocks Table lists in order.
type SeqWork struct {
	Tokens []int32
	SeqLen int
	Table  []int32
	// Sample asks for the sequence's next token (its last prompt chunk or a decode step); a prompt chunk that does
	// not end the prompt only fills the cache.
	Sample bool
	// Sampler draws the next token, at position SeqLen; nil means greedy (argmax).
	Sampler *sample.Sampler
}

// Batch is the work of one iteration.
type Batch struct {
	Seqs []SeqWork
	// Now is the engine's clock when the step starts; an executor times overlapped swap transfers against it.
	Now time.Duration
}

// Tokens is the number of tokens the batch feeds.
func (b *Batch) Tokens() int {
	n := 0
	for _, s := range b.Seqs {
		n += len(s.Tokens)
	}
	return n
}

// Result is what one step produced.
type Result struct {
	// Next holds each sequence's next token, or -1 where it was not asked for (SeqWork.Sample false).
	Next []int32
	// Duration is how long the step took: wall time for a real executor, cost-model time for a simulated one.
	Duration time.Duration
	// Formats are the layers' precisions the step ran with (pending swaps are applied before a step).
	Formats []quant.Format
	// Swapped lists the layers whose asked-for precision took effect at this step.
	Swapped []int
	// SwapTime is the transfer time of the swaps that took effect at this step; a blocking swap's is also part
	// of Duration.
	SwapTime time.Duration
}

// Geometry is what an executor fixes about the steps it runs. The engine takes it from the executor instead of
// repeating it in its own options.
type Geometry struct {
	BlockSize        int // KV block size in tokens
	MaxBatchedTokens int // the most tokens one step feeds (the workspace holds that many)
	Context          int // the model's context length: the most positions a sequence may reach
	Vocab            int // vocabulary size
	Layers           int // decoder layers
}

// LayerBytes is one decoder layer's weight bytes in each format prepared for it, so that what a swap frees is
// known without trying it.
type LayerBytes map[quant.Format]int64

// SwapCost is what moving a layer's variant onto the device costs: its bytes over the host link. With HostLink 0
// a swap takes effect at the next step boundary and costs no time. Otherwise an overlapped swap (the default)
// takes effect at the first step boundary after its transfer has finished, the steps in between running the old
// precision; a blocking swap takes effect at the next boundary and adds its transfer time to that step.
type SwapCost struct {
	HostLink float64 // bytes per second; 0: swaps are free
	Blocking bool
}

// Executor runs iterations on one device.
type Executor interface {
	// Step runs one batch. The batch is the caller's until Step returns: the engine reuses its arrays, so an
	// executor keeps none of them.
	Step(b *Batch) (Result, error)
	// Geometry reports the block size, tokens per step, context and vocabulary the executor was built with.
	Geometry() Geometry
	// LayerBytes reports, for each decoder layer, its bytes in each prepared format.
	LayerBytes() []LayerBytes
	// SetLayerPrecision asks for layer to run in format f from the next step on; the variant must have been
	// prepared. It returns at once; the swap happens at the next step boundary. It fails when the variant is
	// missing or when the memory budget could not hold the layer in f (detach KV first).
	SetLayerPrecision(layer int, f quant.Format) error
	// Memory reports the memory budget and what holds it.
	Memory() Memory
	// AttachKV grows the KV storage by blocks blocks (ids following the current ones); it fails when the budget
	// cannot hold them with every swap asked for so far done.
	AttachKV(blocks int) error
	// DetachKV shrinks the KV storage by its last blocks blocks.
	DetachKV(blocks int) error
}

// Pool sizes an executor's memory budget, in the KV blocks it holds or in bytes: with Blocks, the budget holds the
// model at full precision, the workspace and that many KV blocks (the pool a full-precision deployment has, which
// quantized layers grow); with Bytes, it is that many bytes. Exactly one is set. Every executor sizes its budget
// with Pool.Budget.
type Pool struct {
	Blocks int
	Bytes  int64
}

// Budget returns the budget in bytes and the KV blocks it holds at full precision, given the bytes of the model at
// full precision and the workspace (fixed) and of a KV block. It fails when the pool sets neither or both, or when
// the budget does not hold fixed and one block.
func (p Pool) Budget(fixed, blockBytes int64) (budget int64, blocks int, err error) {
	switch {
	case blockBytes <= 0:
		return 0, 0, fmt.Errorf("executor: KV blocks of %d bytes, want > 0", blockBytes)
	case (p.Blocks != 0) == (p.Bytes != 0) || p.Blocks < 0 || p.Bytes < 0:
		return 0, 0, fmt.Errorf("executor: pool of %d blocks and %d bytes, want one of them, above 0", p.Blocks, p.Bytes)
	case p.Blocks > 0:
		budget = fixed + int64(p.Blocks)*blockBytes
	default:
		budget = p.Bytes
	}
	if budget-fixed < blockBytes {
		return 0, 0, fmt.Errorf("executor: a budget of %d bytes does not hold the %d bytes of full-precision weights and workspace and one KV block of %d",
			budget, fixed, blockBytes)
	}
	return budget, int((budget - fixed) / blockBytes), nil
}

// attached is the blocks an executor attaches at the start: want, or with want 0 every block the budget holds
// beside the starting weights (mem, before any is attached); it fails when the budget does not hold want.
func attached(mem Memory, want int) (int, error) {
	if want == 0 {
		want = mem.Attachable()
	}
	if want <= 0 || want > mem.Attachable() {
		return 0, fmt.Errorf("executor: budget of %d bytes holds %d KV blocks of %d beside %d bytes of weights and %d of workspace, want %d",
			mem.Budget, mem.Attachable(), mem.BlockBytes, mem.Weights, mem.Workspace, want)
	}
	return want, nil
}

// Memory is a device's memory budget in bytes and its parts. Used = Weights + KV + Workspace exactly.
type Memory struct {
	Budget int64
	// FullBlocks is the KV pool the budget holds beside the model at full precision and the workspace.
	FullBlocks int
	Weights    int64 // model weights by each layer's current precision
	KV         int64 // KV pool: attached blocks × BlockBytes
	Workspace  int64 // activations and logits of the largest step, reserved
	// PendingWeights is what Weights becomes once the swaps asked for are applied.
	PendingWeights int64
	BlockBytes     int64 // bytes of one KV block over all layers
	Blocks         int   // KV blocks attached
}

// Used is the memory in use.
func (m Memory) Used() int64 { return m.Weights + m.KV + m.Workspace }

// Free is the budget not in use.
func (m Memory) Free() int64 { return m.Budget - m.Used() }

// SwapFrees is what the pending swaps free (negative when they need more than they free).
func (m Memory) SwapFrees() int64 { return m.Weights - m.PendingWeights }

// Attachable is the number of whole KV blocks that fit in the budget once pending swaps are applied (and while
// they are not: the larger of current and pending weights counts).
func (m Memory) Attachable() int {
	room := m.Budget - max(m.Weights, m.PendingWeights) - m.KV - m.Workspace
	if room <= 0 || m.BlockBytes == 0 {
		return 0
	}
	return int(room / m.BlockBytes)
}

// Clock is the engine's time: the wall clock, or a virtual clock that the engine advances by each step's
// duration (and moves to the next arrival when idle), so that a simulated run has a timeline.
type Clock interface {
	Now() time.Duration
	Advance(d time.Duration)
}

// WallClock is real time since it was made; Advance does nothing because time passes on its own.
type WallClock struct{ start time.Time }

// NewWallClock returns a wall clock reading 0 now.
func NewWallClock() *WallClock { return &WallClock{start: time.Now()} }

// Now is the time since the clock was made.
func (c *WallClock) Now() time.Duration { return time.Since(c.start) }

// Advance does nothing: wall time advances by itself.
func (c *WallClock) Advance(time.Duration) {}

// VirtualClock is time that moves only when advanced. It is safe for concurrent use.
type VirtualClock struct {
	mu sync.Mutex
	t  time.Duration
}

// Now is the virtual time.
func (c *VirtualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (a negative d is ignored).
func (c *VirtualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.t += d
	}
}
