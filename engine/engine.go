// Package engine is the serving engine core: requests come in through Submit, a run loop asks the scheduler for
// each iteration's work, runs it on an Executor, and streams each request's tokens and lifecycle events back. The
// KV block manager, scheduler and executor are the engine's parts (engine/kv, engine/sched, engine/exec); the
// engine owns the request lifecycle, the timestamps the metrics are computed from, and the event log.
package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/exec"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/engine/sched"
	"github.com/morphlab/morphlab/quant"
)

// Request is a generation request in tokens.
type Request struct {
	Prompt    []int32
	MaxTokens int           // output tokens at most
	Stop      []int32       // tokens that end the output (the stop token is the last output token)
	Sampling  sample.Params // Temperature 0 is greedy
}

// EventKind names what happened.
type EventKind int

// The event kinds. Request events carry the request's id; engine events (precision, KV) carry id -1.
const (
	Queued    EventKind = iota // the request entered the waiting queue
	Scheduled                  // the request got its first tokens into a batch (again after a preemption)
	Token                      // the request produced Token
	Preempted                  // the request lost its KV blocks and went back to the queue for recompute
	Finished                   // the request has all its output
	Rejected                   // the request cannot be served (Detail says why)
	Precision                  // a layer's precision was asked for (Detail: layer and format, or the error)
	KVAttach                   // a KV region was attached (Detail: blocks, or the error)
	KVDetach                   // the last KV region was detached (Detail: blocks, or the error)
)

var kindNames = [...]string{"queued", "scheduled", "token", "preempted", "finished", "rejected", "precision", "kv-attach", "kv-detach"}

func (k EventKind) String() string { return kindNames[k] }

// Event is one entry of a request's stream and of the engine's log.
type Event struct {
	Kind   EventKind
	Req    kv.SeqID
	Time   time.Duration // on the engine's clock
	Token  int32
	Detail string
}

// Timeline holds a request's timestamps on the engine's clock.
type Timeline struct {
	Arrival    time.Duration
	Scheduled  time.Duration // first time in a batch
	FirstToken time.Duration
	Tokens     []time.Duration // each output token's time (Tokens[0] = FirstToken)
	Finish     time.Duration
}

// Result is a request's outcome.
type Result struct {
	ID          kv.SeqID
	Output      []int32
	Timeline    Timeline
	Preemptions int
	Err         error // set when the request was rejected
}

// Stream is a submitted request's handle: its events as they happen, and its result at the end.
type Stream struct {
	ID   kv.SeqID
	mu   sync.Mutex
	evs  []Event
	wake chan struct{}
	done chan struct{}
	res  Result
	once sync.Once
	ch   chan Event
}

