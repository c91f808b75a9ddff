package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/quant"
)

func synthModel(t *testing.T) *model.Model {
	return modeltest.Synthetic(t, "stories260K", 11)
}

func prepare(t *testing.T, m *model.Model, formats ...quant.Format) {
	t.Helper()
	for l := range m.Layers {
		for _, f := range formats {
			if _, err := m.AddVariant(l, f); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// budgetFor is a budget holding m's current weights, the workspace of maxTokens and blocks KV blocks of 16.
func budgetFor(m *model.Model, maxTokens, blocks int) int64 {
	return int64(m.WeightBytes()) + executor.WorkspaceBytes(m.Config, maxTokens) + int64(blocks*model.KVBytesPerBlock(m.Config, 16))
}

type setup struct {
	budget    int64
	blocks    int // attached at the start (0: all the budget holds)
	maxTokens int
	caching   bool // prefix caching
	onStep    func(*Engine, StepInfo)
}

func newEngine(t *testing.T, m *model.Model, s setup) *Engine {
	t.Helper()
	x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Bytes: s.budget}, BlockSize: 16, MaxBatchedTokens: s.maxTokens, Attach: s.blocks})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(x, Options{Clock: &executor.VirtualClock{}, PrefixCaching: s.caching})
	if err != nil {
		t.Fatal(err)
	}
	if s.onStep != nil {
		e.OnStep(func(info StepInfo) { s.onStep(e, info) })
	}
	return e
}

// serve submits every request at once and steps the engine until all are done.
func serve(t *testing.T, e *Engine, reqs []Request) []Result {
	t.Helper()
	var streams []*Stream
	for _, r := range reqs {
		streams = append(streams, e.Submit(r))
	}
	for e.Pending() > 0 {
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
	var out []Result
	for _, s := range streams {
		r := s.Wait()
		if r.Err != nil {
			t.Fatalf("request %d: %v", r.ID, r.Err)
		}
		out = append(out, r)
	}
	return out
}

// randomRequests returns n greedy requests with random prompts of 1..60 tokens and 20..59 output tokens.
func randomRequests(seed uint64, n, vocab int) []Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	var reqs []Request
	for range n {
		p := make([]int32, 1+rng.IntN(60))
		for i := range p {
			p[i] = int32(rng.IntN(vocab))
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 20 + rng.IntN(40)})
	}
	return reqs
}

// alone serves each request by itself on a fresh engine with a roomy pool.
func alone(t *testing.T, m *model.Model, reqs []Request) [][]int32 {
	var out [][]int32
	for _, r := range reqs {
		e := newEngine(t, m, setup{budget: budgetFor(m, 64, 64), maxTokens: 64})
		out = append(out, serve(t, e, []Request{r})[0].Output)
	}
	return out
}

func preemptions(e *Engine) int {
	n := 0
	for _, ev := range e.Log() {
		if ev.Kind == Preempted {
			n++
		}
	}
	return n
}

// checkConcurrentEqualsAlone serves reqs together twice (a roomy pool, and one small enough to preempt) and
// compares each output, decoded by dec, with the request served alone.
func checkConcurrentEqualsAlone(t *testing.T, m *model.Model, reqs []Request, dec func([]int32) string) {
	want := alone(t, m, reqs)
	// The small pool holds the largest request with room to spare but only about half of all of them together.
	need, largest := 0, 0
	for _, r := range reqs {
		n := (len(r.Prompt) + r.MaxTokens + 15) / 16
		need, largest = need+n, max(largest, n)
	}
	small := max(largest+2, need/2)
	for _, blocks := range []int{200, small} {
		e := newEngine(t, m, setup{budget: budgetFor(m, 48, blocks), maxTokens: 48})
		got := serve(t, e, reqs)
		for i, r := range got {
			if dec(r.Output) != dec(want[i]) {
				t.Errorf("%d blocks, request %d: together %q, alone %q", blocks, i, dec(r.Output), dec(want[i]))
			}
		}
		if blocks == small && preemptions(e) == 0 {
			t.Errorf("%d blocks: no preemption; the small pool is meant to force some", blocks)
		}
		t.Logf("%d blocks: %d preemptions", blocks, preemptions(e))
	}
}

