// Package engine is the serving engine core: requests come in through Submit, a run loop asks the scheduler for
// each iteration's work, runs it on an Executor, and streams each request's tokens and lifecycle events back. The
// KV block manager, scheduler and executor are the engine's parts (engine/kv, engine/sched, engine/executor); the
// engine owns the request lifecycle, the timestamps the metrics are computed from, and the event log.
//
// # Lifecycle
//
// Every request ends exactly once, with a finish reason: stop (a stop token, or Request.StopWhen), length (MaxTokens or the
// context), cancelled (Cancel, or the context given to SubmitContext ended), rejected (invalid, or it can never
// fit in the KV pool) or error (an executor step failed). Cancel removes a request wherever it is — queued,
// prefilling or decoding — at the next iteration boundary and frees its blocks. When a step fails, every request
// the engine holds ends with that error in the same iteration, and the engine refuses new work from then on.
// Shutdown stops admitting, lets accepted requests finish, and cancels what is left at its deadline.
//
// # Geometry
//
// The block size, the tokens a step may feed, the context length and the vocabulary come from the executor
// (executor.Executor.Geometry); Options only choose within them, and New rejects options that do not fit.
//
// # Control surface
//
// Hooks added with OnStep are called after every iteration and, when the engine is idle, on every idle tick (StepInfo.Idle):
// it carries the signals a controller reads (queue, queueing delay, the KV pool by region, preemptions, tokens,
// the requests that ended). From the hook a controller may ask for layer precisions (SetLayerPrecision), attach,
// drain and detach KV regions, and log its decisions (Note); swaps and region changes are logged with the
// iteration at which they took effect. The event log is a ring of Options.LogSize events; LogSince returns only
// the events after a cursor, so a monitor that polls every iteration costs O(new events), and OnEvent hands every
// event to a hook as it is logged, for a reader that must miss none.
//
// # Streams
//
// A Stream holds only its own unread events and costs no goroutine: Events returns a buffered channel that the
// engine fills without blocking, and an abandoned stream is simply dropped.
//
// # Virtual time
//
// Replay runs a list of requests with explicit arrival times to completion: it submits each at its true arrival,
// and when the engine is idle it moves the clock to the next arrival, the scheduler's next deadline or the next
// idle tick — by advancing a virtual clock, or by sleeping on the wall clock. The simulator and the trace-replay
// runs share this driver. ReplayEach is the same driver over requests drawn only when they arrive, each result
// handed over as its request ends, so that a replay of any length holds only the requests in flight.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
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
	// StopWhen, when set, is called on the loop's goroutine with each output token as it is produced, in order
	// and once each (a preemption does not repeat a token); true ends the request at that token, in the iteration
	// that produced it, with FinishStop. A server finds stop strings in the decoded text with it.
	StopWhen func(tok int32) bool
}

// FinishReason says how a request ended.
type FinishReason int

// The finish reasons; FinishNone is a request that has not ended.
const (
	FinishNone      FinishReason = iota
	FinishStop                   // it produced one of its stop tokens, or its StopWhen said stop
	FinishLength                 // it reached MaxTokens or the context length
	FinishCancelled              // Cancel, the submit context, or Shutdown's deadline
	FinishRejected               // invalid, or it can never fit in the KV pool
	FinishError                  // an executor step failed
)

var finishNames = [...]string{"", "stop", "length", "cancelled", "rejected", "error"}

func (r FinishReason) String() string { return finishNames[r] }

// EventKind names what happened.
type EventKind int

