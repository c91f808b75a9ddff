package suite

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/experiments/results"
)

func newTable(w io.Writer, header ...any) *tablewriter.Table {
	t := tablewriter.NewTable(w, tablewriter.WithRenderer(renderer.NewMarkdown()), tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft), tablewriter.WithRowAutoWrap(tw.WrapNone))
	t.Header(header...)
	return t
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func pct3(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.3f%%", 100*v)
}

// writeCellTable writes one setup and workload's policies side by side.
func writeCellTable(path string, cells []*Cell) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	t := newTable(f, "policy", "TTFT P50 ms", "TTFT P95 ms", "TTFT P99 ms", "SLO viol.", "TPOT P95 ms", "TPOT P99 ms",
		"req/s", "goodput", "preempt.", "peak KV / FP16 pool", "full-prec. tokens", "quality loss")
	for _, c := range cells {
		a := c.Run.Aggregates
		if err := t.Append(c.Policy, f1(a.TTFT.Median), f1(a.TTFT.P95), f1(a.TTFT.P99), pct(a.SLOViolationRate), f1(a.TPOT.P95),
			f1(a.TPOT.P99), fmt.Sprintf("%.2f", a.RequestThroughput), fmt.Sprintf("%.2f", a.RequestGoodput), fmt.Sprint(a.Preemptions),
			fmt.Sprintf("%d / %d", a.PeakKVBlocks, c.Run.Meta.KVBlocksFull), pct(a.FullPrecision), pct3(c.Loss)); err != nil {
			f.Close()
			return err
		}
	}
	if err := t.Render(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// mean averages of over a policy's cells (NaN when any is NaN or there is none).
func (r *Report) mean(policy string, of func(*Cell) float64) float64 {
	var v []float64
	for _, c := range r.Cells {
		if c.Policy == policy {
			v = append(v, of(c))
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	return stat.Mean(v, nil)
}

// Headline is the comparison with the paper's published figures.
type Headline struct {
	// ViolationCut is 1 - morph:default's TTFT-SLO violations / fp16's, pooled over the setups and workloads.
	ViolationCut float64 `json:"violation_cut"`
	// P95Ratio is each morph mode's P95 TTFT against fp16's (fp16 / mode), the geometric mean over the cells.
	P95Ratio map[string]float64 `json:"p95_ttft_ratio"`
	// LossRatio is each morph mode's quality loss over static:int4's, the mean over the cells.
	LossRatio map[string]float64 `json:"quality_loss_ratio"`
	// Bound lists the setup/workload cells where fp16 misses the SLO and static:int4 — every layer in INT4, so
	// the most KV and the fastest decode any policy reaches — misses it as often or more: compute-bound loads,
	// which more memory does not serve and only faster prefill (INT8 layers, W8A8) does. BoundViolations is fp16's violations in them, of
	// FP16Violations in all, and CutElsewhere the violation cut over the other cells.
	Bound           []string `json:"precision_bound_cells"`
	BoundViolations int      `json:"precision_bound_fp16_violations"`
	FP16Violations  int      `json:"fp16_violations"`
	CutElsewhere    float64  `json:"violation_cut_elsewhere"`
	// Cuts are each policy's TTFT-SLO violation cut against fp16 three ways (every policy run but fp16).
	Cuts map[string]Cut `json:"violation_cuts"`
}

// Cut is a policy's TTFT-SLO violation cut against fp16, 1 - its violations / fp16's: pooled over every cell, over
// the memory-bound cells (every cell but the compute-bound ones: static:int4, with the most KV, misses the SLO less
// often than fp16, or fp16 does not miss it) and over the compute-bound ones (Headline.Bound). NaN where fp16 has
// no violation.
type Cut struct {
	Pooled  float64 `json:"pooled"`
	Memory  float64 `json:"memory_bound"`
	Compute float64 `json:"compute_bound"`
}

// Headline computes the headline figures over the cells.
func (r *Report) Headline() Headline {
	h := Headline{P95Ratio: map[string]float64{}, LossRatio: map[string]float64{}, Cuts: map[string]Cut{}}
	violations := func(c *Cell) int { return c.Run.Aggregates.SLOViolations }
	h.ViolationCut, h.FP16Violations = r.pooledCut(violations)
	for _, c := range r.Cells {
		if c.Policy == "fp16" && r.Cell(c.Setup.Name, c.Workload, "morph:default") != nil && r.computeBound(c.Setup.Name, c.Workload) {
			h.Bound = append(h.Bound, c.Setup.Name+"/"+c.Workload)
			h.BoundViolations += c.Run.Aggregates.SLOViolations
		}
	}
	for _, p := range r.Options.Policies {
		if p != "fp16" {
			h.Cuts[p] = r.cut(p)
		}
	}
	h.CutElsewhere = math.NaN()
	if c, ok := h.Cuts["morph:default"]; ok {
		h.CutElsewhere = c.Memory // the memory-bound cells are the others
	}
	for _, mode := range r.Options.Policies {
		if !strings.HasPrefix(mode, "morph:") {
			continue
		}
		var logs []float64
		for _, c := range r.Cells {
			if c.Policy != mode {
				continue
			}
			if f := r.Cell(c.Setup.Name, c.Workload, "fp16"); f != nil && c.Run.Aggregates.TTFT.P95 > 0 {
				logs = append(logs, math.Log(f.Run.Aggregates.TTFT.P95/c.Run.Aggregates.TTFT.P95))
			}
		}
		h.P95Ratio[mode], h.LossRatio[mode] = math.NaN(), r.lossRatio(mode)
		if len(logs) > 0 {
			h.P95Ratio[mode] = math.Exp(stat.Mean(logs, nil))
		}
	}
	return h
}

// pooledCut is morph:default's violation cut against fp16 pooled over the cells (NaN where fp16 has none), each
// cell's violations counted by violations, and fp16's count.
func (r *Report) pooledCut(violations func(*Cell) int) (float64, int) {
	var vf, vm int
	for _, c := range r.Cells {
		switch c.Policy {
		case "fp16":
			vf += violations(c)
		case "morph:default":
			vm += violations(c)
		}
	}
	if vf == 0 {
		return math.NaN(), 0
	}
	return 1 - float64(vm)/float64(vf), vf
}

// computeBound reports whether fp16 misses the SLO in a setup and workload and static:int4 misses it as often or
// more: a load that more memory does not serve.
func (r *Report) computeBound(setup, workload string) bool {
	f, s := r.Cell(setup, workload, "fp16"), r.Cell(setup, workload, "static:int4")
	return f != nil && s != nil && f.Run.Aggregates.SLOViolations > 0 && s.Run.Aggregates.SLOViolations >= f.Run.Aggregates.SLOViolations
}

// cut is a policy's Cut over the cells where fp16 ran too.
func (r *Report) cut(policy string) Cut {
	var f, p [3]float64 // pooled, memory-bound, compute-bound
	for _, c := range r.Cells {
		if c.Policy != policy {
			continue
		}
		fc := r.Cell(c.Setup.Name, c.Workload, "fp16")
		if fc == nil {
			continue
		}
		kind := 1
		if r.computeBound(c.Setup.Name, c.Workload) {
			kind = 2
		}
		for _, i := range []int{0, kind} {
			f[i] += float64(fc.Run.Aggregates.SLOViolations)
			p[i] += float64(c.Run.Aggregates.SLOViolations)
		}
	}
	var cut [3]float64
	for i := range cut {
		cut[i] = math.NaN()
		if f[i] > 0 {
			cut[i] = 1 - p[i]/f[i]
		}
	}
	return Cut{cut[0], cut[1], cut[2]}
}

// FormatRatio formats a ratio cut (not rounded) to two decimals, so that one shown at a bar is at it.
func FormatRatio(v float64) string { return fmt.Sprintf("%.2fx", math.Floor(v*100)/100) }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// WriteSummary writes summary.md.
func (r *Report) WriteSummary(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# MorphServe's comparison, reproduced\n\n")
	fmt.Fprintf(b, "Simulated with the sim executor (cost model fitted to Vidur's A100 operator profiles), TTFT SLO %v, "+
		"every policy's parameters fixed in engine/morph. Each run's files are under `<setup>/<workload>/<policy>/`.\n\n", SLO.TTFT)
	fmt.Fprintf(b, "## Inputs\n\n")
	stand := false
	for _, wl := range r.Workloads {
		switch {
		case wl.PerSetup:
			fmt.Fprintf(b, "- %s: sized to each setup: %s in multiples of its fp16 capacity (the highest Poisson rate at which fp16 keeps P95 TTFT within the SLO, %d s simulated), log-normal prompts and outputs with medians at half the setup's limits, 72 s, seed %d:",
				wl.Name, burstShape, capacityProbe, r.Options.BurstSeed)
			for i, s := range r.Options.Setups {
				sep := ","
				if i == 0 {
					sep = ""
				}
				fmt.Fprintf(b, "%s %s %.2f req/s (%d requests)", sep, s.Name, r.Capacity[s.Name], len(r.Bursts[s.Name].Requests))
			}
			fmt.Fprintf(b, "\n")
		case wl.StandIn != "":
			stand = true
			fmt.Fprintf(b, "- %s: **stand-in**: %s\n", wl.Name, wl.StandIn)
		default:
			fmt.Fprintf(b, "- %s: %s, %d requests (%s)\n", wl.Name, wl.Trace.Source, len(wl.Trace.Requests), strings.Join(wl.Trace.Transforms, " "))
		}
	}
	if stand {
		fmt.Fprintf(b, "\nStand-ins replay where a trace file is missing: run `make data` for the real traces.\n")
	}
	h := r.Headline()
	fmt.Fprintf(b, "\n## Headline\n\n")
	t := newTable(b, "figure", "here", "paper", "target", "met")
	rows := [][]any{
		{"TTFT-SLO violations cut, morph:default vs fp16 (pooled)", pct(h.ViolationCut), "92.45% (average)", ">= 85%", yes(h.ViolationCut >= 0.85)},
		{"P95 TTFT fp16 / morph:accuracy (geometric mean)", FormatRatio(h.P95Ratio["morph:accuracy"]), "2.2-3.9x", ">= 2x", yes(h.P95Ratio["morph:accuracy"] >= 2)},
		{"P95 TTFT fp16 / morph:default", FormatRatio(h.P95Ratio["morph:default"]), "2.9-15.7x", "", ""},
		{"P95 TTFT fp16 / morph:performance", FormatRatio(h.P95Ratio["morph:performance"]), "3.4-19.5x", "", ""},
		{"quality loss morph:default / static:int4", pct(h.LossRatio["morph:default"]), "up to 88.85% less (F1/ROUGE-L)", "<= 40%", yes(h.LossRatio["morph:default"] <= 0.4)},
		{"quality loss morph:accuracy / static:int4", pct(h.LossRatio["morph:accuracy"]), "", "<= 40%", yes(h.LossRatio["morph:accuracy"] <= 0.4)},
	}
	if c, ok := h.Cuts["morph:compute"]; ok {
		rows = append(rows,
			[]any{"TTFT-SLO violations cut, morph:compute vs fp16 (pooled)", pct(c.Pooled), "", ">= 85%", yes(c.Pooled >= 0.85)},
			[]any{"quality loss morph:compute / static:int4", pct(h.LossRatio["morph:compute"]), "", "<= 40%", yes(h.LossRatio["morph:compute"] <= 0.4)})
	}
	for _, row := range rows {
		if err := t.Append(row...); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if len(h.Bound) > 0 {
		fmt.Fprintf(b, "\n%d of fp16's %d pooled violations are in cells where static:int4, every layer quantized (the most KV "+
			"and the fastest decode INT4 reaches), misses the SLO as often or more: loads that more memory does not serve, "+
			"compute-bound (%s). Over the other cells morph:default cuts fp16's violations by %s.\n",
			h.BoundViolations, h.FP16Violations, strings.Join(h.Bound, ", "), pct(h.CutElsewhere))
	}
	if err := r.writeCuts(b, h); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nQuality here is the token-weighted relative perplexity increase from the paper's Table 8 LIS curves, "+
		"not F1/ROUGE-L (the paper's headline metric), so the quality row compares like with like only as a ratio. "+
		"INT8 layers take published W8A8 figures (see Quality at paper scale below).\n")
	fmt.Fprintf(b, "\n## Policies, mean over setups and workloads\n\n")
	t = newTable(b, "policy", "SLO violations", "P95 TTFT ms", "P99 TPOT ms", "goodput req/s", "full-prec. tokens", "quality loss")
	for _, p := range r.Options.Policies {
		if err := t.Append(p, pct(r.mean(p, func(c *Cell) float64 { return c.Run.Aggregates.SLOViolationRate })),
			f1(r.mean(p, func(c *Cell) float64 { return c.Run.Aggregates.TTFT.P95 })),
			f1(r.mean(p, func(c *Cell) float64 { return c.Run.Aggregates.TPOT.P99 })),
			fmt.Sprintf("%.2f", r.mean(p, func(c *Cell) float64 { return c.Run.Aggregates.RequestGoodput })),
			pct(r.mean(p, func(c *Cell) float64 { return c.Run.Aggregates.FullPrecision })),
			pct3(r.mean(p, func(c *Cell) float64 { return c.Loss }))); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nPlot: `pareto.png` (violations against quality loss). Per setup and workload: `table.md`, "+
		"`ttft-over-time.png`, `kv-over-time.png`, `ttft-cdf.png`, `tpot-cdf.png` (and SVG).\n")
	fmt.Fprintf(b, "\n## Per setup and workload: SLO violations, fp16 -> morph:default (P95 TTFT ms)\n\n")
	cols := []string{"fp16", "static:int8", "static:int4", "morph:accuracy", "morph:default", "morph:performance", "morph:compute"}
	t = newTable(b, append([]any{"setup", "workload"}, anys(cols)...)...)
	for _, s := range r.Options.Setups {
		for _, wl := range r.Workloads {
			row := []any{s.Name, wl.Name}
			for _, p := range cols {
				if c := r.Cell(s.Name, wl.Name, p); c != nil {
					row = append(row, fmt.Sprintf("%s (%.0f)", pct(c.Run.Aggregates.SLOViolationRate), c.Run.Aggregates.TTFT.P95))
				} else {
					row = append(row, "")
				}
			}
			if err := t.Append(row...); err != nil {
				return err
			}
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if err := r.writePareto(b); err != nil {
		return err
	}
	if err := r.writeTable5(b); err != nil {
		return err
	}
	if err := r.writeQualitySources(b); err != nil {
		return err
	}
	if err := r.writePrefix(b, h); err != nil {
		return err
	}
	fmt.Fprintf(b, "\n## Rate sweep (the paper's Fig. 6): %s, %s\n\n", sweepSetup(r.Options.Setups).Name, r.Workloads[0].Name)
	t = newTable(b, "policy", "rate x", "req/s asked", "throughput", "goodput", "SLO viol.", "P95 TTFT ms")
	for _, s := range r.Sweep {
		if err := t.Append(s.Policy, fmt.Sprintf("%g", s.Multiplier), fmt.Sprintf("%.2f", s.Rate), fmt.Sprintf("%.2f", s.Throughput),
			fmt.Sprintf("%.2f", s.Goodput), pct(s.Violations), f1(s.P95TTFT)); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nPlot: `rate-sweep.png`.\n")
	if r.Sensitivity != "" {
		fmt.Fprintf(b, "\n%s", r.Sensitivity)
	}
	if len(r.Real) > 0 {
		if err := r.writeReal(b); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// point is a policy's (violation rate, quality loss) on one setup, averaged over its workloads.
type point struct{ viol, loss float64 }

// setupPoint averages a policy's cells on one setup.
func (r *Report) setupPoint(setup, policy string) (point, bool) {
	var v, l []float64
	for _, c := range r.Cells {
		if c.Setup.Name == setup && c.Policy == policy {
			v, l = append(v, c.Run.Aggregates.SLOViolationRate), append(l, c.Loss)
		}
	}
	if len(v) == 0 {
		return point{}, false
	}
	return point{stat.Mean(v, nil), stat.Mean(l, nil)}, true
}

// dominates reports whether a is at least as good as b on both axes and better on one.
func (a point) dominates(b point) bool {
	return a.viol <= b.viol && a.loss <= b.loss && (a.viol < b.viol || a.loss < b.loss)
}

// writePareto judges the policies beyond the paper on each setup: whether any of the paper's policies dominates
// them (they should lie on or beyond that Pareto front), and whether they dominate morph:default.
func (r *Report) writePareto(b io.Writer) error {
	var beyond []string
	for _, p := range r.Options.Policies {
		if !slices.Contains(paperPolicies, p) {
			beyond = append(beyond, p)
		}
	}
	if len(beyond) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\n## Beyond the paper: the Pareto front of (SLO violations, quality loss), per setup\n\n")
	t := newTable(b, "setup", "policy", "SLO viol.", "quality loss", "dominated by", "dominates morph:default")
	wins := map[string]int{}
	for _, s := range r.Options.Setups {
		def, okDef := r.setupPoint(s.Name, "morph:default")
		for _, p := range beyond {
			pt, ok := r.setupPoint(s.Name, p)
			if !ok {
				continue
			}
			var by []string
			for _, q := range paperPolicies {
				if qp, ok := r.setupPoint(s.Name, q); ok && !math.IsNaN(qp.loss) && qp.dominates(pt) {
					by = append(by, q)
				}
			}
			dom := okDef && pt.dominates(def)
			if dom {
				wins[p]++
			}
			if err := t.Append(s.Name, p, pct(pt.viol), pct3(pt.loss), strings.Join(by, ", "), yes(dom)); err != nil {
				return err
			}
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	for _, p := range beyond {
		fmt.Fprintf(b, "\n%s strictly dominates morph:default on %d of %d setups (target: at least 3 of 4).", p, wins[p], len(r.Options.Setups))
	}
	fmt.Fprintln(b)
	return nil
}

// writeTable5 writes the paper's Table 5 rows (Llama-3-8B on the L4, a bursty trace) beside ours.
func (r *Report) writeTable5(b io.Writer) error {
	setup, workload := "llama-3-8b-l4", "burst"
	if r.Cell(setup, workload, "fp16") == nil {
		return nil
	}
	fmt.Fprintf(b, "\n## Table 5: %s, %s\n\n", setup, workload)
	t := newTable(b, "policy", "quality loss", "P95 TTFT s", "SLO viol.", "paper: F1 / P95 TTFT s / viol.")
	paper := map[string]string{"static:int4": "23.66 / 1.62 / 0%", "selective:16": "23.93 / 1.74 / 0%", "selective:8": "24.16 / 2.61 / 4.2%",
		"fp16": "25.19 / 5.65 / 12.7%", "morph:default": "24.63 / 1.77 / 0%", "static:int8": "(not run)", "morph:compute": "(not run)"}
	for _, p := range []string{"static:int4", "static:int8", "selective:16", "selective:8", "fp16", "morph:default", "morph:compute"} {
		c := r.Cell(setup, workload, p)
		if c == nil {
			continue
		}
		a := c.Run.Aggregates
		if err := t.Append(p, pct3(c.Loss), fmt.Sprintf("%.2f", a.TTFT.P95/1000), pct(a.SLOViolationRate), paper[p]); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	m, s8, f := r.Cell(setup, workload, "morph:default"), r.Cell(setup, workload, "selective:8"), r.Cell(setup, workload, "fp16")
	if m != nil && s8 != nil && f != nil {
		order := m.Loss <= s8.Loss && m.Loss >= f.Loss
		fmt.Fprintf(b, "\nOrdering (morph's quality between selective:8 and fp16, violations near 0%%): quality %s, violations %s (%s).\n",
			yes(order), yes(m.Run.Aggregates.SLOViolationRate <= 0.01), pct(m.Run.Aggregates.SLOViolationRate))
	}
	return nil
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// writeCuts writes the violation cut three ways for the static formats and the morph modes that tell pressures
// apart or not.
func (r *Report) writeCuts(b io.Writer, h Headline) error {
	var pols []string
	for _, p := range []string{"static:int8", "static:int4", "morph:default", "morph:compute"} {
		if _, ok := h.Cuts[p]; ok {
			pols = append(pols, p)
		}
	}
	if len(pols) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\n### TTFT-SLO violations cut against fp16, three ways\n\n")
	t := newTable(b, "policy", "pooled", "memory-bound cells", "compute-bound cells", "quality loss / static:int4")
	for _, p := range pols {
		c := h.Cuts[p]
		if err := t.Append(p, pct(c.Pooled), pct(c.Memory), pct(c.Compute), pct(r.lossRatio(p))); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nCompute-bound cells: fp16 misses the SLO and static:int4 misses it as often or more (%s); memory-bound: the others. "+
		"morph:compute answers memory pressure with INT4 layers and compute pressure (a queue that waits for prefill, not blocks) "+
		"with INT8 ones, which run W8A8 at the INT8 peak.\n", strings.Join(h.Bound, ", "))
	return nil
}

// lossRatio is a policy's quality loss over static:int4's, the mean over the cells.
func (r *Report) lossRatio(policy string) float64 {
	var ratios []float64
	for _, c := range r.Cells {
		if s := r.Cell(c.Setup.Name, c.Workload, "static:int4"); c.Policy == policy && s != nil && s.Loss > 0 {
			ratios = append(ratios, c.Loss/s.Loss)
		}
	}
	if len(ratios) == 0 {
		return math.NaN()
	}
	return stat.Mean(ratios, nil)
}

// writeQualitySources writes each paper model's all-layer quality in each kernel and where it comes from.
func (r *Report) writeQualitySources(b io.Writer) error {
	fmt.Fprintf(b, "\n## Quality at paper scale: curves and their sources\n\n"+
		"WikiText-2 perplexity increase with every layer quantized. Int4 layers run W4A16 in the simulator and take MorphServe's "+
		"Table 8 LIS curve; Int8 layers run W8A8 (the INT8 peak) and take Table 8's shape scaled to the W8A8 all-layer figure "+
		"(near-additivity: each layer's cost in the same proportion to its INT4 cost). W8A16 is listed for reference; no policy "+
		"runs it.\n\n")
	t := newTable(b, "model", "kernel", "all layers", "source")
	for _, s := range r.Options.Setups {
		qs, ok := Qualities[s.Model]
		if !ok {
			continue
		}
		for _, k := range []string{"W4A16", "W8A8", "W8A16"} {
			q := qs[k]
			if err := t.Append(s.Model, k, fmt.Sprintf("+%.3f%%", 100*q.Increase), q.Source); err != nil {
				return err
			}
		}
	}
	return t.Render()
}

// writeReal writes the real CPU engine's runs beside the simulator's predictions of them.
func (r *Report) writeReal(b io.Writer) error {
	fmt.Fprintf(b, "\n## The real engine and the simulator\n\n")
	t := newTable(b, "policy", "run", "TTFT P50 ms", "TTFT P95 ms", "TPOT mean ms", "out tok/s", "SLO viol.")
	for _, p := range r.Real {
		for _, x := range []struct {
			name string
			run  *results.Run
		}{{"CPU engine", p.Real}, {"simulator", p.Sim}} {
			a := x.run.Aggregates
			if err := t.Append(p.Policy, x.name, f1(a.TTFT.Median), f1(a.TTFT.P95), f1(a.TPOT.Mean), f1(a.OutputThroughput), pct(a.SLOViolationRate)); err != nil {
				return err
			}
		}
	}
	return t.Render()
}

// summaryJSON is summary.json: the cells' headline aggregates, the headline, the sweep.
func (r *Report) summaryJSON() any {
	type cell struct {
		Setup, Workload, Policy string
		Violations              float64
		P95TTFTms, P99TPOTms    float64
		Goodput, FullPrecision  float64
		QualityLoss             *float64
	}
	var cells []cell
	for _, c := range r.Cells {
		a := c.Run.Aggregates
		cells = append(cells, cell{c.Setup.Name, c.Workload, c.Policy, a.SLOViolationRate, a.TTFT.P95, a.TPOT.P99, a.RequestGoodput,
			a.FullPrecision, finite(c.Loss)})
	}
	h := r.Headline()
	type cut3 struct{ Pooled, MemoryBound, ComputeBound *float64 }
	cuts := map[string]cut3{}
	for p, c := range h.Cuts {
		cuts[p] = cut3{finite(c.Pooled), finite(c.Memory), finite(c.Compute)}
	}
	type prefix struct {
		Setup, Policy         string
		PrefixCaching         bool
		Violations, P95TTFTms float64
		HitRate, Unbounded    float64
		QualityLoss           *float64
	}
	var prefixRuns []prefix
	for _, p := range r.Prefix {
		a := p.Run.Aggregates
		prefixRuns = append(prefixRuns, prefix{p.Setup, p.Policy, p.Caching, a.SLOViolationRate, a.TTFT.P95, a.PrefixHitRate,
			p.Unbounded, finite(p.Loss)})
	}
	return struct {
		Workloads     []Workload
		Capacity      map[string]float64 `json:",omitempty"`
		Cells         []cell
		ViolationCut  *float64
		ViolationCuts map[string]cut3
		P95Ratio      map[string]*float64
		LossRatio     map[string]*float64
		Sweep         []SweepPoint
		Prefix        []prefix `json:",omitempty"`
	}{r.Workloads, r.Capacity, cells, finite(h.ViolationCut), cuts, finiteAll(h.P95Ratio), finiteAll(h.LossRatio), r.Sweep, prefixRuns}
}

// finite is v for JSON: nil (null) for NaN.
func finite(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// finiteAll is finite over a map's values.
func finiteAll(m map[string]float64) map[string]*float64 {
	out := make(map[string]*float64, len(m))
	for k, v := range m {
		out[k] = finite(v)
	}
	return out
}
