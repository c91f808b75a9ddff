// Package suite is the experiment suite of `morphlab reproduce`: MorphServe's comparison — FP16, static INT8 and
// INT4, selective quantization and the morph modes — on the paper's deployments, simulated at paper scale, with a
// rate sweep, Table 5, the layer-sensitivity tables of our real model and the real CPU engine beside the
// simulator's prediction of it.
//
// Setups (PAPER.md section 4): Vicuna-7B v1.5 and Llama-2-7B on an L4 (prompts and responses cut to 512/256),
// Llama-3-8B on an L4 and CodeLlama-34B on an A100 (1024/512), each with the paper's FP16 KV pool in blocks of 16
// (958, 958, 2,599, 3,435). Workloads: the Azure 2023 conversation trace's busiest 72 s and the code trace's 72 s
// from second 1,073 (the window a third party matched to the paper's, 443 requests), both stretched 4.75x as the
// paper "downscales" them; the Mooncake conversation trace's busiest 72 s, stretched 4.75x too (it stands in for
// the paper's second trace, BurstGPT, which is not in the shared data), its whole-second timestamps spread over
// their second first (trace.Spread: tens of requests share each, and replayed as one instant they are a prefill
// burst no INT4 layer serves); and a seeded on/off burst sized to each setup (capacity.go: 2.5x its fp16
// capacity in bursts, a quarter of it between them, the capacity on average), with log-normal lengths at half the
// setup's limits. The headline notes the compute-bound cells (static:int4, with the most KV, misses the SLO as
// often as fp16: more memory does not serve them, faster prefill does) and gives each policy's violation cut
// pooled, over the memory-bound cells and over the compute-bound ones. Where a trace file
// is missing, a seeded synthetic stand-in of the same rate and lengths replays instead, and the report says so.
// TTFT SLO 2 s. Every policy's parameters are fixed in engine/morph before any run: nothing is tuned per trace.
//
// Every run caches prefixes, as vLLM does by default (experiments/deploy), and the Mooncake requests' prompts share
// the tokens their hash ids say they share. On each workload with hash ids the prefix-caching study (prefix.go)
// runs fp16 and morph:default once more without the cache, so that morph is judged against fp16 with the cache as
// well as without it.
//
// Quality at paper scale is the token-weighted relative perplexity increase read off each model's curves
// (Qualities): each output token counts ppl(k)/ppl(0) − 1 for the k layers quantized when it was made, on the curve
// of the kernel its layers run as in the simulator — W4A16 for Int4, Table 8's LIS rows (PaperCurves); W8A8 for
// Int8, Table 8's shape scaled to SmoothQuant's published all-layer figure (W8A8Published, or Share of the INT4
// increase where none is published). A policy with both formats at once counts each layer's step of its format's
// curve by swap position (PositionLoss): the paper's near-additivity.
//
// Output, under Options.Out: <setup>/<workload>/<policy>/ (results.json, events.jsonl, table.md) for each run,
// <setup>/<workload>/table.md with every policy, plots as PNG and SVG, summary.md and summary.json. The simulated
// runs are deterministic: the same inputs give the same files, byte for byte.
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/fidelity"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// Setup is one of the paper's deployments.
type Setup struct {
	Name      string `json:"name"`
	Model     string `json:"model"`     // catalog name
	Device    string `json:"device"`    // catalog name
	KVBlocks  int    `json:"kv_blocks"` // the FP16 pool (PAPER.md: Fig. 5)
	MaxPrompt int    `json:"max_prompt"`
	MaxOutput int    `json:"max_output"`
}

// PaperSetups are the paper's four deployments.
var PaperSetups = []Setup{
	{"vicuna-7b-l4", "vicuna-7b-v1.5", "l4", 958, 512, 256},
	{"llama-2-7b-l4", "llama-2-7b", "l4", 958, 512, 256},
	{"llama-3-8b-l4", "llama-3-8b", "l4", 2599, 1024, 512},
	{"codellama-34b-a100", "codellama-34b", "a100", 3435, 1024, 512},
}

// Policies are the policies every setup and workload runs under.
var Policies = []string{"fp16", "static:int8", "static:int4", "selective:8", "selective:16", "morph:accuracy", "morph:default", "morph:performance",
	"morph:predictive", "morph:slo", "morph:compute"}

// paperPolicies are the policies of the paper's comparison: the Pareto front that the policies beyond the paper
// (morph:predictive, morph:slo) are judged against.
var paperPolicies = []string{"fp16", "static:int8", "static:int4", "selective:8", "selective:16", "morph:accuracy", "morph:default", "morph:performance"}

