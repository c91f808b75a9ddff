package executor

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/quant"
)

// CUDAOptions configure a CUDA executor.
type CUDAOptions struct {
	// Pool is the memory budget on the GPU (the device arena: layers, workspace and KV blocks), in KV blocks beside
	// the model at full precision or in bytes (see Pool).
	Pool Pool
	// BlockSize is the KV block size in tokens; MaxBatchedTokens the most tokens one step feeds.
	BlockSize, MaxBatchedTokens int
	// Attach is the KV blocks attached at the start; 0 attaches every block the budget holds.
	Attach int
	// Start, when set, is each layer's format at the start (each a prepared variant).
	Start []quant.Format
	// Swap with a host link emulates that link's timing on top of the real copies, as the CPU executor does. With
	// the zero value a swap takes effect at the next step boundary, which waits for its copy.
	Swap SwapCost
	// Overlap lets the device's copies time the swaps (the paper's mechanism, and what serving uses): a swap
	// takes effect at the first step boundary after its host-to-device copy, on a side stream beside the steps,
	// has completed. It takes no emulated link.
	Overlap bool
	// StagingSlots is how many swap copies may be in flight at once (each needs a slot of the workspace the size
	// of the largest quantized variant); 0 means 4, the most layers morph:default swaps in one action. More swaps
	// asked at once wait for a slot and take effect at later boundaries.
	StagingSlots int
}

// CUDA runs steps on an NVIDIA GPU with the kernels of kernels/cuda (NewCUDA; the tests also run it on an
// emulated device over the CPU kernels), in the storage type of the model's layers (f32, f16 or bf16: activations,
// KV cache and full-precision weights), Int8 variants as W8A8 and Int4 variants as W4A16.
//
// Memory: one device allocation, laid out by arena: the outer weights, the workspace, one region a layer sized
// for its full-precision image with the layer's current variant at its end, and KV blocks in the pool and in the
// freed heads of quantized layers' regions. Every variant of every layer is prepared in pinned host memory. A
// swap copies the variant's image on a side stream while steps run: the part that lands in the region's free
// head straight there, the part that overwrites the variant in use into a staging slot, moved into place at the
// step boundary that applies the swap (a device-to-device copy before the step's kernels). The KV blocks in the
// way of a larger variant are moved elsewhere when the swap is asked.
//
// A step: the batch's int32 inputs are uploaded (block ids remapped to the arena's), then on the default
// stream: embedding gather; per layer RMSNorm (fused with the residual add after the first), the Q/K/V GEMMs in
// the layer's format, RoPE, KV append, attention (FlashAttention-2 for whole prompts when the type and head
// dimension allow, paged split-KV attention for the rest), the output GEMM, the fused add and FFN norm, the gate
// and up GEMMs, SwiGLU and the down GEMM; then the final norm over each sequence's last row, the classifier and an
// argmax a row on the device. A sequence with a sampler gets its logit row copied back and sampled on the host.
type CUDA struct {
	g     gpu
	cfg   model.Config
	t     kcuda.DType
	opt   CUDAOptions
	base  devPtr
	ar    *arena
	outer devOuter
	ws    devWorkspace
	vars  []map[quant.Format]cudaVariant
	scale float32

	budget     int64
	fullBlocks int

	flashOK bool // the storage type and head dimension have a FlashAttention-2 kernel

	// host scratch of a step: the sequences in the device's order and the inverse, their int32 inputs
	order, slot                         []int
	ids                                 []int32
	tok, pos, slots, last, qstart, lens []int32
	tables                              []int32
	next                                []int32
	keepLogits                          bool
	logits                              []float32

	mu        sync.Mutex // guards the fields below, which SetLayerPrecision, AttachKV and Memory touch
	formats   []quant.Format
	swaps     swapQueue
	copies    map[int]*swapCopy
	queue     []int // layers whose copies wait for a staging slot, in the order asked
	freeSlots []int
}

// cudaVariant is one layer variant: its image's layout and the image in pinned host memory.
type cudaVariant struct {
	layout devLayer
	host   []byte
}