func (s *Stream) push(e Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Events returns a channel carrying the request's events in order, closed after Finished or Rejected. Events are
// buffered without bound inside the stream, so a slow reader never stalls the engine.
func (s *Stream) Events() <-chan Event {
	s.once.Do(func() {
		s.ch = make(chan Event)
		go func() {
			defer close(s.ch)
			for i := 0; ; {
				s.mu.Lock()
				pending := s.evs[i:]
				s.mu.Unlock()
				for _, e := range pending {
					s.ch <- e
					i++
					if e.Kind == Finished || e.Kind == Rejected {
						return
					}
				}
				<-s.wake
			}
		}()
	})
	return s.ch
}

// Wait blocks until the request is finished or rejected and returns its result.
func (s *Stream) Wait() Result {
	<-s.done
	return s.res
}

// Options configure an engine.
type Options struct {
	// Policy is "continuous" (default), "static" or "dynamic" batching.
	Policy    string
	MaxTokens int           // tokens an iteration feeds at most (continuous and the baselines' prefill); default 512
	MaxSeqs   int           // running sequences at most (continuous); default 256
	BatchSize int           // batch size of the baselines; default 32
	MaxDelay  time.Duration // dynamic batching's queueing delay
	BlockSize int           // KV block size in tokens; default 16
	Watermark float64       // fraction of blocks admission keeps free; default 0.01
	Context   int           // the model's context length (the most tokens a request may reach)
	Vocab     int           // the vocabulary size (prompt tokens are checked against it)
	Clock     exec.Clock    // default: the wall clock
	// OnStep, if set, is called by the run loop after every iteration.
	OnStep func(StepInfo)
}

// StepInfo describes one iteration, for monitors and tests.
type StepInfo struct {
	Iter     int
	Time     time.Duration // clock after the step
	Duration time.Duration // the executor's step time
	// Wall is the wall time Step took in all: the executor's step plus the engine's scheduling and bookkeeping.
	Wall    time.Duration
	Work    []WorkInfo
	Formats []quant.Format // layer precisions the step ran with
	Waiting int
	Running int
	Free    int // free KV blocks after the step
	Total   int // KV blocks attached
}

// WorkInfo is one request's share of an iteration.
type WorkInfo struct {
	Req    kv.SeqID
	Start  int // first position fed
	Tokens int
	Sample bool
}

type request struct {
	seq      *sched.Seq
	stream   *Stream
	sampler  *sample.Sampler
	emitted  int
	started  bool
	timeline Timeline
}

// Engine serves requests on an executor. Submit, SetLayerPrecision, AttachKV, DetachKV and Log are safe to call
// from any goroutine; Step and Run drive the loop and must not be called concurrently with each other.
type Engine struct {
	x     exec.Executor
	opt   Options
	kv    *kv.Manager
	sched sched.Scheduler
	reqs  map[kv.SeqID]*request
	iter  int

	mu     sync.Mutex // guards the fields below
	nextID kv.SeqID
	inbox  []*request
	cmds   []func()
	log    []Event
	wake   chan struct{}
}

// New returns an engine over x whose KV pool starts with the executor's attached blocks.
func New(x exec.Executor, opt Options) (*Engine, error) {
	if opt.MaxTokens == 0 {
		opt.MaxTokens = 512
	}
	if opt.MaxSeqs == 0 {
		opt.MaxSeqs = 256
	}
	if opt.BatchSize == 0 {
		opt.BatchSize = 32
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = 16
	}
	if opt.Watermark == 0 {
		opt.Watermark = 0.01
	}
	if opt.Clock == nil {
		opt.Clock = exec.NewWallClock()
	}
	if opt.Context <= 0 || opt.Vocab <= 0 {
		return nil, fmt.Errorf("engine: context %d and vocabulary %d, want > 0", opt.Context, opt.Vocab)
	}
	m, err := kv.New(opt.BlockSize, x.Memory().Blocks, opt.Watermark)
	if err != nil {
		return nil, err
	}
	e := &Engine{x: x, opt: opt, kv: m, reqs: map[kv.SeqID]*request{}, wake: make(chan struct{}, 1)}
	switch opt.Policy {
	case "", "continuous":
		e.sched = &sched.Continuous{KV: m, MaxTokens: opt.MaxTokens, MaxSeqs: opt.MaxSeqs}
	case "static":
		e.sched = sched.NewStatic(m, opt.MaxTokens, opt.BatchSize)
	case "dynamic":
		e.sched = sched.NewDynamic(m, opt.MaxTokens, opt.BatchSize, opt.MaxDelay)
	default:
		return nil, fmt.Errorf("engine: policy %q, want continuous, static or dynamic", opt.Policy)
	}
	return e, nil
}

// Submit queues a request (stamped with its arrival time now) and returns its stream.
func (e *Engine) Submit(r Request) *Stream {
	now := e.opt.Clock.Now()
	e.mu.Lock()
	id := e.nextID
	e.nextID++
	e.mu.Unlock()
	st := &Stream{ID: id, wake: make(chan struct{}, 1), done: make(chan struct{})}
	q := &request{stream: st, timeline: Timeline{Arrival: now},
		seq: &sched.Seq{ID: id, Prompt: append([]int32(nil), r.Prompt...), MaxTokens: r.MaxTokens,
			MaxLen: e.opt.Context, Stop: append([]int32(nil), r.Stop...), Arrival: now}}
	if r.Sampling.Temperature > 0 {
		q.sampler = sample.New(r.Sampling)
	}
	if err := e.validate(r); err != nil {
		e.finish(q, Event{Kind: Rejected, Req: id, Time: now, Detail: err.Error()}, err)
		return st
	}
	e.mu.Lock()
	e.inbox = append(e.inbox, q)
	e.mu.Unlock()
	e.signal()
	return st
}

func (e *Engine) validate(r Request) error {
	if err := r.Sampling.Validate(); err != nil {
		return err
	}
	if len(r.Prompt) == 0 || r.MaxTokens <= 0 || len(r.Prompt) >= e.opt.Context {
		return fmt.Errorf("prompt of %d tokens and %d output tokens, want a prompt of 1..%d and >= 1 output",
			len(r.Prompt), r.MaxTokens, e.opt.Context-1)
	}
	for _, t := range r.Prompt {
		if t < 0 || int(t) >= e.opt.Vocab {
			return fmt.Errorf("prompt token %d outside the vocabulary [0, %d)", t, e.opt.Vocab)
		}
	}
	return nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) record(ev Event) {
	e.mu.Lock()
	e.log = append(e.log, ev)
	e.mu.Unlock()
}

// Log returns a copy of the event log: every request event and every precision and KV change, in order.
func (e *Engine) Log() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.log...)
}