func bytesOf(x []int32) string {
	b := make([]byte, 0, 2*len(x))
	for _, v := range x {
		b = append(b, byte(v), byte(v>>8))
	}
	return string(b)
}

// TestConcurrentEqualsAloneSynthetic: greedy requests served together (with chunked prefill, and with
// preemptions) produce exactly the tokens each produces alone.
func TestConcurrentEqualsAloneSynthetic(t *testing.T) {
	m := synthModel(t)
	n := 8
	if testing.Short() {
		n = 6 // the race detector run
	}
	checkConcurrentEqualsAlone(t, m, randomRequests(3, n, m.Config.VocabSize), bytesOf)
}

// TestSeededSamplingUnderPreemption: requests sampled at temperature 0.9, each with its own seed, produce the
// same tokens alone, together, and together in a pool small enough to preempt and recompute them: a draw depends
// only on the seed and the position.
func TestSeededSamplingUnderPreemption(t *testing.T) {
	m := synthModel(t)
	reqs := randomRequests(5, 8, m.Config.VocabSize)
	for i := range reqs {
		reqs[i].Sampling = sample.Params{Temperature: 0.9, TopP: 0.95, Seed: uint64(1000 + i)}
	}
	checkConcurrentEqualsAlone(t, m, reqs, bytesOf)
}

// TestConcurrentEqualsAloneStories: the same on stories260K with story prompts, compared as decoded text.
func TestConcurrentEqualsAloneStories(t *testing.T) {
	m, vocab := modeltest.Stories260K(t)
	var reqs []Request
	for i, p := range []string{"Once upon a time", "The little dog", "Lily wanted to", "One day, a big", "Tom and Sam went to the park",
		"The sun", "A bird sat on a tree and", "Mom said"} {
		var prompt []int32
		for _, id := range vocab.Encode(p, true, false) {
			prompt = append(prompt, int32(id))
		}
		reqs = append(reqs, Request{Prompt: prompt, MaxTokens: 30 + 5*i})
	}
	if testing.Short() {
		reqs = reqs[:5] // the race detector run
	}
	checkConcurrentEqualsAlone(t, m, reqs, func(x []int32) string {
		ids := make([]int, len(x))
		for i, v := range x {
			ids[i] = int(v)
		}
		return vocab.DecodeAll(ids)
	})
}

// sharedPrefixRequests returns n greedy requests whose prompts start with one of three 70-token prefixes, cut at
// random lengths, and end with up to 20 tokens of their own; a few repeat a prompt exactly.
func sharedPrefixRequests(seed uint64, n, vocab int) []Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	var bases [][]int32
	for range 3 {
		b := make([]int32, 70)
		for i := range b {
			b[i] = int32(rng.IntN(vocab))
		}
		bases = append(bases, b)
	}
	var reqs []Request
	for i := range n {
		if i%5 == 4 {
			reqs = append(reqs, Request{Prompt: slices.Clone(reqs[i-1].Prompt), MaxTokens: 10 + rng.IntN(30)})
			continue
		}
		p := slices.Clone(bases[rng.IntN(3)][:16+rng.IntN(55)])
		for range rng.IntN(20) {
			p = append(p, int32(rng.IntN(vocab)))
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 10 + rng.IntN(30)})
	}
	return reqs
}

