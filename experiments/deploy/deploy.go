// Package deploy describes a served model once — a Deployment — and builds it, the one way every experiment and
// command does: executor -> engine -> morphing controller. `morphlab run`, `simulate`, `serve` and `calibrate`,
// the experiment suite and the fidelity comparison all go through it.
//
// # A deployment
//
// A Deployment names:
//
//   - the model: a checkpoint file (llama2.c, GGUF or safetensors), or a name from experiments/catalog (the
//     paper's models and the llama2.c shapes), which the cpu executor fills with seeded random weights and the sim
//     executor needs only the shape of; DType is the format its decoder layers are served in at full precision;
//   - the executor: "cpu" runs the real kernels on this machine (on the wall clock, or on the CPU-time clock that a
//     loaded machine skews less); "sim" takes each step's time from the cost model of the model on Device (a
//     catalog GPU, or "cpu" with a Calibration file from `morphlab calibrate`) in virtual time;
//   - the memory: a budget of Memory bytes on the device for the weights, the workspace and the KV pool, or KV
//     blocks (KV.Blocks) beside the model at full precision and the workspace, or a share of the device's memory
//     (MemoryUtilization, vLLM's gpu_memory_utilization);
//   - the KV cache: blocks of BlockSize tokens of DType elements, with automatic prefix caching unless
//     NoPrefixCaching;
//   - the scheduler: continuous (iteration-level) batching with its step token budget (MaxBatchedTokens, vLLM's
//     max_num_batched_tokens) and sequence cap (MaxNumSeqs), or the static and dynamic baselines;
//   - the policy (engine/morph: fp16, static, selective, a morph mode or a policy registered with morph.Register;
//     one that could never swap a layer is an error) and the swap order (a `morphlab profile` file, or front to
//     back).
//
// Build loads the model and starts the deployment: it prepares the variants the policy needs, sizes the executor
// in blocks (executor.Pool), makes the engine over it, and adds the controller to the engine's hooks. An
// Instance replays a trace (Replay) into results.Run, or is served over HTTP (engine/server) by `morphlab serve`.
// A replay streams as a fleet's does: each prompt is drawn when its request arrives and each request is added to
// the results as it ends, so that an hour's trace on one replica holds its requests in flight, the rows, events
// and timeline its results keep, not every prompt and result.
// Flags fills a Deployment from the command line with the same names, defaults and units in every command (vLLM's
// names where vLLM has the knob).
//
// A replay's results record everything it ran (results.Meta): the deployment after its defaults (or the Fleet),
// the trace's recipe (experiments/trace.Recipe), the prompt seed and the build. Rerun runs such a record again:
// a simulation to the same results.json, byte for byte.
//
// # Defaults
//
// Zero fields take these: executor cpu; the layers as stored (the sim: f16, or f32 under a CPU calibration without
// f16 terms); KV blocks of 16 tokens, of the calibration's KV type under a calibration, else f16 for layers in
// f16 or bf16 and f32 for others; without Memory, KV.Blocks or MemoryUtilization, the cpu executor holds 32
// full-context sequences of KV and the sim 90% of the device's memory; prefix caching on (continuous batching);
// continuous batching of at most 512 tokens
// and 256 sequences a step (static and dynamic: batches of 32, dynamic waiting at most 50 ms); fp16; front to
// back; the wall clock (cpu) or virtual time (sim); seed 1 for random weights and for the tokens the sim draws.
package deploy

import (
	"fmt"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
)

