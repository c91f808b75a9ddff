package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// PlotFleet draws a fleet run's replicas (serving and provisioning) and its requests (waiting for their first step
// and running) over time, as base.png and base.svg.
func PlotFleet(base string, r *results.Run) error {
	plots, err := fleetPlots(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	return save(base, plots...)
}

// fleetPlots are PlotFleet's plots: the fleet's samples (results.Fleet.Size) as step functions, each value held
// until the next sample.
func fleetPlots(r *results.Run) ([]*plot.Plot, error) {
	if r.Fleet == nil {
		return nil, fmt.Errorf("suite: %s is no fleet's run", r.Meta.Policy)
	}
	reps := newPlot(fmt.Sprintf("%s: replicas (%s router)", r.Meta.Policy, r.Fleet.Router), "time (s)", "replicas")
	queue := newPlot("requests: waiting for their first step, and running", "time (s)", "requests")
	var serving, prov, waiting, running plotter.XYs
	for _, p := range r.Fleet.Size {
		serving = append(serving, plotter.XY{X: p.T, Y: float64(p.Serving)})
		prov = append(prov, plotter.XY{X: p.T, Y: float64(p.Provisioning)})
		waiting = append(waiting, plotter.XY{X: p.T, Y: float64(p.Waiting)})
		running = append(running, plotter.XY{X: p.T, Y: float64(p.Running)})
	}
	for i, s := range []struct {
		p      *plot.Plot
		name   string
		xys    plotter.XYs
		dashed bool
	}{{reps, "serving", serving, false}, {reps, "provisioning", prov, true}, {queue, "waiting", waiting, false}, {queue, "running", running, true}} {
		if err := addSteps(s.p, s.name, i, s.xys, s.dashed); err != nil {
			return nil, err
		}
	}
	for _, p := range []*plot.Plot{reps, queue} {
		p.Y.Min, p.Y.Max = 0, max(1, p.Y.Max)*(1+markerPad) // a line at the most is not drawn on the frame
	}
	return []*plot.Plot{reps, queue}, nil
}

// The fleet study: for each of the paper's setups and the whole hour of the Azure 2023 conversation and code
// traces, at their real rates and at twice them, the cheapest fleet of each strategy that keeps the TTFT-SLO
// violations at most FleetViolations and the P95 TTFT at most FleetP95:
//
//	fp16, static:int8, static:int4, morph:default, morph:compute
//	                           a fixed fleet of the policy's replicas, the fewest that meet the SLO
//	fp16+hpa, morph:default+hpa, morph:compute+hpa
//	                           the policy's replicas behind the HPA rule (outstanding requests per replica against a
//	                           target, the HPA's 5-minute cool-down), the cheapest target that meets the SLO
//	morph:default+morph-aware, morph:compute+morph-aware
//	                           the same behind the morph-aware controller (deploy.Autoscale.Controller)
//
// Morphing fleets sit behind the morph-aware router, the others behind least-outstanding. The autoscaled
// strategies run at each provisioning delay (FleetOptions.Delays); a fixed fleet does not depend on it. An
// autoscaled fleet starts with, and keeps at least, a floor: the smallest fixed fleet of its policy that meets the
// SLO on the trace's first ten minutes, or the policy's fixed fleet for the whole trace where that is smaller or
// where no target from the first floor meets the SLO at no more than that fixed fleet's cost. Cost is
// replica-hours at the catalog's on-demand price (AWS: an L4 $0.8048, an A100 80GB $3.4309 an hour); quality loss
// is token-weighted on Table 8's curves.
const (
	FleetViolations = 0.01
	FleetP95        = 2 * time.Second
)

// FleetStrategies are the study's strategies, fp16+hpa first: the one the others' costs are relative to. A name
// is a policy, fixed, or a policy and an autoscale controller joined by '+'.
var FleetStrategies = []string{"fp16+hpa", "fp16", "static:int8", "static:int4", "morph:default", "morph:compute",
	"morph:default+hpa", "morph:compute+hpa", "morph:default+morph-aware", "morph:compute+morph-aware"}

// DefaultFleetDelays are the provisioning delays the autoscaled strategies run at.
var DefaultFleetDelays = []time.Duration{30 * time.Second, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute}

// ParseDelays reads comma-separated provisioning delays, each a Go duration above 0 (30s,2m).
func ParseDelays(list string) ([]time.Duration, error) {
	var delays []time.Duration
	for part := range strings.SplitSeq(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("delays %q: %q is not a duration above 0 such as 2m", list, part)
		}
		delays = append(delays, d)
	}
	return delays, nil
}

