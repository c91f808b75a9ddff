// Package exectest is the behaviour suite every executor passes: step results, memory accounting, swap and
// attach/detach semantics (free, overlapped and blocking swaps, as SwapCost documents them) and errors, as
// engine/executor's Executor documents them. An executor package calls Run with a Factory; a new executor is
// correct when the suite passes.
package exectest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/quant"
)

// Options are what the suite asks of an executor.
type Options struct {
	Pool             executor.Pool
	BlockSize        int
	MaxBatchedTokens int
	Attach           int            // blocks attached at the start; 0: every block the budget holds
	Start            []quant.Format // each layer's format at the start; nil: F32
	Swap             executor.SwapCost
}

// Factory makes an executor over a model (of at most a few MiB) of at least 4 decoder layers and a vocabulary of at least 259 tokens,
// every layer starting in F32 with Int8 and Int4 variants prepared (and no other). It returns nil after
// t.Fatal-ing when it cannot.
type Factory func(t *testing.T, o Options) executor.Executor

// Run runs the suite against the executors f makes.
func Run(t *testing.T, f Factory) {
	t.Run("Pool", func(t *testing.T) { testPool(t, f) })
	t.Run("Geometry", func(t *testing.T) { testGeometry(t, f) })
	t.Run("Step", func(t *testing.T) { testStep(t, f) })
	t.Run("StepErrors", func(t *testing.T) { testStepErrors(t, f) })
	t.Run("MemoryAccounting", func(t *testing.T) { testMemoryAccounting(t, f) })
	t.Run("Swap", func(t *testing.T) { testSwap(t, f) })
	t.Run("AttachDetach", func(t *testing.T) { testAttachDetach(t, f) })
	t.Run("SwapCost", func(t *testing.T) { testSwapCost(t, f) })
}

const (
	blockSize = 4
	maxTokens = 32
)

// fit returns an executor whose budget holds its full-precision weights, its workspace and headroom blocks
// (a fraction counting as bytes), learning the sizes from a first executor with a one-block pool.
func fit(t *testing.T, f Factory, headroom float64) executor.Executor {
	t.Helper()
	return fitSwap(t, f, headroom, executor.SwapCost{})
}

func fitSwap(t *testing.T, f Factory, headroom float64, swap executor.SwapCost) executor.Executor {
	t.Helper()
	probe := f(t, Options{Pool: executor.Pool{Blocks: 1}, BlockSize: blockSize, MaxBatchedTokens: maxTokens})
	mem := probe.Memory()
	budget := mem.Weights + mem.Workspace + int64(headroom*float64(mem.BlockBytes))
	return f(t, Options{Pool: executor.Pool{Bytes: budget}, BlockSize: blockSize, MaxBatchedTokens: maxTokens, Swap: swap})
}

// testPool: a pool of N blocks is a budget of the full-precision weights, the workspace and N blocks exactly, and
// a pool in bytes holds the whole blocks that fit beside them; layers that start quantized leave the full-precision
// pool as it is and attach what they free; a pool that holds no block, or sets both or neither, is refused.
func testPool(t *testing.T, f Factory) {
	e := f(t, Options{Pool: executor.Pool{Blocks: 7}, BlockSize: blockSize, MaxBatchedTokens: maxTokens})
	mem := e.Memory()
	fixed := mem.Weights + mem.Workspace
	if mem.Budget != fixed+7*mem.BlockBytes || mem.FullBlocks != 7 || mem.Blocks != 7 || mem.Free() != 0 {
		t.Fatalf("pool of 7 blocks: %+v, want a budget of weights, workspace and 7 blocks, all attached", mem)
	}
	bytes := fixed + 9*mem.BlockBytes + mem.BlockBytes/2
	if mem := f(t, Options{Pool: executor.Pool{Bytes: bytes}, BlockSize: blockSize, MaxBatchedTokens: maxTokens}).Memory(); mem.Budget != bytes || mem.FullBlocks != 9 || mem.Blocks != 9 {
		t.Fatalf("pool of %d bytes: %+v, want 9 blocks", bytes, mem)
	}
	lb := e.LayerBytes()
	start := slices.Repeat([]quant.Format{quant.F32}, len(lb))
	start[0], start[2] = quant.Int4, quant.Int8
	freed := lb[0][quant.F32] - lb[0][quant.Int4] + lb[2][quant.F32] - lb[2][quant.Int8]
	q := f(t, Options{Pool: executor.Pool{Blocks: 7}, BlockSize: blockSize, MaxBatchedTokens: maxTokens, Start: start}).Memory()
	if q.Budget != mem.Budget || q.FullBlocks != 7 || q.Weights != mem.Weights-freed || q.Blocks != 7+int(freed/mem.BlockBytes) {
		t.Fatalf("layers 0 and 2 starting in int4 and int8: %+v, want the same budget and full-precision pool, %d more blocks attached",
			q, freed/mem.BlockBytes)
	}
	if a := f(t, Options{Pool: executor.Pool{Blocks: 7}, BlockSize: blockSize, MaxBatchedTokens: maxTokens, Attach: 3}).Memory(); a.Blocks != 3 || a.Attachable() != 4 {
		t.Fatalf("7 blocks with 3 attached: %+v", a)
	}
	for _, p := range []executor.Pool{{}, {Blocks: 2, Bytes: bytes}, {Blocks: -1}, {Bytes: fixed + mem.BlockBytes - 1}} {
		if _, _, err := p.Budget(fixed, mem.BlockBytes); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("pool %+v: %v, want a one-line error", p, err)
		}
	}
}