// The event kinds. Request events carry the request's id; engine events (precision, swap, KV, decision) carry
// id -1. Finished, Rejected, Cancelled and Failed end a request's stream.
const (
	Queued    EventKind = iota // the request entered the waiting queue
	Scheduled                  // the request got its first tokens into a batch (again after a preemption)
	Token                      // the request produced Token
	Preempted                  // the request lost its KV blocks and went back to the queue for recompute
	Finished                   // the request has all its output (stop or length)
	Rejected                   // the request cannot be served (Detail says why)
	Cancelled                  // the request was cancelled
	Failed                     // the request ended with an executor error (Detail)
	Precision                  // a layer's precision was asked for (Detail: layer and format, or the error)
	Swap                       // an asked-for precision took effect at this iteration (Detail: layers, transfer time)
	KVAttach                   // a KV region was attached (Detail: blocks, or the error)
	KVDetach                   // the last KV region was detached (Detail: blocks, or the error)
	KVDrain                    // the last KV region was marked draining or not (Detail)
	Decision                   // a controller's decision and its reason (Detail), logged with Note
)

var kindNames = [...]string{"queued", "scheduled", "token", "preempted", "finished", "rejected", "cancelled", "failed",
	"precision", "swap", "kv-attach", "kv-detach", "kv-drain", "decision"}

func (k EventKind) String() string { return kindNames[k] }

// ends reports whether the kind ends a request.
func (k EventKind) ends() bool {
	return k == Finished || k == Rejected || k == Cancelled || k == Failed
}

