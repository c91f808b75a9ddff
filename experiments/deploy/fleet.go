package deploy

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
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
// autoscaler evaluation and the next replica coming up is taken first; an arrival is routed with every replica's
// state as of that time. A replica steps exactly as Instance.Replay steps one engine, so that round-robin over N
// identical replicas serves each request as N independent replays of every Nth request do.
type Fleet struct {
	// Replicas are the fleet at the start, serving from time 0.
	Replicas []Deployment
	// Router picks a request's replica: round-robin, least-outstanding (fewest requests in the replica),
	// least-kv (the lowest share of KV blocks in use) or morph-aware (a replica whose free blocks hold the
	// request's prompt, then one with no layer quantized, then the fewest requests). Default round-robin.
	Router    string
	Admission Admission
	Autoscale *Autoscale
}

// Admission turns requests away before routing, each with its reason: when MaxQueue requests are already
// waiting for their first step over the whole fleet, or when the token bucket (Rate requests a second on
// average, Burst at once) is empty. Zero values admit everything.
type Admission struct {
	MaxQueue int
	Rate     float64
	Burst    int
}

// Autoscale is a target-tracking autoscaler, as Kubernetes' HorizontalPodAutoscaler computes it with its default
// behaviour: every Interval it wants ceil(serving × metric / Target) replicas (no change within 10% of the
// target), within Min and Max, and adds at most the larger of 4 and as many as are up (doubling) at a time; a
// replica asked for serves Delay later (provisioning and loading the model) and costs from the moment it is
// asked for; replicas are removed only when the wanted count has stayed lower for CoolDown (the highest count
// wanted over that window is kept), the least loaded first, each once its requests have finished.
type Autoscale struct {
	// Template is the replica added.
	Template Deployment
	// Metric is outstanding (requests in a replica, running or waiting), waiting (requests waiting for their
	// first step) or kv (the share of KV blocks in use), averaged over the serving replicas.
	Metric   string
	Target   float64
	Min, Max int
	// Interval is how often it evaluates (default 15 s, the HPA's sync period); Delay the time from asking for a
	// replica to its serving (default 2 minutes); CoolDown the scale-down stabilization (default 300 s, the HPA's).
	Interval, Delay, CoolDown time.Duration
}

// The autoscaler's defaults.
const (
	DefaultScaleInterval = 15 * time.Second
	DefaultScaleDelay    = 2 * time.Minute
	DefaultCoolDown      = 300 * time.Second
	scaleTolerance       = 0.1
)

// A fleet's replicas keep fleetLog engine events (their events are not written out) and a timeline point every
// fleetEvery of virtual time at most.
const (
	fleetLog   = 256
	fleetEvery = time.Second
)

// replica states.
const (
	provisioning = iota
	serving
	draining
	stopped
)

// replica is one replica of a running fleet.
type replica struct {
	index  int
	in     *Instance
	clock  *executor.VirtualClock
	state  int
	info   results.Replica
	next   time.Duration // when it next steps, while it is in the step heap
	heapAt int           // its index in the step heap, -1 when not in it (only an arrival gives it work)
	ended  []kv.SeqID    // requests that ended in its last step
	// routed is the KV blocks of the prompts routed to it since its last step, which its controller's last
	// signals do not count.
	routed int
	// live are its requests not yet ended: their trace index and stream.
	live map[kv.SeqID]liveRequest
	rows []int // the fleet's result rows of the requests it served
}

type liveRequest struct {
	index int
	req   engine.TimedRequest
	st    *engine.Stream
}

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
	rr       int
	cands    []*replica // pick's scratch: the serving replicas
	bucket   float64
	bucketAt time.Duration
	// the autoscaler's next evaluation, and the counts it wanted over the cool-down window
	evalAt time.Duration
	wanted []wantedAt
	layers int
}