func testGeometry(t *testing.T, f Factory) {
	e := fit(t, f, 16)
	g := e.Geometry()
	lb := e.LayerBytes()
	if g.BlockSize != blockSize || g.MaxBatchedTokens != maxTokens || g.Layers != len(lb) || g.Layers < 4 || g.Vocab < 259 || g.Context < 16 {
		t.Fatalf("geometry %+v with %d layers' bytes: want block size %d, max batched tokens %d, >= 4 layers, vocab >= 259",
			g, len(lb), blockSize, maxTokens)
	}
	for l, b := range lb {
		if len(b) != 3 || !(b[quant.F32] > b[quant.Int8] && b[quant.Int8] > b[quant.Int4] && b[quant.Int4] > 0) {
			t.Fatalf("layer %d bytes %v, want f32 > int8 > int4 > 0 and no other format", l, b)
		}
	}
	if mem := e.Memory(); mem.Weights < lb[0][quant.F32]*int64(len(lb)) {
		t.Fatalf("weights %d bytes, less than the %d layers' %d", mem.Weights, len(lb), lb[0][quant.F32]*int64(len(lb)))
	}
}

// twoSeqs is a step over a 6-token prompt that samples (blocks 0-1) and a 3-token chunk that does not (block 2).
func twoSeqs() *executor.Batch {
	return &executor.Batch{Seqs: []executor.SeqWork{
		{Tokens: []int32{1, 5, 9, 33, 100, 7}, SeqLen: 6, Table: []int32{0, 1}, Sample: true},
		{Tokens: []int32{3, 4, 200}, SeqLen: 3, Table: []int32{2}},
	}}
}

func testStep(t *testing.T, f Factory) {
	e := fit(t, f, 16)
	vocab := int32(e.Geometry().Vocab)
	res, err := e.Step(twoSeqs())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Next) != 2 || res.Next[0] < 0 || res.Next[0] >= vocab || res.Next[1] != -1 {
		t.Fatalf("next = %v, want [token in [0, %d), -1]", res.Next, vocab)
	}
	if res.Duration <= 0 || len(res.Swapped) != 0 || res.SwapTime < 0 || res.SwapTime > res.Duration {
		t.Fatalf("result %+v: want a positive duration, no swaps and a swap time within the step", res)
	}
	if len(res.Formats) != len(e.LayerBytes()) || slices.ContainsFunc(res.Formats, func(f quant.Format) bool { return f != quant.F32 }) {
		t.Fatalf("formats %v, want f32 for each of %d layers", res.Formats, len(e.LayerBytes()))
	}
	// A decode step continues the first sequence, and a fresh executor fed the same steps picks the same tokens.
	decode := &executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{res.Next[0]}, SeqLen: 7, Table: []int32{0, 1}, Sample: true}}}
	res2, err := e.Step(decode)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Next) != 1 || res2.Next[0] < 0 || res2.Next[0] >= vocab {
		t.Fatalf("decode next = %v, want one token in [0, %d)", res2.Next, vocab)
	}
	again := fit(t, f, 16)
	r1, err1 := again.Step(twoSeqs())
	r2, err2 := again.Step(decode)
	if err1 != nil || err2 != nil || r1.Next[0] != res.Next[0] || r2.Next[0] != res2.Next[0] {
		t.Fatalf("a second executor picked %v then %v (%v, %v), the first %v then %v", r1.Next, r2.Next, err1, err2, res.Next, res2.Next)
	}
}