// Event is one entry of a request's stream and of the engine's log.
type Event struct {
	Kind   EventKind
	Req    kv.SeqID
	Time   time.Duration // on the engine's clock
	Iter   int           // the iteration it belongs to: the next one to run for events between iterations
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

// TTFT is the time from arrival to the first output token (0 without one).
func (t Timeline) TTFT() time.Duration {
	if len(t.Tokens) == 0 {
		return 0
	}
	return t.FirstToken - t.Arrival
}

// TPOT is vLLM's time per output token after the first: (E2E - TTFT) / (output tokens - 1), 0 with fewer than two.
func (t Timeline) TPOT() time.Duration {
	if n := len(t.Tokens); n > 1 {
		return (t.Finish - t.FirstToken) / time.Duration(n-1)
	}
	return 0
}

// E2E is the time from arrival to the end of the request.
func (t Timeline) E2E() time.Duration { return t.Finish - t.Arrival }

// Result is a request's outcome.
type Result struct {
	ID          kv.SeqID
	Output      []int32
	Timeline    Timeline
	Preemptions int
	// CachedTokens is the prompt tokens whose KV the prefix cache held when the request was first scheduled.
	CachedTokens int
	Finish       FinishReason
	Err          error // set unless the request finished (stop or length)
}

// ErrCancelled is the error of a cancelled request's Result.
var ErrCancelled = errors.New("engine: request cancelled")

// Options configure an engine. The geometry (block size, context, vocabulary, tokens a step may feed) comes from
// the executor.
type Options struct {
	// Scheduler is the batching: "continuous" (iteration-level, the default), "static" or "dynamic".
	Scheduler        string
	MaxBatchedTokens int            // tokens an iteration feeds at most; default and upper bound: the executor's
	MaxNumSeqs       int            // running sequences at most (continuous); default 256
	BatchSize        int            // batch size of the baselines (at most MaxBatchedTokens: a decode feeds one token each); default 32
	MaxDelay         time.Duration  // dynamic batching's queueing delay
	Watermark        float64        // fraction of blocks admission keeps free; default 0.01
	Clock            executor.Clock // default: the wall clock
	// PrefixCaching shares the KV blocks of equal prompt prefixes between requests and skips their prefill
	// (vLLM's automatic prefix caching: engine/kv, engine/sched); continuous batching only.
	PrefixCaching bool
	// IdleTick is how often an idle engine calls its OnStep hooks (Run and Replay); default 50 ms.
	IdleTick time.Duration
	// LogSize is the number of events the log keeps (the oldest are dropped first); default 65536.
	LogSize int
	// QuietTokens keeps Token events out of the log: they go to the requests' streams only (a trace replay, which
	// reads no token from the log, saves their cost).
	QuietTokens bool
}

// StepInfo is the engine's state after an iteration, or at an idle tick (Idle), for monitors, controllers and
// tests. Work is valid during the hook call only (the engine reuses its array); a hook that keeps it copies it.
type StepInfo struct {
	Iter     int // the iteration (after an idle tick: the number of iterations run so far)
	Idle     bool
	Time     time.Duration // clock after the step
	Duration time.Duration // the executor's step time
	// Wall is the wall time Step took in all: the executor's step plus the engine's scheduling and bookkeeping.
	Wall    time.Duration
	Work    []WorkInfo
	Formats []quant.Format // layer precisions the step ran with
	Swapped []int          // layers whose asked-for precision took effect at this step
	// Queue and pool after the step.
	Waiting       int
	Running       int
	OldestWait    time.Duration // queueing delay of the oldest waiting request
	WaitingTokens int           // tokens the waiting requests need prefilled
	WaitingBlocks int           // KV blocks the waiting requests need to be admitted
	HeadBlocks    int           // KV blocks the request at the head of the queue needs to be admitted
	Free          int           // KV blocks that can be handed out
	Used          int           // KV blocks held by requests
	Total         int           // KV blocks attached
	Regions       []kv.Region
	// This step.
	Arrived       int // requests taken into the queue
	Preempted     int
	PrefillTokens int
	DecodeTokens  int
	// PrefixQueries is the tokens of the requests scheduled at this step with prefix caching on, PrefixHits those
	// of them found in the cache (counted at every scheduling, also after a preemption, as vLLM counts them).
	PrefixQueries int
	PrefixHits    int
	Ended         []Ended // requests that ended at this iteration
}

// WorkInfo is one request's share of an iteration.
type WorkInfo struct {
	Req    kv.SeqID
	Start  int // first position fed
	Tokens int
	Sample bool
}

// Ended is a request that ended, with the figures a monitor windows.
type Ended struct {
	ID           kv.SeqID
	Finish       FinishReason
	Prompt       int
	Output       int
	TTFT, TPOT   time.Duration
	E2E, Arrival time.Duration
}

type request struct {
	seq      *sched.Seq
	stream   *Stream
	sampler  *sample.Sampler
	emitted  int
	started  bool
	cached   int // the prompt tokens found in the prefix cache at the first scheduling
	timeline Timeline
}

// Engine serves requests on an executor. Submit, Cancel, SetLayerPrecision, AttachKV, DetachKV, DrainKV, Note,
// Log, Shutdown and Memory are safe to call from any goroutine; Step, Run and Replay drive the loop and must not
// be called concurrently with each other.
type Engine struct {
	x     executor.Executor
	geo   executor.Geometry
	opt   Options
	kv    *kv.Manager
	sched sched.Scheduler
	cap   int // the pool's capacity when the waiting queue was last checked against it
	// endedNow collects the requests that end during an iteration, for its StepInfo; arrived counts the requests
	// it takes in.
	endedNow []Ended
	arrived  int
	// batch and work are the arrays of each step's batch and of its StepInfo's Work, reused.
	batch executor.Batch
	work  []WorkInfo

	mu       sync.Mutex // guards the fields below
	iter     int        // iterations run
	reqs     map[kv.SeqID]*request
	nextID   kv.SeqID
	inbox    []*request
	cmds     []func()
	log      eventLog
	wake     chan struct{}
	ended    chan struct{} // signalled when a request ends (Shutdown waits on it)
	failed   error         // the step error that stopped the engine
	hooks    []func(StepInfo)
	closing  bool // Shutdown: no new requests
	overflow map[*Stream]bool
	// eventHooks are OnEvent's, called as each event is logged.
	eventHooks []func(Event)
}

// New returns an engine over x whose KV pool starts with the executor's attached blocks.
func New(x executor.Executor, opt Options) (*Engine, error) {
	g := x.Geometry()
	if g.BlockSize <= 0 || g.MaxBatchedTokens <= 0 || g.Context <= 0 || g.Vocab <= 0 {
		return nil, fmt.Errorf("engine: executor geometry %+v, want block size, tokens per step, context and vocabulary > 0", g)
	}
	if opt.MaxBatchedTokens == 0 {
		opt.MaxBatchedTokens = g.MaxBatchedTokens
	}
	if opt.MaxNumSeqs == 0 {
		opt.MaxNumSeqs = 256
	}
	if opt.BatchSize == 0 {
		opt.BatchSize = min(32, opt.MaxBatchedTokens)
	}
	if opt.Watermark == 0 {
		opt.Watermark = 0.01
	}
	if opt.Clock == nil {
		opt.Clock = executor.NewWallClock()
	}
	if opt.IdleTick == 0 {
		opt.IdleTick = 50 * time.Millisecond
	}
	if opt.LogSize == 0 {
		opt.LogSize = 1 << 16
	}
	switch {
	case opt.MaxBatchedTokens < 0 || opt.MaxBatchedTokens > g.MaxBatchedTokens:
		return nil, fmt.Errorf("engine: MaxBatchedTokens %d, the executor's steps hold 1..%d tokens", opt.MaxBatchedTokens, g.MaxBatchedTokens)
	case opt.MaxNumSeqs < 0 || opt.BatchSize < 0 || opt.MaxDelay < 0 || opt.IdleTick < 0 || opt.LogSize < 0:
		return nil, fmt.Errorf("engine: MaxNumSeqs %d, BatchSize %d, MaxDelay %v, IdleTick %v, LogSize %d, want none negative",
			opt.MaxNumSeqs, opt.BatchSize, opt.MaxDelay, opt.IdleTick, opt.LogSize)
	case (opt.Scheduler == "static" || opt.Scheduler == "dynamic") && opt.PrefixCaching:
		return nil, fmt.Errorf("engine: prefix caching with %s batching: the baselines model batchers without a prefix cache", opt.Scheduler)
	case (opt.Scheduler == "static" || opt.Scheduler == "dynamic") && opt.BatchSize > opt.MaxBatchedTokens:
		return nil, fmt.Errorf("engine: BatchSize %d is more than the %d tokens a step feeds (MaxBatchedTokens), and a %s batch decodes one token a member",
			opt.BatchSize, opt.MaxBatchedTokens, opt.Scheduler)
	}
	m, err := kv.New(kv.Options{BlockSize: g.BlockSize, Blocks: x.Memory().Blocks, Watermark: opt.Watermark, PrefixCaching: opt.PrefixCaching})
	if err != nil {
		return nil, err
	}
	e := &Engine{x: x, geo: g, opt: opt, kv: m, cap: m.Capacity(), reqs: map[kv.SeqID]*request{},
		log: eventLog{size: opt.LogSize}, wake: make(chan struct{}, 1), ended: make(chan struct{}, 1), overflow: map[*Stream]bool{}}
	switch opt.Scheduler {
	case "", "continuous":
		e.sched = &sched.Continuous{KV: m, MaxBatchedTokens: opt.MaxBatchedTokens, MaxNumSeqs: opt.MaxNumSeqs}
	case "static":
		e.sched = sched.NewStatic(m, opt.MaxBatchedTokens, opt.BatchSize)
	case "dynamic":
		e.sched = sched.NewDynamic(m, opt.MaxBatchedTokens, opt.BatchSize, opt.MaxDelay)
	default:
		return nil, fmt.Errorf("engine: scheduler %q, want continuous, static or dynamic", opt.Scheduler)
	}
	return e, nil
}

// OnStep adds a hook that the loop's goroutine calls after every iteration and on every idle tick, after the hooks
// added before it: a morphing controller, a metrics exporter, a trace replay's recorder. Add hooks before the loop
// first runs (Step, Run, Replay); they and OnEvent's are the engine's only callbacks.
func (e *Engine) OnStep(hook func(StepInfo)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hooks = append(e.hooks, hook)
}

// OnEvent adds a hook called with every event as it is logged, in the log's order and under its lock (the hook
// must not call the engine): a trace replay takes every event with it, however few the log keeps. Add it before
// the loop first runs.
func (e *Engine) OnEvent(hook func(Event)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.eventHooks = append(e.eventHooks, hook)
}

// hookList returns the hooks set (none: nil).
func (e *Engine) hookList() []func(StepInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hooks
}

// callHooks calls hooks with info.
func callHooks(hooks []func(StepInfo), info StepInfo) {
	for _, h := range hooks {
		h(info)
	}
}

// Clock is the engine's clock.
func (e *Engine) Clock() executor.Clock { return e.opt.Clock }

// Geometry is the executor's geometry, which the engine runs with.
func (e *Engine) Geometry() executor.Geometry { return e.geo }

// Submit queues a request, stamped with its arrival time now, and returns its stream.
func (e *Engine) Submit(r Request) *Stream { return e.submit(r, e.opt.Clock.Now(), false, nil) }

// SubmitAt queues a request that arrived at the given time on the engine's clock (at most now): a driver that
// replays arrivals stamps each with its true time even when it is submitted after the step in progress.
func (e *Engine) SubmitAt(r Request, arrival time.Duration) *Stream {
	return e.submit(r, min(arrival, e.opt.Clock.Now()), false, nil)
}

// SubmitTimed is SubmitAt for a driver of trace replays: the stream keeps no events, only the result, and the
// request is stamped with its true arrival even when that is before now.
func (e *Engine) SubmitTimed(r Request, arrival time.Duration) *Stream {
	return e.submit(r, arrival, true, nil)
}

// SubmitContext is Submit, with the request cancelled when ctx ends before it does.
func (e *Engine) SubmitContext(ctx context.Context, r Request) *Stream {
	st := e.Submit(r)
	st.setStop(context.AfterFunc(ctx, func() { e.Cancel(st.ID) }))
	return st
}

// submit takes in r; reload, when set, gives r.Prompt again (sched.Seq.Reload).
func (e *Engine) submit(r Request, arrival time.Duration, discard bool, reload func() []int32) *Stream {
	e.mu.Lock()
	id := e.nextID
	e.nextID++
	e.mu.Unlock()
	st := &Stream{ID: id, eng: e, done: make(chan struct{}), room: r.MaxTokens + 4, discard: discard}
	q := &request{stream: st, timeline: Timeline{Arrival: arrival},
		seq: &sched.Seq{ID: id, Prompt: slices.Clone(r.Prompt), MaxTokens: r.MaxTokens,
			MaxLen: e.geo.Context, Stop: slices.Clone(r.Stop), StopWhen: r.StopWhen, Arrival: arrival, Reload: reload}}
	if r.Sampling.Temperature > 0 {
		q.sampler = sample.New(r.Sampling)
	}
	err := e.validate(r)
	e.mu.Lock()
	switch {
	case err != nil:
	case e.failed != nil:
		err = fmt.Errorf("engine: stopped after a failed step: %v", e.failed)
	case e.closing:
		err = errors.New("engine: shutting down, not admitting new requests")
	default:
		e.inbox = append(e.inbox, q)
	}
	iter := e.iter
	e.mu.Unlock()
	if err != nil {
		e.finish(q, Event{Kind: Rejected, Req: id, Time: arrival, Iter: iter, Detail: err.Error()}, FinishRejected, err)
		return st
	}
	e.signal()
	return st
}

func (e *Engine) validate(r Request) error {
	if err := r.Sampling.Validate(); err != nil {
		return err
	}
	if len(r.Prompt) == 0 || r.MaxTokens <= 0 || len(r.Prompt) >= e.geo.Context {
		return fmt.Errorf("prompt of %d tokens and %d output tokens, want a prompt of 1..%d and >= 1 output",
			len(r.Prompt), r.MaxTokens, e.geo.Context-1)
	}
	for _, t := range r.Prompt {
		if t < 0 || int(t) >= e.geo.Vocab {
			return fmt.Errorf("prompt token %d outside the vocabulary [0, %d)", t, e.geo.Vocab)
		}
	}
	return nil
}

// Cancel ends request id at the next iteration boundary wherever it is (queued, prefilling or decoding), freeing
// its blocks; its stream ends with Cancelled. A request that has already ended is left as it is.
func (e *Engine) Cancel(id kv.SeqID) {
	e.command(func() {
		q := e.reqs[id]
		if q == nil {
			return
		}
		e.sched.Remove(id)
		e.drop(q, Event{Kind: Cancelled, Req: id, Time: e.opt.Clock.Now(), Iter: e.iter}, FinishCancelled, ErrCancelled)
	})
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) record(ev Event) {
	e.mu.Lock()
	e.log.add(ev)
	for _, h := range e.eventHooks {
		h(ev)
	}
	e.mu.Unlock()
}

// Log returns a copy of the events the log still holds (the last Options.LogSize), oldest first.
func (e *Engine) Log() []Event {
	evs, _ := e.LogSince(0)
	return evs
}

// LogSince returns the events logged from cursor on (a cursor of 0 is the start of the log) that the log still
// holds, and the cursor to pass next time. Events that were dropped before they were read are skipped; the
// returned cursor minus the given one, less len(events), counts them.
func (e *Engine) LogSince(cursor uint64) ([]Event, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.since(cursor), e.log.next
}

// Memory reports the executor's memory budget.
func (e *Engine) Memory() executor.Memory { return e.x.Memory() }

// LayerBytes reports each decoder layer's bytes in each prepared format.
func (e *Engine) LayerBytes() []executor.LayerBytes { return e.x.LayerBytes() }

// SetLayerPrecision asks the executor to run layer in f (see executor.Executor) and logs the request; a Swap event
// says at which iteration it took effect.
func (e *Engine) SetLayerPrecision(layer int, f quant.Format) error {
	err := e.x.SetLayerPrecision(layer, f)
	detail := fmt.Sprintf("layer %d -> %v", layer, f)
	if err != nil {
		detail += ": " + err.Error()
	}
	e.record(Event{Kind: Precision, Req: -1, Time: e.opt.Clock.Now(), Iter: e.Iterations(), Detail: detail})
	return err
}

// Note logs a controller's decision and its reason as an engine event.
func (e *Engine) Note(detail string) {
	e.record(Event{Kind: Decision, Req: -1, Time: e.opt.Clock.Now(), Iter: e.Iterations(), Detail: detail})
}

// Iterations is the number of iterations run so far.
func (e *Engine) Iterations() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.iter
}