// SLO is the paper's: TTFT 2 s.
var SLO = metrics.SLO{TTFT: 2e9}

// Workload is a trace the suite replays.
type Workload struct {
	Name    string       `json:"name"`
	Trace   *trace.Trace `json:"-"`                  // nil when PerSetup
	StandIn string       `json:"stand_in,omitempty"` // set when a synthetic trace replays in place of a missing file: why
	// PerSetup marks the burst: each setup replays its own, sized to its fp16 capacity (Report.Bursts).
	PerSetup bool `json:"per_setup,omitempty"`
}

// Options configure a suite run.
type Options struct {
	Out       string
	Data      string   // the data directory ("" when there is none)
	Quick     bool     // two workloads, the morph modes against fp16 and static:int4, a shorter sweep
	TraceFile string   // a user's trace: the only workload
	Policies  []string // default Policies
	Setups    []Setup  // default PaperSetups
	// BurstSeed draws the bursts and the capacity probes that size them (0: DefaultBurstSeed); another seed is a
	// burst the policies' parameters were not chosen on.
	BurstSeed uint64
	// Progress, when set, is called after each simulation with the count done and the total.
	Progress func(done, total int)
}

// Cell is one simulated run.
type Cell struct {
	Setup    Setup        `json:"setup"`
	Workload string       `json:"workload"`
	Policy   string       `json:"policy"`
	Run      *results.Run `json:"-"`
	// Loss is the token-weighted relative perplexity increase (quality; NaN for a model without curves).
	Loss float64 `json:"quality_loss"`
	// events are the run's engine events until Run writes them to events.jsonl.
	events []engine.Event
}

// Report is what a suite run produced.
type Report struct {
	Options   Options    `json:"-"`
	Workloads []Workload `json:"workloads"`
	Cells     []*Cell    `json:"cells"`
	Sweep     []SweepPoint
	// Capacity is each setup's fp16 capacity in requests per second (Capacity), and Bursts the burst it
	// replays, by setup name; both are set only when a workload is PerSetup.
	Capacity map[string]float64      `json:"fp16_capacity_rps,omitempty"`
	Bursts   map[string]*trace.Trace `json:"-"`
	// Set by the caller when it ran them: the sensitivity tables (Sensitivity) and the real engine's runs beside
	// the simulator's (RealEngine).
	Sensitivity string `json:"-"`
	Real        []*fidelity.Pair
	// Prefix is the prefix-caching study's runs (prefix.go): fp16 and morph:default on the workload whose requests
	// share prefixes, with the cache off and (the suite's cells) on, by setup.
	Prefix []*PrefixRun `json:"-"`
}

// Run simulates every setup, workload and policy, and the rate sweep, writing each run under opt.Out.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Policies == nil {
		opt.Policies = Policies
		if opt.Quick {
			opt.Policies = []string{"fp16", "static:int4", "selective:8", "morph:accuracy", "morph:default", "morph:performance"}
		}
	}
	if opt.Setups == nil {
		opt.Setups = PaperSetups
	}
	if opt.BurstSeed == 0 {
		opt.BurstSeed = DefaultBurstSeed
	}
	wls, err := Workloads(opt)
	if err != nil {
		return nil, err
	}
	r := &Report{Options: opt, Workloads: wls}
	specs := make([]morph.Policy, len(opt.Policies))
	for i, p := range opt.Policies {
		if specs[i], err = morph.Parse(p); err != nil {
			return nil, err
		}
	}
	if slices.ContainsFunc(wls, func(w Workload) bool { return w.PerSetup }) {
		if err := r.sizeBursts(ctx); err != nil {
			return nil, err
		}
	}
	sweep := sweepFactors(opt.Quick)
	total, done := len(opt.Setups)*len(wls)*len(specs)+len(sweep)*len(sweepPolicies), 0
	for _, w := range wls {
		if sharesPrefixes(w) {
			total += len(opt.Setups) * len(r.prefixPolicies())
		}
	}
	step := func() {
		done++
		if opt.Progress != nil {
			opt.Progress(done, total)
		}
	}
	for _, s := range opt.Setups {
		for _, w := range wls {
			t := w.Trace
			if w.PerSetup {
				t = r.Bursts[s.Name]
			}
			t, err := trace.Clip(t, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput})
			if err != nil {
				return nil, err
			}
			var runs []*results.Run
			for _, spec := range specs {
				c, err := simulate(ctx, s, s.Deployment(spec), t)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, %s: %w", s.Name, w.Name, spec, err)
				}
				c.Workload = w.Name
				if err := c.Run.Write(filepath.Join(opt.Out, s.Name, w.Name, DirName(spec.String())), c.events); err != nil {
					return nil, err
				}
				c.events = nil
				r.Cells = append(r.Cells, c)
				runs = append(runs, c.Run)
				step()
			}
			if err := writeCellTable(filepath.Join(opt.Out, s.Name, w.Name, "table.md"), r.cells(s.Name, w.Name)); err != nil {
				return nil, err
			}
			if err := plotRuns(filepath.Join(opt.Out, s.Name, w.Name), s, w.Name, runs); err != nil {
				return nil, err
			}
		}
	}
	if err := r.runPrefix(ctx, wls, step); err != nil {
		return nil, err
	}
	if r.Sweep, err = runSweep(ctx, opt, wls[0], sweep, step); err != nil {
		return nil, err
	}
	return r, nil
}