func testStepErrors(t *testing.T, f Factory) {
	e := fit(t, f, 8)
	blocks := int32(e.Memory().Blocks)
	for _, c := range []struct {
		name string
		b    *executor.Batch
	}{
		{"empty batch", &executor.Batch{}},
		{"more tokens than the workspace", &executor.Batch{Seqs: []executor.SeqWork{{Tokens: make([]int32, maxTokens+1), SeqLen: maxTokens + 1,
			Table: []int32{0, 1, 2, 3, 4, 5, 6, 7, 0}, Sample: true}}}},
		{"a block past the attached ones", &executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{1, 2}, SeqLen: 5, Table: []int32{0, blocks}, Sample: true}}}},
		{"a negative block", &executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{1}, SeqLen: 1, Table: []int32{-1}, Sample: true}}}},
	} {
		if _, err := e.Step(c.b); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, err := e.Step(twoSeqs()); err != nil {
		t.Errorf("a good step after bad ones: %v", err)
	}
}

func testMemoryAccounting(t *testing.T, f Factory) {
	e := fit(t, f, 10.5)
	mem := e.Memory()
	bb := mem.BlockBytes
	lb := e.LayerBytes()
	full := mem.Weights
	if mem.Blocks != 10 || mem.KV != 10*bb || mem.Free() != int64(10.5*float64(bb))-10*bb || mem.PendingWeights != full || mem.Attachable() != 0 {
		t.Fatalf("memory %+v: want 10 blocks of %d bytes, %d bytes free, nothing pending or attachable", mem, bb, int64(10.5*float64(bb))-10*bb)
	}
	saved := lb[2][quant.F32] - lb[2][quant.Int4]
	if err := e.SetLayerPrecision(2, quant.Int4); err != nil {
		t.Fatal(err)
	}
	mem = e.Memory()
	if mem.Weights != full || mem.SwapFrees() != saved || mem.Attachable() != 0 {
		t.Fatalf("pending swap: %+v, want weights %d, swap frees %d (layer bytes), nothing attachable yet", mem, full, saved)
	}
	res, err := e.Step(twoSeqs())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Swapped, []int{2}) || res.Formats[2] != quant.Int4 || res.Formats[1] != quant.F32 {
		t.Fatalf("step after the swap: swapped %v, formats %v; want [2] and layer 2 in int4", res.Swapped, res.Formats)
	}
	mem = e.Memory()
	free := mem.Free()
	want := int((saved + int64(10.5*float64(bb)) - 10*bb) / bb)
	if mem.Weights != full-saved || mem.SwapFrees() != 0 || mem.Attachable() != want || free != saved+int64(10.5*float64(bb))-10*bb {
		t.Fatalf("after the swap: %+v, want weights %d and %d attachable blocks", mem, full-saved, want)
	}
	if err := e.AttachKV(want); err != nil {
		t.Fatal(err)
	}
	if mem = e.Memory(); mem.Blocks != 10+want || mem.KV != int64(10+want)*bb || mem.Free() != free-int64(want)*bb {
		t.Fatalf("after attaching %d: %+v", want, mem)
	}
	if err := e.SetLayerPrecision(2, quant.F32); err == nil {
		t.Fatal("going back to f32 with the freed bytes attached as KV was accepted")
	}
	if mem := e.Memory(); mem.PendingWeights != mem.Weights {
		t.Fatalf("a refused swap is pending: %+v", mem)
	}
	if err := e.DetachKV(want); err != nil {
		t.Fatal(err)
	}
	if err := e.SetLayerPrecision(2, quant.F32); err != nil {
		t.Fatal(err)
	}
	if got := e.Memory().SwapFrees(); got != -saved {
		t.Errorf("pending swap back frees %d, want %d", got, -saved)
	}
}

func testSwap(t *testing.T, f Factory) {
	e := fit(t, f, 16)
	lb := e.LayerBytes()
	layers := len(lb)
	outer := e.Memory().Weights
	for l := range lb {
		outer -= lb[l][quant.F32]
	}
	for _, c := range []struct {
		layer int
		f     quant.Format
	}{{-1, quant.Int8}, {layers, quant.Int8}, {0, quant.BF16}} {
		if err := e.SetLayerPrecision(c.layer, c.f); err == nil {
			t.Errorf("layer %d in %v: accepted", c.layer, c.f)
		}
	}
	// The last ask for a layer wins; swaps take effect at the next step, all together, and only once.
	for _, s := range []struct {
		layer int
		f     quant.Format
	}{{3, quant.Int8}, {1, quant.Int8}, {3, quant.Int4}} {
		if err := e.SetLayerPrecision(s.layer, s.f); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.Step(twoSeqs())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Swapped, []int{1, 3}) || res.Formats[1] != quant.Int8 || res.Formats[3] != quant.Int4 || res.Formats[0] != quant.F32 {
		t.Fatalf("swapped %v, formats %v: want layers 1 (int8) and 3 (int4)", res.Swapped, res.Formats)
	}
	want := outer
	for l, f := range res.Formats {
		want += lb[l][f]
	}
	if got := e.Memory().Weights; got != want {
		t.Fatalf("weights %d bytes, want %d: the same outside the layers, each layer's bytes in its format", got, want)
	}
	decode := &executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{res.Next[0]}, SeqLen: 7, Table: []int32{0, 1}, Sample: true}}}
	res, err = e.Step(decode)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Swapped) != 0 || res.Formats[3] != quant.Int4 {
		t.Fatalf("the step after: swapped %v, formats %v; want no swaps, layer 3 still int4", res.Swapped, res.Formats)
	}
}

