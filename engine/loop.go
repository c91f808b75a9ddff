package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/sched"
)

// Step runs one iteration: it runs the queued commands (cancellations, KV changes), takes in new requests, checks
// the waiting queue against the pool, schedules, runs the batch and delivers the tokens. It reports whether a batch
// ran. A failed executor step ends every request with its error and stops the engine: Step returns that error from
// then on.
func (e *Engine) Step() (bool, error) {
	start := time.Now()
	e.mu.Lock()
	if err := e.failed; err != nil {
		e.mu.Unlock()
		return false, err
	}
	inbox, cmds := e.inbox, e.cmds
	e.inbox, e.cmds = nil, nil
	for _, q := range inbox {
		e.reqs[q.seq.ID] = q
	}
	e.mu.Unlock()
	e.endedNow, e.arrived = nil, 0
	clock := e.opt.Clock
	for _, f := range cmds {
		f()
	}
	for _, q := range inbox {
		if e.reqs[q.seq.ID] == q { // not cancelled by a command
			e.admit(q)
		}
	}
	e.recheck()
	now := clock.Now()
	plan := e.sched.Schedule(now)
	for _, s := range plan.Preempted {
		e.event(e.reqs[s.ID], Event{Kind: Preempted, Req: s.ID, Time: now, Iter: e.iter})
	}
	for _, s := range plan.Started {
		q := e.reqs[s.ID]
		if !q.started {
			q.started, q.timeline.Scheduled, q.cached = true, now, s.Cached
		}
		e.event(q, Event{Kind: Scheduled, Req: s.ID, Time: now, Iter: e.iter})
	}
	if len(plan.Work) == 0 {
		e.flushOverflow()
		if hooks := e.hookList(); len(hooks) > 0 {
			callHooks(hooks, e.info(StepInfo{Iter: e.iter, Idle: true, Time: now, Wall: time.Since(start), Preempted: len(plan.Preempted)}))
		}
		return false, nil
	}
	clear(e.batch.Seqs) // the last step's tokens: a shorter batch would keep the rest past their sequences' end
	e.batch = executor.Batch{Seqs: slices.Grow(e.batch.Seqs[:0], len(plan.Work))[:len(plan.Work)], Now: now}
	b := &e.batch
	for i, w := range plan.Work {
		table, _ := e.kv.Table(w.Seq.ID)
		b.Seqs[i] = executor.SeqWork{Tokens: w.Seq.Tokens(w.Start, w.Start+w.N), SeqLen: w.Start + w.N, Table: table, Sample: w.Sample}
		if q := e.reqs[w.Seq.ID]; q != nil {
			b.Seqs[i].Sampler = q.sampler
		}
	}
	res, err := e.x.Step(b)
	if err != nil {
		e.fail(fmt.Errorf("engine: iteration %d: %w", e.iter, err))
		return true, err
	}
	clock.Advance(res.Duration)
	now = clock.Now()
	if len(res.Swapped) > 0 {
		var layers []string
		for _, l := range res.Swapped {
			layers = append(layers, fmt.Sprintf("%d->%v", l, res.Formats[l]))
		}
		e.record(Event{Kind: Swap, Req: -1, Time: now, Iter: e.iter,
			Detail: fmt.Sprintf("layers %s took effect (transfer %v)", strings.Join(layers, " "), res.SwapTime)})
	}
	done := e.sched.Update(plan, res.Next)
	info := StepInfo{Iter: e.iter, Time: now, Duration: res.Duration, Formats: res.Formats, Swapped: res.Swapped, Preempted: len(plan.Preempted),
		Work: e.work[:0], PrefixQueries: plan.PrefixQueries, PrefixHits: plan.PrefixHits}
	for _, w := range plan.Work {
		info.Work = append(info.Work, WorkInfo{Req: w.Seq.ID, Start: w.Start, Tokens: w.N, Sample: w.Sample})
		if w.N == 1 && w.Start >= w.Seq.PromptLen() {
			info.DecodeTokens++
		} else {
			info.PrefillTokens += w.N
		}
		q := e.reqs[w.Seq.ID]
		if q == nil {
			continue // padding
		}
		for ; q.emitted < len(q.seq.Output); q.emitted++ {
			if q.emitted == 0 {
				q.timeline.FirstToken = now
			}
			q.timeline.Tokens = append(q.timeline.Tokens, now)
			ev := Event{Kind: Token, Req: q.seq.ID, Time: now, Iter: e.iter, Token: q.seq.Output[q.emitted]}
			if !e.opt.QuietTokens {
				e.record(ev)
			}
			if !q.stream.discard { // a stream that keeps no events has no use for its tokens
				q.stream.push(ev)
			}
		}
	}
	for _, s := range done {
		reason := FinishLength
		if n := len(s.Output); s.Stopped || n > 0 && slices.Contains(s.Stop, s.Output[n-1]) {
			reason = FinishStop
		}
		e.drop(e.reqs[s.ID], Event{Kind: Finished, Req: s.ID, Time: now, Iter: e.iter, Detail: reason.String()}, reason, nil)
	}
	e.work = info.Work
	e.mu.Lock()
	e.iter++
	e.mu.Unlock()
	e.flushOverflow()
	if hooks := e.hookList(); len(hooks) > 0 {
		info.Wall = time.Since(start)
		callHooks(hooks, e.info(info))
	}
	return true, nil
}

// admit queues a new request, or rejects it when the pool could never hold it.
func (e *Engine) admit(q *request) {
	if need, room := e.need(q.seq), e.room(); need > room {
		e.reject(q, fmt.Sprintf("needs %d KV blocks, the pool has %d", need, room))
		return
	}
	e.sched.Add(q.seq)
	e.arrived++
	e.event(q, Event{Kind: Queued, Req: q.seq.ID, Time: q.timeline.Arrival, Iter: e.iter})
}

