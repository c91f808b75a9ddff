package suite

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
)

// PremiseRun is one fleet over the premise's burst at one provisioning delay: its violations per premiseBin of
// arrivals and its replicas provisioning over time.
type PremiseRun struct {
	Strategy   string        `json:"strategy"`
	Delay      time.Duration `json:"delay_ns"`
	Target     float64       `json:"target"`
	Start      int           `json:"start_replicas"`
	Violations int           `json:"slo_violations"`
	// InBurst are the violations of the requests that arrive from the burst's start to premiseTail after its end.
	InBurst int     `json:"slo_violations_in_burst"`
	PerBin  []int   `json:"slo_violations_per_bin"`
	Peak    int     `json:"peak_replicas"`
	Cost    float64 `json:"cost_usd"`
	run     *results.Run
	Size    []results.SizePoint `json:"-"`
}

// The premise's burst: premiseBase of the first setup's first workload at its own rate, the next premiseSqueeze of
// it in premiseBurst (three times the rate), then premiseBase more at its own rate; violations are counted per
// premiseBin of arrivals.
const (
	premiseBase    = 10 * time.Minute
	premiseBurst   = 5 * time.Minute
	premiseSqueeze = 3
	premiseBin     = 10 * time.Second
	premiseTail    = 2 * time.Minute
	// premiseTarget is both autoscalers' target in the burst, outstanding requests a replica: one at which each
	// scales out within it (the study's own targets on the steady hours are often ones that never scale).
	premiseTarget = 32.0
)

// premiseStrategies are the premise figure's two: scaling out on queues, and morphing with scaling out only for
// what morphing cannot absorb.
var premiseStrategies = []string{"fp16+hpa", "morph:default+morph-aware"}

// premiseTrace is the burst built from t: its first premiseBase, the following premiseSqueeze × premiseBurst
// arriving within premiseBurst, then the premiseBase after those.
func premiseTrace(t *trace.Trace) (*trace.Trace, error) {
	base, burst := premiseBase.Seconds(), premiseBurst.Seconds()
	before, err := trace.Window(t, 0, base)
	if err != nil {
		return nil, err
	}
	squeezed, err := trace.Window(t, base, premiseSqueeze*burst)
	if err != nil {
		return nil, err
	}
	if squeezed, err = trace.TimeScale(squeezed, 1.0/premiseSqueeze); err != nil {
		return nil, err
	}
	after, err := trace.Window(t, base+premiseSqueeze*burst, base)
	if err != nil {
		return nil, err
	}
	out := *before
	out.Requests = slices.Clone(before.Requests)
	for _, part := range []struct {
		t  *trace.Trace
		at float64
	}{{squeezed, base}, {after, base + burst}} {
		for _, r := range part.t.Requests {
			r.Arrival += part.at
			out.Requests = append(out.Requests, r)
		}
	}
	out.Transforms = append(slices.Clone(out.Transforms), fmt.Sprintf("premise-burst=%gs+%gs*%d", base, burst, premiseSqueeze))
	return &out, nil
}

