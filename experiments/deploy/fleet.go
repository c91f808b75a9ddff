package deploy

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// Fleet is replicas of deployments on one timeline behind a router, with admission control and, optionally, an
// autoscaler that adds replicas of a template as a metric runs over its target and removes them as it stays
// under. Each replica is a whole deployment (its own engine, KV pool and controller); replicas may differ in
// device and policy. A fleet runs in virtual time: every replica on the sim, or on the cpu executor with a
// CPU-time clock.
//
// The simulation is a discrete-event loop over the replicas' clocks: the earliest of the next arrival, the next
// step of a replica (at once while it has work, else at its scheduler's deadline or its next idle tick), the next
// autoscaler evaluation, the next replica coming up, the next step of a fault (Faults) and the next sample of the
// fleet's size is taken first; an arrival is routed with every replica's state as of that time. A replica steps exactly as Instance.Replay steps one engine, so that round-robin over N
// identical replicas serves each request as N independent replays of every Nth request do.
type Fleet struct {
	// Replicas are the fleet at the start, serving from time 0.
	Replicas []Deployment
	// Router names the registered Router (RegisterRouter) that picks a request's replica: round-robin,
	// least-outstanding (the fewest requests in the replica), least-kv (the lowest share of KV blocks in use),
	// morph-aware (a replica whose free blocks hold the request's prompt, then one with no layer quantized, then
	// the fewest requests) or one registered from outside. Default round-robin.
	Router    string
	Admission Admission
	Autoscale *Autoscale
	// Faults kill replicas during the run and start them again; Failover is what the proxy in front does about
	// them (when it notices, which requests it sends on).
	Faults   []Fault
	Failover Failover
}

// A fleet's replicas keep fleetLog engine events (their events are not written out) and a timeline point every
// fleetEvery of virtual time at most; the fleet's size and queue are sampled every fleetSampleEvery (and at every
// change of its replicas), so that a plot of them shows the queue between changes.
const (
	fleetLog         = 256
	fleetEvery       = time.Second
	fleetSampleEvery = 10 * time.Second
)

// fleetRun is a Fleet replaying one trace.
type fleetRun struct {
	f        Fleet
	opt      ReplayOptions
	replicas []*replica
	steps    stepHeap
	acc      *results.Accumulator
	assigned []int
	rejected map[string]int
	size     []results.SizePoint
	router   Router
	metric   ScaleMetric   // the autoscaler's, when there is one
	scaler   Scaler        // the autoscaler's controller, when there is one
	views    []ReplicaView // the serving replicas, for the router and the metric
	bucket   float64
	bucketAt time.Duration
	// the next sample of the size, the autoscaler's next evaluation, and the counts it wanted over the cool-down
	// window
	sampleAt, evalAt time.Duration
	wanted           []wantedAt
	layers           int
	// the record of the faults, their steps still to come, the last that killed its replica (-1 before the
	// first), and each request's retries
	faults     []results.Fault
	faultSteps []faultStep
	lastDeath  int
	retries    []int
	violations int // requests that missed the TTFT SLO so far, for ReplayOptions.StopAfterViolations
}

