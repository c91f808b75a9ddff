package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/quant"
)

// fakeExec is a synthetic executor: each sampled token is a hash of the sequence's position and last token (never
// 0, which the tests use as a stop token), a step takes 1 ms plus 10 µs a token, and the KV pool is a block count.
// It fails its failAt-th step when failAt > 0.
type fakeExec struct {
	geo    executor.Geometry
	blocks int
	failAt int
	steps  int
	sleep  time.Duration // real time a step takes, for wall-clock tests
}

func newFake(blocks int) *fakeExec {
	return &fakeExec{geo: executor.Geometry{BlockSize: 16, MaxBatchedTokens: 64, Context: 512, Vocab: 100, Layers: 4}, blocks: blocks}
}

func (f *fakeExec) Step(b *executor.Batch) (executor.Result, error) {
	f.steps++
	time.Sleep(f.sleep)
	if f.steps == f.failAt {
		return executor.Result{}, errors.New("device lost")
	}
	next := make([]int32, len(b.Seqs))
	for i, s := range b.Seqs {
		if s.SeqLen > len(s.Table)*f.geo.BlockSize {
			return executor.Result{}, fmt.Errorf("sequence %d: table of %d blocks for %d positions", i, len(s.Table), s.SeqLen)
		}
		next[i] = -1
		if s.Sample {
			next[i] = 1 + int32((s.SeqLen*7919+int(s.Tokens[len(s.Tokens)-1])*31)%(f.geo.Vocab-1))
		}
	}
	return executor.Result{Next: next, Duration: time.Millisecond + 10*time.Microsecond*time.Duration(b.Tokens())}, nil
}

func (f *fakeExec) Geometry() executor.Geometry                       { return f.geo }
func (f *fakeExec) LayerBytes() []executor.LayerBytes                 { return nil }
func (f *fakeExec) SetLayerPrecision(layer int, _ quant.Format) error { return nil }
func (f *fakeExec) Memory() executor.Memory                           { return executor.Memory{Blocks: f.blocks, BlockBytes: 1} }
func (f *fakeExec) AttachKV(blocks int) error                         { f.blocks += blocks; return nil }
func (f *fakeExec) DetachKV(blocks int) error                         { f.blocks -= blocks; return nil }

func prompt(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + i%97)
	}
	return p
}

// stepUntil steps e until cond holds, failing after limit iterations.
func stepUntil(t *testing.T, e *Engine, limit int, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == limit {
			t.Fatalf("condition not reached in %d iterations", limit)
		}
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
}

// produced is the number of output tokens a request has so far (0 before the loop has taken it in).
func produced(e *Engine, s *Stream) int {
	if q := e.reqs[s.ID]; q != nil {
		return len(q.seq.Output)
	}
	return len(s.res.Output)
}

