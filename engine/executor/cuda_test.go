//go:build cuda

package executor

import (
	"math"
	"sync"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/quant"
)

// These tests need a GPU (sm_80 or newer): `make device-bundle` builds them into build/device/executor.test and
// kernels/cuda/run-device.sh runs them there.

var (
	devOnce sync.Once
	dev     *kcuda.Device
	devErr  error
)

// TestDevice is the GPU the tests share, for the suite in package executor_test.
var TestDevice = device

func device(t testing.TB) *kcuda.Device {
	devOnce.Do(func() { dev, devErr = kcuda.Open(0) })
	if devErr != nil {
		t.Fatal(devErr)
	}
	return dev
}

func newCUDA(t testing.TB, m *model.Model, opt CUDAOptions) *CUDA {
	e, err := NewCUDA(device(t), m, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// relErr is ‖got − want‖₂ / ‖want‖₂.
func relErr(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
		n += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / n)
}

// TestCUDAMatchesCPU runs a prompt and decode steps on the CPU and CUDA executors over the same model, with every
// layer in each format in turn (swapped between runs, so the swaps' copies are checked too), and compares each
// step's logits. Bounds on the relative L2 error: f32 1e-4 (the kernels' float32 accumulation orders differ); f16
// 2e-2 (the GPU keeps activations and the residual in f16, the CPU in float32: u = 2^-11 a rounding, over a few
// layers); int8 as the full format's bound plus 2e-2 (both W8A8 with the same row quantization, so only codes
// that a rounding difference flips differ); int4 the full format's bound plus 5e-2 (W4A16 on the GPU, W4A8 on
// the CPU: the CPU also rounds the activations to int8).
func TestCUDAMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape string
		typ   model.TensorType
		kv    model.KVType
		tol   float64
	}{
		{"f32", "stories260K", model.F32, model.KVF32, 1e-4},
		{"f16", "stories42M", model.F16, model.KVF16, 2e-2}, // head dim 64: whole prompts run FlashAttention-2
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := model.ShapeByName(c.shape)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := model.SynthesizeAs(cfg, 3, c.typ)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.FromCheckpoint(ck)
			if err != nil {
				t.Fatal(err)
			}
			for l := range m.Layers {
				for _, f := range []quant.Format{quant.Int8, quant.Int4} {
					if _, err := m.AddVariant(l, f); err != nil {
						t.Fatal(err)
					}
				}
			}
			pool := Pool{Blocks: 64}
			cpuEx, err := NewCPU(m, CPUOptions{Pool: pool, BlockSize: 16, MaxBatchedTokens: 256, KVType: c.kv})
			if err != nil {
				t.Fatal(err)
			}
			gpu := newCUDA(t, m, CUDAOptions{Pool: pool, BlockSize: 16, MaxBatchedTokens: 256})
			gpu.keepLogits = true
			full := m.Layers[0].Active
			for run, f := range []quant.Format{full, quant.Int8, quant.Int4, full} {
				bound := c.tol
				switch f {
				case quant.Int8:
					bound += 2e-2
				case quant.Int4:
					bound += 5e-2
				}
				for l := range m.Layers {
					for _, ex := range []Executor{cpuEx, gpu} {
						if err := ex.SetLayerPrecision(l, f); err != nil {
							t.Fatal(err)
						}
					}
				}
				// Two sequences: a 40-token prompt and, on its own blocks, a 7-token one; then decode both.
				table := func(seq int) []int32 {
					return []int32{int32(8*run + 4*seq), int32(8*run + 4*seq + 1), int32(8*run + 4*seq + 2)}
				}
				b := &Batch{Seqs: []SeqWork{
					{Tokens: tokens(40, 1), SeqLen: 40, Table: table(0), Sample: true},
					{Tokens: tokens(7, 2), SeqLen: 7, Table: table(1), Sample: true},
				}}
				for step := range 6 {
					rc, err := cpuEx.Step(b)
					if err != nil {
						t.Fatal(err)
					}
					rg, err := gpu.Step(b)
					if err != nil {
						t.Fatal(err)
					}
					if rg.Formats[0] != f {
						t.Fatalf("%v run, step %d: the GPU ran layer 0 in %v", f, step, rg.Formats[0])
					}
					voc := cfg.VocabSize
					for i := range b.Seqs {
						want := cpuEx.logits[i*voc : (i+1)*voc]
						if e := relErr(gpu.rowOf(i), want); e > bound {
							t.Fatalf("%v run, step %d, sequence %d: logits' relative error %.3g, bound %.3g", f, step, i, e, bound)
						}
					}
					if f == full && c.typ == model.F32 && (rc.Next[0] != rg.Next[0] || rc.Next[1] != rg.Next[1]) {
						t.Fatalf("f32 step %d: the GPU picked %v, the CPU %v", step, rg.Next, rc.Next)
					}
					for i := range b.Seqs {
						s := &b.Seqs[i]
						s.Tokens, s.SeqLen = []int32{rc.Next[i]}, s.SeqLen+1
					}
				}
			}
		})
	}
}

// tokens returns n tokens of a fixed pseudo-random sequence.
func tokens(n int, seed int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = (seed*7919 + int32(i)*104729) % 500
	}
	return out
}
