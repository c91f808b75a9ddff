package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"slices"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/exec"
	"github.com/morphlab/morphlab/engine/exec/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/replay"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "simulate", summary: "replay a trace at paper scale in virtual time (the sim executor) under a policy", run: runSimulate})
}

const simulateHelp = `
Simulate replays a request trace through the same engine, scheduler, KV manager and morph controller as 'morphlab
run', with the sim executor in place of the CPU one: each step's time comes from the cost model of --model on
--gpu (the catalog's shapes and datasheet ceilings, efficiencies fitted to Vidur's measured operator times; on
--gpu cpu, from a 'morphlab calibrate' file), weights and KV are accounted by format, and swaps cross the host link
(overlapped unless --blocking-swaps). It writes the same results.json, events.jsonl and table.md as run.

The budget is --kv-blocks (full-precision weights, the workspace and that many KV blocks: the paper's FP16 pools
are 958 blocks for the 7B models on an L4, 2,599 for Llama-3-8B on an L4, 3,435 for CodeLlama-34B on an A100),
--memory bytes, or else --memory-utilization of the device's memory (vLLM's gpu_memory_utilization). The same
inputs give the same results.json, byte for byte.`

// simSetup is what a simulation runs on: the executor, the policy's layer plan, and the budget's full-precision
// KV pool.
type simSetup struct {
	x          *exec.Sim
	order      []int
	base       []quant.Format
	fullBlocks int
}

// simOptions are the knobs of newSim.
type simOptions struct {
	model, gpu, calibration string
	kv                      model.KVType
	kvBlocks                int
	memory                  int64
	utilization             float64
	blockSize, maxTokens    int
	blocking                bool
	seed                    uint64
}

// newSim builds the sim executor for spec: layers stored in F16 (F32 for a CPU calibration that has no F16
// terms), the policy's variants, its starting formats, and the budget.
func newSim(spec morph.Spec, o simOptions) (*simSetup, error) {
	m, err := catalog.ModelByName(o.model)
	if err != nil {
		return nil, usagef("--model: %v", err)
	}
	hw, err := catalog.HardwareByName(o.gpu)
	if err != nil {
		return nil, usagef("--gpu: %v", err)
	}
	cm, err := costmodel.New(m.Config, hw, catalog.Params(), o.kv, quant.F16)
	if err != nil {
		return nil, err
	}
	full := quant.F16
	if o.calibration != "" {
		if cm.Calibration, err = costmodel.LoadCalibration(o.calibration); err != nil {
			return nil, err
		}
		if cm.Calibration.Check(m.Config, []quant.Format{quant.F16}) != nil {
			full = quant.F32
		}
	} else if o.gpu == "cpu" {
		return nil, usagef("--gpu cpu needs a --calibration file from 'morphlab calibrate'")
	}
	formats := []quant.Format{full}
	for _, f := range spec.Needs() {
		if !slices.Contains(formats, f) {
			formats = append(formats, f)
		}
	}
	order := sensitivity.FrontToBack(m.Config.NLayers)
	base := slices.Repeat([]quant.Format{full}, m.Config.NLayers)
	opt := exec.SimOptions{Cost: cm, Formats: formats, Outer: quant.F16, BlockSize: o.blockSize, MaxTokens: o.maxTokens,
		Seed: o.seed, Swap: exec.SwapCost{HostLink: hw.HostLink, Blocking: o.blocking}}
	// The full-precision pool: what the budget holds beside full-precision weights and the workspace.
	probe := opt
	probe.Budget, probe.Blocks = 1<<62, 1
	px, err := exec.NewSim(probe)
	if err != nil {
		return nil, err
	}
	pm := px.Memory()
	fixed := pm.Weights + pm.Workspace
	switch {
	case o.kvBlocks > 0:
		opt.Budget = fixed + int64(o.kvBlocks)*pm.BlockBytes
	case o.memory > 0:
		opt.Budget = o.memory
	default:
		opt.Budget = int64(o.utilization * float64(hw.Memory))
	}
	if opt.Budget-fixed < pm.BlockBytes {
		return nil, fmt.Errorf("%s on %s: a budget of %d bytes does not hold the %d bytes of full-precision weights and workspace and one KV block",
			o.model, o.gpu, opt.Budget, fixed)
	}
	opt.Start = spec.Formats(order, base)
	x, err := exec.NewSim(opt)
	if err != nil {
		return nil, err
	}
	return &simSetup{x: x, order: order, base: base, fullBlocks: int((opt.Budget - fixed) / pm.BlockBytes)}, nil
}