// goal is what a fleet must meet: at most Violations of its requests beyond SLO, and a P95 TTFT within P95.
type goal struct {
	SLO        metrics.SLO
	Violations float64
	P95        time.Duration
}

// studyGoal is the fleet study's.
var studyGoal = goal{SLO, FleetViolations, FleetP95}

// meets reports whether a run meets the goal (nil: a run stopped once it missed).
func (g goal) meets(r *results.Run) bool {
	return r != nil && r.Aggregates.SLOViolationRate <= g.Violations && r.Aggregates.TTFT.P95 <= float64(g.P95.Milliseconds())
}

// fleetTargets are the autoscaler targets tried (outstanding requests a replica), in increasing order: a higher
// target scales out later, so costs less and misses more.
var fleetTargets = []float64{2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}

// fleetMax is the most replicas a fixed fleet is tried with, and the autoscaler's ceiling.
const fleetMax = 64

// FleetOptions configure the fleet study.
type FleetOptions struct {
	Out  string
	Data string
	// Setups default to the paper's; Rates (multiples of the traces' own) to 1 and 2; Delays to
	// DefaultFleetDelays.
	Setups []Setup
	Rates  []float64
	Delays []time.Duration
	// Hours is how much of each trace replays, from its start (default 1: the whole hour).
	Hours float64
	// Parallel is how many simulations run at once (default GOMAXPROCS).
	Parallel int
	// Progress, when set, is told each cell as it ends.
	Progress func(msg string)
}

// FleetCell is one setup, trace, rate, strategy and (for an autoscaled strategy) provisioning delay: the cheapest
// fleet found that meets the SLO (Meets false when none of those tried does; its figures are then those of the
// largest fleet tried, or the lowest target).
type FleetCell struct {
	Setup    string        `json:"setup"`
	Workload string        `json:"workload"`
	Rate     float64       `json:"rate"`
	Strategy string        `json:"strategy"`
	Delay    time.Duration `json:"delay_ns,omitempty"` // 0 for a fixed fleet
	Meets    bool          `json:"meets_slo"`
	// Replicas is the fixed fleet's size, or the autoscaled fleet's start and floor; Target the autoscaler's.
	Replicas     int     `json:"replicas"`
	Target       float64 `json:"target,omitempty"`
	PeakReplicas int     `json:"peak_replicas"`
	ReplicaHours float64 `json:"replica_hours"`
	Cost         float64 `json:"cost_usd"`
	CostPerMTok  float64 `json:"cost_usd_per_million_output_tokens"`
	Violations   float64 `json:"slo_violation_rate"`
	P95TTFT      float64 `json:"p95_ttft_ms"`
	Loss         float64 `json:"quality_loss"`
	run          *results.Run
}

// FleetReport is the study's results.
type FleetReport struct {
	Options   FleetOptions `json:"-"`
	Workloads []Workload   `json:"workloads"`
	Cells     []*FleetCell `json:"cells"`
	// Premise is the burst of the premise figure, run at each delay.
	Premise []*PremiseRun `json:"premise"`
}

// fleetWorkloads are the whole-hour traces (or stand-ins of their rates and lengths).
func fleetWorkloads(data string) ([]Workload, error) {
	var out []Workload
	for _, s := range snippets[:2] {
		t, standIn, err := s.load(data, 3600)
		if err != nil {
			return nil, err
		}
		out = append(out, Workload{Name: s.name + "-hour", Trace: t, StandIn: standIn})
	}
	return out, nil
}

// splitStrategy is a strategy's policy and autoscale controller ("" for a fixed fleet).
func splitStrategy(strategy string) (policy, controller string) {
	policy, controller, _ = strings.Cut(strategy, "+")
	return policy, controller
}

