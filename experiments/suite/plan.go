package suite

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
)

// PlanSpec is what Cheapest searches: a model serving a trace, under an SLO and a quality budget, over devices,
// policies and fleets of them, fixed or autoscaled.
type PlanSpec struct {
	Trace *trace.Trace
	Model string // catalog name
	// Devices default to PlanDevices, Policies to Policies; Controllers are the autoscalers tried with each policy
	// (default hpa and, for a morphing policy, morph-aware; empty but not nil: fixed fleets only).
	Devices     []string
	Policies    []string
	Controllers []string
	// Delay is the autoscaled fleets' provisioning delay (default 2 minutes).
	Delay time.Duration
	// A deployment meets the spec when at most MaxViolations of its requests miss SLO (default 1%), its P95 TTFT
	// is within MaxP95 (default the SLO's TTFT) and its quality loss within MaxLoss (a share: 0.01 is 1%).
	SLO           metrics.SLO
	MaxViolations float64
	MaxP95        time.Duration
	MaxLoss       float64
	// Parallel is how many simulations run at once (default GOMAXPROCS).
	Parallel int
	// Progress, when set, is told each candidate as it ends.
	Progress func(msg string)
}

// DefaultPlanDelay is the autoscaled candidates' provisioning delay unless the spec says otherwise.
const DefaultPlanDelay = 2 * time.Minute

// PlanDevices are the devices Cheapest tries by default: those with a price.
var PlanDevices = []string{"l4", "a100", "h100", "h200"}

// Candidate is one deployment Cheapest considered: a device, a policy and a fleet of it, fixed (Replicas) or
// autoscaled (Controller, from Replicas up, at Target outstanding requests a replica), with its simulated figures
// over the whole trace, or why it was not simulated to the end (Pruned).
type Candidate struct {
	Device     string  `json:"device"`
	Policy     string  `json:"policy"`
	Controller string  `json:"controller,omitempty"`
	Replicas   int     `json:"replicas"`
	Target     float64 `json:"target,omitempty"`
	Meets      bool    `json:"meets"`
	// USDPerHour is the fleet's mean cost an hour: its cost over the trace's hours.
	USDPerHour  float64 `json:"usd_per_hour"`
	Cost        float64 `json:"cost_usd"`
	CostPerMTok float64 `json:"usd_per_million_output_tokens"`
	Violations  float64 `json:"slo_violation_rate"`
	P95TTFT     float64 `json:"p95_ttft_ms"`
	Loss        float64 `json:"quality_loss"`
	Pruned      string  `json:"pruned,omitempty"`
	run         *results.Run
}

// Plan is Cheapest's answer: every candidate in the order considered, the cheapest that meets the spec, its
// replica's Latency-RPS curve (Poisson arrivals of the trace's requests, one replica) and what the capacity
// method (one instance's throughput at the knee, instances = the trace's mean rate over it) makes of it.
type Plan struct {
	Spec       PlanSpec            `json:"-"`
	Hours      float64             `json:"hours"`
	MeanRate   float64             `json:"mean_rps"`
	Candidates []*Candidate        `json:"candidates"`
	Winner     *Candidate          `json:"winner"`
	Curve      []loadtest.Point    `json:"curve"`
	Knee       loadtest.KneeTarget `json:"knee_target"`
	Capacity   loadtest.Capacity   `json:"capacity"`
}

// planWave is how many candidates Cheapest runs between updates of the cheapest so far: a constant, so that
// what is pruned, and so the plan, does not depend on the number of cores.
const planWave = 4

// curveSeconds is how long each Poisson run of the winner's Latency-RPS curve lasts.
const curveSeconds = 300

