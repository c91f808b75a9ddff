// Package catalog names the models and devices the experiments run on: each model's shape from its published
// configuration, each device's ceilings from its datasheet (this machine's CPU from `morphlab probe`), and the
// cost model's efficiencies fitted to Vidur's measured A100 operator times (fitted.json, refitted by
// TestFittedParams). Every figure carries its source in a comment. It fills engine/executor/costmodel's inputs, so
// that the engine itself depends on no catalog.
package catalog

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
)

// Model is a model the experiments know by name.
type Model struct {
	Name   string
	Config model.Config
	// Vidur is the model's directory under Vidur's profiles (data/profiles/vidur/<gpu>/<Vidur>), "" when Vidur
	// has not profiled it.
	Vidur string
}

// Models are the catalog's models. The paper's models have the shapes of their Hugging Face config.json files
// (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size,
// max_position_embeddings, rope_theta, rms_norm_eps, tie_word_embeddings); the small ones are the shapes that
// `morphlab synth --shape` makes (engine/model.Shapes: Karpathy's llama2.c TinyStories configs).
var Models = []Model{
	// huggingface.co/meta-llama/Llama-2-7b-hf config.json.
	{"llama-2-7b", model.Config{Dim: 4096, HiddenDim: 11008, NLayers: 32, NHeads: 32, NKVHeads: 32, VocabSize: 32000,
		SeqLen: 4096, RopeTheta: 10000, NormEps: 1e-5}, "meta-llama/Llama-2-7b-hf"},
	// huggingface.co/lmsys/vicuna-7b-v1.5 config.json (a Llama 2 7B fine-tune: the same shape).
	{"vicuna-7b-v1.5", model.Config{Dim: 4096, HiddenDim: 11008, NLayers: 32, NHeads: 32, NKVHeads: 32, VocabSize: 32000,
		SeqLen: 4096, RopeTheta: 10000, NormEps: 1e-5}, ""},
	// huggingface.co/meta-llama/Llama-2-13b-hf config.json.
	{"llama-2-13b", model.Config{Dim: 5120, HiddenDim: 13824, NLayers: 40, NHeads: 40, NKVHeads: 40, VocabSize: 32000,
		SeqLen: 4096, RopeTheta: 10000, NormEps: 1e-5}, ""},
	// huggingface.co/meta-llama/Meta-Llama-3-8B config.json (grouped-query attention, 8 KV heads).
	{"llama-3-8b", model.Config{Dim: 4096, HiddenDim: 14336, NLayers: 32, NHeads: 32, NKVHeads: 8, VocabSize: 128256,
		SeqLen: 8192, RopeTheta: 500000, NormEps: 1e-5}, "meta-llama/Meta-Llama-3-8B"},
	// huggingface.co/codellama/CodeLlama-34b-hf config.json (8 KV heads; Vidur profiled the Instruct variant,
	// which has the same shape).
	{"codellama-34b", model.Config{Dim: 8192, HiddenDim: 22016, NLayers: 48, NHeads: 64, NKVHeads: 8, VocabSize: 32000,
		SeqLen: 16384, RopeTheta: 1e6, NormEps: 1e-5}, "codellama/CodeLlama-34b-Instruct-hf"},
	{"stories260K", shape("stories260K"), ""},
	{"stories15M", shape("stories15M"), ""},
	{"stories42M", shape("stories42M"), ""},
	{"stories110M", shape("stories110M"), ""},
}

func shape(name string) model.Config {
	c, err := model.ShapeByName(name)
	if err != nil {
		panic("catalog: " + err.Error())
	}
	return c
}

// ModelByName returns the named model; the error lists the names there are.
func ModelByName(name string) (Model, error) {
	var names []string
	for _, m := range Models {
		if m.Name == name {
			return m, nil
		}
		names = append(names, m.Name)
	}
	return Model{}, fmt.Errorf("unknown model %q (models: %s)", name, strings.Join(names, ", "))
}

const (
	tera = 1e12
	giga = 1e9
	mib  = 1 << 20
	// Host links as a layer swap sees them: pinned host-to-device copies reach about 26 GB/s over PCIe Gen4 x16
	// (32 GB/s raw a direction) and about 55 GB/s over Gen5 x16 (64 GB/s raw).
	pcieGen4 = 26 * giga
	pcieGen5 = 55 * giga
)