// Memory reports the executor's memory budget.
func (e *Engine) Memory() exec.Memory { return e.x.Memory() }

// SetLayerPrecision asks the executor to run layer in f from the next iteration (see exec.Executor) and logs it.
func (e *Engine) SetLayerPrecision(layer int, f quant.Format) error {
	err := e.x.SetLayerPrecision(layer, f)
	detail := fmt.Sprintf("layer %d -> %v", layer, f)
	if err != nil {
		detail += ": " + err.Error()
	}
	e.record(Event{Kind: Precision, Req: -1, Time: e.opt.Clock.Now(), Detail: detail})
	return err
}

// AttachKV asks for a KV region of blocks blocks at the next iteration boundary: the executor's storage grows,
// then the block manager's pool. The outcome is logged (KVAttach).
func (e *Engine) AttachKV(blocks int) {
	e.command(func() {
		ev := Event{Kind: KVAttach, Req: -1, Time: e.opt.Clock.Now(), Detail: fmt.Sprintf("%d blocks", blocks)}
		if err := e.x.AttachKV(blocks); err != nil {
			ev.Detail += ": " + err.Error()
		} else {
			e.kv.Attach(blocks)
		}
		e.record(ev)
	})
}

// DetachKV asks for the last attached KV region to be detached at the next iteration boundary, which succeeds
// only when none of its blocks is in use. The outcome is logged (KVDetach).
func (e *Engine) DetachKV() {
	e.command(func() {
		ev := Event{Kind: KVDetach, Req: -1, Time: e.opt.Clock.Now()}
		r, err := e.kv.Detach()
		if err == nil {
			err = e.x.DetachKV(r.Blocks)
		}
		if err != nil {
			ev.Detail = err.Error()
		} else {
			ev.Detail = fmt.Sprintf("%d blocks", r.Blocks)
		}
		e.record(ev)
	})
}

func (e *Engine) command(f func()) {
	e.mu.Lock()
	e.cmds = append(e.cmds, f)
	e.mu.Unlock()
	e.signal()
}

func (e *Engine) finish(q *request, ev Event, err error) {
	q.timeline.Finish = ev.Time
	q.stream.res = Result{ID: q.seq.ID, Output: q.seq.Output, Timeline: q.timeline, Preemptions: q.seq.Preemptions, Err: err}
	e.record(ev)
	q.stream.push(ev)
	close(q.stream.done)
}

func (e *Engine) event(q *request, ev Event) {
	e.record(ev)
	q.stream.push(ev)
}

// Pending is the number of requests submitted and not finished.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inbox) + len(e.reqs)
}