// Cheapest finds the cheapest deployment of the spec's model that serves its trace within the SLO and the quality
// budget, simulated. Candidates are the devices (the largest first: its fleets are the quickest to simulate, and
// the cost they set bounds the smaller devices' searches) times the policies, each as a fixed fleet (the fewest
// replicas that meet, by smallest, from the fleet that meets the trace's first ten minutes) and behind each
// controller (with that first fleet as its floor, at the highest autoscaler target that meets). A candidate runs
// only while it can beat the cheapest found so far by more than planTie: a fixed fleet is searched below that cost,
// an autoscaled one whose floor costs as much, or is its fixed fleet's size or more, is not run, nor is a device
// whose one replica costs as much; a policy that quantizes the same layers whatever the load (fp16, static,
// selective) leaves after its first run over the quality budget. Candidates run planWave at a time, each wave's in
// parallel.
func Cheapest(ctx context.Context, spec PlanSpec) (*Plan, error) {
	if err := spec.defaults(); err != nil {
		return nil, err
	}
	t := spec.Trace
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("plan: the trace has no requests")
	}
	hours := max(t.Requests[len(t.Requests)-1].Arrival, 1) / 3600
	p := &Plan{Spec: spec, Hours: hours, MeanRate: float64(len(t.Requests)) / (hours * 3600),
		Knee: loadtest.KneeTarget{Metric: "ttft", Limit: spec.MaxP95}}
	gl := goal{SLO: spec.SLO, Violations: spec.MaxViolations, P95: spec.MaxP95}
	// The largest device first: its fleets are the smallest, the quickest to simulate, and the cost they set
	// bounds the many replicas of a smaller device from the start.
	devices := slices.Clone(spec.Devices)
	slices.SortStableFunc(devices, func(a, b string) int {
		ha, _ := catalog.HardwareByName(a)
		hb, _ := catalog.HardwareByName(b)
		return cmp.Compare(hb.Memory, ha.Memory)
	})
	var jobs []*planJob
	for _, d := range devices {
		price, _ := catalog.PriceOf(d)
		for _, name := range spec.Policies {
			pol, err := morph.Parse(name)
			if err != nil {
				return nil, err
			}
			j := &planJob{spec: &spec, gl: gl, t: t, hours: hours, price: price.USDPerHour, policy: pol,
				setup: Setup{Name: d, Model: spec.Model, Device: d}, c: &Candidate{Device: d, Policy: name}, done: make(chan struct{})}
			jobs = append(jobs, j)
			for _, ctl := range spec.Controllers {
				if _, morphing := pol.(morph.Morphing); ctl == "morph-aware" && !morphing {
					continue
				}
				jobs = append(jobs, &planJob{spec: &spec, gl: gl, t: t, hours: hours, price: price.USDPerHour, policy: pol,
					setup: j.setup, fixed: j, c: &Candidate{Device: d, Policy: name, Controller: ctl}})
			}
		}
	}
	best := math.Inf(1)
	for start := 0; start < len(jobs); start += planWave {
		wave := jobs[start:min(start+planWave, len(jobs))]
		var wg sync.WaitGroup
		sem := make(chan struct{}, spec.Parallel)
		errs := make([]error, len(wave))
		for i, j := range wave {
			wg.Go(func() {
				if j.fixed != nil {
					<-j.fixed.done // outside the semaphore: the fixed candidate may be waiting for it
				}
				sem <- struct{}{}
				defer func() { <-sem }()
				errs[i] = j.run(ctx, best)
			})
		}
		wg.Wait()
		for i, j := range wave {
			if errs[i] != nil {
				return nil, fmt.Errorf("plan: %s: %w", j.c.name(), errs[i])
			}
			p.Candidates = append(p.Candidates, j.c)
			if j.c.Meets && beats(j.c.USDPerHour, best) {
				best, p.Winner = j.c.USDPerHour, j.c
			}
			if spec.Progress != nil {
				spec.Progress(j.c.summary())
			}
		}
	}
	if p.Winner == nil {
		return p, fmt.Errorf("plan: no candidate meets the SLO and a quality loss of at most %.2f%%", 100*spec.MaxLoss)
	}
	return p, p.curve(ctx)
}