type wantedAt struct {
	t time.Duration
	n int
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
	if !slices.Contains(Routers, f.Router) {
		return nil, fmt.Errorf("deploy: router %q, want one of %s", f.Router, strings.Join(Routers, ", "))
	}
	if err := f.Admission.check(); err != nil {
		return nil, err
	}
	if a := f.Autoscale; a != nil {
		if err := a.defaults(len(f.Replicas)); err != nil {
			return nil, err
		}
	}
	r := &fleetRun{f: f, opt: o, rejected: map[string]int{}, bucket: float64(f.Admission.Burst)}
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
	t, err := trace.Clip(t, trace.Limits{Context: window})
	if err != nil {
		return nil, err
	}
	first := r.replicas[0]
	r.layers = first.in.Config.NLayers
	meta := replayMeta(t, o)
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
	if meta.Fleet, err = r.fleetRecord(); err != nil {
		return nil, err
	}
	r.acc = results.NewAccumulator(meta, r.layers)
	r.acc.Grow(len(t.Requests))
	r.assigned = make([]int, 0, len(t.Requests))
	if err := r.run(ctx, t); err != nil {
		return nil, err
	}
	return r.results(), nil
}

// Routers are the routers a fleet knows.
var Routers = []string{"round-robin", "least-outstanding", "least-kv", "morph-aware"}

func (a Admission) check() error {
	if a.MaxQueue < 0 || a.Rate < 0 || a.Burst < 0 || (a.Rate > 0) != (a.Burst > 0) {
		return fmt.Errorf("deploy: admission queue %d, rate %g, burst %d: want none negative, and a rate with a burst",
			a.MaxQueue, a.Rate, a.Burst)
	}
	return nil
}