// AttachKV asks for a KV region of blocks blocks at the next iteration boundary: the executor's storage grows,
// then the block manager's pool. The outcome is logged (KVAttach).
func (e *Engine) AttachKV(blocks int) {
	e.command(func() {
		ev := Event{Kind: KVAttach, Req: -1, Time: e.opt.Clock.Now(), Iter: e.iter, Detail: fmt.Sprintf("%d blocks", blocks)}
		if err := e.x.AttachKV(blocks); err != nil {
			ev.Detail += ": " + err.Error()
		} else {
			e.kv.Attach(blocks)
		}
		e.record(ev)
	})
}

// DetachKV asks for the last attached KV region to be detached at the next iteration boundary. It is refused
// (and the refusal logged) when a block of the region is in use, or when the pool left could not hold a request
// the engine has admitted, which would then wait for ever; a waiting request that was never scheduled and no
// longer fits is rejected instead, with the reason. The outcome is logged (KVDetach).
func (e *Engine) DetachKV() {
	e.command(func() {
		ev := Event{Kind: KVDetach, Req: -1, Time: e.opt.Clock.Now(), Iter: e.iter}
		err := e.checkShrink("detach")
		var r kv.Region
		if err == nil {
			r, err = e.kv.Detach()
		}
		if err == nil {
			if err = e.x.DetachKV(r.Blocks); err != nil {
				e.kv.Attach(r.Blocks) // the executor kept its storage: give the ids back
			}
		}
		if err != nil {
			ev.Detail = err.Error()
		} else {
			ev.Detail = fmt.Sprintf("%d blocks", r.Blocks)
		}
		e.record(ev)
	})
}