func isDone(s *Stream) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// TestCancelEverywhere: requests cancelled while queued, while prefilling and while decoding end with cancelled,
// hold no block from the next iteration on, never run again, and leave the other requests' outputs as they are
// served alone; the pool is whole at the end.
func TestCancelEverywhere(t *testing.T) {
	m := synthModel(t)
	reqs := randomRequests(4, 6, m.Config.VocabSize)
	want := alone(t, m, reqs)
	long := Request{Prompt: prompt(120), MaxTokens: 20} // prefills in chunks of the 48-token budget
	e := newEngine(t, m, setup{budget: budgetFor(m, 48, 40), maxTokens: 48})
	var streams []*Stream
	for _, r := range reqs {
		streams = append(streams, e.Submit(r))
	}
	prefilling := e.Submit(long)
	decoding := e.Submit(Request{Prompt: prompt(5), MaxTokens: 200})
	queued := e.Submit(Request{Prompt: prompt(300), MaxTokens: 100}) // waits: the pool is busy
	evs := queued.Events()
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	if _, held := e.kv.Table(queued.ID); held != 0 {
		t.Fatal("the queued request was admitted; the test needs it waiting")
	}
	e.Cancel(queued.ID)
	stepUntil(t, e, 50, func() bool { _, n := e.kv.Table(prefilling.ID); return n > 0 })
	if got := produced(e, prefilling); got != 0 {
		t.Fatalf("the long prompt already decodes (%d tokens)", got)
	}
	e.Cancel(prefilling.ID)
	stepUntil(t, e, 200, func() bool { return isDone(prefilling) && produced(e, decoding) >= 3 })
	e.Cancel(decoding.ID)
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Stream{"queued": queued, "prefilling": prefilling, "decoding": decoding} {
		if !isDone(s) {
			t.Fatalf("%s: not ended one iteration after Cancel", name)
		}
		r := s.Wait()
		if r.Finish != FinishCancelled || !errors.Is(r.Err, ErrCancelled) {
			t.Errorf("%s: finish %v, error %v; want cancelled", name, r.Finish, r.Err)
		}
		if _, held := e.kv.Table(s.ID); held != 0 {
			t.Errorf("%s: still holds blocks after its cancellation", name)
		}
	}
	var kinds []EventKind
	for ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	if !slices.Equal(kinds, []EventKind{Queued, Cancelled}) {
		t.Errorf("queued request's stream %v, want queued, cancelled", kinds)
	}
	stepUntil(t, e, 1000, func() bool { return e.Pending() == 0 })
	for i, s := range streams {
		if r := s.Wait(); r.Finish != FinishLength || !slices.Equal(r.Output, want[i]) {
			t.Errorf("request %d: finish %v, output %v; alone %v", i, r.Finish, r.Output, want[i])
		}
	}
	for _, ev := range e.Log() {
		if (ev.Req == prefilling.ID || ev.Req == decoding.ID) && ev.Kind == Token && ev.Time > decoding.Wait().Timeline.Finish {
			t.Errorf("a cancelled request produced a token after it ended: %+v", ev)
		}
	}
	if e.kv.UsedBlocks() != 0 || e.kv.FreeBlocks() != e.kv.TotalBlocks() {
		t.Errorf("at the end %d blocks in use, %d of %d free", e.kv.UsedBlocks(), e.kv.FreeBlocks(), e.kv.TotalBlocks())
	}
}

// TestCancelUnderBaselines: a member of a static or dynamic batch cancelled mid-decode ends, frees its blocks and
// lets the batch finish.
func TestCancelUnderBaselines(t *testing.T) {
	for _, policy := range []string{"static", "dynamic"} {
		x := newFake(40)
		e, err := New(x, Options{Scheduler: policy, BatchSize: 4, MaxDelay: time.Millisecond, Clock: &executor.VirtualClock{}})
		if err != nil {
			t.Fatal(err)
		}
		var streams []*Stream
		for i := range 4 {
			streams = append(streams, e.Submit(Request{Prompt: prompt(10 + i), MaxTokens: 30}))
		}
		stepUntil(t, e, 100, func() bool { return produced(e, streams[1]) >= 2 })
		e.Cancel(streams[1].ID)
		stepUntil(t, e, 200, func() bool { return e.Pending() == 0 })
		for i, s := range streams {
			r := s.Wait()
			if want := map[bool]FinishReason{true: FinishCancelled, false: FinishLength}[i == 1]; r.Finish != want {
				t.Errorf("%s, request %d: finish %v, want %v", policy, i, r.Finish, want)
			}
		}
		if e.kv.UsedBlocks() != 0 {
			t.Errorf("%s: %d blocks still in use", policy, e.kv.UsedBlocks())
		}
	}
}