// Replay runs t (clipped to the smallest context of the fleet's models) through the fleet, every request at its
// arrival, to the end, and returns the fleet's results: the aggregates over every request, and each replica's,
// its size over time and its cost (results.Fleet). Requests are turned away by admission with their reason, and
// routed by the router among the serving replicas.
func (f Fleet) Replay(ctx context.Context, t *trace.Trace, o ReplayOptions) (*results.Run, error) {
	if len(f.Replicas) == 0 {
		return nil, fmt.Errorf("deploy: a fleet of no replicas")
	}
	if f.Router == "" {
		f.Router = "round-robin"
	}
	router, err := NewRouter(f.Router)
	if err != nil {
		return nil, err
	}
	if err := f.Admission.check(); err != nil {
		return nil, err
	}
	if err := f.checkFaults(); err != nil {
		return nil, err
	}
	r := &fleetRun{f: f, opt: o, router: router, rejected: map[string]int{}, bucket: float64(f.Admission.Burst), lastDeath: -1}
	if a := f.Autoscale; a != nil {
		if err := a.defaults(len(f.Replicas)); err != nil {
			return nil, err
		}
		if r.metric, err = NewScaleMetric(a.Metric); err != nil {
			return nil, err
		}
		if r.scaler, err = NewScaler(a.Controller); err != nil {
			return nil, err
		}
	}
	for _, d := range f.Replicas {
		if _, err := r.add(d, 0, 0); err != nil {
			return nil, err
		}
	}
	window := r.replicas[0].in.Engine.Geometry().Context
	for _, rep := range r.replicas {
		window = min(window, rep.in.Engine.Geometry().Context)
	}
	if a := f.Autoscale; a != nil {
		cfg, err := ModelConfig(a.Template.Model)
		if err != nil {
			return nil, err
		}
		window = min(window, cfg.SeqLen)
	}
	t, err = trace.Clip(t, trace.Limits{Context: window})
	if err != nil {
		return nil, err
	}
	r.layers = r.replicas[0].in.Config.NLayers
	meta, err := r.meta(t)
	if err != nil {
		return nil, err
	}
	r.acc = results.NewAccumulator(meta, r.layers)
	r.acc.Grow(len(t.Requests))
	r.assigned = make([]int, 0, len(t.Requests))
	r.retries = make([]int, len(t.Requests))
	r.planFaults()
	if err := r.run(ctx, t); err != nil {
		return nil, err
	}
	return r.results(), nil
}

// meta is what the results record of the fleet's run of t.
func (r *fleetRun) meta(t *trace.Trace) (results.Meta, error) {
	f, first := r.f, r.replicas[0]
	meta := replayMeta(t, r.opt)
	meta.Command, meta.Executor, meta.Clock = "simulate", first.in.Deployment.Executor, first.in.Deployment.Clock
	meta.Model, meta.Device, meta.Policy = first.in.Name, first.in.Deployment.Device, fleetPolicy(f)
	meta.BlockSize = first.in.Engine.Geometry().BlockSize
	if meta.Executor != "sim" {
		meta.Command = "run"
	}
	for _, rep := range r.replicas {
		mem := rep.in.Executor.Memory()
		meta.Memory += mem.Budget
		meta.KVBlocksFull += mem.FullBlocks
	}
	var err error
	meta.Fleet, err = r.fleetRecord()
	return meta, err
}