// Deployment is one served model: what runs, on what, with how much memory, scheduled how and morphed how.
type Deployment struct {
	// Model is a checkpoint file, or a model name from the catalog (catalog.Models).
	Model string
	// Tokenizer is a llama2.c tokenizer.bin file, for a checkpoint without its vocabulary (serving text).
	Tokenizer string
	// WeightsSeed draws the random weights of a named model on the cpu and cuda executors.
	WeightsSeed uint64
	// DType is the format of the decoder layers at full precision: f32, f16, bf16, or a quantized format the CPU
	// kernels run (int8, int4, q8_0, q4_0); "" keeps them as stored.
	DType string
	// Classifier, when set, stores the classifier (output matrix) in this format (cpu executor).
	Classifier string
	// Executor is "cpu", "sim" or "cuda" (GPU 0, in a morphlab built with -tags cuda).
	Executor string
	// Device is the sim's device: a catalog GPU (l4, a40, a100, h100, h200) or "cpu"; for the cuda executor, the
	// catalog name of the GPU it runs on, which results and fleet prices name ("" leaves it unnamed).
	Device string
	// Calibration is a CPU step-time calibration file (`morphlab calibrate`), for the sim on device "cpu";
	// Calibrated is one in memory, in its place.
	Calibration string
	Calibrated  *costmodel.Calibration
	// Memory is the executor's memory budget in bytes on its device: the weights, the workspace and the KV pool
	// (without KV.Blocks). The cpu executor emulates a device of this size; the cuda executor's is on the GPU.
	Memory int64
	// MemoryUtilization is the share of the device's memory the budget takes (the sim and cuda on a GPU, without
	// KV.Blocks and Memory; vLLM's gpu_memory_utilization).
	MemoryUtilization float64
	KV                KV
	Scheduler         Scheduler
	// Policy is the serving policy (morph.Parse); nil is fp16.
	Policy morph.Policy
	// Profile is a `morphlab profile` file whose order is the swap order; "" is front to back.
	Profile string
	// BlockingSwaps makes a swap's host-to-device transfer block the step that applies it (the sim and cuda; by
	// default transfers overlap the steps).
	BlockingSwaps bool
	// Clock is "wall", "cpu" or "thread" for the cpu executor: cpu replays in virtual time, each step lasting the
	// process CPU time it used over the kernel threads (CPUTimed), which a loaded machine skews less than the wall
	// clock; thread, on one kernel thread, the CPU time of its own thread (ThreadTimed), so that runs side by side
	// in one process each count only their own. The sim runs in virtual time.
	Clock string
	// Threads is the kernel threads (cpu executor); 0 is GOMAXPROCS.
	Threads int
	// SimSeed draws the tokens the sim samples.
	SimSeed uint64
}

// KV is the KV cache: its size and its blocks.
type KV struct {
	// Blocks sizes the budget to hold the model at full precision, the workspace and this many blocks (in place
	// of the deployment's Memory).
	Blocks int
	// BlockSize is a block's tokens.
	BlockSize int
	// DType is the KV cache's element type: f32, f16 or int8; "" or "auto" follows the layers (see the package doc).
	DType string
	// NoPrefixCaching turns automatic prefix caching off. It is on by default, as in vLLM: requests share the KV
	// blocks of equal prompt prefixes and skip their prefill (engine/kv). The static and dynamic baselines never
	// cache.
	NoPrefixCaching bool
}

// Scheduler is the batching and its limits.
type Scheduler struct {
	// Kind is "continuous" (iteration-level batching with chunked prefill), "static" or "dynamic".
	Kind string
	// MaxBatchedTokens is the most tokens one iteration feeds (the workspace is sized for it).
	MaxBatchedTokens int
	// MaxNumSeqs is the most sequences running at once (continuous batching).
	MaxNumSeqs int
	// BatchSize is the static and dynamic baselines' batch.
	BatchSize int
	// MaxDelay is the longest a request waits for a dynamic batch to fill.
	MaxDelay time.Duration
}

// The defaults of a Deployment's zero fields (the package doc lists them all).
const (
	DefaultBlockSize         = 16
	DefaultMaxBatchedTokens  = 512
	DefaultMaxNumSeqs        = 256
	DefaultBatchSize         = 32
	DefaultMaxDelay          = 50 * time.Millisecond
	DefaultMemoryUtilization = 0.9
	// DefaultSequences is the cpu executor's pool without a size: this many full-context sequences' blocks.
	DefaultSequences = 32
)