// fleetGroup is one setup, workload and rate: the cells of every strategy over one trace.
type fleetGroup struct {
	s    Setup
	w    Workload
	rate float64
	t    *trace.Trace
	// starts are each policy's smallest fixed fleet on the trace's first ten minutes, and fixeds its smallest on
	// the whole trace, each found once for the fixed strategy and the autoscaled ones.
	mu     sync.Mutex
	starts map[string]func() (int, error)
	fixeds map[string]func() (fixedFleet, error)
}

// fixedFleet is a policy's smallest fixed fleet that meets the goal on a trace (the most tried, and its whole
// run, when none does).
type fixedFleet struct {
	n   int
	run *results.Run
}

func newFleetGroup(s Setup, w Workload, rate float64, t *trace.Trace) *fleetGroup {
	return &fleetGroup{s: s, w: w, rate: rate, t: t, starts: map[string]func() (int, error){}, fixeds: map[string]func() (fixedFleet, error){}}
}

// once runs find for key the first time it is asked for, under the group's lock, and returns its result to every
// caller.
func once[T any](g *fleetGroup, m map[string]func() (T, error), key string, find func() (T, error)) (T, error) {
	g.mu.Lock()
	f, ok := m[key]
	if !ok {
		f = sync.OnceValues(find)
		m[key] = f
	}
	g.mu.Unlock()
	return f()
}

// start is the policy's smallest fixed fleet on the trace's first ten minutes.
func (g *fleetGroup) start(ctx context.Context, policy string) (int, error) {
	return once(g, g.starts, policy, func() (int, error) {
		first, err := trace.Window(g.t, 0, 600)
		if err != nil {
			return 0, err
		}
		n, _, err := smallest(1, fleetMax, func(n int, whole bool) (*results.Run, error) {
			return simFleet(ctx, studyGoal, g.s, policy, n, 0, "", 0, first, whole)
		}, studyGoal.meets)
		return n, err
	})
}

// fixed is the policy's smallest fixed fleet on the whole trace, searched from the first ten minutes' (a close
// guess, found on a sixth of the trace).
func (g *fleetGroup) fixed(ctx context.Context, policy string) (fixedFleet, error) {
	return once(g, g.fixeds, policy, func() (fixedFleet, error) {
		hint, err := g.start(ctx, policy)
		if err != nil {
			return fixedFleet{}, err
		}
		run := func(n int, whole bool) (*results.Run, error) {
			return simFleet(ctx, studyGoal, g.s, policy, n, 0, "", 0, g.t, whole)
		}
		n, r, err := smallest(hint, fleetMax, run, studyGoal.meets)
		if err == nil && r == nil {
			r, err = run(n, true)
		}
		return fixedFleet{n, r}, err
	})
}

