package replay

import (
	"context"
	"fmt"
	"slices"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

// SimConfig is a simulated deployment: a catalog model on a catalog device, and its budget.
type SimConfig struct {
	Model, GPU  string
	Calibration string // a CPU step-time calibration file, for GPU "cpu"
	KV          model.KVType
	// The budget: full-precision weights, the workspace and KVBlocks blocks; else Memory bytes; else
	// Utilization of the device's memory.
	KVBlocks    int
	Memory      int64
	Utilization float64
	BlockSize   int
	MaxTokens   int // tokens a step feeds at most
	MaxSeqs     int // running requests at most
	Blocking    bool
	Seed        uint64 // of the tokens the sim draws
}

// DefaultSim is a deployment's defaults: an FP16 KV cache in blocks of 16, 2,048 tokens and 256 requests a
// step, 90% of the device's memory, overlapped swaps.
func DefaultSim(modelName, gpu string) SimConfig {
	return SimConfig{Model: modelName, GPU: gpu, KV: model.KVF16, Utilization: 0.9, BlockSize: 16, MaxTokens: 2048, MaxSeqs: 256, Seed: 1}
}

// Sim is a simulated deployment ready to replay a trace under one policy.
type Sim struct {
	Config     SimConfig
	Spec       morph.Spec
	X          *executor.Sim
	Order      []int
	Base       []quant.Format
	FullBlocks int // the KV pool the budget holds at full precision
}

// NewSim builds the sim executor for spec: layers stored in F16 (F32 under a CPU calibration without F16
// terms), the variants the policy needs, its starting formats, and the budget.
func NewSim(spec morph.Spec, o SimConfig) (*Sim, error) {
	m, err := catalog.ModelByName(o.Model)
	if err != nil {
		return nil, err
	}
	hw, err := catalog.HardwareByName(o.GPU)
	if err != nil {
		return nil, err
	}
	cm, err := costmodel.New(m.Config, hw, catalog.Params(), o.KV, quant.F16)
	if err != nil {
		return nil, err
	}
	full := quant.F16
	if o.Calibration != "" {
		if cm.Calibration, err = costmodel.LoadCalibration(o.Calibration); err != nil {
			return nil, err
		}
		if cm.Calibration.Check(m.Config, []quant.Format{quant.F16}) != nil {
			full = quant.F32
		}
	} else if o.GPU == "cpu" {
		return nil, fmt.Errorf("the cpu device needs a calibration file from 'morphlab calibrate'")
	}
	formats := []quant.Format{full}
	for _, f := range spec.Needs() {
		if !slices.Contains(formats, f) {
			formats = append(formats, f)
		}
	}
	order := sensitivity.FrontToBack(m.Config.NLayers)
	base := slices.Repeat([]quant.Format{full}, m.Config.NLayers)
	opt := executor.SimOptions{Cost: cm, Formats: formats, Outer: quant.F16, BlockSize: o.BlockSize, MaxBatchedTokens: o.MaxTokens,
		Seed: o.Seed, Swap: executor.SwapCost{HostLink: hw.HostLink, Blocking: o.Blocking}}
	// The full-precision pool: what the budget holds beside full-precision weights and the workspace.
	probe := opt
	probe.Budget, probe.Blocks = 1<<62, 1
	px, err := executor.NewSim(probe)
	if err != nil {
		return nil, err
	}
	pm := px.Memory()
	fixed := pm.Weights + pm.Workspace
	switch {
	case o.KVBlocks > 0:
		opt.Budget = fixed + int64(o.KVBlocks)*pm.BlockBytes
	case o.Memory > 0:
		opt.Budget = o.Memory
	default:
		opt.Budget = int64(o.Utilization * float64(hw.Memory))
	}
	if opt.Budget-fixed < pm.BlockBytes {
		return nil, fmt.Errorf("%s on %s: a budget of %d bytes does not hold the %d bytes of full-precision weights and workspace and one KV block",
			o.Model, o.GPU, opt.Budget, fixed)
	}
	opt.Start = spec.Formats(order, base)
	x, err := executor.NewSim(opt)
	if err != nil {
		return nil, err
	}
	return &Sim{Config: o, Spec: spec, X: x, Order: order, Base: base, FullBlocks: int((opt.Budget - fixed) / pm.BlockBytes)}, nil
}

// Replay runs t (clipped to the model's context) through the simulated deployment in virtual time.
func (s *Sim) Replay(ctx context.Context, t *trace.Trace, slo loadtest.SLO) (*results.Run, []engine.Event, error) {
	g := s.X.Geometry()
	t, err := trace.Clip(t, trace.Limits{Context: g.Context})
	if err != nil {
		return nil, nil, err
	}
	reqs, err := Requests(t, g.Vocab, 1)
	if err != nil {
		return nil, nil, err
	}
	meta := results.Meta{Command: "simulate", Executor: "sim", Clock: "virtual", Model: s.Config.Model, Hardware: s.Config.GPU,
		Memory: s.X.Memory().Budget, KVBlocksFull: s.FullBlocks, SLO: slo,
		Trace: results.TraceInfo{Source: t.Source, Format: t.Format, Transforms: slices.Clone(t.Transforms), Requests: len(t.Requests)}}
	return Run(ctx, s.X, Config{Policy: s.Spec, Order: s.Order, Base: s.Base,
		Engine: engine.Options{MaxSeqs: s.Config.MaxSeqs, Clock: &executor.VirtualClock{}}, Meta: meta}, reqs)
}