// Hardware are the catalog's devices, dense (no structured sparsity) peaks. GPUs compute in FP16 activations.
// A GPU's memory is what nvidia-smi reports as its total (the datasheet's GB less what ECC and the firmware
// keep): 23,034 MiB on an L4, 46,068 on an A40, 81,920 on an A100 80GB, 81,559 on an H100 SXM, 143,771 on an
// H200.
var Hardware = []costmodel.Hardware{
	// NVIDIA L4 datasheet: FP16 tensor 121 TFLOPS and INT8 242.5 TOPS dense (242 and 485 with sparsity), FP32
	// 30.3 TFLOPS, 24 GB GDDR6 at 300 GB/s, PCIe Gen4 x16. FP16 without tensor cores runs at the FP32 rate on
	// Ada (Ada whitepaper, appendix table).
	{Name: "l4", F16FLOPS: 121 * tera, Int8OPS: 242.5 * tera, F32FLOPS: 30.3 * tera, VectorFLOPS: 30.3 * tera, Bandwidth: 300 * giga,
		Memory: 23034 * mib, HostLink: pcieGen4, ActBytes: 2},
	// NVIDIA A40 datasheet: FP16 tensor 149.7 TFLOPS (FP32 accumulate) and INT8 299.3 TOPS dense, FP32 37.4
	// TFLOPS, 48 GB GDDR6 at 696 GB/s, PCIe Gen4 x16. FP16 without tensor cores runs at the FP32 rate on GA102
	// (Ampere GA102 whitepaper, table 9).
	{Name: "a40", F16FLOPS: 149.7 * tera, Int8OPS: 299.3 * tera, F32FLOPS: 37.4 * tera, VectorFLOPS: 37.4 * tera, Bandwidth: 696 * giga,
		Memory: 46068 * mib, HostLink: pcieGen4, ActBytes: 2},
	// NVIDIA A100 datasheet (80 GB SXM): FP16 tensor 312 TFLOPS, INT8 624 TOPS dense, FP32 19.5 TFLOPS, 80 GB
	// HBM2e at 2,039 GB/s, PCIe Gen4 x16 to the host. FP16 without tensor cores: 78 TFLOPS (A100 whitepaper,
	// table 1).
	{Name: "a100", F16FLOPS: 312 * tera, Int8OPS: 624 * tera, F32FLOPS: 19.5 * tera, VectorFLOPS: 78 * tera, Bandwidth: 2039 * giga,
		Memory: 81920 * mib, HostLink: pcieGen4, ActBytes: 2},
	// NVIDIA H100 datasheet (SXM): FP16 tensor 989.4 TFLOPS, INT8 1,979 TOPS dense (half the with-sparsity
	// figures), FP32 67 TFLOPS, 80 GB HBM3 at 3.35 TB/s, PCIe Gen5 x16 to the host. FP16 without tensor cores:
	// 133.8 TFLOPS (H100 whitepaper, table 3).
	{Name: "h100", F16FLOPS: 989.4 * tera, Int8OPS: 1979 * tera, F32FLOPS: 67 * tera, VectorFLOPS: 133.8 * tera, Bandwidth: 3350 * giga,
		Memory: 81559 * mib, HostLink: pcieGen5, ActBytes: 2},
	// NVIDIA H200 datasheet (SXM): the H100's compute, 141 GB HBM3e at 4.8 TB/s, PCIe Gen5 x16.
	{Name: "h200", F16FLOPS: 989.4 * tera, Int8OPS: 1979 * tera, F32FLOPS: 67 * tera, VectorFLOPS: 133.8 * tera, Bandwidth: 4800 * giga,
		Memory: 143771 * mib, HostLink: pcieGen5, ActBytes: 2},
	// This machine, from `morphlab probe` (kernels/probe, 2 threads): "Intel(R) Xeon(R) Processor"
	// under KVM, 2 logical CPUs with AVX-512 VNNI; f32 FMA peak 460 GFLOP/s, int8 dot peak 1,850 GOP/s, read
	// bandwidth 33.5 GB/s at a 256 MiB working set (DRAM), 23 GiB of memory (free -g). The CPU executor widens
	// F16 weights to f32 in its kernels, so they compute at the FMA peak; activations are float32. Its step times
	// come from a calibration file (`morphlab calibrate`), not from these ceilings; a swap copies within DRAM.
	{Name: "cpu", F16FLOPS: 460 * giga, Int8OPS: 1850 * giga, F32FLOPS: 460 * giga, VectorFLOPS: 460 * giga, Bandwidth: 33.5 * giga,
		Memory: 23 << 30, HostLink: 33.5 * giga, ActBytes: 4},
}

// HardwareByName returns the named device; the error lists the names there are.
func HardwareByName(name string) (costmodel.Hardware, error) {
	var names []string
	for _, h := range Hardware {
		if h.Name == name {
			return h, nil
		}
		names = append(names, h.Name)
	}
	return costmodel.Hardware{}, fmt.Errorf("unknown device %q (devices: %s)", name, strings.Join(names, ", "))
}

// FittedFile is the embedded fit: the cost model's efficiencies fitted to Vidur's Llama-2-7B profile on an A100
// (tensor parallel 1), with the fit's own error.
//
//go:embed fitted.json
var FittedFile []byte

// Fitted is the content of fitted.json.
type Fitted struct {
	Source string           `json:"source"` // the profile fitted to
	Params costmodel.Params `json:"params"`
}

// Params returns the fitted efficiencies.
func Params() costmodel.Params {
	var f Fitted
	if err := json.Unmarshal(FittedFile, &f); err != nil {
		panic("catalog: fitted.json: " + err.Error())
	}
	return f.Params
}