// FleetStudy runs the study and writes fleet.md, fleet.json and its plots under opt.Out.
func FleetStudy(ctx context.Context, opt FleetOptions) (*FleetReport, error) {
	if opt.Setups == nil {
		opt.Setups = PaperSetups
	}
	if opt.Rates == nil {
		opt.Rates = []float64{1, 2}
	}
	if opt.Delays == nil {
		opt.Delays = DefaultFleetDelays
	}
	if opt.Parallel <= 0 {
		opt.Parallel = runtime.GOMAXPROCS(0)
	}
	if opt.Hours == 0 {
		opt.Hours = 1
	}
	for _, d := range opt.Delays {
		if d <= 0 {
			return nil, fmt.Errorf("suite: fleet study delay %v, want above 0", d)
		}
	}
	wls, err := fleetWorkloads(opt.Data)
	if err != nil {
		return nil, err
	}
	for i := range wls {
		if wls[i].Trace, err = trace.Window(wls[i].Trace, 0, 3600*opt.Hours); err != nil {
			return nil, err
		}
	}
	rep := &FleetReport{Options: opt, Workloads: wls}
	type job struct {
		g        *fleetGroup
		strategy string
	}
	var jobs []job
	for _, s := range opt.Setups {
		for _, w := range wls {
			for _, rate := range opt.Rates {
				t, err := trace.TimeScale(w.Trace, 1/rate)
				if err != nil {
					return nil, err
				}
				if t, err = trace.Clip(t, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput}); err != nil {
					return nil, err
				}
				g := newFleetGroup(s, w, rate, t)
				for _, st := range FleetStrategies {
					jobs = append(jobs, job{g, st})
				}
			}
		}
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
		sem   = make(chan struct{}, opt.Parallel)
	)
	cells := make([][]*FleetCell, len(jobs))
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			cs, err := searchFleet(ctx, j.g, j.strategy, opt.Delays)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("%s, %s at %gx, %s: %w", j.g.s.Name, j.g.w.Name, j.g.rate, j.strategy, err)
				}
				return
			}
			cells[i] = cs
			for _, c := range cs {
				c.Setup, c.Workload, c.Rate = j.g.s.Name, j.g.w.Name, j.g.rate
				if opt.Progress != nil {
					opt.Progress(fmt.Sprintf("%s, %s at %gx, %s%s: %d replicas, $%.2f, %.2f%% violations", c.Setup, c.Workload, c.Rate, c.Strategy,
						delayNote(c.Delay), c.PeakReplicas, c.Cost, 100*c.Violations))
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, cs := range cells {
		rep.Cells = append(rep.Cells, cs...)
	}
	if rep.Premise, err = rep.runPremise(ctx); err != nil {
		return nil, err
	}
	return rep, rep.Write()
}

// delayNote is ", delay D" for an autoscaled cell, "" for a fixed one.
func delayNote(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return ", delay " + d.String()
}

// fleetFor is a fleet of n replicas of the setup under policy (with a controller, an autoscaled one starting at n
// and keeping n at least, at target with the provisioning delay).
func fleetFor(s Setup, policy string, n int, controller string, target float64, delay time.Duration) (deploy.Fleet, error) {
	p, err := morph.Parse(policy)
	if err != nil {
		return deploy.Fleet{}, err
	}
	router := "least-outstanding"
	if _, ok := p.(morph.Morphing); ok {
		router = "morph-aware"
	}
	d := s.Deployment(p)
	f := deploy.Fleet{Router: router}
	for range n {
		f.Replicas = append(f.Replicas, d)
	}
	if controller != "" {
		f.Autoscale = &deploy.Autoscale{Template: d, Metric: "outstanding", Target: target, Min: n, Max: fleetMax, Delay: delay, Controller: controller}
	}
	return f, nil
}

// simFleet replays t through fleetFor's fleet under the goal's SLO. Unless whole, a run stops once it has missed
// the goal's violations and simFleet returns nil: the search needs only to know that it missed.
func simFleet(ctx context.Context, gl goal, s Setup, policy string, n int, target float64, controller string, delay time.Duration, t *trace.Trace, whole bool) (*results.Run, error) {
	f, err := fleetFor(s, policy, n, controller, target, delay)
	if err != nil {
		return nil, err
	}
	o := deploy.ReplayOptions{SLO: gl.SLO}
	if !whole {
		o.StopAfterViolations = max(1, int(math.Floor(gl.Violations*float64(len(t.Requests)))))
	}
	r, err := f.Replay(ctx, t, o)
	if errors.Is(err, deploy.ErrSLOMissed) {
		return nil, nil
	}
	return r, err
}

// searchFleet finds the cheapest fleet of a strategy that meets the SLO on the group's trace: one cell for a fixed
// strategy, one a delay for an autoscaled one.
func searchFleet(ctx context.Context, g *fleetGroup, strategy string, delays []time.Duration) ([]*FleetCell, error) {
	policy, controller := splitStrategy(strategy)
	fixed, err := g.fixed(ctx, policy)
	if err != nil {
		return nil, err
	}
	if controller == "" {
		c := &FleetCell{Strategy: strategy, Replicas: fixed.n, run: fixed.run}
		return []*FleetCell{c}, c.fill(g.s)
	}
	start, err := g.start(ctx, policy)
	if err != nil {
		return nil, err
	}
	// The floor is the first ten minutes' fleet, unless the whole trace's fixed fleet is smaller; that fixed
	// fleet is the second floor tried, when the first gives no fleet that meets at no more than its cost.
	floors := []*targetSearch{{g: g, policy: policy, controller: controller, floor: min(start, fixed.n), top: len(fleetTargets) - 1}}
	if fixed.n > floors[0].floor {
		floors = append(floors, &targetSearch{g: g, policy: policy, controller: controller, floor: fixed.n, top: len(fleetTargets) - 1})
	}
	var cells []*FleetCell
	for _, delay := range slices.Sorted(slices.Values(delays)) {
		c := &FleetCell{Strategy: strategy, Delay: delay}
		for _, ts := range floors {
			r, target, err := ts.cheapest(ctx, delay)
			if err != nil {
				return nil, err
			}
			if r != nil && (c.run == nil || r.Fleet.Cost < c.run.Fleet.Cost) {
				c.run, c.Target, c.Replicas = r, target, ts.floor
			}
			if c.run != nil && c.run.Fleet.Cost <= fixed.run.Fleet.Cost {
				break
			}
		}
		if c.run == nil {
			// None meets: the figures are those of the first floor at the lowest target.
			c.Target, c.Replicas = fleetTargets[0], floors[0].floor
			if c.run, err = floors[0].sim(ctx, fleetTargets[0], delay, true); err != nil {
				return nil, err
			}
		}
		if err := c.fill(g.s); err != nil {
			return nil, err
		}
		cells = append(cells, c)
	}
	return cells, nil
}

// targetSearch searches an autoscaled strategy's targets from one floor, delay after delay.
type targetSearch struct {
	g                  *fleetGroup
	policy, controller string
	floor              int
	// top is the highest target that may meet at the next delay: a longer delay never lets a higher target meet
	// than a shorter one did, so each delay's search starts from the last one's.
	top int
	// unscaled holds the runs that asked for no replica, by target: the same at every delay.
	unscaled map[float64]*results.Run
}

// sim replays the group's trace through the autoscaled fleet from the floor (nil, unless whole, for a run that
// missed).
func (ts *targetSearch) sim(ctx context.Context, target float64, delay time.Duration, whole bool) (*results.Run, error) {
	if r, ok := ts.unscaled[target]; ok {
		return r, nil
	}
	r, err := simFleet(ctx, studyGoal, ts.g.s, ts.policy, ts.floor, target, ts.controller, delay, ts.g.t, whole)
	if r != nil && len(r.Fleet.Replicas) == ts.floor {
		if ts.unscaled == nil {
			ts.unscaled = map[float64]*results.Run{}
		}
		ts.unscaled[target] = r
	}
	return r, err
}

// cheapest is the cheapest run that meets at the delay among the targets tried, searching for the highest target
// that meets (nil when none does).
func (ts *targetSearch) cheapest(ctx context.Context, delay time.Duration) (*results.Run, float64, error) {
	runs := make([]*results.Run, len(fleetTargets))
	try := func(i int) (bool, error) {
		r, err := ts.sim(ctx, fleetTargets[i], delay, false)
		runs[i] = r
		return studyGoal.meets(r), err
	}
	ok, err := try(ts.top)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		lo, err := highestMeeting(ts.top, try)
		if err != nil {
			return nil, 0, err
		}
		ts.top = max(lo, 0)
	}
	// Of runs that cost the same, the highest target's is kept.
	var best *results.Run
	target := 0.0
	for i := len(fleetTargets) - 1; i >= 0; i-- {
		if r := runs[i]; studyGoal.meets(r) && (best == nil || r.Fleet.Cost < best.Fleet.Cost) {
			best, target = r, fleetTargets[i]
		}
	}
	return best, target, nil
}