// fleetPolicy names the fleet's policy: the replicas' one, or theirs joined by '+' where they differ.
func fleetPolicy(f Fleet) string {
	var names []string
	for _, d := range f.Replicas {
		name := "fp16"
		if d.Policy != nil {
			name = d.Policy.String()
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, "+")
}

// add builds a replica of d, asked for at asked and serving from ready.
func (r *fleetRun) add(d Deployment, asked, ready time.Duration) (*replica, error) {
	rep := &replica{index: len(r.replicas), state: ReplicaServing, heapAt: -1, live: map[kv.SeqID]liveRequest{}}
	if err := r.boot(rep, d, ready); err != nil {
		return nil, err
	}
	in := rep.in
	rep.info = results.Replica{Model: in.Name, Device: in.Deployment.Device, Policy: in.Deployment.Policy.String(),
		Asked: asked.Seconds(), Ready: ready.Seconds()}
	if in.Deployment.Executor == "cpu" {
		rep.info.Device = "cpu"
	}
	if p, err := catalog.PriceOf(rep.info.Device); err == nil {
		rep.info.Price = p.USDPerHour
	}
	if ready > asked {
		rep.state = ReplicaProvisioning
	}
	r.replicas = append(r.replicas, rep)
	return rep, nil
}

// boot starts an instance of d for rep (at its start, or again after its death), its clock at ready, when it
// serves.
func (r *fleetRun) boot(rep *replica, d Deployment, ready time.Duration) error {
	l, err := d.Load()
	if err != nil {
		return fmt.Errorf("replica %d: %w", rep.index, err)
	}
	in, err := l.start(fleetLog)
	if err != nil {
		return fmt.Errorf("replica %d: %w", rep.index, err)
	}
	in.Controller.Recorder.Every = fleetEvery
	clock, ok := in.Engine.Clock().(*executor.VirtualClock)
	if !ok {
		return fmt.Errorf("replica %d: a fleet runs in virtual time: the sim, or the cpu executor on the cpu or thread clock", rep.index)
	}
	clock.Advance(ready)
	in.Engine.OnStep(func(info engine.StepInfo) {
		for _, e := range info.Ended {
			rep.ended = append(rep.ended, e.ID)
		}
	})
	rep.in, rep.clock, rep.ready = in, clock, ready
	return nil
}

// run is the event loop.
func (r *fleetRun) run(ctx context.Context, t *trace.Trace) error {
	prompts := newPromptSource(r.replicas[0].in.Engine.Geometry().Vocab, max(r.opt.PromptSeed, 1), hashBlock(t))
	if prompts == nil {
		return fmt.Errorf("deploy: vocabulary of %d tokens, want > 3", r.replicas[0].in.Engine.Geometry().Vocab)
	}
	r.evalAt = math.MaxInt64
	if r.f.Autoscale != nil {
		r.evalAt = r.f.Autoscale.Interval
	}
	r.record(0)
	r.sampleAt = fleetSampleEvery
	next := 0
	for iter := 0; ; iter++ {
		if iter%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if limit := r.opt.StopAfterViolations; limit > 0 && r.violations > limit {
			return ErrSLOMissed
		}
		arrival := time.Duration(math.MaxInt64)
		if next < len(t.Requests) {
			arrival = time.Duration(t.Requests[next].Arrival * float64(time.Second))
		}
		step := time.Duration(math.MaxInt64)
		if len(r.steps) > 0 {
			step = r.steps[0].next
		}
		up, upAt := r.nextReady()
		faultAt := time.Duration(math.MaxInt64)
		if len(r.faultSteps) > 0 {
			faultAt = r.faultSteps[0].at
		}
		if next == len(t.Requests) && r.outstanding() == 0 {
			r.finish(max(r.lastTime(), lastArrival(t)))
			return nil
		}
		switch event := min(faultAt, upAt, arrival, step, r.evalAt); {
		case r.sampleAt <= event && event < math.MaxInt64:
			r.record(r.sampleAt)
			r.sampleAt += fleetSampleEvery
		case faultAt <= event && faultAt < math.MaxInt64:
			if err := r.faultStepDue(); err != nil {
				return err
			}
		case upAt <= arrival && upAt <= step && upAt <= r.evalAt:
			up.state = ReplicaServing
			r.record(upAt)
		case arrival <= step && arrival <= r.evalAt:
			req := prompts.request(t.Requests[next], arrival)
			if err := r.route(next, req); err != nil {
				return err
			}
			next++
		case r.evalAt <= step && r.evalAt < math.MaxInt64:
			if err := r.scale(r.evalAt); err != nil {
				return err
			}
			r.evalAt += r.f.Autoscale.Interval
		case step < math.MaxInt64:
			if err := r.step(heap.Pop(&r.steps).(*replica)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("deploy: fleet stalled with %d requests outstanding and no arrival left", r.outstanding())
		}
	}
}

// lastArrival is when the trace's last request arrives.
func lastArrival(t *trace.Trace) time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return time.Duration(t.Requests[len(t.Requests)-1].Arrival * float64(time.Second))
}

// nextReady is the provisioning replica that comes up first, and when.
func (r *fleetRun) nextReady() (*replica, time.Duration) {
	var up *replica
	at := time.Duration(math.MaxInt64)
	for _, rep := range r.replicas {
		if rep.state == ReplicaProvisioning && rep.ready < at {
			up, at = rep, rep.ready
		}
	}
	return up, at
}

// outstanding is the requests in the fleet's replicas.
func (r *fleetRun) outstanding() int {
	n := 0
	for _, rep := range r.replicas {
		n += len(rep.live)
	}
	return n
}

// lastTime is the latest replica clock.
func (r *fleetRun) lastTime() time.Duration {
	var t time.Duration
	for _, rep := range r.replicas {
		t = max(t, rep.clock.Now())
	}
	return t
}

// step runs one iteration of rep at its next time, collects the requests that ended, and schedules its next.
func (r *fleetRun) step(rep *replica) error {
	if rep.state == ReplicaStopped {
		return nil
	}
	if d := rep.next - rep.clock.Now(); d > 0 {
		rep.clock.Advance(d)
	}
	e := rep.in.Engine
	ran, err := e.Step()
	rep.steps++
	if err != nil {
		return fmt.Errorf("replica %d: %w", rep.index, err)
	}
	rep.routedBlocks, rep.routedTokens = 0, 0
	for _, id := range rep.ended {
		r.end(rep, id)
	}
	rep.ended = rep.ended[:0]
	if rep.state == ReplicaDraining && len(rep.live) == 0 {
		rep.state = ReplicaStopped
		rep.info.Stopped = rep.clock.Now().Seconds()
		r.record(rep.clock.Now())
		return nil
	}
	now := rep.clock.Now()
	if ran {
		r.schedule(rep, now)
	} else if t, ok := e.Wake(now); ok {
		r.schedule(rep, t)
	}
	return nil
}

// schedule sets rep's next step at t.
func (r *fleetRun) schedule(rep *replica, t time.Duration) {
	rep.next = t
	if rep.heapAt >= 0 {
		heap.Fix(&r.steps, rep.heapAt)
	} else {
		heap.Push(&r.steps, rep)
	}
}

// end takes a request that ended on rep into the results.
func (r *fleetRun) end(rep *replica, id kv.SeqID) {
	lr, ok := rep.live[id]
	if !ok {
		return
	}
	delete(rep.live, id)
	res := lr.st.Wait()
	res.ID = kv.SeqID(lr.index)
	rep.rows = append(rep.rows, r.acc.Requests())
	r.acc.Add(lr.req, res, rep.in.Controller.Recorder.Take(id), false, false)
	if slo := r.opt.SLO.TTFT; res.Err != nil || slo > 0 && res.Timeline.TTFT() > slo {
		r.violations++
	}
	rep.info.Requests++
	r.assigned[lr.index] = rep.index
}

// route admits the request that arrives at the request's arrival and dispatches it.
func (r *fleetRun) route(index int, req engine.TimedRequest) error {
	r.assigned = append(r.assigned, -1)
	if why := r.admit(req.Arrival); why != "" {
		r.rejected[why]++
		r.violations++
		r.acc.Add(req, engine.Result{ID: kv.SeqID(index), Finish: engine.FinishRejected, Err: fmt.Errorf("%s", why),
			Timeline: engine.Timeline{Arrival: req.Arrival, Finish: req.Arrival}}, make([]int32, r.layers+1), false, false)
		return nil
	}
	return r.dispatch(index, req, req.Arrival, nil)
}

// dispatch has the router pick the replica of a request sent at at, among the serving replicas but the dead ones
// that refused it (refusedBy: the first is the one it was in when that died, or the first it was routed to), and
// submits it there. A dead replica refuses it in turn: the proxy sends it on, as many times as replicas refuse
// it, and fails it when no other is serving.
func (r *fleetRun) dispatch(index int, req engine.TimedRequest, at time.Duration, refusedBy []*replica) error {
	serving := slices.DeleteFunc(r.serving(), func(v ReplicaView) bool { return slices.Contains(refusedBy, v.r) })
	if len(serving) == 0 {
		switch {
		case len(refusedBy) > 0:
			r.unserved(index, req, at, refusedBy[0].fault)
			return nil
		case r.lastDeath >= 0: // dead, or not serving again yet
			r.unserved(index, req, at, r.lastDeath)
			return nil
		}
		return fmt.Errorf("deploy: no replica serving at %v for request %d", at, index)
	}
	i := r.router.Route(req, serving)
	if i < 0 || i >= len(serving) {
		return fmt.Errorf("deploy: router %q sent request %d to replica %d of the %d serving", r.f.Router, index, i, len(serving))
	}
	rep := serving[i].r
	if rep.dead {
		r.retries[index]++
		return r.dispatch(index, req, at, append(refusedBy, rep))
	}
	if len(refusedBy) > 0 {
		r.faults[refusedBy[0].fault].Resent++
	}
	if now := rep.clock.Now(); now < at {
		rep.clock.Advance(at - now)
	}
	st := rep.in.Engine.SubmitTimed(req.Request, req.Arrival)
	rep.live[st.ID] = liveRequest{index: index, req: req, st: st, step: rep.steps}
	rep.routedBlocks += serving[i].Blocks(len(req.Prompt))
	rep.routedTokens += len(req.Prompt)
	select {
	case <-st.Done(): // rejected at once (it can never fit)
		r.end(rep, st.ID)
	default:
	}
	if rep.heapAt < 0 || rep.next > at {
		r.schedule(rep, max(at, rep.clock.Now()))
	}
	return nil
}

// serving are views of the serving replicas, in the order they joined, valid until the next call.
func (r *fleetRun) serving() []ReplicaView {
	r.views = r.views[:0]
	for _, rep := range r.replicas {
		if rep.state == ReplicaServing {
			r.views = append(r.views, ReplicaView{rep})
		}
	}
	return r.views
}

// record adds the fleet's state at now to its size over time, which stays in time order: a replica that stops at
// the end of a step records the step's end, which a sample taken at the step's start may not be after (it is
// then taken as at that end), and of the states recorded at one time only the last is kept.
func (r *fleetRun) record(now time.Duration) {
	p := results.SizePoint{T: now.Seconds()}
	last := len(r.size) - 1
	if last >= 0 && p.T <= r.size[last].T {
		p.T = r.size[last].T
		r.size = r.size[:last]
	}
	for _, rep := range r.replicas {
		switch rep.state {
		case ReplicaServing:
			p.Serving++
		case ReplicaProvisioning:
			p.Provisioning++
		case ReplicaDraining:
			p.Draining++
		case ReplicaFailed:
			p.Failed++
		}
		if rep.state != ReplicaStopped {
			w := ReplicaView{rep}.Waiting()
			p.Waiting += w
			p.Running += len(rep.live) - w
		}
	}
	r.size = append(r.size, p)
}

// finish stops the replicas still up at end.
func (r *fleetRun) finish(end time.Duration) {
	for _, rep := range r.replicas {
		if rep.state != ReplicaStopped {
			rep.info.Stopped = max(end.Seconds(), rep.info.Ready)
			rep.state = ReplicaStopped
		}
	}
	r.record(end)
}

// results assembles the fleet's results.
func (r *fleetRun) results() *results.Run {
	run := r.acc.Run(nil, morph.Point{}, 0)
	fl := &results.Fleet{Router: r.f.Router, Assigned: r.assigned, Size: r.size, Faults: r.faults}
	if len(r.rejected) > 0 {
		fl.Rejections = r.rejected
	}
	var end float64
	for _, rep := range r.replicas {
		var peak morph.Point
		swaps := 0
		for _, c := range append(slices.Clip(rep.past), rep.in.Controller) {
			p := c.Recorder.Peak()
			peak.KVUsed, peak.KVTotal, peak.Quantized = max(peak.KVUsed, p.KVUsed), max(peak.KVTotal, p.KVTotal), max(peak.Quantized, p.Quantized)
			swaps += c.Swaps()
			run.Aggregates.AddPositions(c.Recorder.TokensByPosition())
		}
		rep.info.Aggregates = r.acc.Part(rep.rows, peak, swaps)
		run.Aggregates.SwapActions += swaps
		run.Aggregates.PeakKVAttached += rep.info.Aggregates.PeakKVAttached
		hours := (rep.info.Stopped - rep.info.Asked) / 3600
		fl.ReplicaHours += hours
		fl.Cost += hours * rep.info.Price
		fl.Replicas = append(fl.Replicas, rep.info)
		end = max(end, rep.info.Stopped)
	}
	slices.SortFunc(run.Requests, func(a, b results.Request) int { return a.ID - b.ID }) // the replicas' parts index them as added
	for i, n := range r.retries {
		run.Requests[i].Retries = n
	}
	if end > 0 {
		fl.CostPerHour = fl.Cost / (end / 3600)
	}
	if out := run.Aggregates.TotalOutputTokens; out > 0 {
		fl.CostPerMillionTokens = fl.Cost / (float64(out) / 1e6)
	}
	run.Fleet = fl
	return run
}