func (a *Autoscale) defaults(start int) error {
	if a.Interval == 0 {
		a.Interval = DefaultScaleInterval
	}
	if a.Delay == 0 {
		a.Delay = DefaultScaleDelay
	}
	if a.CoolDown == 0 {
		a.CoolDown = DefaultCoolDown
	}
	switch {
	case a.Metric != "outstanding" && a.Metric != "waiting" && a.Metric != "kv":
		return fmt.Errorf("deploy: autoscale metric %q, want outstanding, waiting or kv", a.Metric)
	case !(a.Target > 0):
		return fmt.Errorf("deploy: autoscale target %g, want above 0", a.Target)
	case a.Min < 1 || a.Max < a.Min || start < a.Min || start > a.Max:
		return fmt.Errorf("deploy: autoscale between %d and %d replicas starting from %d, want 1 <= min <= start <= max", a.Min, a.Max, start)
	case a.Interval < 0 || a.Delay < 0 || a.CoolDown < 0:
		return fmt.Errorf("deploy: autoscale interval %v, delay %v, cool-down %v: want none negative", a.Interval, a.Delay, a.CoolDown)
	}
	return nil
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
	l, err := d.Load()
	if err != nil {
		return nil, fmt.Errorf("replica %d: %w", len(r.replicas), err)
	}
	in, err := l.start(fleetLog)
	if err != nil {
		return nil, fmt.Errorf("replica %d: %w", len(r.replicas), err)
	}
	in.Controller.Recorder.Every = fleetEvery
	clock, ok := in.Engine.Clock().(*executor.VirtualClock)
	if !ok {
		return nil, fmt.Errorf("replica %d: a fleet runs in virtual time: the sim, or the cpu executor on the cpu or thread clock", len(r.replicas))
	}
	clock.Advance(ready)
	rep := &replica{index: len(r.replicas), in: in, clock: clock, state: serving, heapAt: -1, live: map[kv.SeqID]liveRequest{},
		info: results.Replica{Model: in.Name, Device: in.Deployment.Device, Policy: in.Deployment.Policy.String(),
			Asked: asked.Seconds(), Ready: ready.Seconds()}}
	if in.Deployment.Executor == "cpu" {
		rep.info.Device = "cpu"
	}
	if p, err := catalog.PriceOf(rep.info.Device); err == nil {
		rep.info.Price = p.USDPerHour
	}
	in.Engine.OnStep(func(info engine.StepInfo) {
		for _, e := range info.Ended {
			rep.ended = append(rep.ended, e.ID)
		}
	})
	if ready > asked {
		rep.state = provisioning
	}
	r.replicas = append(r.replicas, rep)
	return rep, nil
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
	next := 0
	for iter := 0; ; iter++ {
		if iter%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
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
		if next == len(t.Requests) && r.outstanding() == 0 {
			r.finish(max(r.lastTime(), lastArrival(t)))
			return nil
		}
		switch {
		case upAt <= arrival && upAt <= step && upAt <= r.evalAt:
			up.state = serving
			r.record(upAt)
		case arrival <= step && arrival <= r.evalAt:
			req := prompts.request(t.Requests[next], arrival)
			r.route(next, req)
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
		if rep.state == provisioning && time.Duration(rep.info.Ready*float64(time.Second)) < at {
			up, at = rep, time.Duration(rep.info.Ready*float64(time.Second))
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
	if rep.state == stopped {
		return nil
	}
	if d := rep.next - rep.clock.Now(); d > 0 {
		rep.clock.Advance(d)
	}
	e := rep.in.Engine
	ran, err := e.Step()
	if err != nil {
		return fmt.Errorf("replica %d: %w", rep.index, err)
	}
	rep.routed = 0
	for _, id := range rep.ended {
		r.end(rep, id)
	}
	rep.ended = rep.ended[:0]
	if rep.state == draining && len(rep.live) == 0 {
		rep.state = stopped
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
	rep.info.Requests++
	r.assigned[lr.index] = rep.index
}

// route admits the request that arrives at the request's arrival, picks its replica and submits it.
func (r *fleetRun) route(index int, req engine.TimedRequest) {
	r.assigned = append(r.assigned, -1)
	if why := r.admit(req.Arrival); why != "" {
		r.rejected[why]++
		r.acc.Add(req, engine.Result{ID: kv.SeqID(index), Finish: engine.FinishRejected, Err: fmt.Errorf("%s", why),
			Timeline: engine.Timeline{Arrival: req.Arrival, Finish: req.Arrival}}, make([]int32, r.layers+1), false, false)
		return
	}
	rep := r.pick(req)
	if now := rep.clock.Now(); now < req.Arrival {
		rep.clock.Advance(req.Arrival - now)
	}
	st := rep.in.Engine.SubmitTimed(req.Request, req.Arrival)
	rep.live[st.ID] = liveRequest{index: index, req: req, st: st}
	rep.routed += rep.blocks(len(req.Prompt))
	select {
	case <-st.Done(): // rejected at once (it can never fit)
		r.end(rep, st.ID)
	default:
	}
	if rep.heapAt < 0 || rep.next > req.Arrival {
		r.schedule(rep, max(req.Arrival, rep.clock.Now()))
	}
}

// admit returns why a request arriving at now is turned away, or "".
func (r *fleetRun) admit(now time.Duration) string {
	a := r.f.Admission
	if a.MaxQueue > 0 {
		waiting := 0
		for _, rep := range r.replicas {
			waiting += rep.waiting()
		}
		if waiting >= a.MaxQueue {
			return fmt.Sprintf("queue full: %d requests waiting, the limit is %d", waiting, a.MaxQueue)
		}
	}
	if a.Rate > 0 {
		r.bucket = min(float64(a.Burst), r.bucket+a.Rate*(now-r.bucketAt).Seconds())
		r.bucketAt = now
		if r.bucket < 1 {
			return fmt.Sprintf("rate limited: %g requests a second, bursts of %d", a.Rate, a.Burst)
		}
		r.bucket--
	}
	return ""
}

// waiting is the requests in rep not yet running: those submitted since its last step and those it left waiting.
func (rep *replica) waiting() int {
	return max(0, len(rep.live)-rep.in.Controller.Last().Running)
}

// kvUsage is the share of rep's KV blocks in use at its last step.
func (rep *replica) kvUsage() float64 {
	s := rep.in.Controller.Last()
	if s.Total == 0 {
		return 0
	}
	return float64(s.Used) / float64(s.Total)
}

// pick is the router: the serving replica the request goes to.
func (r *fleetRun) pick(req engine.TimedRequest) *replica {
	cands := r.cands[:0]
	for _, rep := range r.replicas {
		if rep.state == serving {
			cands = append(cands, rep)
		}
	}
	r.cands = cands
	switch r.f.Router {
	case "least-outstanding":
		return slices.MinFunc(cands, func(a, b *replica) int { return len(a.live) - len(b.live) })
	case "least-kv":
		return slices.MinFunc(cands, func(a, b *replica) int {
			if c := cmp.Compare(a.kvUsage(), b.kvUsage()); c != 0 {
				return c
			}
			return len(a.live) - len(b.live)
		})
	case "morph-aware":
		return slices.MinFunc(cands, func(a, b *replica) int {
			ra, rb := morphRank(a, req), morphRank(b, req)
			if ra != rb {
				return ra - rb
			}
			return len(a.live) - len(b.live)
		})
	}
	rep := cands[r.rr%len(cands)]
	r.rr++
	return rep
}

// morphRank orders replicas for the morph-aware router: 0 for one whose free blocks hold the request's prompt
// beside the prompts already waiting there and whose layers are all at full precision, 1 for one with the room but
// quantized layers, 2 for one without the room at full precision, 3 for the rest. A replica that has not stepped
// yet has every attached block free.
func morphRank(rep *replica, req engine.TimedRequest) int {
	s := rep.in.Controller.Last()
	free := s.Free
	if s.Total == 0 {
		free = rep.in.Engine.Memory().Blocks
	}
	rank := 0
	if free < rep.blocks(len(req.Prompt))+s.WaitingBlocks+rep.routed {
		rank += 2
	}
	if s.Quantized > 0 {
		rank++
	}
	return rank
}

// blocks is the KV blocks that tokens tokens fill on rep.
func (rep *replica) blocks(tokens int) int {
	bs := rep.in.Engine.Geometry().BlockSize
	return (tokens + bs - 1) / bs
}

// scale is one autoscaler evaluation at now.
func (r *fleetRun) scale(now time.Duration) error {
	a := r.f.Autoscale
	var live []*replica
	pending := 0
	for _, rep := range r.replicas {
		switch rep.state {
		case serving:
			live = append(live, rep)
		case provisioning:
			pending++
		}
	}
	metric := 0.0
	for _, rep := range live {
		switch a.Metric {
		case "outstanding":
			metric += float64(len(rep.live))
		case "waiting":
			metric += float64(rep.waiting())
		case "kv":
			metric += rep.kvUsage()
		}
	}
	metric /= float64(len(live))
	want := len(live)
	if ratio := metric / a.Target; math.Abs(ratio-1) > scaleTolerance {
		want = int(math.Ceil(float64(len(live)) * ratio))
	}
	want = min(max(want, a.Min), a.Max)
	r.wanted = append(r.wanted, wantedAt{now, want})
	for len(r.wanted) > 0 && now-r.wanted[0].t > a.CoolDown {
		r.wanted = r.wanted[1:]
	}
	switch have := len(live) + pending; {
	case want > have:
		for range min(want-have, max(4, have)) {
			if _, err := r.add(a.Template, now, now+a.Delay); err != nil {
				return err
			}
		}
	case want < len(live):
		keep := want
		for _, w := range r.wanted {
			keep = max(keep, w.n)
		}
		slices.SortStableFunc(live, func(x, y *replica) int { return len(x.live) - len(y.live) })
		for _, rep := range live[:max(0, len(live)-keep)] {
			rep.state = draining
			if len(rep.live) == 0 {
				rep.state = stopped
				rep.info.Stopped = now.Seconds()
			}
		}
	}
	r.record(now)
	return nil
}

// record adds the fleet's state at now to its size over time.
func (r *fleetRun) record(now time.Duration) {
	p := results.SizePoint{T: now.Seconds()}
	for _, rep := range r.replicas {
		switch rep.state {
		case serving:
			p.Serving++
		case provisioning:
			p.Provisioning++
		case draining:
			p.Draining++
		}
		if rep.state != stopped {
			w := rep.waiting()
			p.Waiting += w
			p.Running += len(rep.live) - w
		}
	}
	r.size = append(r.size, p)
}

// finish stops the replicas still up at end.
func (r *fleetRun) finish(end time.Duration) {
	for _, rep := range r.replicas {
		if rep.state != stopped {
			rep.info.Stopped = max(end.Seconds(), rep.info.Ready)
			rep.state = stopped
		}
	}
	r.record(end)
}

// results assembles the fleet's results.
func (r *fleetRun) results() *results.Run {
	run := r.acc.Run(nil, morph.Point{}, 0)
	fl := &results.Fleet{Router: r.f.Router, Assigned: r.assigned, Size: r.size}
	if len(r.rejected) > 0 {
		fl.Rejections = r.rejected
	}
	var end float64
	for _, rep := range r.replicas {
		c := rep.in.Controller
		rep.info.Aggregates = r.acc.Part(rep.rows, c.Recorder.Peak(), c.Swaps())
		run.Aggregates.SwapActions += c.Swaps()
		run.Aggregates.AddPositions(c.Recorder.TokensByPosition())
		run.Aggregates.PeakKVAttached += rep.info.Aggregates.PeakKVAttached
		hours := (rep.info.Stopped - rep.info.Asked) / 3600
		fl.ReplicaHours += hours
		fl.Cost += hours * rep.info.Price
		fl.Replicas = append(fl.Replicas, rep.info)
		end = max(end, rep.info.Stopped)
	}
	slices.SortFunc(run.Requests, func(a, b results.Request) int { return a.ID - b.ID }) // the replicas' parts index them as added
	if end > 0 {
		fl.CostPerHour = fl.Cost / (end / 3600)
	}
	if out := run.Aggregates.TotalOutputTokens; out > 0 {
		fl.CostPerMillionTokens = fl.Cost / (float64(out) / 1e6)
	}
	run.Fleet = fl
	return run
}

// promptSource draws requests' prompt tokens as Requests does, one request at a time, so that a fleet holds only
// the prompts of the requests in flight.
type promptSource struct {
	rng   *rand.Rand // the tokens of no hash id
	ids   *rand.PCG  // reseeded for each hash id's block
	idRng *rand.Rand // draws from ids
	vocab int
	seed  uint64
	block int // the prompt tokens a hash id stands for
}

func newPromptSource(vocab int, seed uint64, block int) *promptSource {
	if vocab <= 3 {
		return nil
	}
	ids := rand.NewPCG(0, 0)
	return &promptSource{rng: rand.New(rand.NewPCG(seed, 0x5eed)), ids: ids, idRng: rand.New(ids), vocab: vocab, seed: seed, block: block}
}

// request is the next request: r's lengths, arriving at arrival, its prompt drawn from [3, vocab) as Requests
// describes.
func (s *promptSource) request(r trace.Request, arrival time.Duration) engine.TimedRequest {
	p := make([]int32, r.PromptTokens)
	n := 0
	for _, id := range r.HashIDs {
		if n == len(p) {
			break
		}
		s.ids.Seed(s.seed, hashStream(id))
		for end := min(n+s.block, len(p)); n < end; n++ {
			p[n] = int32(3 + s.idRng.IntN(s.vocab-3))
		}
	}
	for ; n < len(p); n++ {
		p[n] = int32(3 + s.rng.IntN(s.vocab-3))
	}
	return engine.TimedRequest{Arrival: arrival, Request: engine.Request{Prompt: p, MaxTokens: r.OutputTokens}}
}

// stepHeap orders the replicas due to step by their next step, then by index.
type stepHeap []*replica

func (h stepHeap) Len() int { return len(h) }
func (h stepHeap) Less(i, j int) bool {
	if h[i].next != h[j].next {
		return h[i].next < h[j].next
	}
	return h[i].index < h[j].index
}
func (h stepHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *stepHeap) Push(x any) {
	rep := x.(*replica)
	rep.heapAt = len(*h)
	*h = append(*h, rep)
}
func (h *stepHeap) Pop() any {
	old := *h
	rep := old[len(old)-1]
	*h = old[:len(old)-1]
	rep.heapAt = -1
	return rep
}
