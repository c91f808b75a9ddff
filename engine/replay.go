package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/kv"
)

// TimedRequest is a request with the time it arrives on the engine's clock, for Replay.
type TimedRequest struct {
	Request
	Arrival time.Duration
}

// maxStalledTicks bounds how long Replay waits, idle tick after idle tick, for requests that nothing can start: no
// batch ran, no arrival is left, no scheduler deadline is due. A controller gets that long to act (50 s at the default
// tick) before Replay reports the stall.
const maxStalledTicks = 1000

// Wake is when an engine that ran no batch at now (on its clock) next has something to do without a new
// request: its scheduler's next deadline (dynamic batching) or, with a hook, its next idle tick, whichever comes
// first; ok is false when only a new request can give it work. A driver of several engines on one timeline steps
// each at its Wake, as Replay does one.
func (e *Engine) Wake(now time.Duration) (time.Duration, bool) {
	t, ok := e.NextWake()
	return e.withTick(now, t, ok)
}

// withTick is t (ok: when it is set) or, with a hook, the idle tick after now when that comes first.
func (e *Engine) withTick(now, t time.Duration, ok bool) (time.Duration, bool) {
	if len(e.hookList()) > 0 {
		if tick := now + e.opt.IdleTick; !ok || tick < t {
			return tick, true
		}
	}
	return t, ok
}

// Replay runs reqs to completion and returns their results in the order given. Each request is submitted at its
// arrival time and stamped with it, also when it arrives during a step. When the engine is idle the clock moves to
// the next arrival, the scheduler's next deadline (dynamic batching) or, with a hook (OnStep), the next idle tick:
// a virtual clock is advanced there, the wall clock is waited on. Replay returns ctx's error within one iteration
// of its end, and an error when a step fails or the requests left can never start.
func (e *Engine) Replay(ctx context.Context, reqs []TimedRequest) ([]Result, error) {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(reqs[a].Arrival - reqs[b].Arrival) })
	out := make([]Result, len(reqs))
	if err := e.ReplayEach(ctx, sortedRequests{reqs, order}, func(k int, r Result) { out[order[k]] = r }); err != nil {
		return nil, err
	}
	return out, nil
}

// Arrivals are a replay's requests in order of arrival, each drawn only when it is due (ReplayEach).
type Arrivals interface {
	Len() int                    // the number of requests
	Arrival(i int) time.Duration // request i's arrival on the engine's clock, never before request i-1's
	Request(i int) Request       // request i, asked for once, when it arrives
}

// PromptReloader is Arrivals that can draw a request's prompt again, the same tokens: a replay over it lets a
// waiting request go of its prompt once the scheduler has the prefix hashes it needs, and reloads it when the
// request runs, so that a long queue holds few prompts (sched.KeepPrompts at its head).
type PromptReloader interface {
	Arrivals
	Prompt(i int) []int32 // request i's prompt, the tokens Request(i) gave
}

// sortedRequests are requests in the order of their arrival as Arrivals.
type sortedRequests struct {
	reqs  []TimedRequest
	order []int
}

func (s sortedRequests) Len() int                    { return len(s.order) }
func (s sortedRequests) Arrival(k int) time.Duration { return s.reqs[s.order[k]].Arrival }
func (s sortedRequests) Request(k int) Request       { return s.reqs[s.order[k]].Request }

// ReplayEach is Replay over requests drawn as they arrive, each request's result handed to done with its index
// as soon as the request ends (on the caller's goroutine, after the iteration's hooks), so that a long replay
// holds only the requests in flight: no prompt before its arrival, no result after its end. It returns an error
// as Replay does, and when an arrival comes before the one preceding it.
func (e *Engine) ReplayEach(ctx context.Context, reqs Arrivals, done func(i int, r Result)) error {
	type inFlight struct {
		index  int
		stream *Stream
	}
	live := map[kv.SeqID]inFlight{}
	clock := e.opt.Clock
	_, virtual := clock.(*executor.VirtualClock)
	n := reqs.Len()
	next, stalled := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := clock.Now()
		for ; next < n && reqs.Arrival(next) <= now; next++ {
			arrival := reqs.Arrival(next)
			if next > 0 && arrival < reqs.Arrival(next-1) {
				return fmt.Errorf("engine: replay request %d arrives at %v, before request %d at %v: want arrivals in order",
					next, arrival, next-1, reqs.Arrival(next-1))
			}
			var reload func() []int32
			if pr, ok := reqs.(PromptReloader); ok {
				i := next
				reload = func() []int32 { return pr.Prompt(i) }
			}
			st := e.submit(reqs.Request(next), arrival, true, reload)
			select {
			case <-st.Done(): // rejected at once
				done(next, st.Wait())
			default:
				live[st.ID] = inFlight{next, st}
			}
		}
		ran, err := e.Step()
		if err != nil {
			return err
		}
		for _, end := range e.endedNow {
			if r, ok := live[end.ID]; ok {
				delete(live, end.ID)
				done(r.index, r.stream.Wait())
			}
		}
		if ran {
			stalled = 0
			continue
		}
		if next == n && e.Pending() == 0 {
			return nil
		}
		t, ok := e.NextWake()
		if next < n {
			if a := reqs.Arrival(next); !ok || a < t {
				t, ok = a, true
			}
		}
		if !ok {
			stalled++
			if len(e.hookList()) == 0 || stalled > maxStalledTicks {
				return fmt.Errorf("engine: replay stalled at %v: %d requests left, none can start and no arrival is due", now, e.Pending())
			}
		}
		t, ok = e.withTick(now, t, ok)
		if virtual {
			clock.Advance(t - now)
			continue
		}
		timer := time.NewTimer(t - now)
		select {
		case <-ctx.Done():
		case <-e.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}