// DrainKV marks the last attached region draining (no new blocks are handed out from it, so it empties as its
// holders finish) or not, at the next iteration boundary. Draining is refused, as a detach is, when the pool left
// could not hold a request the engine has admitted. The outcome is logged (KVDrain).
func (e *Engine) DrainKV(draining bool) {
	e.command(func() {
		ev := Event{Kind: KVDrain, Req: -1, Time: e.opt.Clock.Now(), Iter: e.iter, Detail: fmt.Sprintf("draining %v", draining)}
		var err error
		if draining {
			err = e.checkShrink("drain")
		}
		if err == nil {
			err = e.kv.SetDraining(draining)
		}
		if err != nil {
			ev.Detail += ": " + err.Error()
		}
		e.record(ev)
	})
}

// checkShrink returns an error when taking the last region out of the pool's capacity would leave an admitted
// request (one that has been scheduled: running, or preempted and waiting to resume) needing more blocks than the
// pool could ever give it. Requests never scheduled are checked against the smaller pool at the next iteration
// and rejected if they no longer fit.
func (e *Engine) checkShrink(what string) error {
	regions := e.kv.Regions()
	if len(regions) < 2 {
		return fmt.Errorf("kv: no region to %s (the base region stays)", what)
	}
	last := regions[len(regions)-1]
	left := e.kv.Capacity()
	if !last.Draining {
		left -= last.Blocks
	}
	left -= int(e.opt.Watermark * float64(e.kv.TotalBlocks()-last.Blocks))
	for _, q := range e.reqs {
		if need := e.need(q.seq); q.started && need > left {
			return fmt.Errorf("refused: request %d, admitted, needs %d KV blocks, the pool would hold %d without the last region", q.seq.ID, need, left)
		}
	}
	return nil
}

