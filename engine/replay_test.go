package engine

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/sched"
)

// drawnRequests are requests as ReplayEach draws them, checking that each is drawn once, in order and not before
// it arrives, and counting those drawn and not yet handed back.
type drawnRequests struct {
	t        *testing.T
	reqs     []TimedRequest
	clock    executor.Clock
	next     int // the next request to be drawn
	inFlight int
	most     int // the most in flight at once
}

func (d *drawnRequests) Len() int                    { return len(d.reqs) }
func (d *drawnRequests) Arrival(i int) time.Duration { return d.reqs[i].Arrival }
func (d *drawnRequests) Request(i int) Request {
	if i != d.next || d.clock.Now() < d.reqs[i].Arrival {
		d.t.Fatalf("request %d drawn at %v, want request %d at %v or later", i, d.clock.Now(), d.next, d.reqs[i].Arrival)
	}
	d.next++
	d.inFlight++
	d.most = max(d.most, d.inFlight)
	return d.reqs[i].Request
}

// TestReplayEach: ReplayEach draws each request only when it arrives and hands each result back once, as its
// request ends, with the results Replay gives (a request rejected at submission included), so that 2,000 requests
// a few milliseconds apart never have more than a few dozen in flight; arrivals out of order are refused.
func TestReplayEach(t *testing.T) {
	reqs := make([]TimedRequest, 2000)
	for i := range reqs {
		reqs[i] = TimedRequest{Request: Request{Prompt: prompt(1 + i%50), MaxTokens: 1 + i%20}, Arrival: time.Duration(i) * 3 * time.Millisecond}
	}
	reqs[700].Prompt = nil // rejected when submitted
	e, err := New(newFake(400), Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Replay(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	clock := &executor.VirtualClock{}
	if e, err = New(newFake(400), Options{Clock: clock}); err != nil {
		t.Fatal(err)
	}
	d := &drawnRequests{t: t, reqs: reqs, clock: clock}
	got := make([]*Result, len(reqs))
	err = e.ReplayEach(context.Background(), d, func(i int, r Result) {
		if got[i] != nil || i >= d.next {
			t.Fatalf("request %d handed back again, or before it was drawn (%d drawn)", i, d.next)
		}
		if r.Finish == FinishNone || r.Timeline.Finish > clock.Now() {
			t.Fatalf("request %d handed back at %v before it ended (%v at %v)", i, clock.Now(), r.Finish, r.Timeline.Finish)
		}
		got[i] = &r
		d.inFlight--
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if got[i] == nil || !reflect.DeepEqual(*got[i], want[i]) {
			t.Fatalf("request %d: %+v, Replay gives %+v", i, got[i], want[i])
		}
	}
	if want[700].Finish != FinishRejected || d.inFlight != 0 || d.most > 32 {
		t.Errorf("request 700 %v, %d left in flight, at most %d at once: want rejected, none and a few dozen", want[700].Finish, d.inFlight, d.most)
	}

	reqs[5].Arrival = reqs[4].Arrival - time.Millisecond
	if e, err = New(newFake(400), Options{Clock: &executor.VirtualClock{}}); err != nil {
		t.Fatal(err)
	}
	err = e.ReplayEach(context.Background(), &drawnRequests{t: t, reqs: reqs[:10], clock: e.Clock()}, func(int, Result) {})
	if err == nil || !strings.Contains(err.Error(), "request 5 arrives at 11ms, before request 4 at 12ms") {
		t.Errorf("arrivals out of order: %v", err)
	}
}

// TestOnEvent: an event hook sees every event in the order of the log, however small the log: the same events a
// log big enough for the whole run keeps.
func TestOnEvent(t *testing.T) {
	reqs := make([]TimedRequest, 300)
	for i := range reqs {
		reqs[i] = TimedRequest{Request: Request{Prompt: prompt(1 + i%50), MaxTokens: 1 + i%20}, Arrival: time.Duration(i) * time.Millisecond}
	}
	var logged [2][]Event
	var kept []Event
	for k, size := range []int{16, 1 << 16} {
		e, err := New(newFake(400), Options{Clock: &executor.VirtualClock{}, LogSize: size})
		if err != nil {
			t.Fatal(err)
		}
		e.OnEvent(func(ev Event) { logged[k] = append(logged[k], ev) })
		if _, err := e.Replay(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		kept = e.Log()
	}
	if len(kept) < 300*4 || !reflect.DeepEqual(logged[0], kept) || !reflect.DeepEqual(logged[1], kept) {
		t.Errorf("the hooks saw %d and %d events, the whole run's log holds %d", len(logged[0]), len(logged[1]), len(kept))
	}
}

// reloadedRequests are drawnRequests that draw a prompt again when the engine reloads it, counting the reloads.
type reloadedRequests struct {
	*drawnRequests
	reloads int
}

func (r *reloadedRequests) Prompt(i int) []int32 {
	r.reloads++
	return slices.Clone(r.reqs[i].Prompt)
}

// TestReplayEachReloadsPrompts: over a PromptReloader, a long queue holds no prompts past its head after each step
// (the scheduler has their prefix hashes), each is reloaded when its request runs, and every result is the one a
// replay holding every prompt gives (the fake executor's tokens follow the prompt's last token).
func TestReplayEachReloadsPrompts(t *testing.T) {
	reqs := make([]TimedRequest, 300)
	for i := range reqs {
		p := prompt(20 + i%90)
		for k := range p {
			p[k] = 1 + int32((k*13+i*7)%97)
		}
		reqs[i] = TimedRequest{Request: Request{Prompt: p, MaxTokens: 4 + i%9}, Arrival: time.Duration(i) * time.Millisecond}
	}
	run := func(reload bool) ([]Result, int, int) {
		clock := &executor.VirtualClock{}
		e, err := New(newFake(60), Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		most, held := 0, 0
		e.OnStep(func(StepInfo) {
			most = max(most, len(e.sched.Queue()))
			for _, s := range e.sched.Queue()[min(sched.KeepPrompts, len(e.sched.Queue())):] {
				if s.Prompt != nil {
					held++
				}
			}
		})
		d := &drawnRequests{t: t, reqs: reqs, clock: clock}
		var arrivals Arrivals = d
		r := &reloadedRequests{drawnRequests: d}
		if reload {
			arrivals = r
		}
		out := make([]Result, len(reqs))
		if err := e.ReplayEach(context.Background(), arrivals, func(i int, res Result) { out[i] = res }); err != nil {
			t.Fatal(err)
		}
		if reload && (most < sched.KeepPrompts+50 || held != 0 || r.reloads < 50) {
			t.Errorf("at most %d waiting, %d prompts held past the queue's head after a step, %d reloads: want a long queue holding none, and reloads",
				most, held, r.reloads)
		}
		return out, most, r.reloads
	}
	want, _, _ := run(false)
	got, _, _ := run(true)
	for i := range reqs {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("request %d: %+v with prompts reloaded, %+v with them held", i, got[i], want[i])
		}
	}
}