func testAttachDetach(t *testing.T, f Factory) {
	e := fit(t, f, 8)
	if err := e.AttachKV(1); err == nil {
		t.Error("attaching past the budget was accepted")
	}
	for _, n := range []int{0, -1, 9} {
		if err := e.DetachKV(n); err == nil {
			t.Errorf("detaching %d of 8 blocks was accepted", n)
		}
	}
	if err := e.DetachKV(5); err != nil {
		t.Fatal(err)
	}
	if mem := e.Memory(); mem.Blocks != 3 || mem.KV != 3*mem.BlockBytes || mem.Attachable() != 5 {
		t.Fatalf("after detaching 5 of 8: %+v, want 3 blocks and 5 attachable", mem)
	}
	if _, err := e.Step(&executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{1, 2, 3, 4, 5}, SeqLen: 5, Table: []int32{0, 3}, Sample: true}}}); err == nil {
		t.Error("a step on a detached block was accepted")
	}
	if _, err := e.Step(&executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{1, 2, 3, 4, 5}, SeqLen: 5, Table: []int32{0, 2}, Sample: true}}}); err != nil {
		t.Errorf("a step on attached blocks: %v", err)
	}
	if err := e.AttachKV(5); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(&executor.Batch{Seqs: []executor.SeqWork{{Tokens: []int32{1, 2, 3, 4, 5}, SeqLen: 5, Table: []int32{0, 7}, Sample: true}}}); err != nil {
		t.Errorf("a step on a block attached again: %v", err)
	}
}

// testSwapCost: an overlapped swap takes effect at the first step starting (Batch.Now) once its transfer, its
// bytes over the host link, is done, transfers going one after another; a blocking swap takes effect at the next
// step and lasts into it.
func testSwapCost(t *testing.T, f Factory) {
	lb := fit(t, f, 16).LayerBytes()
	// A link that moves layer 0's int4 variant in exactly one second.
	e := fitSwap(t, f, 16, executor.SwapCost{HostLink: float64(lb[0][quant.Int4])})
	for _, l := range []int{0, 1} {
		if err := e.SetLayerPrecision(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	const second = 1_000_000_000
	for _, c := range []struct {
		now     int64
		swapped []int
	}{{0, nil}, {second - 1, nil}, {second, []int{0}}, {2*second - 1, nil}, {2 * second, []int{1}}, {3 * second, nil}} {
		b := twoSeqs()
		b.Now = time.Duration(c.now)
		res, err := e.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(len(c.swapped)) * time.Second
		if !slices.Equal(res.Swapped, c.swapped) || res.SwapTime != want {
			t.Fatalf("step at %v: swapped %v in %v, want %v in %v", b.Now, res.Swapped, res.SwapTime, c.swapped, want)
		}
		if c.now >= second && res.Formats[0] != quant.Int4 || c.now < second && res.Formats[0] != quant.F32 {
			t.Fatalf("step at %v runs layer 0 in %v", b.Now, res.Formats[0])
		}
	}

	const transfer = 20 * time.Millisecond
	bl := fitSwap(t, f, 16, executor.SwapCost{HostLink: float64(lb[2][quant.Int8]) / transfer.Seconds(), Blocking: true})
	if err := bl.SetLayerPrecision(2, quant.Int8); err != nil {
		t.Fatal(err)
	}
	res, err := bl.Step(twoSeqs())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Swapped, []int{2}) || res.SwapTime != transfer || res.Duration < transfer || res.Formats[2] != quant.Int8 {
		t.Fatalf("blocking swap: swapped %v in %v, step %v; want [2] in %v within the step", res.Swapped, res.SwapTime, res.Duration, transfer)
	}
}