// Step runs one iteration: it takes in new requests and queued KV commands, schedules, runs the batch and
// delivers the tokens. It reports whether there was work.
func (e *Engine) Step() (bool, error) {
	start := time.Now()
	e.mu.Lock()
	inbox, cmds := e.inbox, e.cmds
	e.inbox, e.cmds = nil, nil
	for _, q := range inbox {
		e.reqs[q.seq.ID] = q
	}
	e.mu.Unlock()
	for _, f := range cmds {
		f()
	}
	clock := e.opt.Clock
	for _, q := range inbox {
		if need := (min(q.seq.MaxLen, len(q.seq.Prompt)+q.seq.MaxTokens) + 2*e.kv.BlockSize() - 1) / e.kv.BlockSize(); need > e.kv.TotalBlocks()-int(e.opt.Watermark*float64(e.kv.TotalBlocks())) {
			e.drop(q, Event{Kind: Rejected, Req: q.seq.ID, Time: clock.Now(), Detail: fmt.Sprintf("needs %d KV blocks, the pool has %d", need, e.kv.TotalBlocks())})
			continue
		}
		e.sched.Add(q.seq)
		e.event(q, Event{Kind: Queued, Req: q.seq.ID, Time: q.timeline.Arrival})
	}
	plan := e.sched.Schedule(clock.Now())
	now := clock.Now()
	for _, s := range plan.Preempted {
		e.event(e.reqs[s.ID], Event{Kind: Preempted, Req: s.ID, Time: now})
	}
	for _, s := range plan.Started {
		q := e.reqs[s.ID]
		if !q.started {
			q.started, q.timeline.Scheduled = true, now
		}
		e.event(q, Event{Kind: Scheduled, Req: s.ID, Time: now})
	}
	if len(plan.Work) == 0 {
		return false, nil
	}
	b := &exec.Batch{Seqs: make([]exec.SeqWork, len(plan.Work))}
	for i, w := range plan.Work {
		table, _ := e.kv.Table(w.Seq.ID)
		b.Seqs[i] = exec.SeqWork{Tokens: w.Seq.Tokens(w.Start, w.Start+w.N), SeqLen: w.Start + w.N, Table: table, Sample: w.Sample}
		if q := e.reqs[w.Seq.ID]; q != nil {
			b.Seqs[i].Sampler = q.sampler
		}
	}
	res, err := e.x.Step(b)
	if err != nil {
		return true, err
	}
	clock.Advance(res.Duration)
	now = clock.Now()
	done := e.sched.Update(plan, res.Next)
	info := StepInfo{Iter: e.iter, Time: now, Duration: res.Duration, Formats: res.Formats}
	e.iter++
	for _, w := range plan.Work {
		info.Work = append(info.Work, WorkInfo{Req: w.Seq.ID, Start: w.Start, Tokens: w.N, Sample: w.Sample})
		q := e.reqs[w.Seq.ID]
		if q == nil {
			continue // padding
		}
		for ; q.emitted < len(q.seq.Output); q.emitted++ {
			if q.emitted == 0 {
				q.timeline.FirstToken = now
			}
			q.timeline.Tokens = append(q.timeline.Tokens, now)
			e.event(q, Event{Kind: Token, Req: q.seq.ID, Time: now, Token: q.seq.Output[q.emitted]})
		}
	}
	for _, s := range done {
		e.drop(e.reqs[s.ID], Event{Kind: Finished, Req: s.ID, Time: now})
	}
	if e.opt.OnStep != nil {
		info.Waiting, info.Running = e.sched.Waiting(), e.sched.Running()
		info.Free, info.Total = e.kv.FreeBlocks(), e.kv.TotalBlocks()
		info.Wall = time.Since(start)
		e.opt.OnStep(info)
	}
	return true, nil
}

func (e *Engine) drop(q *request, ev Event) {
	e.mu.Lock()
	delete(e.reqs, q.seq.ID)
	e.mu.Unlock()
	var err error
	if ev.Kind == Rejected {
		err = fmt.Errorf("engine: %s", ev.Detail)
	}
	e.finish(q, ev, err)
}

// NextWake is when the scheduler could next find work without a new request (dynamic batching's queueing
// deadline); ok is false when only a request can. Like Step, it belongs to the loop's goroutine.
func (e *Engine) NextWake() (time.Duration, bool) { return e.sched.NextWake() }

// Run drives the loop until ctx is done, sleeping while there is no work (until a submission, a KV command or,
// for dynamic batching, the oldest request's queueing deadline). A step error ends the loop and is returned.
func (e *Engine) Run(ctx context.Context) error {
	for {
		ran, err := e.Step()
		if err != nil {
			return err
		}
		if ran {
			continue
		}
		var timer <-chan time.Time
		if t, ok := e.NextWake(); ok {
			timer = time.After(t - e.opt.Clock.Now())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.wake:
		case <-timer:
		}
	}
}