// recheck rejects, once the pool has shrunk, the waiting requests it can no longer hold, so that none waits for
// ever.
func (e *Engine) recheck() {
	c := e.kv.Capacity()
	if c >= e.cap {
		e.cap = c
		return
	}
	e.cap = c
	room := e.room()
	var gone []*sched.Seq
	for _, s := range e.sched.Queue() {
		if e.need(s) > room {
			gone = append(gone, s)
		}
	}
	for _, s := range gone {
		e.sched.Remove(s.ID)
		e.reject(e.reqs[s.ID], fmt.Sprintf("needs %d KV blocks, the pool now has %d", e.need(s), room))
	}
}

func (e *Engine) reject(q *request, why string) {
	e.drop(q, Event{Kind: Rejected, Req: q.seq.ID, Time: e.opt.Clock.Now(), Iter: e.iter, Detail: why}, FinishRejected,
		fmt.Errorf("engine: request %d rejected: %s", q.seq.ID, why))
}

// info completes a StepInfo with the queue and the pool.
func (e *Engine) info(info StepInfo) StepInfo {
	info.Waiting, info.Running = e.sched.Waiting(), e.sched.Running()
	if queue := e.sched.Queue(); len(queue) > 0 {
		info.OldestWait = info.Time - queue[0].Arrival
	}
	info.HeadBlocks, info.WaitingBlocks, info.WaitingTokens = e.sched.Demand()
	info.Free, info.Used, info.Total = e.kv.FreeBlocks(), e.kv.UsedBlocks(), e.kv.TotalBlocks()
	info.Regions = e.kv.Regions()
	info.Ended = e.endedNow
	info.Arrived = e.arrived
	return info
}

// fail ends every request the engine holds with err and refuses new work from then on.
func (e *Engine) fail(err error) {
	e.mu.Lock()
	e.failed = err
	for _, q := range e.inbox {
		e.reqs[q.seq.ID] = q
	}
	e.inbox = nil
	qs := make([]*request, 0, len(e.reqs))
	for _, q := range e.reqs {
		qs = append(qs, q)
	}
	e.mu.Unlock()
	now := e.opt.Clock.Now()
	for _, q := range qs {
		e.drop(q, Event{Kind: Failed, Req: q.seq.ID, Time: now, Iter: e.iter, Detail: err.Error()}, FinishError, err)
	}
	e.flushOverflow()
}

func (e *Engine) addOverflow(s *Stream) {
	e.mu.Lock()
	e.overflow[s] = true
	e.mu.Unlock()
}

// flushOverflow hands streams' waiting events on to their readers as far as their channels have room.
func (e *Engine) flushOverflow() {
	e.mu.Lock()
	if len(e.overflow) == 0 {
		e.mu.Unlock()
		return
	}
	streams := make([]*Stream, 0, len(e.overflow))
	for s := range e.overflow {
		streams = append(streams, s)
	}
	e.mu.Unlock()
	for _, s := range streams {
		if !s.flush() {
			e.mu.Lock()
			delete(e.overflow, s)
			e.mu.Unlock()
		}
	}
}

func (e *Engine) hasOverflow() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.overflow) > 0
}

// NextWake is when the scheduler could next find work without a new request (dynamic batching's queueing
// deadline); ok is false when only a request can. Like Step, it belongs to the loop's goroutine.
func (e *Engine) NextWake() (time.Duration, bool) { return e.sched.NextWake() }

// Run drives the loop until ctx is done, returning within one iteration of it. While there is no work it waits
// for a submission or a command, for dynamic batching's queueing deadline (on a virtual clock it moves the clock
// there) and, when a hook is set (OnStep), for the next idle tick. A step error ends the loop and is returned.
func (e *Engine) Run(ctx context.Context) error {
	_, virtual := e.opt.Clock.(*executor.VirtualClock)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ran, err := e.Step()
		if err != nil {
			return err
		}
		if ran {
			continue
		}
		wake, ok := e.NextWake()
		if ok && virtual {
			e.opt.Clock.Advance(wake - e.opt.Clock.Now())
			continue
		}
		var timer <-chan time.Time
		if ok {
			timer = time.After(wake - e.opt.Clock.Now()) // a deadline passes at most once an idle wait
		}
		var tick *time.Timer
		var tickC <-chan time.Time
		if !virtual && (len(e.hookList()) > 0 || e.hasOverflow()) {
			tick = time.NewTimer(e.opt.IdleTick)
			tickC = tick.C
		}
		select {
		case <-ctx.Done():
		case <-e.wake:
		case <-timer:
		case <-tickC:
		}
		if tick != nil {
			tick.Stop()
		}
	}
}

// Shutdown stops admitting requests (Submit rejects them from now on), lets the requests already accepted run to
// their end, and returns nil once none is left. When ctx ends first, it cancels the rest and returns ctx's error
// once they have ended. The loop (Run) must be running for requests to end.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.signal()
	for e.Pending() > 0 {
		select {
		case <-e.ended:
		case <-ctx.Done():
			e.command(func() {
				for id, q := range e.reqs {
					e.sched.Remove(id)
					e.drop(q, Event{Kind: Cancelled, Req: id, Time: e.opt.Clock.Now(), Iter: e.iter, Detail: "shutdown deadline"}, FinishCancelled, ErrCancelled)
				}
			})
			for e.Pending() > 0 {
				<-e.ended
			}
			return ctx.Err()
		}
	}
	return nil
}