// defaults fills the spec's defaults and checks it.
func (s *PlanSpec) defaults() error {
	if s.Trace == nil {
		return fmt.Errorf("plan: no trace")
	}
	if _, err := catalog.ModelByName(s.Model); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if s.Devices == nil {
		s.Devices = PlanDevices
	}
	if s.Policies == nil {
		s.Policies = Policies
	}
	if s.Controllers == nil {
		s.Controllers = []string{"hpa", "morph-aware"}
	}
	if s.Delay == 0 {
		s.Delay = DefaultPlanDelay
	}
	if s.SLO.TTFT == 0 {
		s.SLO = SLO
	}
	if s.MaxViolations == 0 {
		s.MaxViolations = FleetViolations
	}
	if s.MaxP95 == 0 {
		s.MaxP95 = time.Duration(s.SLO.TTFT)
	}
	if s.Parallel <= 0 {
		s.Parallel = runtime.GOMAXPROCS(0)
	}
	for _, d := range s.Devices {
		if _, err := catalog.PriceOf(d); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
	}
	if _, ok := Qualities[s.Model]; !ok {
		return fmt.Errorf("plan: no quality curve for %s, so no quality loss to judge", s.Model)
	}
	if !(s.MaxLoss >= 0) || !(s.MaxViolations > 0 && s.MaxViolations < 1) || s.MaxP95 <= 0 || s.Delay < 0 {
		return fmt.Errorf("plan: quality loss %g, violations %g, P95 %v, delay %v: want a loss of 0 or more, violations in (0, 1), a P95 above 0, a delay of 0 or more",
			s.MaxLoss, s.MaxViolations, s.MaxP95, s.Delay)
	}
	return nil
}

// planJob is one candidate's search.
type planJob struct {
	spec   *PlanSpec
	gl     goal
	t      *trace.Trace
	hours  float64
	price  float64 // a replica's an hour
	policy morph.Policy
	setup  Setup
	fixed  *planJob // an autoscaled candidate's fixed fleet, whose floor it waits for
	c      *Candidate
	// done closes once a fixed candidate's search has ended.
	done chan struct{}
	// fixedLoss is the quality loss of a policy that quantizes the same layers whatever the load, once known.
	fixedLoss float64
	lossKnown bool
	floor     int     // a fixed candidate's fleet for the first ten minutes, once known (0: none below the cheapest so far)
	best      float64 // the cheapest so far an hour when the search began
}

func (c *Candidate) name() string {
	name := c.Device + ", " + c.Policy
	if c.Controller != "" {
		name += "+" + c.Controller
	}
	return name
}

// fleet is the candidate's fleet in words.
func (c *Candidate) fleet() string {
	n := fmt.Sprintf("%d replicas", c.Replicas)
	if c.Replicas == 1 {
		n = "1 replica"
	}
	if c.Controller != "" {
		return fmt.Sprintf("%s from %s, target %g", c.Controller, n, c.Target)
	}
	return n
}

// summary is the candidate's line of progress.
func (c *Candidate) summary() string {
	if c.Pruned != "" {
		return c.name() + ": " + c.Pruned
	}
	return fmt.Sprintf("%s, %s: $%.2f/h, %.2f%% violations, P95 TTFT %.0f ms, loss %.2f%%", c.name(), c.fleet(), c.USDPerHour,
		100*c.Violations, c.P95TTFT, 100*c.Loss)
}

// planTie is how much cheaper than the cheapest so far a candidate must be to take its place: costs within it are
// a tie, which the earlier candidate (a cheaper device, a policy earlier in the list) keeps.
const planTie = 0.01

// beats reports whether a cost an hour beats best, the cheapest so far.
func beats(perHour, best float64) bool { return perHour < best*(1-planTie) }