// highestMeeting bisects [0, hi) for the highest index whose try meets, those that meet being the ones below some
// bound; -1 when none does.
func highestMeeting(hi int, try func(i int) (bool, error)) (int, error) {
	lo := -1
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := try(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// smallest is the fewest replicas (1..most) whose run meets (more replicas never serve worse), found by galloping
// from hint (down while it meets, up while it misses, by doubling steps) then bisecting; most and a nil run when
// even most misses. run(n, whole) may return nil for a run that missed unless whole; smallest asks for no whole
// run.
func smallest(hint, most int, run func(n int, whole bool) (*results.Run, error), meets func(*results.Run) bool) (int, *results.Run, error) {
	runs := map[int]*results.Run{}
	ok := func(n int) (bool, error) {
		r, err := run(n, false)
		if err != nil {
			return false, err
		}
		runs[n] = r
		return meets(r), nil
	}
	hint = min(max(hint, 1), most)
	good, err := ok(hint)
	if err != nil {
		return 0, nil, err
	}
	lo, hi := 0, hint // lo misses (0: no fleet), hi meets
	if good {
		for step := 1; hi > 1; step *= 2 {
			n := max(hi-step, 1)
			if good, err = ok(n); err != nil {
				return 0, nil, err
			}
			if !good {
				lo = n
				break
			}
			hi = n
		}
	} else {
		lo = hint
		for step := 1; ; step *= 2 {
			if lo == most {
				return most, nil, nil
			}
			n := min(lo+step, most)
			if good, err = ok(n); err != nil {
				return 0, nil, err
			}
			if good {
				hi = n
				break
			}
			lo = n
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		good, err := ok(mid)
		if err != nil {
			return 0, nil, err
		}
		if good {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, runs[hi], nil
}

// fill sets the cell's figures from its run.
func (c *FleetCell) fill(s Setup) error {
	r := c.run
	c.Meets = studyGoal.meets(r)
	c.ReplicaHours, c.Cost, c.CostPerMTok = r.Fleet.ReplicaHours, r.Fleet.Cost, r.Fleet.CostPerMillionTokens
	c.Violations, c.P95TTFT = r.Aggregates.SLOViolationRate, r.Aggregates.TTFT.P95
	for _, p := range r.Fleet.Size {
		c.PeakReplicas = max(c.PeakReplicas, p.Serving+p.Provisioning+p.Draining)
	}
	policy, _ := splitStrategy(c.Strategy)
	p, err := morph.Parse(policy)
	if err != nil {
		return err
	}
	c.Loss = 0
	if l, err := quality(s.Model, p, r); err == nil && !math.IsNaN(l) {
		c.Loss = l
	}
	return nil
}

// cell returns the report's cell of a setup, workload, rate and strategy at a delay (any delay for a fixed
// strategy).
func (r *FleetReport) cell(setup, workload string, rate float64, strategy string, delay time.Duration) *FleetCell {
	if _, controller := splitStrategy(strategy); controller == "" {
		delay = 0
	}
	for _, c := range r.Cells {
		if c.Setup == setup && c.Workload == workload && c.Rate == rate && c.Strategy == strategy && c.Delay == delay {
			return c
		}
	}
	return nil
}

// FleetMeans are a strategy's figures at one delay over the cells where it and fp16+hpa both meet the SLO:
// geometric means of the cost relative to fp16+hpa, of the P95 TTFT and of the perplexity ratio (1 + quality loss,
// reported less 1), and the mean violation rate.
type FleetMeans struct {
	Cost, Loss, Violations, P95TTFT float64
	Cells                           int
}

// Means are each strategy's FleetMeans at a delay.
func (r *FleetReport) Means(delay time.Duration) map[string]FleetMeans {
	out := map[string]FleetMeans{}
	for _, st := range FleetStrategies {
		var cost, loss, p95, viol []float64
		for _, c := range r.Cells {
			if c.Strategy != st || c.Delay != 0 && c.Delay != delay || !c.Meets {
				continue
			}
			base := r.cell(c.Setup, c.Workload, c.Rate, FleetStrategies[0], delay)
			if base == nil || !base.Meets || base.Cost <= 0 {
				continue
			}
			cost = append(cost, math.Log(c.Cost/base.Cost))
			loss = append(loss, math.Log1p(c.Loss))
			p95 = append(p95, math.Log(max(c.P95TTFT, 1e-3)))
			viol = append(viol, c.Violations)
		}
		if len(cost) > 0 {
			out[st] = FleetMeans{Cost: math.Exp(stat.Mean(cost, nil)), Loss: math.Expm1(stat.Mean(loss, nil)),
				P95TTFT: math.Exp(stat.Mean(p95, nil)), Violations: stat.Mean(viol, nil), Cells: len(cost)}
		}
	}
	return out
}