// TestPrefixCachingKeepsOutputs: greedy requests sharing prefixes give exactly the same tokens with prefix caching
// as without, served together in a roomy pool and in one small enough to preempt and evict, while the cache skips
// part of their prefill and the KV accounting holds at every step.
func TestPrefixCachingKeepsOutputs(t *testing.T) {
	m := synthModel(t)
	n := 20
	if testing.Short() {
		n = 12 // the race detector run
	}
	reqs := sharedPrefixRequests(5, n, m.Config.VocabSize)
	for _, blocks := range []int{200, 16} {
		var outs [2][]Result
		cached, preempted := 0, 0
		for i, caching := range []bool{false, true} {
			var e *Engine
			e = newEngine(t, m, setup{budget: budgetFor(m, 48, blocks), maxTokens: 48, caching: caching, onStep: func(e *Engine, info StepInfo) {
				if err := e.CheckKV(); err != nil {
					t.Fatalf("iteration %d: %v", info.Iter, err)
				}
			}})
			outs[i] = serve(t, e, reqs)
			if caching {
				preempted = preemptions(e)
			}
		}
		for i := range reqs {
			if !slices.Equal(outs[0][i].Output, outs[1][i].Output) {
				t.Errorf("%d blocks, request %d: %v with prefix caching, %v without", blocks, i, outs[1][i].Output, outs[0][i].Output)
			}
			if outs[0][i].CachedTokens != 0 || outs[1][i].CachedTokens%16 != 0 || outs[1][i].CachedTokens >= len(reqs[i].Prompt) {
				t.Errorf("%d blocks, request %d of %d prompt tokens: %d and %d cached", blocks, i, len(reqs[i].Prompt), outs[0][i].CachedTokens, outs[1][i].CachedTokens)
			}
			cached += outs[1][i].CachedTokens
		}
		t.Logf("%d blocks: %d prompt tokens found cached, %d preemptions", blocks, cached, preempted)
		if cached == 0 || (blocks == 16 && preempted == 0) {
			t.Errorf("%d blocks: %d tokens cached, %d preemptions: the test is meant to hit the cache (and to preempt in the small pool)", blocks, cached, preempted)
		}
	}
}

// TestPrecisionSwitchMidDecode: layers go to Int8 and Int4 in the middle of decoding and back to F32; every request
// keeps running to its full length, and each output equals a single-sequence reference that feeds the same chunks
// with the same layer precisions at every step.
func TestPrecisionSwitchMidDecode(t *testing.T) {
	m := synthModel(t)
	prepare(t, m, quant.Int8, quant.Int4)
	schedule := map[int][]struct {
		layer int
		f     quant.Format
	}{
		4:  {{0, quant.Int8}, {2, quant.Int8}},
		9:  {{0, quant.Int4}, {1, quant.Int4}, {4, quant.Int8}},
		15: {{0, quant.F32}, {1, quant.F32}, {2, quant.Int4}},
		22: {{2, quant.F32}, {4, quant.F32}},
	}
	var steps []StepInfo
	mixed := false
	e := newEngine(t, m, setup{budget: budgetFor(m, 48, 40), maxTokens: 48, onStep: func(e *Engine, info StepInfo) {
		info.Work = slices.Clone(info.Work) // the engine reuses its array
		steps = append(steps, info)
		for _, f := range info.Formats {
			mixed = mixed || f != quant.F32
		}
		for _, s := range schedule[info.Iter] {
			if err := e.SetLayerPrecision(s.layer, s.f); err != nil {
				t.Error(err)
			}
		}
	}})
	reqs := randomRequests(9, 6, m.Config.VocabSize)
	got := serve(t, e, reqs)
	if !mixed || len(steps) < 25 {
		t.Fatalf("%d steps, mixed precision seen %v: the schedule did not play out", len(steps), mixed)
	}
	for i, r := range got {
		if len(r.Output) != reqs[i].MaxTokens {
			t.Errorf("request %d: %d tokens, want %d", i, len(r.Output), reqs[i].MaxTokens)
		}
		var ref []modeltest.RefStep
		for _, st := range steps {
			for _, w := range st.Work {
				if w.Req == r.ID {
					ref = append(ref, modeltest.RefStep{Formats: st.Formats, Start: w.Start, Tokens: w.Tokens, Sample: w.Sample})
				}
			}
		}
		if want := modeltest.Reference(t, m, reqs[i].Prompt, ref); !slices.Equal(r.Output, want) {
			t.Errorf("request %d:\ngot  %v\nwant %v (reference with the same precision schedule)", i, r.Output, want)
		}
	}
}

