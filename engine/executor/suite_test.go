package executor_test

import (
	"testing"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/executor/exectest"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/quant"
)

// suiteModel is stories260K's shape with seeded weights and Int8 and Int4 variants of every layer.
func suiteModel(t *testing.T) *model.Model {
	return modeltest.Synthetic(t, "stories260K", 1, quant.Int8, quant.Int4)
}

func TestCPUSuite(t *testing.T) {
	exectest.Run(t, func(t *testing.T, o exectest.Options) executor.Executor {
		e, err := executor.NewCPU(suiteModel(t), executor.CPUOptions{Pool: o.Pool, BlockSize: o.BlockSize,
			MaxBatchedTokens: o.MaxBatchedTokens, Attach: o.Attach, Start: o.Start, Swap: o.Swap})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

// simCost is the cost model of stories260K on this machine's CPU ceilings (the catalog's, which engine tests
// cannot import) with a plain efficiency: the suite checks behaviour, not times.
func simCost(t testing.TB) *costmodel.Model {
	cfg, err := model.ShapeByName("stories260K")
	if err != nil {
		t.Fatal(err)
	}
	hw := costmodel.Hardware{Name: "cpu", F16FLOPS: 460e9, Int8OPS: 1850e9, F32FLOPS: 460e9, VectorFLOPS: 460e9,
		Bandwidth: 33.5e9, Memory: 1 << 34, HostLink: 33.5e9, ActBytes: 4}
	r := costmodel.Roofline{Compute: costmodel.Efficiency{Max: 0.5}, Memory: costmodel.Efficiency{Max: 0.5}, Floor: 1e-6}
	p := costmodel.Params{Linear: r, Norm: r, RoPE: r, Act: r, Add: r, Embedding: r, Iteration: 1e-5}
	m, err := costmodel.New(cfg, hw, p, model.KVF32, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSimSuite(t *testing.T) {
	exectest.Run(t, func(t *testing.T, o exectest.Options) executor.Executor {
		e, err := executor.NewSim(executor.SimOptions{Cost: simCost(t), Formats: []quant.Format{quant.F32, quant.Int8, quant.Int4},
			Outer: quant.F32, Pool: o.Pool, BlockSize: o.BlockSize, MaxBatchedTokens: o.MaxBatchedTokens, Attach: o.Attach, Start: o.Start, Swap: o.Swap})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}