// CheckKV verifies the KV block manager's accounting (kv.Manager.Check): a test's OnStep hook calls it, on the
// loop's goroutine.
func (e *Engine) CheckKV() error { return e.kv.Check() }

// need is the blocks a sequence needs to run to its end: its longest length, plus a block of rounding for a
// baseline batch's padding.
func (e *Engine) need(s *sched.Seq) int { return e.kv.BlocksFor(s.Limit()) + 1 }

// room is the most blocks one request can ever be given: the pool's capacity less the watermark.
func (e *Engine) room() int { return e.kv.Capacity() - e.kv.WatermarkBlocks() }

// MaxRequestTokens is the longest request, prompt and output in tokens, that the KV pool as it stands can ever
// hold: the room a request can be given (the capacity less the watermark) less the block need adds. A server
// refuses to start when it is below the context. Call it before Run or from an OnStep hook.
func (e *Engine) MaxRequestTokens() int { return max(0, e.room()-1) * e.geo.BlockSize }

func (e *Engine) command(f func()) {
	e.mu.Lock()
	e.cmds = append(e.cmds, f)
	e.mu.Unlock()
	e.signal()
}

// finish ends a request: its result, the log, its stream.
func (e *Engine) finish(q *request, ev Event, reason FinishReason, err error) {
	q.timeline.Finish = ev.Time
	q.stream.res = Result{ID: q.seq.ID, Output: q.seq.Output, Timeline: q.timeline, Preemptions: q.seq.Preemptions,
		CachedTokens: q.cached, Finish: reason, Err: err}
	e.record(ev)
	q.stream.push(ev)
	q.stream.end()
	select {
	case e.ended <- struct{}{}:
	default:
	}
}

func (e *Engine) event(q *request, ev Event) {
	e.record(ev)
	q.stream.push(ev)
}

// drop forgets a request the loop holds and ends it.
func (e *Engine) drop(q *request, ev Event, reason FinishReason, err error) {
	e.mu.Lock()
	delete(e.reqs, q.seq.ID)
	e.mu.Unlock()
	e.finish(q, ev, reason, err)
	e.endedNow = append(e.endedNow, Ended{ID: q.seq.ID, Finish: reason, Prompt: q.seq.PromptLen(), Output: len(q.seq.Output),
		TTFT: q.timeline.TTFT(), TPOT: q.timeline.TPOT(), E2E: q.timeline.E2E(), Arrival: q.timeline.Arrival})
}

// Pending is the number of requests submitted and not ended.
func (e *Engine) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inbox) + len(e.reqs)
}