// memoryAddsUp returns an error unless the executor's accounting matches what the test computes independently:
// the weights are the model's active weights, the KV part is the block manager's pool in blocks of the model's
// block bytes, the workspace is that of 48 tokens, and all of it fits the budget.
func memoryAddsUp(mem executor.Memory, m *model.Model, info StepInfo) error {
	blockBytes := int64(model.KVBytesPerBlock(m.Config, 16))
	want := int64(m.WeightBytes()) + int64(info.Total)*blockBytes + executor.WorkspaceBytes(m.Config, 48)
	switch {
	case mem.Weights != int64(m.WeightBytes()) || mem.Blocks != info.Total || mem.KV != int64(info.Total)*blockBytes ||
		mem.Workspace != executor.WorkspaceBytes(m.Config, 48):
		return fmt.Errorf("iteration %d: memory %+v, want weights %d, %d blocks of %d bytes", info.Iter, mem, m.WeightBytes(), info.Total, blockBytes)
	case mem.Used() != want || want > mem.Budget:
		return fmt.Errorf("iteration %d: %d bytes used, the parts add up to %d, budget %d", info.Iter, mem.Used(), want, mem.Budget)
	}
	return nil
}

func checkMemory(t *testing.T, e *Engine, m *model.Model, info StepInfo) {
	t.Helper()
	if err := memoryAddsUp(e.Memory(), m, info); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryCheckCatchesWrongAccounting: the memory check fails on accounts that leave out the attached KV, count
// the weights in a format they are not in, or exceed the budget.
func TestMemoryCheckCatchesWrongAccounting(t *testing.T) {
	m := synthModel(t)
	blockBytes := int64(model.KVBytesPerBlock(m.Config, 16))
	info := StepInfo{Total: 20}
	good := executor.Memory{Budget: budgetFor(m, 48, 20), Weights: int64(m.WeightBytes()), KV: 20 * blockBytes,
		Workspace: executor.WorkspaceBytes(m.Config, 48), BlockBytes: blockBytes, Blocks: 20}
	if err := memoryAddsUp(good, m, info); err != nil {
		t.Fatalf("a right account fails: %v", err)
	}
	for name, bad := range map[string]func(*executor.Memory){
		"KV of the base region only":  func(mem *executor.Memory) { mem.KV, mem.Blocks = 12*blockBytes, 12 },
		"weights of a smaller format": func(mem *executor.Memory) { mem.Weights -= 1000 },
		"over the budget":             func(mem *executor.Memory) { mem.Budget -= blockBytes },
	} {
		mem := good
		bad(&mem)
		if err := memoryAddsUp(mem, m, info); err == nil {
			t.Errorf("%s: the check passed %+v", name, mem)
		}
	}
}

// TestKVAttachDetachWhileRunning: regions attached and detached while requests run (a detach of a region in use
// fails and is logged) leave every output equal to the request served alone, and the accounting adds up at every
// step.
func TestKVAttachDetachWhileRunning(t *testing.T) {
	m := synthModel(t)
	reqs := randomRequests(5, 8, m.Config.VocabSize)
	want := alone(t, m, reqs)
	e := newEngine(t, m, setup{budget: budgetFor(m, 48, 60), blocks: 14, maxTokens: 48, onStep: func(e *Engine, info StepInfo) {
		checkMemory(t, e, m, info)
		switch info.Iter {
		case 3, 6:
			e.AttachKV(20)
		case 12, 30:
			e.DetachKV()
		}
	}})
	got := serve(t, e, reqs)
	for i, r := range got {
		if !slices.Equal(r.Output, want[i]) {
			t.Errorf("request %d: %v, alone %v", i, r.Output, want[i])
		}
	}
	e.DetachKV()
	e.DetachKV()
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range e.Log() {
		if ev.Kind == KVAttach || ev.Kind == KVDetach {
			kinds = append(kinds, ev.Kind.String()+" "+ev.Detail)
		}
	}
	t.Log(kinds)
	if mem := e.Memory(); mem.Blocks != 14 {
		t.Errorf("after detaching everything, %d blocks attached, want 14; log %v", mem.Blocks, kinds)
	}
}

// TestSwapFreesBecomeKV: the morphing sequence end to end on the engine: a layer goes to Int4, the bytes it frees
// become a KV region while requests run, the region is detached once free, and the layer returns to F32; outputs
// follow the per-step precision reference (checked in TestPrecisionSwitchMidDecode) and every request completes.
func TestSwapFreesBecomeKV(t *testing.T) {
	m := synthModel(t)
	prepare(t, m, quant.Int4)
	full := int64(m.WeightBytes())
	var attached int
	e := newEngine(t, m, setup{budget: budgetFor(m, 48, 12), maxTokens: 48, onStep: func(e *Engine, info StepInfo) {
		checkMemory(t, e, m, info)
		switch info.Iter {
		case 2:
			for l := range 3 {
				if err := e.SetLayerPrecision(l, quant.Int4); err != nil {
					t.Fatal(err)
				}
			}
		case 3:
			attached = e.Memory().Attachable()
			e.AttachKV(attached)
		}
	}})
	reqs := randomRequests(8, 10, m.Config.VocabSize)
	got := serve(t, e, reqs)
	for i, r := range got {
		if len(r.Output) != reqs[i].MaxTokens {
			t.Errorf("request %d: %d tokens, want %d", i, len(r.Output), reqs[i].MaxTokens)
		}
	}
	if attached == 0 {
		t.Fatal("three Int4 layers freed no whole KV block")
	}
	if err := e.SetLayerPrecision(0, quant.F32); err == nil {
		t.Fatal("a layer went back to F32 while its bytes were attached as KV")
	}
	e.DetachKV()
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	for l := range 3 {
		if err := e.SetLayerPrecision(l, quant.F32); err != nil {
			t.Fatal(err)
		}
	}
	if mem := e.Memory(); mem.PendingWeights != full || mem.Blocks != 12 || mem.Budget-mem.PendingWeights-mem.KV-mem.Workspace < 0 {
		t.Errorf("memory %+v after detaching, want 12 blocks and pending weights %d within the budget", mem, full)
	}
}

// TestStreamAndTimeline: a request's stream carries queued, scheduled, its tokens in order and finished; its
// timeline is ordered; the wall-clock run loop serves requests submitted from several goroutines.
func TestStreamAndTimeline(t *testing.T) {
	m := synthModel(t)
	x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 64}, BlockSize: 16, MaxBatchedTokens: 48})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(x, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	loop := make(chan error)
	go func() { loop <- e.Run(ctx) }()
	reqs := randomRequests(2, 4, m.Config.VocabSize)
	reqs = append(reqs, Request{Prompt: []int32{1, 9999}, MaxTokens: 3})
	results := make(chan []Event, len(reqs))
	for _, r := range reqs {
		go func() {
			var evs []Event
			for ev := range e.Submit(r).Events() {
				evs = append(evs, ev)
			}
			results <- evs
		}()
	}
	for range reqs {
		evs := <-results
		last := evs[len(evs)-1]
		if last.Kind == Rejected {
			continue
		}
		if evs[0].Kind != Queued || evs[1].Kind != Scheduled || last.Kind != Finished {
			t.Errorf("events %v: want queued, scheduled, ..., finished", evs)
		}
		var toks []int32
		for i, ev := range evs {
			if ev.Kind == Token {
				toks = append(toks, ev.Token)
			}
			if i > 0 && ev.Time < evs[i-1].Time {
				t.Errorf("event %d at %v before the previous at %v", i, ev.Time, evs[i-1].Time)
			}
		}
		if len(toks) < 20 {
			t.Errorf("request %d streamed %d tokens, want >= 20", last.Req, len(toks))
		}
	}
	cancel()
	if err := <-loop; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	rejected := 0
	for _, ev := range e.Log() {
		if ev.Kind == Rejected {
			rejected++
		}
	}
	if rejected != 1 {
		t.Errorf("%d requests rejected, want 1 (the out-of-vocabulary prompt)", rejected)
	}
}
