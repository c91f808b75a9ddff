package suite

import (
	"context"
	"fmt"
	"io"
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
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
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
//	fp16              a fixed fleet of fp16 replicas, the fewest that meet the SLO (least-outstanding router)
//	static:int4       the same, every layer in INT4
//	morph:default     the same, each replica morphing (morph-aware router)
//	fp16+autoscale    fp16 replicas behind the autoscaler (outstanding requests per replica against a target, a
//	                  2-minute scale-up delay, the HPA's 5-minute cool-down), the cheapest target and floor that
//	                  meet the SLO
//	morph+autoscale   the same with morph:default replicas
//
// An autoscaled fleet starts with as many replicas as the smallest fixed fleet of its policy that meets the SLO on
// the trace's first ten minutes; its floor (the HPA's minReplicas) is one, half that start or the start. Cost is replica-hours at the catalog's on-demand price
// (AWS: an L4 $0.8048, an A100 80GB $3.4309 an hour); quality loss is token-weighted on Table 8's curves.
const (
	FleetViolations = 0.01
	FleetP95        = 2 * time.Second
)

// FleetStrategies are the study's strategies, fp16+autoscale first: the one the others' costs are relative to.
var FleetStrategies = []string{"fp16+autoscale", "fp16", "static:int4", "morph:default", "morph+autoscale"}

// fleetTargets are the autoscaler targets tried (outstanding requests a replica).
var fleetTargets = []float64{2, 3, 4, 6, 8, 12, 16, 32}

// fleetMax is the most replicas a fixed fleet is tried with, and the autoscaler's ceiling.
const fleetMax = 64

// FleetOptions configure the fleet study.
type FleetOptions struct {
	Out  string
	Data string
	// Setups default to the paper's; Rates (multiples of the traces' own) to 1 and 2.
	Setups []Setup
	Rates  []float64
	// Hours is how much of each trace replays, from its start (default 1: the whole hour).
	Hours float64
	// Parallel is how many simulations run at once (default GOMAXPROCS).
	Parallel int
	// Progress, when set, is told each cell as it ends.
	Progress func(msg string)
}

// FleetCell is one setup, trace, rate and strategy: the cheapest fleet found that meets the SLO (Meets false when
// none of those tried does; its figures are then the last tried).
type FleetCell struct {
	Setup    string  `json:"setup"`
	Workload string  `json:"workload"`
	Rate     float64 `json:"rate"`
	Strategy string  `json:"strategy"`
	Meets    bool    `json:"meets_slo"`
	// Replicas is the fixed fleet's size, or the autoscaled fleet's start; Target and Floor the autoscaler's
	// target and least replicas.
	Replicas     int     `json:"replicas"`
	Target       float64 `json:"target,omitempty"`
	Floor        int     `json:"floor,omitempty"`
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
	// Tried are every fleet simulated: (violations, cost) points for the cost-against-SLO plot.
	Tried []FleetTry `json:"-"`
}

// FleetTry is one fleet simulated during the search.
type FleetTry struct {
	Strategy   string
	Violations float64
	CostPerH   float64
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

// FleetStudy runs the study and writes fleet.md, fleet.json and its plots under opt.Out.
func FleetStudy(ctx context.Context, opt FleetOptions) (*FleetReport, error) {
	if opt.Setups == nil {
		opt.Setups = PaperSetups
	}
	if opt.Rates == nil {
		opt.Rates = []float64{1, 2}
	}
	if opt.Parallel <= 0 {
		opt.Parallel = runtime.GOMAXPROCS(0)
	}
	if opt.Hours == 0 {
		opt.Hours = 1
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
		s        Setup
		w        Workload
		rate     float64
		strategy string
		t        *trace.Trace
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
				for _, st := range FleetStrategies {
					jobs = append(jobs, job{s, w, rate, st, t})
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
	rep.Cells = make([]*FleetCell, len(jobs))
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			c, tried, err := searchFleet(ctx, j.s, j.strategy, j.t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("%s, %s at %gx, %s: %w", j.s.Name, j.w.Name, j.rate, j.strategy, err)
				}
				return
			}
			c.Setup, c.Workload, c.Rate = j.s.Name, j.w.Name, j.rate
			rep.Cells[i] = c
			rep.Tried = append(rep.Tried, tried...)
			if opt.Progress != nil {
				opt.Progress(fmt.Sprintf("%s, %s at %gx, %s: %d replicas, $%.2f, %.2f%% violations", c.Setup, c.Workload, c.Rate, c.Strategy,
					c.PeakReplicas, c.Cost, 100*c.Violations))
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
	return rep, rep.Write()
}

// fleetFor is a fleet of n replicas of the setup under strategy (with target, an autoscaled one starting at n that
// keeps floor replicas at least).
func fleetFor(s Setup, strategy string, n int, target float64, floor int) (deploy.Fleet, error) {
	p, router, err := strategyPolicy(strategy)
	if err != nil {
		return deploy.Fleet{}, err
	}
	d := s.Deployment(p)
	f := deploy.Fleet{Router: router}
	for range n {
		f.Replicas = append(f.Replicas, d)
	}
	if target > 0 {
		f.Autoscale = &deploy.Autoscale{Template: d, Metric: "outstanding", Target: target, Min: floor, Max: fleetMax}
	}
	return f, nil
}

// strategyPolicy is the replicas' policy of a strategy and the router in front of them.
func strategyPolicy(strategy string) (morph.Policy, string, error) {
	name, router := strategy, "least-outstanding"
	switch strategy {
	case "fp16+autoscale":
		name = "fp16"
	case "morph+autoscale", "morph:default":
		name, router = "morph:default", "morph-aware"
	}
	p, err := morph.Parse(name)
	return p, router, err
}

// meets reports whether a run meets the study's SLO.
func meets(r *results.Run) bool {
	return r.Aggregates.SLOViolationRate <= FleetViolations && r.Aggregates.TTFT.P95 <= float64(FleetP95.Milliseconds())
}

// searchFleet finds the cheapest fleet of a strategy that meets the SLO on t.
func searchFleet(ctx context.Context, s Setup, strategy string, t *trace.Trace) (*FleetCell, []FleetTry, error) {
	var tried []FleetTry
	sim := func(n int, target float64, floor int, tr *trace.Trace) (*results.Run, error) {
		f, err := fleetFor(s, strategy, n, target, floor)
		if err != nil {
			return nil, err
		}
		r, err := f.Replay(ctx, tr, deploy.ReplayOptions{SLO: SLO})
		if err != nil {
			return nil, err
		}
		if tr == t {
			tried = append(tried, FleetTry{strategy, r.Aggregates.SLOViolationRate, r.Fleet.CostPerHour})
		}
		return r, nil
	}
	fixed := func(tr *trace.Trace) (int, *results.Run, error) { // fleetFor makes an autoscaled strategy's fixed fleet
		return smallest(func(n int) (*results.Run, error) { return sim(n, 0, 0, tr) })
	}
	c := &FleetCell{Strategy: strategy}
	if !strings.HasSuffix(strategy, "+autoscale") {
		n, r, err := fixed(t)
		if err != nil {
			return nil, nil, err
		}
		c.Replicas, c.run = n, r
	} else {
		start, err := trace.Window(t, 0, 600)
		if err != nil {
			return nil, nil, err
		}
		n, _, err := fixed(start)
		if err != nil {
			return nil, nil, err
		}
		c.Replicas = n
		for _, floor := range slices.Compact([]int{1, (n + 1) / 2, n}) {
			for _, target := range fleetTargets {
				r, err := sim(n, target, floor, t)
				if err != nil {
					return nil, nil, err
				}
				if c.run == nil || meets(r) && (!meets(c.run) || r.Fleet.Cost < c.run.Fleet.Cost) {
					c.run, c.Target, c.Floor = r, target, floor
				}
			}
		}
	}
	c.fill(s)
	return c, tried, nil
}

// smallest is the fewest replicas (1..fleetMax) whose run meets the SLO, found by doubling then bisecting (more
// replicas never serve worse); when even fleetMax misses, fleetMax and its run.
func smallest(run func(n int) (*results.Run, error)) (int, *results.Run, error) {
	runs := map[int]*results.Run{}
	ok := func(n int) (bool, error) {
		r, err := run(n)
		if err != nil {
			return false, err
		}
		runs[n] = r
		return meets(r), nil
	}
	lo, hi := 0, 1 // lo misses (0: none tried), hi is the one to try
	for {
		good, err := ok(hi)
		if err != nil {
			return 0, nil, err
		}
		if good {
			break
		}
		if hi == fleetMax {
			return hi, runs[hi], nil
		}
		lo, hi = hi, min(2*hi, fleetMax)
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
func (c *FleetCell) fill(s Setup) {
	r := c.run
	c.Meets = meets(r)
	c.ReplicaHours, c.Cost, c.CostPerMTok = r.Fleet.ReplicaHours, r.Fleet.Cost, r.Fleet.CostPerMillionTokens
	c.Violations, c.P95TTFT = r.Aggregates.SLOViolationRate, r.Aggregates.TTFT.P95
	for _, p := range r.Fleet.Size {
		c.PeakReplicas = max(c.PeakReplicas, p.Serving+p.Provisioning+p.Draining)
	}
	c.Loss = 0
	if p, _, err := strategyPolicy(c.Strategy); err == nil {
		if l, err := quality(s.Model, p, r); err == nil && !math.IsNaN(l) {
			c.Loss = l
		}
	}
}

// cell returns the report's cell of a setup, workload, rate and strategy.
func (r *FleetReport) cell(setup, workload string, rate float64, strategy string) *FleetCell {
	for _, c := range r.Cells {
		if c.Setup == setup && c.Workload == workload && c.Rate == rate && c.Strategy == strategy {
			return c
		}
	}
	return nil
}

// RelativeCost is each strategy's cost over fp16+autoscale's at equal SLO: the geometric mean over the cells where
// both meet it, and in how many cells that is.
func (r *FleetReport) RelativeCost() map[string]struct {
	Ratio float64
	Cells int
} {
	out := map[string]struct {
		Ratio float64
		Cells int
	}{}
	for _, st := range FleetStrategies {
		var logs []float64
		for _, c := range r.Cells {
			base := r.cell(c.Setup, c.Workload, c.Rate, FleetStrategies[0])
			if c.Strategy == st && c.Meets && base != nil && base.Meets && base.Cost > 0 {
				logs = append(logs, math.Log(c.Cost/base.Cost))
			}
		}
		if len(logs) > 0 {
			out[st] = struct {
				Ratio float64
				Cells int
			}{math.Exp(stat.Mean(logs, nil)), len(logs)}
		}
	}
	return out
}

// Write writes fleet.md, fleet.json, each chosen fleet's plot and the cost-against-violations plot.
func (r *FleetReport) Write() error {
	out := r.Options.Out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range r.Cells {
		base := filepath.Join(out, c.Setup, fmt.Sprintf("%s-%gx", c.Workload, c.Rate), DirName(c.Strategy))
		if err := c.run.Write(base, nil); err != nil {
			return err
		}
		if err := PlotFleet(filepath.Join(base, "fleet"), c.run); err != nil {
			return err
		}
	}
	if err := r.plotCost(filepath.Join(out, "cost-vs-slo")); err != nil {
		return err
	}
	return writeSummary(out, "fleet", r.WriteSummary, r)
}

// WriteSummary writes the headline (each strategy's cost relative to fp16+autoscale at equal SLO) and a table per
// setup.
func (r *FleetReport) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "# Fleets: morphing against scaling out, at equal SLO and cost\n\n"+
		"The cheapest fleet of each strategy keeping TTFT-SLO violations <= %.0f%% and P95 TTFT <= %v on the whole hour of each "+
		"Azure 2023 trace, at its real rate and twice it (experiments/suite.FleetStudy). Cost: replica-hours at the catalog's on-demand "+
		"prices; quality loss token-weighted on Table 8's curves.\n\n", 100*FleetViolations, FleetP95)
	for _, wl := range r.Workloads {
		if wl.StandIn != "" {
			fmt.Fprintf(w, "Note: %s.\n\n", wl.StandIn)
		}
	}
	rel := r.RelativeCost()
	var rows [][]string
	for _, st := range FleetStrategies {
		v, ok := rel[st]
		if !ok {
			rows = append(rows, []string{st, "n/a", "0"})
			continue
		}
		rows = append(rows, []string{st, fmt.Sprintf("%.2fx", v.Ratio), fmt.Sprint(v.Cells)})
	}
	fmt.Fprintf(w, "Cost relative to fp16+autoscale (geometric mean over the cells where both meet the SLO):\n\n")
	if err := mdtable.Write(w, []string{"strategy", "cost / fp16+autoscale", "cells"}, rows); err != nil {
		return err
	}
	for _, s := range r.Options.Setups {
		fmt.Fprintf(w, "\n## %s\n\n", s.Name)
		rows = nil
		for _, c := range r.Cells {
			if c.Setup != s.Name {
				continue
			}
			size := fmt.Sprint(c.Replicas)
			if c.Target > 0 {
				size = fmt.Sprintf("%d-%d (from %d, target %g)", c.Floor, c.PeakReplicas, c.Replicas, c.Target)
			}
			meet := ""
			if !c.Meets {
				meet = " (SLO not met)"
			}
			rows = append(rows, []string{c.Workload, fmt.Sprintf("%gx", c.Rate), c.Strategy + meet, size, fmt.Sprintf("%.1f", c.ReplicaHours),
				fmt.Sprintf("$%.2f", c.Cost), fmt.Sprintf("$%.3f", c.CostPerMTok), fmt.Sprintf("%.2f%%", 100*c.Violations),
				fmt.Sprintf("%.0f", c.P95TTFT), fmt.Sprintf("%.3f%%", 100*c.Loss)})
		}
		if err := mdtable.Write(w, []string{"trace", "rate", "strategy", "replicas", "replica-hours", "cost", "$/M tokens",
			"SLO viol.", "P95 TTFT ms", "quality loss"}, rows); err != nil {
			return err
		}
	}
	return nil
}

// plotCost draws every fleet tried: cost per hour against TTFT-SLO violations, a color per strategy.
func (r *FleetReport) plotCost(base string) error {
	p := newPlot("fleets tried: cost against SLO violations", "TTFT-SLO violations (%)", "cost ($ an hour)")
	names := slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, t := range r.Tried {
			if !yield(t.Strategy) {
				return
			}
		}
	}))
	for i, name := range names {
		var xys plotter.XYs
		for _, t := range r.Tried {
			if t.Strategy == name {
				xys = append(xys, plotter.XY{X: 100 * t.Violations, Y: t.CostPerH})
			}
		}
		if err := addScatter(p, name, i, xys, 3); err != nil {
			return err
		}
	}
	padAxes(p, markerPad)
	return save(base, p)
}
