package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
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
	streams := make([]*Stream, len(reqs))
	clock := e.opt.Clock
	_, virtual := clock.(*executor.VirtualClock)
	next, stalled := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := clock.Now()
		for ; next < len(order) && reqs[order[next]].Arrival <= now; next++ {
			i := order[next]
			streams[i] = e.submit(reqs[i].Request, reqs[i].Arrival, true)
		}
		ran, err := e.Step()
		if err != nil {
			return nil, err
		}
		if ran {
			stalled = 0
			continue
		}
		if next == len(order) && e.Pending() == 0 {
			break
		}
		t, ok := e.NextWake()
		if next < len(order) {
			if a := reqs[order[next]].Arrival; !ok || a < t {
				t, ok = a, true
			}
		}
		if !ok {
			stalled++
			if len(e.hookList()) == 0 || stalled > maxStalledTicks {
				return nil, fmt.Errorf("engine: replay stalled at %v: %d requests left, none can start and no arrival is due", now, e.Pending())
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
	out := make([]Result, len(reqs))
	for i, s := range streams {
		out[i] = s.Wait()
	}
	return out, nil
}