// swapCopy is the device copy of a swap asked for: direct bytes go straight into the layer's region, the rest
// into staging slot slot (-1 while it waits for one).
type swapCopy struct {
	format quant.Format
	direct int64
	slot   int
	job    copyJob // nil until the copy starts
	noop   bool    // the layer is asked for the format it runs: nothing to copy
}

// newCUDA returns an executor over m on device g, whose layers' formats (f32, f16 or bf16, all the same) are its
// full precision, with opt's budget. It copies what it needs: m may be dropped after. Close frees the device and
// pinned memory.
func newCUDA(g gpu, m *model.Model, opt CUDAOptions) (*CUDA, error) {
	cfg := m.Config
	if opt.BlockSize <= 0 || opt.MaxBatchedTokens <= 0 {
		return nil, fmt.Errorf("executor: block size %d and max batched tokens %d, want > 0", opt.BlockSize, opt.MaxBatchedTokens)
	}
	if opt.Start != nil && len(opt.Start) != len(m.Layers) {
		return nil, fmt.Errorf("executor: %d starting formats for %d layers", len(opt.Start), len(m.Layers))
	}
	if opt.StagingSlots == 0 {
		opt.StagingSlots = 4
	}
	if opt.Overlap && opt.Swap != (SwapCost{}) {
		return nil, fmt.Errorf("executor: overlapped swaps timed by the device and an emulated host link %+v: give one", opt.Swap)
	}
	full := m.Layers[0].Active
	t, err := storageType(full)
	if err != nil {
		return nil, err
	}
	e := &CUDA{g: g, cfg: cfg, t: t, opt: opt, flashOK: kcuda.FlashPrefillOK(t, cfg.HeadDim()), swaps: newSwapQueue(opt.Swap), copies: map[int]*swapCopy{},
		scale: float32(1 / math.Sqrt(float64(cfg.HeadDim())))}
	// Each variant's image is written straight into its pinned buffer, layers in parallel: a 7B model's images
	// are 17 GB.
	var stage int64
	regionBytes, startBytes := make([]int64, len(m.Layers)), make([]int64, len(m.Layers))
	type job struct {
		dst []byte
		l   *layout
	}
	var jobs []job
	err = g.Do(func() error {
		for l, layer := range m.Layers {
			if layer.Active != full {
				return fmt.Errorf("executor: layer %d runs %v, layer 0 %v: the CUDA executor's layers start in one format", l, layer.Active, full)
			}
			e.vars = append(e.vars, map[quant.Format]cudaVariant{})
			for f, w := range layer.Variants {
				lay, img, err := layoutLayer(w, t)
				if err != nil {
					return fmt.Errorf("executor: layer %d in %v: %w", l, f, err)
				}
				host, err := g.AllocPinned(lay.Bytes)
				if err != nil {
					return err
				}
				e.vars[l][f] = cudaVariant{layout: lay, host: host}
				jobs = append(jobs, job{host, img})
				if f != full {
					stage = max(stage, lay.Bytes)
				}
			}
			e.formats = append(e.formats, full)
			regionBytes[l] = e.vars[l][full].layout.Bytes
		}
		return nil
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	next := make(chan job)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range next {
				j.l.fill(j.dst)
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	for l, f := range opt.Start {
		if _, ok := e.vars[l][f]; !ok {
			e.Close()
			return nil, fmt.Errorf("executor: layer %d starts in %v, which is not prepared", l, f)
		}
	}
	outer, outerImg := packOuter(m, t)
	e.outer = outer
	sub := int64(opt.BlockSize * cfg.KVDim() * t.Size())
	maxBlocks := (cfg.SeqLen + opt.BlockSize - 1) / opt.BlockSize
	var paged int64
	for rows := 1; rows <= opt.MaxBatchedTokens; rows++ {
		paged = max(paged, kcuda.PlanPaged(g.SMs(), rows, cfg.NHeads, cfg.NKVHeads, cfg.HeadDim(), cfg.SeqLen).WorkspaceBytes)
	}
	e.ws = newDevWorkspace(cfg, t, opt.MaxBatchedTokens, opt.MaxBatchedTokens*maxBlocks, paged, opt.StagingSlots, stage)
	for i := range opt.StagingSlots {
		e.freeSlots = append(e.freeSlots, i)
	}
	var weights int64
	for _, b := range regionBytes {
		weights += b
	}
	if e.budget, e.fullBlocks, err = opt.Pool.Budget(outer.Bytes+weights+e.ws.Bytes, 2*int64(cfg.NLayers)*sub); err != nil {
		e.Close()
		return nil, err
	}
	for l := range startBytes {
		if opt.Start != nil {
			e.formats[l] = opt.Start[l]
		}
		startBytes[l] = e.vars[l][e.formats[l]].layout.Bytes
	}
	if e.ar, err = newArena(e.budget, outer.Bytes, e.ws.Bytes, regionBytes, startBytes, sub); err != nil {
		e.Close()
		return nil, err
	}
	blocks, err := attached(e.memoryLocked(), opt.Attach)
	if err == nil {
		err = e.ar.attach(blocks)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	err = g.Do(func() error {
		var err error
		if e.base, err = g.Alloc(e.ar.size); err != nil {
			return fmt.Errorf("executor: a device arena of %d bytes: %w", e.ar.size, err)
		}
		if err := g.Upload(e.base, outerImg); err != nil {
			return err
		}
		for l, vs := range e.vars {
			v := vs[e.formats[l]]
			if err := g.Upload(e.at(e.ar.variantAt(l, v.layout.Bytes)), v.host); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close frees the executor's device and pinned memory; it must not be used after.
func (e *CUDA) Close() {
	_ = e.g.Do(func() error {
		for _, c := range e.copies {
			if c.job != nil {
				_ = c.job.Wait()
			}
			e.freeCopy(c)
		}
		for _, vs := range e.vars {
			for _, v := range vs {
				if v.host != nil {
					e.g.FreePinned(v.host)
				}
			}
		}
		if e.base != 0 {
			e.g.Free(e.base)
		}
		e.g.Close()
		return nil
	})
}

// at is the device address offset bytes into the arena.
func (e *CUDA) at(offset int64) devPtr { return e.base + devPtr(offset) }

// wsAt is the device address offset bytes into the workspace.
func (e *CUDA) wsAt(offset int64) devPtr { return e.at(e.ar.workspace + offset) }

func (e *CUDA) imageBytes(l int, f quant.Format) int64 { return e.vars[l][f].layout.Bytes }

func (e *CUDA) memoryLocked() Memory {
	w, pw := e.outer.Bytes, e.outer.Bytes
	for l, f := range e.formats {
		w += e.imageBytes(l, f)
		pw += e.imageBytes(l, e.swaps.format(l, f))
	}
	bb := e.ar.blockBytes
	return Memory{Budget: e.budget, FullBlocks: e.fullBlocks, Weights: w, KV: int64(len(e.ar.blocks)) * bb,
		Workspace: e.ws.Bytes, PendingWeights: pw, BlockBytes: bb, Blocks: len(e.ar.blocks)}
}

// Memory reports the budget and its parts.
func (e *CUDA) Memory() Memory {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.memoryLocked()
}

// Geometry reports the executor's block size and tokens per step and the model's context and vocabulary.
func (e *CUDA) Geometry() Geometry {
	c := e.cfg
	return Geometry{BlockSize: e.opt.BlockSize, MaxBatchedTokens: e.opt.MaxBatchedTokens, Context: c.SeqLen, Vocab: c.VocabSize, Layers: c.NLayers}
}

// LayerBytes reports each layer's bytes on the device in each prepared variant.
func (e *CUDA) LayerBytes() []LayerBytes {
	out := make([]LayerBytes, len(e.vars))
	for l, vs := range e.vars {
		out[l] = LayerBytes{}
		for f, v := range vs {
			out[l][f] = v.layout.Bytes
		}
	}
	return out
}

// AttachKV grows the attached KV blocks; see Executor. It also fails when the arena has no place for them,
// which happens only while swaps to larger and to smaller variants are both pending: the smaller ones' bytes
// count as free before they are.
func (e *CUDA) AttachKV(blocks int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if mem := e.memoryLocked(); blocks <= 0 || blocks > mem.Attachable() {
		return fmt.Errorf("executor: attach %d KV blocks, room for %d", blocks, mem.Attachable())
	}
	return e.ar.attach(blocks)
}

// DetachKV shrinks the attached KV blocks; see Executor.
func (e *CUDA) DetachKV(blocks int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if blocks <= 0 || blocks > len(e.ar.blocks) {
		return fmt.Errorf("executor: detach %d KV blocks of %d attached", blocks, len(e.ar.blocks))
	}
	e.ar.detach(blocks)
	return nil
}

// SetLayerPrecision asks for layer to run in f from a later step; see Executor. The copy starts at once when a
// staging slot is free.
func (e *CUDA) SetLayerPrecision(layer int, f quant.Format) error {
	if layer < 0 || layer >= len(e.vars) {
		return fmt.Errorf("executor: layer %d out of range [0, %d)", layer, len(e.vars))
	}
	v, ok := e.vars[layer][f]
	if !ok {
		return fmt.Errorf("executor: layer %d has no %v variant prepared", layer, f)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.g.Do(func() error {
		undo, err := e.swaps.ask(layer, f, v.layout.Bytes, e.memoryLocked)
		if err != nil {
			return err
		}
		earlier, had := e.copies[layer]
		// A copy in flight for the layer is finished and dropped first: it may write where the new one's room ends.
		if err := e.dropCopy(layer); err != nil {
			return err
		}
		moves, err := e.ar.ask(layer, v.layout.Bytes)
		if err != nil {
			undo()
			if had { // the arena kept its room; the earlier swap's copy was dropped and starts again
				e.queueCopy(layer, earlier.format)
			}
			return errors.Join(err, e.startCopies())
		}
		for _, mv := range moves {
			if err := e.g.Move(e.at(mv.to), e.at(mv.from), e.ar.blockBytes); err != nil {
				return err
			}
		}
		e.queueCopy(layer, f)
		return e.startCopies()
	})
}

// queueCopy queues the copy of layer's variant f (none when the layer runs f already).
func (e *CUDA) queueCopy(layer int, f quant.Format) {
	size := e.imageBytes(layer, f)
	c := &swapCopy{format: f, slot: -1, direct: max(0, size-e.imageBytes(layer, e.formats[layer])), noop: f == e.formats[layer]}
	e.copies[layer] = c
	if !c.noop {
		e.queue = append(e.queue, layer)
	}
}

// dropCopy finishes and forgets the copy of layer's earlier ask, if any. It runs inside Do.
func (e *CUDA) dropCopy(layer int) error {
	c, ok := e.copies[layer]
	if !ok {
		return nil
	}
	if c.job != nil {
		if err := c.job.Wait(); err != nil {
			return err
		}
		e.freeCopy(c)
	}
	e.queue = slices.DeleteFunc(e.queue, func(l int) bool { return l == layer })
	delete(e.copies, layer)
	return nil
}

func (e *CUDA) freeCopy(c *swapCopy) {
	if c.slot >= 0 {
		e.freeSlots = append(e.freeSlots, c.slot)
		c.slot = -1
	}
	if c.job != nil {
		c.job.Release()
		c.job = nil
	}
}

// startCopies starts the queued copies that a free staging slot can take, in the order asked, each on the side
// stream after everything enqueued on the default stream so far (block moves, staging reads). It runs inside Do.
func (e *CUDA) startCopies() error {
	for len(e.queue) > 0 && len(e.freeSlots) > 0 {
		l := e.queue[0]
		e.queue = e.queue[1:]
		c := e.copies[l]
		c.slot, e.freeSlots = e.freeSlots[len(e.freeSlots)-1], e.freeSlots[:len(e.freeSlots)-1]
		v := e.vars[l][c.format]
		var parts []hostPart
		if c.direct > 0 {
			parts = append(parts, hostPart{e.at(e.ar.variantAt(l, v.layout.Bytes)), v.host[:c.direct]})
		}
		if c.direct < v.layout.Bytes {
			parts = append(parts, hostPart{e.at(e.stagingAt(c.slot)), v.host[c.direct:]})
		}
		job, err := e.g.Copy(parts)
		if err != nil {
			return err
		}
		c.job = job
	}
	return nil
}

func (e *CUDA) stagingAt(slot int) int64 {
	return e.ar.workspace + e.ws.Staging + int64(slot)*e.ws.StageBytes
}

// applySwaps makes the swaps due at a step starting at now take effect: a swap is due by the emulated link's
// timing (Swap.HostLink), at once (the zero SwapCost) or once its copy has completed (Overlap), and only once its
// copy has started. It moves each staged part into place on the default stream, frees the slots and starts the
// copies waiting for one. It returns the layers swapped and their transfer time: the emulated link's, the time
// spent here (zero SwapCost), or the copies' measured time (Overlap). It runs inside Do.
func (e *CUDA) applySwaps(now time.Duration) ([]int, time.Duration, error) {
	start := time.Now()
	var failed error
	ready := func(l int) bool {
		c := e.copies[l]
		switch {
		case c.noop:
			return true
		case c.job == nil:
			return false
		case e.opt.Overlap:
			return c.job.Done()
		}
		if err := c.job.Wait(); err != nil && failed == nil {
			failed = err
		}
		return true
	}
	// Without Overlap, swaps waiting for a staging slot start and apply at this boundary too, a slot's worth at a
	// time, so that every swap due applies now.
	var swapped []int
	var transfer, measured time.Duration
	for {
		layers, formats, tr := e.swaps.due(now, ready)
		if failed != nil {
			return nil, 0, failed
		}
		for i, l := range layers {
			c := e.copies[l]
			v := e.vars[l][formats[i]]
			if rest := v.layout.Bytes - c.direct; rest > 0 && !c.noop {
				if err := e.g.Move(e.at(e.ar.variantAt(l, v.layout.Bytes)+c.direct), e.at(e.stagingAt(c.slot)), rest); err != nil {
					return nil, 0, err
				}
			}
			if c.job != nil {
				measured += c.job.Elapsed()
			}
			e.freeCopy(c)
			delete(e.copies, l)
			e.ar.apply(l)
			e.formats[l] = formats[i]
		}
		swapped, transfer = append(swapped, layers...), transfer+tr
		if err := e.startCopies(); err != nil {
			return nil, 0, err
		}
		if len(layers) == 0 || e.opt.Overlap || len(e.copies) == 0 {
			break
		}
	}
	slices.Sort(swapped)
	switch {
	case e.opt.Overlap:
		transfer = measured
	case e.opt.Swap.HostLink == 0:
		transfer = time.Since(start)
	}
	return swapped, transfer, nil
}

// Step applies the swaps due, then runs the batch on the device and picks each asked-for next token.
func (e *CUDA) Step(b *Batch) (Result, error) {
	start := time.Now()
	e.mu.Lock()
	var swapped []int
	var transfer time.Duration
	err := e.g.Do(func() error {
		var err error
		swapped, transfer, err = e.applySwaps(b.Now)
		return err
	})
	formats := slices.Clone(e.formats)
	if err == nil {
		err = e.plan(b, len(e.ar.blocks))
	}
	e.mu.Unlock()
	res := Result{Formats: formats, Swapped: swapped, SwapTime: transfer}
	if err != nil {
		return res, err
	}
	if e.opt.Swap.Blocking && e.opt.Swap.HostLink > 0 && transfer > 0 {
		time.Sleep(transfer) // the emulated link's copy, which the step waits for
	}
	defer func() { e.setLastEnd(b.Now + res.Duration) }()
	if err := e.g.Do(func() error { return e.forward(b, formats) }); err != nil {
		return res, err
	}
	res.Next = nextTokens(b.Seqs, e.rowOf, func(i int) int32 { return e.next[e.slot[i]] })
	res.Duration = time.Since(start)
	return res, nil
}

func (e *CUDA) setLastEnd(t time.Duration) {
	e.mu.Lock()
	e.swaps.lastEnd = max(e.swaps.lastEnd, t)
	e.mu.Unlock()
}

// flash reports whether sequence s runs FlashAttention-2: its chunk is its whole sequence (no cached prefix).
func (e *CUDA) flash(s SeqWork) bool {
	return e.flashOK && len(s.Tokens) == s.SeqLen && len(s.Tokens) > 1
}

// plan checks the batch against blocks attached blocks and fills the step's int32 inputs on the host: the
// sequences in the order the device runs them (paged attention's first, then FlashAttention's), their tokens,
// positions, KV slots and block tables in the arena's ids, and each sequence's last row.
func (e *CUDA) plan(b *Batch, blocks int) error {
	n := len(b.Seqs)
	if n == 0 {
		return fmt.Errorf("executor: empty batch")
	}
	if t := b.Tokens(); t > e.opt.MaxBatchedTokens {
		return fmt.Errorf("executor: batch of %d tokens, the workspace holds %d", t, e.opt.MaxBatchedTokens)
	}
	bs := e.opt.BlockSize
	mb := 0
	for i, s := range b.Seqs {
		if len(s.Tokens) == 0 || len(s.Tokens) > s.SeqLen || s.SeqLen > len(s.Table)*bs || s.SeqLen > e.cfg.SeqLen {
			return fmt.Errorf("executor: sequence %d feeds %d tokens up to position %d, its table of %d blocks of %d holds %d (context %d)",
				i, len(s.Tokens), s.SeqLen, len(s.Table), bs, len(s.Table)*bs, e.cfg.SeqLen)
		}
		for _, id := range s.Table {
			if id < 0 || int(id) >= blocks {
				return fmt.Errorf("executor: sequence %d uses block %d, %d attached", i, id, blocks)
			}
		}
		for _, tok := range s.Tokens {
			if tok < 0 || int(tok) >= e.cfg.VocabSize {
				return fmt.Errorf("executor: sequence %d feeds token %d, outside the vocabulary of %d", i, tok, e.cfg.VocabSize)
			}
		}
		mb = max(mb, len(s.Table))
	}
	e.order = e.order[:0]
	paged := 0
	for _, flash := range []bool{false, true} {
		for i, s := range b.Seqs {
			if e.flash(s) == flash {
				e.order = append(e.order, i)
			}
		}
		if !flash {
			paged = len(e.order)
		}
	}
	if paged*mb > e.ws.TableLen {
		return fmt.Errorf("executor: %d sequences of up to %d blocks, the workspace holds %d block ids", paged, mb, e.ws.TableLen)
	}
	e.slot = slices.Grow(e.slot[:0], n)[:n]
	e.tok, e.pos, e.slots, e.last = e.tok[:0], e.pos[:0], e.slots[:0], e.last[:0]
	e.qstart, e.lens = append(e.qstart[:0], 0), e.lens[:0]
	e.tables = slices.Grow(e.tables[:0], paged*mb)[:paged*mb]
	clear(e.tables)
	e.ids = slices.Grow(e.ids[:0], mb)[:mb]
	ids := e.ids
	for j, i := range e.order {
		s := b.Seqs[i]
		e.slot[i] = j
		e.ar.ids(ids[:len(s.Table)], s.Table)
		first := s.SeqLen - len(s.Tokens)
		for k, tok := range s.Tokens {
			p := first + k
			e.tok = append(e.tok, tok)
			e.pos = append(e.pos, int32(p))
			e.slots = append(e.slots, ids[p/bs]*int32(bs)+int32(p%bs))
		}
		e.last = append(e.last, int32(len(e.tok)-1))
		if j < paged {
			copy(e.tables[j*mb:], ids[:len(s.Table)])
			e.qstart = append(e.qstart, int32(len(e.tok)))
			e.lens = append(e.lens, int32(s.SeqLen))
		}
	}
	return nil
}

// rowOf is batch sequence i's logit row, copied back by forward when it has a sampler.
func (e *CUDA) rowOf(i int) []float32 {
	v := e.cfg.VocabSize
	j := e.slot[i]
	return e.logits[j*v : (j+1)*v]
}

// upload copies int32s into the workspace at offset. It runs inside Do.
func (e *CUDA) upload(offset int64, s []int32) error {
	if len(s) == 0 {
		return nil
	}
	return e.g.Upload(e.wsAt(offset), bytesOf(s))
}

// forward runs the planned step on the default stream and copies back the next tokens (and, for sequences with
// a sampler, their logit rows). It runs inside Do.
func (e *CUDA) forward(b *Batch, formats []quant.Format) error {
	g, cfg, t, ws := e.g, e.cfg, e.t, e.ws
	T, ns := len(e.tok), len(e.order)
	paged := len(e.lens)
	mb := 0
	if paged > 0 {
		mb = len(e.tables) / paged
	}
	for _, u := range []struct {
		off int64
		s   []int32
	}{{ws.Tok, e.tok}, {ws.Pos, e.pos}, {ws.Slots, e.slots}, {ws.Last, e.last}, {ws.QStart, e.qstart}, {ws.Lens, e.lens}, {ws.Tables, e.tables}} {
		if err := e.upload(u.off, u.s); err != nil {
			return err
		}
	}
	dim, kvDim, hid, hd := cfg.Dim, cfg.KVDim(), cfg.HiddenDim, cfg.HeadDim()
	eps, theta := float32(cfg.NormEps), float32(cfg.RopeTheta)
	el := int64(t.Size())
	x, xb, q, att, dl := e.wsAt(ws.X), e.wsAt(ws.XB), e.wsAt(ws.Q), e.wsAt(ws.Att), e.wsAt(ws.D)
	k, v, h1, h3 := e.wsAt(ws.K), e.wsAt(ws.V), e.wsAt(ws.H1), e.wsAt(ws.H3)
	pos, slots := e.wsAt(ws.Pos), e.wsAt(ws.Slots)
	if err := g.GatherRows(t, x, e.at(e.outer.Embedding), e.wsAt(ws.Tok), T, dim); err != nil {
		return err
	}
	var plan kcuda.PagedPlan
	rows := 0
	if paged > 0 { // the workspace holds the partials of any batch: splits grow with the longest sequence
		rows = int(e.qstart[paged])
		plan = kcuda.PlanPaged(g.SMs(), rows, cfg.NHeads, cfg.NKVHeads, hd, int(slices.Max(e.lens)))
	}
	sub := e.ar.sub
	for l := range cfg.NLayers {
		lay := e.vars[l][formats[l]].layout
		lb := e.ar.variantAt(l, lay.Bytes)
		var err error
		if l == 0 {
			err = g.RMSNorm(t, xb, x, e.at(lb+lay.AttnNorm), T, dim, eps)
		} else {
			err = g.AddRMSNorm(t, xb, x, dl, e.at(lb+lay.AttnNorm), T, dim, eps)
		}
		if err != nil {
			return err
		}
		if err := e.matmuls(lb, lay.Mats[0:3], xb, []devPtr{q, k, v}, T); err != nil {
			return err
		}
		if err := g.RoPE(t, q, pos, T, cfg.NHeads, hd, theta); err != nil {
			return err
		}
		if err := g.RoPE(t, k, pos, T, cfg.NKVHeads, hd, theta); err != nil {
			return err
		}
		kc, vc := e.at(int64(2*l)*sub), e.at(int64(2*l+1)*sub)
		if err := g.KVAppend(t, kc, vc, k, v, slots, T, kvDim); err != nil {
			return err
		}
		if paged > 0 {
			if err := g.PagedAttention(t, plan, e.wsAt(ws.Paged), plan.WorkspaceBytes, att, q, kc, vc, e.wsAt(ws.QStart),
				e.wsAt(ws.Lens), e.wsAt(ws.Tables), rows, paged, mb, e.opt.BlockSize, cfg.NHeads, cfg.NKVHeads, hd, e.scale); err != nil {
				return err
			}
		}
		row := int64(rows)
		for _, i := range e.order[paged:] {
			n := int64(len(b.Seqs[i].Tokens))
			at := func(base devPtr, width int) devPtr { return base + devPtr(row*int64(width)*el) }
			if err := g.FlashPrefill(t, at(att, dim), at(q, dim), at(k, kvDim), at(v, kvDim), int(n), int(n),
				cfg.NHeads, cfg.NKVHeads, hd, e.scale); err != nil {
				return err
			}
			row += n
		}
		if err := e.matmuls(lb, lay.Mats[3:4], att, []devPtr{dl}, T); err != nil {
			return err
		}
		if err := g.AddRMSNorm(t, xb, x, dl, e.at(lb+lay.FFNNorm), T, dim, eps); err != nil {
			return err
		}
		if err := e.matmuls(lb, []devMatrix{lay.Mats[4], lay.Mats[6]}, xb, []devPtr{h1, h3}, T); err != nil {
			return err
		}
		if err := g.SwiGLU(t, h1, h1, h3, T*hid); err != nil {
			return err
		}
		if err := e.matmuls(lb, lay.Mats[5:6], h1, []devPtr{dl}, T); err != nil {
			return err
		}
	}
	last, logits := e.wsAt(ws.Rows), e.wsAt(ws.Logits)
	if err := g.AddRMSNorm(t, xb, x, dl, e.at(e.outer.FinalN), T, dim, eps); err != nil {
		return err
	}
	if err := g.GatherRows(t, last, xb, e.wsAt(ws.Last), ns, dim); err != nil {
		return err
	}
	if err := g.GEMM(t, ns, cfg.VocabSize, dim, last, e.at(e.outer.Output), logits); err != nil {
		return err
	}
	if err := g.Argmax(e.wsAt(ws.Next), logits, ns, cfg.VocabSize); err != nil {
		return err
	}
	e.next = slices.Grow(e.next[:0], ns)[:ns]
	if err := g.Download(bytesOf(e.next), e.wsAt(ws.Next)); err != nil {
		return err
	}
	sampled := e.keepLogits
	for _, s := range b.Seqs {
		sampled = sampled || (s.Sample && s.Sampler != nil)
	}
	if sampled {
		e.logits = slices.Grow(e.logits[:0], ns*cfg.VocabSize)[:ns*cfg.VocabSize]
		return g.Download(bytesOf(e.logits), logits)
	}
	return nil
}

// matmuls computes ys[i] = x·Wᵢᵀ for rows rows, the matrices of a layer whose image starts at lb, each in its
// format; a GEMM's float32 output is narrowed to the storage type (an f32 model's GEMMs write ys directly).
// Int8 activations are quantized once for all the matrices. It runs inside Do.
func (e *CUDA) matmuls(lb int64, mats []devMatrix, x devPtr, ys []devPtr, rows int) error {
	g, t := e.g, e.t
	out, qa, sa := e.wsAt(e.ws.Out), e.wsAt(e.ws.QA), e.wsAt(e.ws.SA)
	if mats[0].Format == quant.Int8 {
		if err := g.QuantizeRows(t, qa, sa, x, rows, mats[0].Cols); err != nil {
			return err
		}
	}
	for i, m := range mats {
		dst := out
		if t == kcuda.F32 {
			dst = ys[i]
		}
		w := e.at(lb + m.Data)
		var err error
		switch m.Format {
		case quant.Int8:
			err = g.GEMMW8A8(rows, m.Rows, m.Cols, qa, sa, w, e.at(lb+m.Scales), dst)
		case quant.Int4:
			err = g.GEMMW4A16(t, rows, m.Rows, m.Cols, m.Group, x, w, e.at(lb+m.Scales), e.at(lb+m.Zeros), dst)
		default:
			err = g.GEMM(t, rows, m.Rows, m.Cols, x, w, dst)
		}
		if err != nil {
			return err
		}
		if t != kcuda.F32 {
			if err := g.Cast(t, ys[i], out, rows*m.Rows); err != nil {
				return err
			}
		}
	}
	return nil
}

var _ Executor = (*CUDA)(nil)