// sizeBursts finds each setup's fp16 capacity and draws the burst at it.
func (r *Report) sizeBursts(ctx context.Context) error {
	r.Capacity, r.Bursts = map[string]float64{}, map[string]*trace.Trace{}
	for _, s := range r.Options.Setups {
		c, err := Capacity(ctx, s, r.Options.BurstSeed)
		if err != nil {
			return err
		}
		if r.Bursts[s.Name], err = trace.Generate(burstAt(s, c), r.Options.BurstSeed); err != nil {
			return err
		}
		r.Capacity[s.Name] = c
	}
	return nil
}

// MaxBatchedTokens is the step token budget of every setup: 2,048 tokens, vLLM's default for online serving.
const MaxBatchedTokens = 2048

// Deployment is a setup's deployment under a policy: the setup's model on its device in the sim, with the paper's
// FP16 KV pool.
func (s Setup) Deployment(p morph.Policy) deploy.Deployment {
	return deploy.Deployment{Model: s.Model, Executor: "sim", Device: s.Device, Policy: p,
		KV: deploy.KV{Blocks: s.KVBlocks}, Scheduler: deploy.Scheduler{MaxBatchedTokens: MaxBatchedTokens}}
}

// simulate runs one policy on one setup, deployed as d.
func simulate(ctx context.Context, s Setup, d deploy.Deployment, t *trace.Trace) (*Cell, error) {
	in, err := d.Build()
	if err != nil {
		return nil, err
	}
	run, events, err := in.Replay(ctx, t, deploy.ReplayOptions{SLO: SLO})
	if err != nil {
		return nil, err
	}
	c := &Cell{Setup: s, Policy: d.Policy.String(), Run: run, events: events}
	if c.Loss, err = quality(s.Model, d.Policy, run); err != nil {
		return nil, err
	}
	return c, nil
}

// DirName is a policy's directory name: its name with ':' and '=' and ',' made safe.
func DirName(policy string) string {
	return strings.NewReplacer(":", "_", "=", "-", ",", "+").Replace(policy)
}

// cells returns the report's cells of one setup and workload, in policy order.
func (r *Report) cells(setup, workload string) []*Cell {
	var out []*Cell
	for _, c := range r.Cells {
		if c.Setup.Name == setup && c.Workload == workload {
			out = append(out, c)
		}
	}
	return out
}

// Cell returns the cell of a setup, workload and policy, or nil.
func (r *Report) Cell(setup, workload, policy string) *Cell {
	for _, c := range r.Cells {
		if c.Setup.Name == setup && c.Workload == workload && c.Policy == policy {
			return c
		}
	}
	return nil
}

// Write writes summary.md, summary.json and the suite-wide plots.
func (r *Report) Write() error {
	if err := plotPareto(filepath.Join(r.Options.Out, "pareto"), r); err != nil {
		return err
	}
	if err := plotSweep(filepath.Join(r.Options.Out, "rate-sweep"), r.Sweep); err != nil {
		return err
	}
	return writeSummary(r.Options.Out, "summary", r.WriteSummary, r.summaryJSON())
}

// writeSummary writes name.md in dir with md and name.json with v, indented.
func writeSummary(dir, name string, md func(io.Writer) error, v any) error {
	f, err := os.Create(filepath.Join(dir, name+".md"))
	if err != nil {
		return err
	}
	if err := md(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644)
}