// runPremise runs the premise's burst through fp16 with the HPA and morph:default with the morph-aware controller
// at each delay, on the first setup and workload at its own rate: each starts with its policy's smallest fixed
// fleet for the burst's first ten minutes, both at premiseTarget.
func (r *FleetReport) runPremise(ctx context.Context) ([]*PremiseRun, error) {
	s, w := r.Options.Setups[0], r.Workloads[0]
	t, err := trace.Clip(w.Trace, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput})
	if err != nil {
		return nil, err
	}
	if t, err = premiseTrace(t); err != nil {
		return nil, err
	}
	g := newFleetGroup(s, w, 1, t)
	var out []*PremiseRun
	for _, delay := range r.Options.Delays {
		for _, st := range premiseStrategies {
			policy, controller := splitStrategy(st)
			n, err := g.start(ctx, policy)
			if err != nil {
				return nil, err
			}
			run, err := simFleet(ctx, studyGoal, s, policy, n, premiseTarget, controller, delay, t, true)
			if err != nil {
				return nil, err
			}
			p := &PremiseRun{Strategy: st, Delay: delay, Target: premiseTarget, Start: n, Violations: run.Aggregates.SLOViolations, Cost: run.Fleet.Cost,
				Size: run.Fleet.Size}
			bins := int(math.Ceil((2*premiseBase + premiseBurst).Seconds() / premiseBin.Seconds()))
			p.PerBin = make([]int, bins)
			for _, q := range run.Requests {
				if q.TTFT <= float64(SLO.TTFT.Milliseconds()) && (q.Finish == "stop" || q.Finish == "length") {
					continue
				}
				p.PerBin[min(bins-1, int(q.Arrival/premiseBin.Seconds()))]++
				if q.Arrival >= premiseBase.Seconds() && q.Arrival < (premiseBase+premiseBurst+premiseTail).Seconds() {
					p.InBurst++
				}
			}
			for _, sp := range run.Fleet.Size {
				p.Peak = max(p.Peak, sp.Serving+sp.Provisioning+sp.Draining)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Write writes fleet.md, fleet.json, each chosen fleet's results and plot, the cost-against-quality plot of each
// delay and the premise figure.
func (r *FleetReport) Write() error {
	out := r.Options.Out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range r.Cells {
		dir := DirName(c.Strategy)
		if c.Delay > 0 {
			dir += "-" + c.Delay.String()
		}
		base := filepath.Join(out, c.Setup, fmt.Sprintf("%s-%gx", c.Workload, c.Rate), dir)
		if err := c.run.Write(base, nil); err != nil {
			return err
		}
		if err := PlotFleet(filepath.Join(base, "fleet"), c.run); err != nil {
			return err
		}
	}
	for _, d := range r.Options.Delays {
		if err := r.plotCostQuality(filepath.Join(out, "cost-vs-quality-"+d.String()), d); err != nil {
			return err
		}
	}
	if err := r.plotPremise(filepath.Join(out, "premise")); err != nil {
		return err
	}
	return writeSummary(out, "fleet", r.WriteSummary, r)
}

// paretoFront are the strategies no other beats on both cost and quality loss (nor equals on one and beats on
// the other), by increasing loss.
func paretoFront(m map[string]FleetMeans) []string {
	var front []string
	for a, ma := range m {
		dominated := false
		for b, mb := range m {
			if a != b && mb.Cost <= ma.Cost && mb.Loss <= ma.Loss && (mb.Cost < ma.Cost || mb.Loss < ma.Loss) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, a)
		}
	}
	slices.SortFunc(front, func(a, b string) int {
		if c := cmpFloat(m[a].Loss, m[b].Loss); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return front
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// plotCostQuality draws each strategy's geometric-mean cost relative to fp16+hpa against its quality loss at a
// delay, the Pareto front joined by a line.
func (r *FleetReport) plotCostQuality(base string, delay time.Duration) error {
	p := newPlot(fmt.Sprintf("cost against quality loss, provisioning delay %v", delay), "quality loss (% of perplexity, geometric mean)",
		"cost / fp16+hpa (geometric mean)")
	m := r.Means(delay)
	for i, st := range FleetStrategies {
		if v, ok := m[st]; ok {
			if err := addScatter(p, st, i, plotter.XYs{{X: 100 * v.Loss, Y: v.Cost}}, 4); err != nil {
				return err
			}
		}
	}
	var front plotter.XYs
	for _, st := range paretoFront(m) {
		front = append(front, plotter.XY{X: 100 * m[st].Loss, Y: m[st].Cost})
	}
	if len(front) > 0 {
		if _, err := addLine(p, "Pareto front", len(FleetStrategies), front, true); err != nil {
			return err
		}
	}
	padAxes(p, markerPad)
	return save(base, p)
}

// plotPremise draws, a panel a delay, the violations per premiseBin of arrivals over the premise's burst of each
// of its strategies, and their replicas provisioning.
func (r *FleetReport) plotPremise(base string) error {
	var plots []*plot.Plot
	for _, d := range r.Options.Delays {
		p := newPlot(fmt.Sprintf("one burst, provisioning delay %v: violations (solid), replicas provisioning (dashed)", d), "time (s)",
			fmt.Sprintf("violations per %v / replicas", premiseBin))
		i := 0
		for _, pr := range r.Premise {
			if pr.Delay != d {
				continue
			}
			var viol, prov plotter.XYs
			for b, n := range pr.PerBin {
				viol = append(viol, plotter.XY{X: float64(b) * premiseBin.Seconds(), Y: float64(n)})
			}
			for _, sp := range pr.Size {
				prov = append(prov, plotter.XY{X: sp.T, Y: float64(sp.Provisioning)})
			}
			if err := addSteps(p, pr.Strategy, i, viol, false); err != nil {
				return err
			}
			if err := addSteps(p, pr.Strategy+" provisioning", i, prov, true); err != nil {
				return err
			}
			i++
		}
		p.Y.Min = 0
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return nil
	}
	return save(base, plots...)
}

// WriteSummary writes the headline tables (each strategy's geometric means at each delay), the verdict on the
// morph-aware controller, where each strategy wins, the premise's burst and a table per setup.
func (r *FleetReport) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "# Fleets: morphing and scaling out, at equal SLO\n\n"+
		"The cheapest fleet of each strategy keeping TTFT-SLO violations <= %.0f%% and P95 TTFT <= %v on the whole hour of each "+
		"Azure 2023 trace, at its real rate and twice it (experiments/suite.FleetStudy), the autoscaled ones at each provisioning delay. "+
		"An autoscaled fleet keeps a floor, the fleet for the first ten minutes or the hour's fixed fleet, and its target is the "+
		"cheapest that meets, searched down from the highest of %g to %g outstanding requests a replica. "+
		"Cost: replica-hours at the catalog's on-demand prices, relative to fp16 with the HPA rule at the same delay; quality loss "+
		"token-weighted on Table 8's curves. Geometric means over the cells where the strategy and fp16+hpa both meet the SLO "+
		"(quality loss: of the perplexity ratio; violations: the mean).\n\n", 100*FleetViolations, FleetP95, fleetTargets[0], fleetTargets[len(fleetTargets)-1])
	for _, wl := range r.Workloads {
		if wl.StandIn != "" {
			fmt.Fprintf(w, "Note: %s.\n\n", wl.StandIn)
		}
	}
	for _, d := range r.Options.Delays {
		m := r.Means(d)
		front := paretoFront(m)
		fmt.Fprintf(w, "## Provisioning delay %v\n\n", d)
		var rows [][]string
		for _, st := range FleetStrategies {
			v, ok := m[st]
			if !ok {
				rows = append(rows, []string{st, "n/a", "", "", "", "0", ""})
				continue
			}
			mark := ""
			if slices.Contains(front, st) {
				mark = "yes"
			}
			rows = append(rows, []string{st, fmt.Sprintf("%.2fx", v.Cost), fmt.Sprintf("%.2f%%", 100*v.Loss), fmt.Sprintf("%.2f%%", 100*v.Violations),
				fmt.Sprintf("%.0f", v.P95TTFT), fmt.Sprint(v.Cells), mark})
		}
		if err := mdtable.Write(w, []string{"strategy", "cost / fp16+hpa", "quality loss", "violations", "P95 TTFT ms", "cells", "Pareto"}, rows); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n![cost against quality](cost-vs-quality-%v.png)\n\n%s\n", d, r.wins(d))
	}
	r.writeVerdict(w)
	r.writePremise(w)
	for _, s := range r.Options.Setups {
		fmt.Fprintf(w, "\n## %s\n\n", s.Name)
		var rows [][]string
		for _, c := range r.Cells {
			if c.Setup != s.Name {
				continue
			}
			size := fmt.Sprint(c.Replicas)
			if c.Target > 0 {
				size = fmt.Sprintf("%d-%d (target %g)", c.Replicas, c.PeakReplicas, c.Target)
			}
			meet := ""
			if !c.Meets {
				meet = " (SLO not met)"
			}
			rel := ""
			if base := r.cell(c.Setup, c.Workload, c.Rate, FleetStrategies[0], c.Delay); base != nil && base.Cost > 0 && c.Delay > 0 {
				rel = fmt.Sprintf("%.2fx", c.Cost/base.Cost)
			}
			delay := "any"
			if c.Delay > 0 {
				delay = c.Delay.String()
			}
			rows = append(rows, []string{c.Workload, fmt.Sprintf("%gx", c.Rate), c.Strategy + meet, delay, size, fmt.Sprintf("%.1f", c.ReplicaHours),
				fmt.Sprintf("$%.2f", c.Cost), rel, fmt.Sprintf("%.2f%%", 100*c.Violations), fmt.Sprintf("%.0f", c.P95TTFT), fmt.Sprintf("%.3f%%", 100*c.Loss)})
		}
		if err := mdtable.Write(w, []string{"trace", "rate", "strategy", "delay", "replicas", "replica-hours", "cost", "cost / fp16+hpa",
			"SLO viol.", "P95 TTFT ms", "quality loss"}, rows); err != nil {
			return err
		}
	}
	return nil
}

// wins says at a delay which strategy is the cheapest that meets the SLO in how many cells, and how often the
// autoscaled strategies scaled out at all.
func (r *FleetReport) wins(delay time.Duration) string {
	count := map[string]int{}
	var groups []string
	for _, c := range r.Cells {
		key := fmt.Sprintf("%s|%s|%g", c.Setup, c.Workload, c.Rate)
		if slices.Contains(groups, key) {
			continue
		}
		groups = append(groups, key)
		var best *FleetCell
		for _, st := range FleetStrategies {
			if x := r.cell(c.Setup, c.Workload, c.Rate, st, delay); x != nil && x.Meets && (best == nil || x.Cost < best.Cost) {
				best = x
			}
		}
		if best != nil {
			count[best.Strategy]++
		}
	}
	var parts []string
	for _, st := range FleetStrategies {
		if count[st] > 0 {
			parts = append(parts, fmt.Sprintf("%s in %d", st, count[st]))
		}
	}
	var scaled []string
	for _, st := range FleetStrategies {
		if _, controller := splitStrategy(st); controller == "" {
			continue
		}
		n, of, extra := 0, 0, 0.0
		for _, c := range r.Cells {
			if c.Strategy == st && c.Delay == delay {
				of++
				if c.PeakReplicas > c.Replicas {
					n++
				}
				if fixed := r.cell(c.Setup, c.Workload, c.Rate, strings.Split(st, "+")[0], 0); fixed != nil && fixed.Cost > 0 {
					extra = max(extra, c.Cost/fixed.Cost)
				}
			}
		}
		scaled = append(scaled, fmt.Sprintf("%s scaled out in %d of %d cells (at most %.2fx its policy's fixed fleet's cost)", st, n, of, extra))
	}
	return fmt.Sprintf("Cheapest that meets the SLO, by cell: %s of %d. %s.\n", strings.Join(parts, ", "), len(groups), strings.Join(scaled, "; "))
}

// verdictDelay is the delay the morph-aware controller is judged at.
const verdictDelay = 2 * time.Minute

// writeVerdict checks the morph-aware controllers at verdictDelay against their fixed fleets cell by cell and,
// in geometric mean, against static:int4's cost and a quarter of its quality loss.
func (r *FleetReport) writeVerdict(w io.Writer) {
	if !slices.Contains(r.Options.Delays, verdictDelay) {
		return
	}
	fmt.Fprintf(w, "## The morph-aware controller at a %v delay\n\n", verdictDelay)
	m := r.Means(verdictDelay)
	int4 := m["static:int4"]
	for _, st := range FleetStrategies {
		policy, controller := splitStrategy(st)
		if controller != "morph-aware" {
			continue
		}
		var over []string
		for _, c := range r.Cells {
			if c.Strategy != st || c.Delay != verdictDelay {
				continue
			}
			fixed := r.cell(c.Setup, c.Workload, c.Rate, policy, 0)
			if fixed != nil && (c.Cost > fixed.Cost || !c.Meets && fixed.Meets) {
				over = append(over, fmt.Sprintf("%s %s %gx: $%.2f (%d-%d replicas, target %g, %.2f%% violations) against the fixed %d's $%.2f: %s",
					c.Setup, c.Workload, c.Rate, c.Cost, c.Replicas, c.PeakReplicas, c.Target, 100*c.Violations, fixed.Replicas, fixed.Cost, overCause(c, fixed)))
			}
		}
		v, ok := m[st]
		switch {
		case !ok:
			fmt.Fprintf(w, "- %s meets the SLO in no cell where fp16+hpa does.\n", st)
		default:
			fmt.Fprintf(w, "- %s: %.2fx fp16+hpa's cost (static:int4 %.2fx: %s), quality loss %.2f%% (a quarter of static:int4's is %.2f%%: %s); ",
				st, v.Cost, int4.Cost, verdictWord(v.Cost < int4.Cost), 100*v.Loss, 25*int4.Loss, verdictWord(v.Loss <= int4.Loss/4))
		}
		if len(over) == 0 {
			fmt.Fprintf(w, "no more than the fixed %s fleet in every cell.\n", policy)
		} else {
			fmt.Fprintf(w, "more than the fixed %s fleet in %d cells: %s.\n", policy, len(over), strings.Join(over, "; "))
		}
		if ok && v.Cost >= int4.Cost {
			r.writeAboveInt4(w, st)
		}
	}
	fmt.Fprintln(w)
}

// writeAboveInt4 lists, for a morph-aware strategy whose mean cost is not below static:int4's, the cells where it
// costs more than static:int4 by over planTie (a run's last minutes make pennies of difference), each with its
// fixed fleet's size beside static:int4's: the controller adds no replica to the fixed fleet where the hour is
// steady, so a cell costs more where the fixed morphing fleet is larger.
func (r *FleetReport) writeAboveInt4(w io.Writer, st string) {
	policy, _ := splitStrategy(st)
	var above []string
	larger := 0
	for _, c := range r.Cells {
		if c.Strategy != st || c.Delay != verdictDelay {
			continue
		}
		int4, fixed := r.cell(c.Setup, c.Workload, c.Rate, "static:int4", 0), r.cell(c.Setup, c.Workload, c.Rate, policy, 0)
		if int4 == nil || fixed == nil || !beats(int4.Cost, c.Cost) {
			continue
		}
		if fixed.Replicas > int4.Replicas {
			larger++
		}
		above = append(above, fmt.Sprintf("%s %s %gx: $%.2f (%d-%d replicas; the fixed %s fleet %d) against static:int4's %d at $%.2f",
			c.Setup, c.Workload, c.Rate, c.Cost, c.Replicas, c.PeakReplicas, policy, fixed.Replicas, int4.Replicas, int4.Cost))
	}
	fmt.Fprintf(w, "  It costs over %.0f%% more than static:int4 in %d cells, in %d of them because the fixed %s fleet itself needs more replicas "+
		"than static:int4's (its swaps, made under pressure, lag load that a fleet quantized from the start serves): %s.\n",
		100*planTie, len(above), larger, policy, strings.Join(above, "; "))
}

// overCause says, from a morph-aware cell's figures and its fixed fleet's, why it costs more or misses the SLO.
func overCause(c, fixed *FleetCell) string {
	if !c.Meets {
		return fmt.Sprintf("it misses the SLO even at the lowest target, from the first ten minutes' fleet of %d and from the hour's fixed fleet", c.Replicas)
	}
	return fmt.Sprintf("from a floor of %d it scaled out to %d for load beyond the swaps that the fixed fleet of %d rode out within the SLO",
		c.Replicas, c.PeakReplicas, fixed.Replicas)
}

func verdictWord(ok bool) string {
	if ok {
		return "below"
	}
	return "not below"
}

// writePremise tabulates the premise's burst: each strategy's violations at each delay.
func (r *FleetReport) writePremise(w io.Writer) {
	if len(r.Premise) == 0 {
		return
	}
	fmt.Fprintf(w, "## One burst while replicas provision\n\n%s's %s at its own rate: %v, then %d times its rate for %v, then %v more "+
		"(the premise figure, premise.png). Each fleet starts with its policy's smallest fixed fleet for the first ten minutes, at "+
		"a target of %g outstanding requests a replica. Violations: all, and of the requests arriving from the burst's start "+
		"to %v after its end.\n\n", r.Options.Setups[0].Name, r.Workloads[0].Name, premiseBase, premiseSqueeze, premiseBurst, premiseBase, premiseTarget, premiseTail)
	var rows [][]string
	for _, p := range r.Premise {
		rows = append(rows, []string{p.Delay.String(), p.Strategy, fmt.Sprintf("%d-%d (target %g)", p.Start, p.Peak, p.Target),
			fmt.Sprint(p.InBurst), fmt.Sprint(p.Violations), fmt.Sprintf("$%.2f", p.Cost)})
	}
	mdtable.Write(w, []string{"delay", "strategy", "replicas", "violations in the burst", "violations", "cost"}, rows)
	fmt.Fprintln(w)
}