// run searches the candidate's cheapest fleet that beats best, the cheapest meeting fleet's cost an hour so far.
func (j *planJob) run(ctx context.Context, best float64) error {
	j.best = best
	if j.done != nil {
		defer close(j.done)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// A fleet of n replicas costs n prices an hour or more: at most most replicas can beat best.
	most := fleetMax
	if !math.IsInf(best, 1) {
		most = min(fleetMax, int(math.Ceil(best*(1-planTie)/j.price))-1)
	}
	if most < 1 {
		j.c.Pruned = fmt.Sprintf("pruned: one replica costs $%.2f/h, the cheapest so far $%.2f/h", j.price, best)
		return nil
	}
	if j.c.Controller == "" {
		return j.searchFixed(ctx, most)
	}
	return j.searchAutoscaled(ctx, most)
}

// meets reports whether a run meets the spec: the goal and the quality budget.
func (j *planJob) meets(r *results.Run) bool {
	if !j.gl.meets(r) {
		return false
	}
	loss, err := j.loss(r)
	return err == nil && loss <= j.spec.MaxLoss
}

// loss is a run's quality loss.
func (j *planJob) loss(r *results.Run) (float64, error) {
	l, err := quality(j.setup.Model, j.policy, r)
	if err == nil && math.IsNaN(l) {
		err = fmt.Errorf("no quality curve for %s under %s", j.setup.Model, j.policy)
	}
	return l, err
}

// overBudget notes the loss of a policy that quantizes the same layers at any load from its first run, and
// reports whether it is over the budget: no fleet of the policy can meet the spec.
func (j *planJob) overBudget(r *results.Run) bool {
	if _, morphing := j.policy.(morph.Morphing); morphing || r == nil {
		return false
	}
	if !j.lossKnown {
		l, err := j.loss(r)
		if err != nil {
			return false
		}
		j.fixedLoss, j.lossKnown = l, true
	}
	return j.fixedLoss > j.spec.MaxLoss
}

// searchFixed finds the fewest replicas, at most most, that meet the spec.
func (j *planJob) searchFixed(ctx context.Context, most int) error {
	sim := func(t *trace.Trace) func(n int, whole bool) (*results.Run, error) {
		return func(n int, whole bool) (*results.Run, error) {
			return simFleet(ctx, j.gl, j.setup, j.c.Policy, n, 0, "", 0, t, whole)
		}
	}
	// The fleet that meets the trace's first ten minutes is the search's hint, and the autoscaled fleets' floor.
	first, err := trace.Window(j.t, 0, 600)
	if err != nil {
		return err
	}
	lossy := false
	meets := func(r *results.Run) bool {
		lossy = lossy || j.overBudget(r)
		return !lossy && j.meets(r)
	}
	hint, r, err := smallest(1, most, sim(first), meets)
	if err != nil {
		return err
	}
	if r != nil && !lossy {
		j.floor = hint
	}
	if lossy {
		return j.prunedLoss()
	}
	if r == nil {
		j.c.Pruned = fmt.Sprintf("pruned: %d replica(s) ($%.2f/h) miss the first ten minutes", most, float64(most)*j.price)
		return nil
	}
	n, r, err := smallest(hint, most, sim(j.t), meets)
	if err != nil {
		return err
	}
	if lossy {
		return j.prunedLoss()
	}
	if r == nil {
		j.c.Pruned = fmt.Sprintf("pruned: %d replica(s) ($%.2f/h) miss", most, float64(most)*j.price)
		return nil
	}
	j.c.Replicas = n
	return j.fill(r)
}

// errOverBudget stops a search whose policy is over the quality budget at any load.
var errOverBudget = errors.New("plan: over the quality budget at any load")

// prunedLoss marks the candidate as over the quality budget at any load.
func (j *planJob) prunedLoss() error {
	j.c.Pruned = fmt.Sprintf("pruned: quality loss %.2f%% at any load, over %.2f%%", 100*j.fixedLoss, 100*j.spec.MaxLoss)
	j.c.Loss = j.fixedLoss
	return nil
}

// searchAutoscaled finds the highest autoscaler target that meets the spec, from the fixed fleet's floor.
func (j *planJob) searchAutoscaled(ctx context.Context, most int) error {
	f := j.fixed // done: its fields are settled, and no longer written
	floor := f.floor
	switch {
	case f.lossKnown && f.fixedLoss > j.spec.MaxLoss:
		j.fixedLoss = f.fixedLoss
		return j.prunedLoss()
	case floor == 0:
		j.c.Pruned = "pruned: no fixed fleet of its policy below the cheapest so far meets the first ten minutes"
		return nil
	case f.c.Meets && floor >= f.c.Replicas:
		j.c.Pruned = fmt.Sprintf("pruned: its floor, the fleet for the first ten minutes (%d replica(s)), is the fixed fleet's size or more", floor)
		return nil
	case floor > most:
		j.c.Pruned = fmt.Sprintf("pruned: its floor, %d replicas, costs $%.2f/h, the cheapest so far $%.2f/h", floor, float64(floor)*j.price, j.best)
		return nil
	}
	j.c.Replicas = floor
	// Targets from the lowest (scaling out soonest) up: the highest that meets costs least.
	var met *results.Run
	lo, err := highestMeeting(len(fleetTargets), func(i int) (bool, error) {
		r, err := simFleet(ctx, j.gl, j.setup, j.c.Policy, floor, fleetTargets[i], j.c.Controller, j.spec.Delay, j.t, false)
		switch {
		case err != nil:
			return false, err
		case j.overBudget(r):
			return false, errOverBudget
		case j.meets(r):
			met = r
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, errOverBudget) {
		return j.prunedLoss()
	}
	if err != nil {
		return err
	}
	if lo == -1 {
		j.c.Pruned = fmt.Sprintf("pruned: no target from %g to %g meets from %d replicas", fleetTargets[0], fleetTargets[len(fleetTargets)-1], floor)
		return nil
	}
	j.c.Target = fleetTargets[lo]
	return j.fill(met)
}

// fill sets the candidate's figures from its run.
func (j *planJob) fill(r *results.Run) error {
	c := j.c
	c.run, c.Meets = r, true
	c.Cost, c.CostPerMTok = r.Fleet.Cost, r.Fleet.CostPerMillionTokens
	c.USDPerHour = c.Cost / j.hours
	c.Violations, c.P95TTFT = r.Aggregates.SLOViolationRate, r.Aggregates.TTFT.P95
	var err error
	c.Loss, err = j.loss(r)
	return err
}

// curve runs the winner's replica under Poisson arrivals of the trace's requests, curveSeconds a rate, from the
// capacity method's rate search, and sets the knee's capacity.
func (p *Plan) curve(ctx context.Context) error {
	w := p.Winner
	pol, err := morph.Parse(w.Policy)
	if err != nil {
		return err
	}
	s := Setup{Name: w.Device, Model: p.Spec.Model, Device: w.Device}
	err = search(w.name(), func(rate float64) (bool, error) {
		t, err := trace.WithArrivals(p.Spec.Trace, trace.Poisson{PerSecond: rate}, DefaultBurstSeed)
		if err == nil {
			t, err = trace.Window(t, 0, curveSeconds)
		}
		if err != nil {
			return false, err
		}
		c, err := simulate(ctx, s, s.Deployment(pol), t)
		if err != nil {
			return false, err
		}
		p.Curve = append(p.Curve, loadtest.Point{Rate: rate, Metrics: c.Run.Aggregates.Metrics})
		return p.Knee.Meets(c.Run.Aggregates.Metrics), nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(p.Curve, func(a, b loadtest.Point) int { return cmp.Compare(a.Rate, b.Rate) })
	knee, ok := loadtest.Knee(p.Curve, p.Knee)
	if !ok {
		return fmt.Errorf("plan: no rate meets %v on one %s replica", p.Knee, w.name())
	}
	price, _ := catalog.PriceOf(w.Device)
	p.Capacity, err = loadtest.PlanCapacity(knee.Metrics, p.MeanRate, price.USDPerHour)
	return err
}

// Write writes plan.json, plan.md (WriteSummary), the winner's results.json and its replica's Latency-RPS curve
// (latency-rps.png and .svg) under dir.
func (p *Plan) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md bytes.Buffer
	if err := p.WriteSummary(&md); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	if p.Winner == nil {
		return nil
	}
	if err := p.Winner.run.Write(filepath.Join(dir, "winner"), nil); err != nil {
		return err
	}
	return loadtest.PlotCurve(p.Curve, "one "+p.Winner.Device+" replica, "+p.Winner.Policy, filepath.Join(dir, "latency-rps"))
}

// WriteSummary writes the plan: the winner, the capacity method's count beside it, every candidate and the
// winner's replica's Latency-RPS curve.
func (p *Plan) WriteSummary(w io.Writer) error {
	s := p.Spec
	fmt.Fprintf(w, "# Plan: %s, %d requests over %.2f h (%.2f req/s on average)\n\n", s.Model, len(s.Trace.Requests), p.Hours, p.MeanRate)
	fmt.Fprintf(w, "Meets: at most %.2g%% of requests beyond %v, P95 TTFT within %v, quality loss at most %.2f%%; autoscalers provision in %v.\n\n",
		100*s.MaxViolations, s.SLO, s.MaxP95, 100*s.MaxLoss, s.Delay)
	if c := p.Winner; c != nil {
		fmt.Fprintf(w, "Cheapest: %s, %s: $%.2f an hour ($%.3f a million output tokens), %.2f%% violations, P95 TTFT %.0f ms, quality loss %.2f%%. ",
			c.name(), c.fleet(), c.USDPerHour, c.CostPerMTok, 100*c.Violations, c.P95TTFT, 100*c.Loss)
		fmt.Fprintf(w, "The capacity method (one replica's throughput at the knee, where the P95 TTFT is within %v: %.2f req/s; instances = %.2f req/s over it) gives %d instances, $%.2f an hour.\n\n",
			s.MaxP95, p.Capacity.KneeRPS, p.MeanRate, p.Capacity.Instances, p.Capacity.CostPerHour)
	}
	header := []string{"device", "policy", "fleet", "$/h", "$/M output tokens", "violations", "P95 TTFT ms", "quality loss", "meets"}
	var rows [][]string
	for _, c := range p.Candidates {
		row := []string{c.Device, c.Policy, c.fleet(), fmt.Sprintf("%.2f", c.USDPerHour), fmt.Sprintf("%.3f", c.CostPerMTok),
			fmt.Sprintf("%.2f%%", 100*c.Violations), fmt.Sprintf("%.0f", c.P95TTFT), fmt.Sprintf("%.2f%%", 100*c.Loss), map[bool]string{true: "yes", false: "no"}[c.Meets]}
		if c.Pruned != "" {
			row = []string{c.Device, c.Policy, cmp.Or(c.Controller, "fixed"), "", "", "", "", "", c.Pruned}
		}
		if c == p.Winner {
			row[len(row)-1] = "winner"
		}
		rows = append(rows, row)
	}
	fmt.Fprintf(w, "## Candidates\n\n")
	if err := mdtable.Write(w, header, rows); err != nil {
		return err
	}
	if p.Winner == nil {
		return nil
	}
	knee, _ := loadtest.Knee(p.Curve, p.Knee)
	fmt.Fprintf(w, "\n## One %s replica of the winner: its Latency-RPS curve (Poisson arrivals of the trace's requests, %d s a rate)\n\n", p.Winner.Device, curveSeconds)
	return loadtest.WriteTables(w, loadtest.SweepTable(p.Curve, &knee), loadtest.CapacityTable(p.Capacity))
}