// TestSubmitContext: a request whose context ends is cancelled; one whose context outlives it costs nothing after.
func TestSubmitContext(t *testing.T) {
	e, err := New(newFake(40), Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := e.SubmitContext(ctx, Request{Prompt: prompt(4), MaxTokens: 100})
	kept := e.SubmitContext(context.Background(), Request{Prompt: prompt(4), MaxTokens: 3})
	stepUntil(t, e, 10, func() bool { return produced(e, s) > 0 })
	cancel() // the context's AfterFunc cancels from its own goroutine
	for deadline := time.Now().Add(10 * time.Second); !isDone(s) && time.Now().Before(deadline); runtime.Gosched() {
		if _, err := e.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.Wait(); r.Finish != FinishCancelled {
		t.Errorf("context cancelled: finish %v, want cancelled", r.Finish)
	}
	stepUntil(t, e, 10, func() bool { return isDone(kept) })
	if r := kept.Wait(); r.Finish != FinishLength || len(r.Output) != 3 {
		t.Errorf("finish %v with %d tokens, want length with 3", r.Finish, len(r.Output))
	}
}

// TestFailingExecutor: when a step fails, every queued and running request ends with that error in the same
// iteration, and the engine refuses new work with a one-line error.
func TestFailingExecutor(t *testing.T) {
	x := newFake(10)
	x.failAt = 4
	e, err := New(x, Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	var streams []*Stream
	for i := range 6 {
		streams = append(streams, e.Submit(Request{Prompt: prompt(20 + 10*i), MaxTokens: 50}))
	}
	var stepErr error
	for i := 0; i < 4 && stepErr == nil; i++ {
		_, stepErr = e.Step()
	}
	if stepErr == nil || !strings.Contains(stepErr.Error(), "device lost") {
		t.Fatalf("step error %v, want the executor's", stepErr)
	}
	waiting := 0
	for i, s := range streams {
		if !isDone(s) {
			t.Fatalf("request %d still open after the failed step", i)
		}
		r := s.Wait()
		if r.Finish != FinishError || r.Err == nil || !strings.Contains(r.Err.Error(), "device lost") {
			t.Errorf("request %d: finish %v, error %v; want the step's error", i, r.Finish, r.Err)
		}
		if r.Timeline.Scheduled == 0 && len(r.Output) == 0 {
			waiting++
		}
	}
	if waiting == 0 {
		t.Error("no request was still waiting at the failure; the test means to cover queued ones too")
	}
	if _, err := e.Step(); err == nil {
		t.Error("Step after a failure ran")
	}
	r := e.Submit(Request{Prompt: prompt(3), MaxTokens: 3}).Wait()
	if r.Finish != FinishRejected || r.Err == nil || strings.Contains(r.Err.Error(), "\n") || !strings.Contains(r.Err.Error(), "device lost") {
		t.Errorf("submit after failure: %v %v, want a one-line rejection naming the failure", r.Finish, r.Err)
	}
	if err := e.Run(context.Background()); err == nil {
		t.Error("Run on a failed engine returned nil")
	}
}

// TestAbandonedStreams: 1,000 requests whose streams are opened and never read cost no goroutine, and each stream
// keeps only its own events.
func TestAbandonedStreams(t *testing.T) {
	e, err := New(newFake(200), Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	before := runtime.NumGoroutine()
	var streams []*Stream
	for i := range 1000 {
		s := e.SubmitContext(context.Background(), Request{Prompt: prompt(1 + i%20), MaxTokens: 3})
		s.Events()
		streams = append(streams, s)
	}
	stepUntil(t, e, 10000, func() bool { return e.Pending() == 0 })
	if after := runtime.NumGoroutine(); after != before {
		t.Errorf("%d goroutines before, %d after 1,000 unread streams", before, after)
	}
	for _, s := range streams {
		if n := len(s.Events()); n != 6 { // queued, scheduled, three tokens, finished
			t.Fatalf("stream %d holds %d events, want its 6", s.ID, n)
		}
	}
}

// TestSlowReaderGetsEverything: a stream whose request makes more events than its channel buffers delivers all of
// them, in order, to a reader that starts late.
func TestSlowReaderGetsEverything(t *testing.T) {
	x := newFake(200)
	x.geo.Context = 4096
	e, err := New(x, Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	s := e.Submit(Request{Prompt: prompt(3), MaxTokens: 2 * streamBuffer})
	ch := s.Events()
	stepUntil(t, e, 1000, func() bool { return e.Pending() == 0 })
	var got []int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			if ev.Kind == Token {
				got = append(got, ev.Token)
			}
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		e.flushOverflow() // what the loop does at every iteration and idle tick
		select {
		case <-done:
			if r := s.Wait(); !slices.Equal(got, r.Output) {
				t.Fatalf("read %d tokens, the result has %d", len(got), len(r.Output))
			}
			return
		case <-deadline:
			t.Fatalf("reader got %d of %d tokens", len(got), 2*streamBuffer)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestRunReturnsOnCancel: Run returns without running an iteration when its context is already done, and within
// one iteration when it ends while work runs.
func TestRunReturnsOnCancel(t *testing.T) {
	e, err := New(newFake(200), Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		e.Submit(Request{Prompt: prompt(30), MaxTokens: 400})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Run(ctx); !errors.Is(err, context.Canceled) || e.Iterations() != 0 {
		t.Fatalf("Run with a cancelled context: %v after %d iterations, want none", err, e.Iterations())
	}
	ctx, cancel = context.WithCancel(context.Background())
	at := -1
	e.OnStep(func(info StepInfo) {
		if info.Iter == 5 {
			at = info.Iter
			cancel()
		}
	})
	if err := e.Run(ctx); !errors.Is(err, context.Canceled) || at != 5 || e.Iterations() != 6 {
		t.Fatalf("Run: %v after %d iterations, cancelled at %d; want it back right after", err, e.Iterations(), at)
	}
}

// TestNewRejectsInconsistentOptions: options that contradict the executor's geometry fail in New, naming both values.
func TestNewRejectsInconsistentOptions(t *testing.T) {
	for _, c := range []struct {
		opt  Options
		geo  func(*executor.Geometry)
		want string
	}{
		{Options{Scheduler: "static", BatchSize: 16, MaxBatchedTokens: 8}, nil, "BatchSize 16 is more than the 8 tokens"},
		{Options{Scheduler: "dynamic", BatchSize: 65}, nil, "BatchSize 65 is more than the 64 tokens"},
		{Options{MaxBatchedTokens: 65}, nil, "MaxBatchedTokens 65, the executor's steps hold 1..64"},
		{Options{}, func(g *executor.Geometry) { g.BlockSize = 0 }, "executor geometry"},
		{Options{Scheduler: "fifo"}, nil, `scheduler "fifo"`},
		{Options{Scheduler: "static", PrefixCaching: true}, nil, "prefix caching with static batching"},
	} {
		x := newFake(10)
		if c.geo != nil {
			c.geo(&x.geo)
		}
		_, err := New(x, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want a one-line error with %q", c.opt, err, c.want)
		}
	}
}

// TestGeometryFromExecutor: the engine's block size is the executor's: with blocks of 8 on the CPU executor the
// outputs are those of blocks of 16, and a table too short for its sequence is an error, not a write into block 0.
func TestGeometryFromExecutor(t *testing.T) {
	m := synthModel(t)
	reqs := randomRequests(6, 4, m.Config.VocabSize)
	want := alone(t, m, reqs)
	x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Bytes: budgetFor(m, 48, 80)}, BlockSize: 8, MaxBatchedTokens: 48})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(x, Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	if e.kv.BlockSize() != 8 {
		t.Fatalf("engine blocks of %d, executor's 8", e.kv.BlockSize())
	}
	for i, r := range serve(t, e, reqs) {
		if !slices.Equal(r.Output, want[i]) {
			t.Errorf("request %d with blocks of 8: %v, with 16: %v", i, r.Output, want[i])
		}
	}
	_, err = x.Step(&executor.Batch{Seqs: []executor.SeqWork{{Tokens: prompt(20), SeqLen: 20, Table: []int32{0, 1}, Sample: true}}})
	if err == nil || !strings.Contains(err.Error(), "its table of 2 blocks of 8 holds 16") {
		t.Errorf("a 20-token step over 2 blocks of 8: %v, want a table error", err)
	}
}

// TestDetachNeverStrands: a detach that would leave an admitted request more than the pool can hold is refused
// with the reason, and a waiting request that no longer fits after a detach is rejected with the reason; every
// other request completes (the run has a deadline, not a sleep).
func TestDetachNeverStrands(t *testing.T) {
	x := newFake(8)
	e, err := New(x, Options{Clock: &executor.VirtualClock{}, Watermark: 1e-9})
	if err != nil {
		t.Fatal(err)
	}
	e.AttachKV(20)
	big := e.Submit(Request{Prompt: prompt(100), MaxTokens: 100}) // 13 blocks in all: needs the region
	stepUntil(t, e, 5, func() bool { return produced(e, big) > 0 })
	e.DetachKV()
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	if ev := lastOf(e, KVDetach); !strings.Contains(ev.Detail, "refused: request 0, admitted, needs 14 KV blocks, the pool would hold 8") {
		t.Fatalf("detach with an admitted request needing the region: %q, want refused", ev.Detail)
	}
	stepUntil(t, e, 300, func() bool { return isDone(big) })
	if r := big.Wait(); r.Finish != FinishLength {
		t.Fatalf("the admitted request ended %v", r.Finish)
	}

	// A request that needs the region waits behind one that fits the base (one sequence at a time); the region is
	// drained and detached, and the waiting request, never scheduled, is rejected with the reason.
	x = newFake(8)
	if e, err = New(x, Options{Clock: &executor.VirtualClock{}, Watermark: 1e-9, MaxNumSeqs: 1}); err != nil {
		t.Fatal(err)
	}
	e.AttachKV(20)
	filler := e.Submit(Request{Prompt: prompt(60), MaxTokens: 50}) // 8 blocks with the rounding block: fits the base
	waiting := e.Submit(Request{Prompt: prompt(100), MaxTokens: 100})
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	if _, n := e.kv.Table(waiting.ID); n != 0 || e.sched.Waiting() != 1 {
		t.Fatal("the second request was admitted; the test needs it waiting")
	}
	e.DrainKV(true)
	e.DetachKV()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go e.Run(ctx)
	for _, s := range []*Stream{waiting, filler} {
		select {
		case <-s.Done():
		case <-ctx.Done():
			t.Fatalf("stalled: request %d did not end before the deadline", s.ID)
		}
	}
	cancel()
	if ev := lastOf(e, KVDrain); ev.Detail != "draining true" {
		t.Errorf("drain: %q", ev.Detail)
	}
	if ev := lastOf(e, KVDetach); ev.Detail != "20 blocks" {
		t.Errorf("detach of the drained region: %q", ev.Detail)
	}
	if w := waiting.Wait(); w.Finish != FinishRejected || !strings.Contains(w.Err.Error(), "needs 14 KV blocks, the pool now has 8") {
		t.Errorf("waiting request: %v %v, want rejected with the pool it no longer fits", w.Finish, w.Err)
	}
	if f := filler.Wait(); f.Finish != FinishLength {
		t.Errorf("filler ended %v", f.Finish)
	}
}

func lastOf(e *Engine, k EventKind) Event {
	var last Event
	for _, ev := range e.Log() {
		if ev.Kind == k {
			last = ev
		}
	}
	return last
}

// TestFinishReasons: a stop token ends a request with stop, MaxTokens and the context with length.
func TestFinishReasons(t *testing.T) {
	x := newFake(100)
	x.geo.Context = 40
	e, err := New(x, Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	probe := serve(t, e, []Request{{Prompt: prompt(5), MaxTokens: 10}})[0]
	stop := e.Submit(Request{Prompt: prompt(5), MaxTokens: 10, Stop: []int32{probe.Output[3]}})
	length := e.Submit(Request{Prompt: prompt(5), MaxTokens: 4})
	ctxFull := e.Submit(Request{Prompt: prompt(30), MaxTokens: 100})
	stepUntil(t, e, 100, func() bool { return e.Pending() == 0 })
	for name, c := range map[string]struct {
		s    *Stream
		want FinishReason
		n    int
	}{"stop": {stop, FinishStop, 4}, "length": {length, FinishLength, 4}, "context": {ctxFull, FinishLength, 10}} {
		if r := c.s.Wait(); r.Finish != c.want || len(r.Output) != c.n || r.Err != nil {
			t.Errorf("%s: %v with %d tokens (%v), want %v with %d", name, r.Finish, len(r.Output), r.Err, c.want, c.n)
		}
	}
}

// TestStopWhen: a request whose StopWhen says stop at its fourth token ends with stop and those four tokens in the
// iteration that produced the fourth, its blocks freed then; StopWhen sees each token once and in order, also
// when a small pool preempts and recomputes the requests, under each scheduler.
func TestStopWhen(t *testing.T) {
	for _, scheduler := range []string{"continuous", "static"} {
		for _, blocks := range []int{100, 6} {
			x := newFake(blocks)
			e, err := New(x, Options{Scheduler: scheduler, Clock: &executor.VirtualClock{}})
			if err != nil {
				t.Fatal(err)
			}
			probe := serve(t, e, []Request{{Prompt: prompt(20), MaxTokens: 30}})[0]
			var seen []int32
			stopAt := probe.Output[3]
			r := Request{Prompt: prompt(20), MaxTokens: 30, StopWhen: func(tok int32) bool {
				seen = append(seen, tok)
				return len(seen) == 4
			}}
			var ended StepInfo
			e.OnStep(func(info StepInfo) {
				if len(info.Ended) > 0 && info.Ended[0].Finish == FinishStop {
					ended = info
				}
			})
			others := []*Stream{e.Submit(Request{Prompt: prompt(30), MaxTokens: 40}), e.Submit(Request{Prompt: prompt(25), MaxTokens: 40})}
			st := e.Submit(r)
			stepUntil(t, e, 500, func() bool { return e.Pending() == 0 })
			res := st.Wait()
			name := fmt.Sprintf("%s, %d blocks", scheduler, blocks)
			if res.Finish != FinishStop || !slices.Equal(res.Output, probe.Output[:4]) || res.Output[3] != stopAt || res.Err != nil {
				t.Errorf("%s: %v, output %v (%v); want stop after %v", name, res.Finish, res.Output, res.Err, probe.Output[:4])
			}
			if !slices.Equal(seen, res.Output) {
				t.Errorf("%s: StopWhen saw %v, want each output token once: %v", name, seen, res.Output)
			}
			var lastToken, finished Event
			for _, ev := range e.Log() {
				if ev.Req == st.ID && ev.Kind == Token {
					lastToken = ev
				}
				if ev.Req == st.ID && ev.Kind.ends() {
					finished = ev
				}
			}
			if finished.Kind != Finished || finished.Detail != "stop" || finished.Iter != lastToken.Iter || ended.Iter != lastToken.Iter {
				t.Errorf("%s: ended with %v %q at iteration %d (hook: %d), last token at %d; want finished stop in that iteration",
					name, finished.Kind, finished.Detail, finished.Iter, ended.Iter, lastToken.Iter)
			}
			for _, o := range others {
				if r := o.Wait(); r.Finish != FinishLength || len(r.Output) != 40 {
					t.Errorf("%s: another request: %v with %d tokens, want length with 40", name, r.Finish, len(r.Output))
				}
			}
			if blocks == 6 && scheduler == "continuous" && preemptions(e) == 0 {
				t.Errorf("%s: no preemption; the small pool is meant to force some", name)
			}
			if used := e.kv.UsedBlocks(); used != 0 {
				t.Errorf("%s: %d blocks in use at the end", name, used)
			}
		}
	}
}

// TestShutdown: Shutdown stops admitting, lets accepted requests finish, and at its deadline cancels the rest.
func TestShutdown(t *testing.T) {
	e, err := New(newFake(200), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	var streams []*Stream
	for range 5 {
		streams = append(streams, e.Submit(Request{Prompt: prompt(10), MaxTokens: 20}))
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := e.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		if r := s.Wait(); r.Finish != FinishLength {
			t.Errorf("request %d accepted before Shutdown ended %v", i, r.Finish)
		}
	}
	if r := e.Submit(Request{Prompt: prompt(3), MaxTokens: 3}).Wait(); r.Finish != FinishRejected || !strings.Contains(r.Err.Error(), "shutting down") {
		t.Errorf("submit after Shutdown: %v %v", r.Finish, r.Err)
	}

	slow := newFake(200)
	slow.sleep = time.Millisecond
	if e, err = New(slow, Options{}); err != nil {
		t.Fatal(err)
	}
	go e.Run(ctx)
	long := e.Submit(Request{Prompt: prompt(10), MaxTokens: 400})
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if err := e.Shutdown(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	if r := long.Wait(); r.Finish != FinishCancelled {
		t.Errorf("request left at the deadline ended %v, want cancelled", r.Finish)
	}
}

// TestReplayVirtualTime: the replay driver stamps each request with its true arrival, also when it arrives during
// a step, jumps over idle time, serves a lone request under dynamic batching (whose deadline it waits for), and
// gives the same results under every scheduler as far as they are schedule-independent.
func TestReplayVirtualTime(t *testing.T) {
	var reqs []TimedRequest
	for i := range 30 {
		reqs = append(reqs, TimedRequest{Request: Request{Prompt: prompt(5 + i), MaxTokens: 10}, Arrival: time.Duration(i) * 2500 * time.Microsecond})
	}
	reqs = append(reqs, TimedRequest{Request: Request{Prompt: prompt(7), MaxTokens: 5}, Arrival: 10 * time.Second}) // alone, after idle time
	var outputs [][]int32
	for _, policy := range []string{"continuous", "static", "dynamic"} {
		clock := &executor.VirtualClock{}
		e, err := New(newFake(200), Options{Scheduler: policy, BatchSize: 8, MaxDelay: 20 * time.Millisecond, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Replay(context.Background(), reqs)
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		for i, r := range res {
			if r.Timeline.Arrival != reqs[i].Arrival || r.Finish != FinishLength || r.Timeline.FirstToken < r.Timeline.Arrival {
				t.Fatalf("%s, request %d: arrival %v (want %v), finish %v, first token %v", policy, i, r.Timeline.Arrival, reqs[i].Arrival, r.Finish, r.Timeline.FirstToken)
			}
		}
		last := res[len(res)-1].Timeline
		if policy == "dynamic" && last.TTFT() < 20*time.Millisecond {
			t.Errorf("dynamic: the lone request started after %v, before the 20 ms deadline", last.TTFT())
		}
		if last.TTFT() > 50*time.Millisecond || clock.Now() > 11*time.Second {
			t.Errorf("%s: lone request TTFT %v, clock at %v: idle time was not skipped", policy, last.TTFT(), clock.Now())
		}
		if policy == "continuous" {
			for _, r := range res {
				outputs = append(outputs, r.Output)
			}
		} else {
			for i, r := range res {
				if !slices.Equal(r.Output, outputs[i]) {
					t.Errorf("%s, request %d: %v, continuous %v", policy, i, r.Output, outputs[i])
				}
			}
		}
	}
}

// TestRunDynamicVirtual: Run on a virtual clock moves time to dynamic batching's deadline, so a lone request runs.
func TestRunDynamicVirtual(t *testing.T) {
	e, err := New(newFake(50), Options{Scheduler: "dynamic", BatchSize: 8, MaxDelay: 100 * time.Millisecond, Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go e.Run(ctx)
	select {
	case <-e.Submit(Request{Prompt: prompt(4), MaxTokens: 3}).Done():
	case <-ctx.Done():
		t.Fatal("a lone request under dynamic batching never ran")
	}
}

// TestControlSurface: the hook runs after iterations and on idle ticks with the queue and pool signals; swaps,
// region changes and decisions are logged with the iteration they took effect at; LogSince returns only new events.
func TestControlSurface(t *testing.T) {
	m := synthModel(t)
	prepare(t, m, quant.Int4)
	var infos []StepInfo
	var cursor uint64
	var polled int
	e := newEngine(t, m, setup{budget: budgetFor(m, 48, 30), blocks: 20, maxTokens: 48, onStep: func(e *Engine, info StepInfo) {
		infos = append(infos, info)
		evs, next := e.LogSince(cursor)
		if uint64(len(evs)) != next-cursor {
			t.Fatalf("LogSince(%d) gave %d events, cursor moved to %d", cursor, len(evs), next)
		}
		polled += len(evs)
		cursor = next
		if info.Iter == 2 && !info.Idle {
			if err := e.SetLayerPrecision(1, quant.Int4); err != nil {
				t.Fatal(err)
			}
			e.Note("morph: layer 1 to int4 (test)")
			e.AttachKV(5)
		}
	}})
	if lb := e.LayerBytes(); len(lb) != len(m.Layers) || lb[1][quant.Int4] >= lb[1][quant.F32] || lb[1][quant.Int4] == 0 {
		t.Fatalf("layer bytes %v", lb)
	}
	reqs := randomRequests(2, 6, m.Config.VocabSize)
	serve(t, e, reqs)
	if _, err := e.Step(); err != nil { // idle
		t.Fatal(err)
	}
	if last := infos[len(infos)-1]; !last.Idle || last.Running != 0 || last.Used != 0 || last.Total != 25 || len(last.Regions) != 2 {
		t.Errorf("idle info %+v", last)
	}
	if polled != len(e.Log()) {
		t.Errorf("the hook polled %d events, the log holds %d", polled, len(e.Log()))
	}
	first := infos[0]
	if first.Waiting+first.Running != len(reqs) || first.PrefillTokens == 0 || len(first.Ended) != 0 {
		t.Errorf("first info %+v", first)
	}
	ended, swapIter, attachIter := 0, -1, -1
	for _, info := range infos {
		ended += len(info.Ended)
		if info.Waiting > 0 && info.OldestWait <= 0 {
			t.Errorf("iteration %d: %d waiting, oldest wait %v", info.Iter, info.Waiting, info.OldestWait)
		}
	}
	for _, ev := range e.Log() {
		switch ev.Kind {
		case Swap:
			swapIter = ev.Iter
		case KVAttach:
			attachIter = ev.Iter
		}
	}
	if ended != len(reqs) || swapIter != 3 || attachIter != 3 || lastOf(e, Decision).Iter != 3 {
		t.Errorf("%d ended (want %d), swap at %d, attach at %d, decision at %d; want iteration 3", ended, len(reqs), swapIter, attachIter, lastOf(e, Decision).Iter)
	}
	if infos[3].Formats[1] != quant.Int4 || !slices.Equal(infos[3].Swapped, []int{1}) {
		t.Errorf("iteration 3 ran %v, swapped %v", infos[3].Formats, infos[3].Swapped)
	}
}

// TestVirtualRunBoundedLog: 10,000 requests replayed in virtual time on the synthetic executor leave a log of at
// most LogSize events, while a hook that polls it every iteration sees every event.
func TestVirtualRunBoundedLog(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	var cursor uint64
	var seen int
	e, err := New(newFake(400), Options{Clock: &executor.VirtualClock{}, LogSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	e.OnStep(func(StepInfo) {
		evs, next := e.LogSince(cursor)
		seen += len(evs)
		cursor = next
	})
	reqs := make([]TimedRequest, n)
	for i := range reqs {
		reqs[i] = TimedRequest{Request: Request{Prompt: prompt(1 + i%50), MaxTokens: 1 + i%20}, Arrival: time.Duration(i) * 3 * time.Millisecond}
	}
	res, err := e.Replay(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for _, r := range res {
		events += 3 + len(r.Output) // queued, scheduled, tokens, finished (no preemption: a roomy pool)
	}
	if got := len(e.Log()); got != 4096 || cap(e.log.buf) > 4096 {
		t.Errorf("log holds %d events (capacity %d), want the last 4096", got, cap(e.log.buf))
	}
	if seen != events || cursor != uint64(events) {
		t.Errorf("the hook saw %d events (cursor %d), the run made %d", seen, cursor, events)
	}
}

// BenchmarkMonitorIteration is one iteration of a replayed run with a hook that polls the log, after past requests
// have already run: its ns/op stays level from 1,000 to 10,000 past requests.
func BenchmarkMonitorIteration(b *testing.B) {
	for _, past := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("past=%d", past), func(b *testing.B) {
			var cursor uint64
			e, err := New(newFake(400), Options{Clock: &executor.VirtualClock{}})
			if err != nil {
				b.Fatal(err)
			}
			e.OnStep(func(StepInfo) { _, cursor = e.LogSince(cursor) })
			reqs := make([]TimedRequest, past)
			for i := range reqs {
				reqs[i] = TimedRequest{Request: Request{Prompt: prompt(1 + i%50), MaxTokens: 1 + i%20}, Arrival: time.Duration(i) * 3 * time.Millisecond}
			}
			if _, err := e.Replay(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
			for range 8 {
				e.Submit(Request{Prompt: prompt(8), MaxTokens: 400})
			}
			b.ResetTimer()
			for range b.N {
				if e.Pending() == 0 {
					b.StopTimer()
					for range 8 {
						e.Submit(Request{Prompt: prompt(8), MaxTokens: 400})
					}
					b.StartTimer()
				}
				if _, err := e.Step(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