func runSimulate(e *env, args []string) error {
	fs := e.flags("--model M --gpu G --trace FILE --policy P --out DIR [flags]", simulateHelp)
	var tf trace.Flags
	tf.Register(fs)
	var o simOptions
	fs.StringVar(&o.model, "model", "llama-2-7b", "catalog `model`")
	fs.StringVar(&o.gpu, "gpu", "l4", "catalog `device` (l4, a40, a100, h100, h200, cpu)")
	fs.StringVar(&o.calibration, "calibration", "", "CPU step-time calibration `file` (with --gpu cpu)")
	kvFlag := fs.String("kv-type", "f16", "KV cache element `type`: f32, f16 or int8")
	fs.IntVar(&o.kvBlocks, "kv-blocks", 0, "budget: full-precision weights, workspace and `N` KV blocks")
	fs.Int64Var(&o.memory, "memory", 0, "memory budget in `bytes`")
	fs.Float64Var(&o.utilization, "memory-utilization", 0.9, "without --kv-blocks or --memory, this `share` of the device's memory")
	fs.IntVar(&o.blockSize, "block-size", 16, "KV block size in `tokens`")
	fs.IntVar(&o.maxTokens, "max-tokens", 2048, "tokens a step feeds at most (chunked prefill budget)")
	maxSeqs := fs.Int("max-seqs", 256, "running requests at most")
	fs.BoolVar(&o.blocking, "blocking-swaps", false, "a swap's transfer blocks the step that applies it (default: overlapped)")
	fs.Uint64Var(&o.seed, "sim-seed", 1, "`seed` of the tokens the sim draws")
	tracePath := fs.String("trace", "", "request trace `file`")
	policy := fs.String("policy", "fp16", "serving `policy`")
	sloFlag := fs.String("slo", "ttft=2s", "SLO `limits`: ttft=..,tpot=..,e2el=..")
	out := fs.String("out", "", "output `directory`")
	asJSON := fs.Bool("json", false, "print the aggregates as JSON instead of a table")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	spec, err := morph.Parse(*policy)
	if err != nil {
		return usagef("--policy: %v", err)
	}
	slo, err := loadtest.ParseSLO(*sloFlag)
	if err != nil {
		return usagef("--slo: %v", err)
	}
	if o.kv, err = model.ParseKVType(*kvFlag); err != nil {
		return usagef("--kv-type: %v", err)
	}
	switch {
	case *tracePath == "":
		return usagef("--trace is required")
	case *out == "":
		return usagef("--out is required")
	case o.kvBlocks < 0 || o.memory < 0 || !(o.utilization > 0 && o.utilization <= 1):
		return usagef("--kv-blocks %d, --memory %d, --memory-utilization %g: want >= 0, >= 0 and in (0, 1]", o.kvBlocks, o.memory, o.utilization)
	}
	t, err := tf.Load(*tracePath)
	if err != nil {
		return err
	}
	s, err := newSim(spec, o)
	if err != nil {
		return err
	}
	r, events, err := simulate(context.Background(), s, spec, t, slo, *maxSeqs, o)
	if err != nil {
		return err
	}
	if err := r.Write(*out, events); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r.Aggregates)
	}
	return results.WriteTable(e.stdout, []*results.Run{r})
}

// simulate replays t on the setup in virtual time.
func simulate(ctx context.Context, s *simSetup, spec morph.Spec, t *trace.Trace, slo loadtest.SLO, maxSeqs int, o simOptions) (*results.Run, []engine.Event, error) {
	cfg := s.x.Geometry()
	t, err := trace.Clip(t, trace.Limits{Context: cfg.Context})
	if err != nil {
		return nil, nil, err
	}
	reqs, err := replay.Requests(t, cfg.Vocab, 1)
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	meta := results.Meta{Command: "simulate", Executor: "sim", Clock: "virtual", Model: o.model, Hardware: o.gpu,
		Memory: s.x.Memory().Budget, KVBlocksFull: s.fullBlocks, SLO: slo,
		Trace: results.TraceInfo{Source: t.Source, Format: t.Format, Transforms: slices.Clone(t.Transforms), Requests: len(t.Requests)}}
	return replay.Run(ctx, s.x, replay.Config{Policy: spec, Order: s.order, Base: s.base,
		Engine: engine.Options{MaxSeqs: maxSeqs, Clock: &exec.VirtualClock{}}, Meta: meta}, reqs)
}