// withDefaults returns d with its zero fields set to the defaults and its choices checked.
func (d Deployment) withDefaults() (Deployment, error) {
	if d.Executor == "" {
		d.Executor = "cpu"
	}
	if d.Policy == nil {
		d.Policy = morph.FP16{}
	}
	if d.WeightsSeed == 0 {
		d.WeightsSeed = 1
	}
	if d.SimSeed == 0 {
		d.SimSeed = 1
	}
	if d.KV.BlockSize == 0 {
		d.KV.BlockSize = DefaultBlockSize
	}
	s := &d.Scheduler
	if s.Kind == "" {
		s.Kind = "continuous"
	}
	if s.MaxBatchedTokens == 0 {
		s.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	if s.MaxNumSeqs == 0 {
		s.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if s.BatchSize == 0 {
		s.BatchSize = min(DefaultBatchSize, s.MaxBatchedTokens)
	}
	if s.MaxDelay == 0 {
		s.MaxDelay = DefaultMaxDelay
	}
	switch {
	case d.Model == "":
		return d, fmt.Errorf("deploy: no model: give a checkpoint file or a catalog name")
	case d.Executor != "cpu" && d.Executor != "sim" && d.Executor != "cuda":
		return d, fmt.Errorf("deploy: executor %q, want cpu, sim or cuda", d.Executor)
	case d.Executor == "cuda" && d.Device == "cpu":
		return d, fmt.Errorf("deploy: the cuda executor runs on a GPU, not device cpu")
	case d.Executor == "cuda" && d.KV.DType != "" && d.KV.DType != "auto" && d.KV.DType != d.DType:
		return d, fmt.Errorf("deploy: KV cache dtype %q: the cuda executor keeps its KV cache in the layers' type (dtype %q)", d.KV.DType, d.DType)
	case d.Executor == "sim" && d.Device == "":
		return d, fmt.Errorf("deploy: the sim needs a device: a catalog GPU or cpu")
	case d.Executor == "cpu" && d.Device != "" && d.Device != "cpu":
		return d, fmt.Errorf("deploy: device %q: the cpu executor runs on this CPU; simulate a GPU with the sim executor", d.Device)
	case d.Calibration != "" && d.Calibrated != nil:
		return d, fmt.Errorf("deploy: a calibration file and one in memory: give one of them")
	case d.Executor == "sim" && d.Device == "cpu" && d.Calibration == "" && d.Calibrated == nil:
		return d, fmt.Errorf("deploy: the sim on device cpu needs a calibration file from 'morphlab calibrate'")
	case d.Executor != "sim" && (d.Calibration != "" || d.Calibrated != nil):
		return d, fmt.Errorf("deploy: a calibration is the sim's model of a device; the %s executor times its own steps", d.Executor)
	case d.KV.Blocks < 0 || d.Memory < 0 || d.MemoryUtilization < 0 || d.MemoryUtilization > 1 || d.KV.BlockSize < 0:
		return d, fmt.Errorf("deploy: KV blocks %d, memory %d, utilization %g, block size %d: want none negative and utilization at most 1",
			d.KV.Blocks, d.Memory, d.MemoryUtilization, d.KV.BlockSize)
	case d.KV.Blocks > 0 && d.Memory > 0:
		return d, fmt.Errorf("deploy: KV blocks %d and memory %d bytes: give one of them", d.KV.Blocks, d.Memory)
	case d.Executor == "cpu" && d.MemoryUtilization > 0:
		return d, fmt.Errorf("deploy: a memory utilization is a share of a GPU's memory; size the cpu executor's pool in blocks or bytes")
	case s.Kind != "continuous" && s.Kind != "static" && s.Kind != "dynamic":
		return d, fmt.Errorf("deploy: scheduler %q, want continuous, static or dynamic", s.Kind)
	case s.MaxBatchedTokens < 0 || s.MaxNumSeqs < 0 || s.BatchSize < 0 || s.MaxDelay < 0 || d.Threads < 0:
		return d, fmt.Errorf("deploy: max batched tokens %d, max sequences %d, batch size %d, max delay %v, threads %d: want none negative",
			s.MaxBatchedTokens, s.MaxNumSeqs, s.BatchSize, s.MaxDelay, d.Threads)
	}
	switch {
	case d.Executor == "sim" && d.Clock != "" && d.Clock != "virtual":
		return d, fmt.Errorf("deploy: clock %q: the sim runs in virtual time", d.Clock)
	case d.Executor == "sim":
		d.Clock = "virtual"
	case d.Clock == "":
		d.Clock = "wall"
	case d.Executor == "cuda" && d.Clock != "wall":
		return d, fmt.Errorf("deploy: clock %q: the cuda executor runs on the wall clock", d.Clock)
	case d.Clock != "wall" && d.Clock != "cpu" && d.Clock != "thread":
		return d, fmt.Errorf("deploy: clock %q, want wall, cpu or thread", d.Clock)
	case d.Clock == "thread" && d.Threads != 1:
		return d, fmt.Errorf("deploy: the thread clock times one kernel thread, and threads is %d", d.Threads)
	}
	if err := morph.Check(d.Policy); err != nil {
		return d, fmt.Errorf("deploy: %w", err)
	}
	return d, nil
}

// PrefixCaching reports whether the deployment caches prefixes: unless NoPrefixCaching, with continuous batching.
func (d Deployment) PrefixCaching() bool {
	return !d.KV.NoPrefixCaching && (d.Scheduler.Kind == "" || d.Scheduler.Kind == "continuous")
}
