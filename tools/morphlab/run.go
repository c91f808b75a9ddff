package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/replay"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "run", summary: "replay a trace on the CPU engine under a policy (fp16, static, selective, morph)", run: runRun})
}

const runHelp = `
Run replays a request trace on the real engine (the CPU executor) under a memory budget and a policy, and writes
results.json (each request's TTFT, TPOT, E2E latency, tokens and precision mix; vLLM's aggregates, the TTFT-SLO
violation rate, preemptions, KV use), events.jsonl (swaps, KV regions, the controller's decisions) and table.md
into --out. The model is a checkpoint (--model) or seeded random weights at a named shape (--shape); --format
sets its full precision (the precision fp16 serves in). Prompts are seeded random tokens of the trace's lengths.

The budget is --memory bytes, or --kv-blocks: the bytes that hold the full-precision weights, the workspace and
that many KV blocks. --clock wall replays in real time; --clock cpu replays in virtual time advanced by each
step's CPU time over the kernel threads, which a loaded machine does not skew. Policies: fp16, static:int8,
static:int4, selective:N[:int8|int4], morph:accuracy|default|performance|predictive[:k=v...] (engine/morph's
package doc); --profile takes the swap order from a 'morphlab profile' file, else front to back. --steps also
writes steps.jsonl, each step's work, layer formats and time, which 'morphlab calibrate --steps' fits.`

// servingModel are the flags that pick the model a serving command runs.
type servingModel struct {
	path, shape, format, kv string
	seed                    uint64
	threads                 int
}

func (f *servingModel) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "model", "", "checkpoint `file` (llama2.c, GGUF or safetensors)")
	fs.StringVar(&f.shape, "shape", "", "seeded random weights at a named `shape` (stories260K, stories15M, stories110M, llama-2-7b, ...) instead of --model")
	fs.Uint64Var(&f.seed, "weights-seed", 1, "`seed` of --shape's weights")
	fs.StringVar(&f.format, "format", "", "full-precision `format` of the decoder layers (f32, f16, bf16); default: as stored")
	fs.StringVar(&f.kv, "kv-type", "f32", "KV cache `type`: f32, f16 or int8")
	fs.IntVar(&f.threads, "threads", 0, "kernel threads (default GOMAXPROCS)")
}

// load builds the model; its layers' active formats are the full precision.
func (f *servingModel) load() (*model.Model, model.KVType, error) {
	cpu.SetThreads(f.threads)
	kv, err := model.ParseKVType(f.kv)
	if err != nil {
		return nil, 0, usagef("--kv-type: %v", err)
	}
	var ck *model.Checkpoint
	switch {
	case (f.path == "") == (f.shape == ""):
		return nil, 0, usagef("give one of --model and --shape")
	case f.shape != "":
		cfg, err := model.ShapeByName(f.shape)
		if err != nil {
			return nil, 0, usagef("--shape: %v", err)
		}
		ck = model.Synthesize(cfg, f.seed)
	default:
		if ck, err = model.Load(f.path); err != nil {
			return nil, 0, err
		}
		defer ck.Close()
	}
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		return nil, 0, err
	}
	if f.format != "" {
		if err := setFormat(m, f.format); err != nil {
			return nil, 0, err
		}
	}
	return m, kv, nil
}

func (f *servingModel) name() string {
	if f.shape != "" {
		return fmt.Sprintf("%s (synthetic, seed %d)", f.shape, f.seed)
	}
	return f.path
}

// servingSetup prepares m for a policy: the variants it needs, the swap order (from a profile, checked against
// the model, or front to back), the full-precision formats, and the layers the policy starts quantized.
func servingSetup(m *model.Model, spec morph.Spec, profile string) (order []int, base []quant.Format, err error) {
	order = sensitivity.FrontToBack(len(m.Layers))
	if profile != "" {
		p, err := sensitivity.Load(profile)
		if err != nil {
			return nil, nil, err
		}
		if p.Model.Config != m.Config {
			return nil, nil, fmt.Errorf("%s: profiled a model of shape %+v, this one is %+v", profile, p.Model.Config, m.Config)
		}
		order = p.Order
	}
	for _, l := range m.Layers {
		base = append(base, l.Active)
	}
	for l := range m.Layers {
		for _, f := range spec.Needs() {
			if _, err := m.AddVariant(l, f); err != nil {
				return nil, nil, err
			}
		}
	}
	for l, f := range spec.Formats(order, base) {
		if err := m.SetPrecision(l, f); err != nil {
			return nil, nil, err
		}
	}
	return order, base, nil
}

// budgetFor is the budget that holds m at full precision (base), the workspace of maxTokens and blocks KV blocks.
func budgetFor(m *model.Model, base []quant.Format, kv model.KVType, blockSize, maxTokens, blocks int) int64 {
	w := int64(m.WeightBytes())
	for l, layer := range m.Layers {
		w += int64(layer.Variants[base[l]].Bytes() - layer.Weights().Bytes())
	}
	return w + executor.WorkspaceBytes(m.Config, maxTokens) + int64(blocks)*int64(kv.BytesPerBlock(m.Config, blockSize))
}

func runRun(e *env, args []string) error {
	fs := e.flags("(--model FILE | --shape NAME) --trace FILE --policy P (--memory B | --kv-blocks N) --out DIR [flags]", runHelp)
	var mf servingModel
	mf.register(fs)
	var rf replayFlags
	rf.register(fs)
	profile := fs.String("profile", "", "layer swap order from a 'morphlab profile' `file`")
	memory := fs.Int64("memory", 0, "memory budget in `bytes`")
	kvBlocks := fs.Int("kv-blocks", 0, "budget: full-precision weights, workspace and `N` KV blocks")
	blockSize := fs.Int("block-size", 16, "KV block size in `tokens`")
	maxTokens := fs.Int("max-tokens", 512, "tokens a step feeds at most (chunked prefill budget)")
	maxSeqs := fs.Int("max-seqs", 256, "running requests at most")
	clock := fs.String("clock", "wall", "`clock`: wall or cpu")
	promptSeed := fs.Uint64("prompt-seed", 1, "`seed` of the prompts' random tokens")
	keep := fs.Bool("keep-tokens", false, "keep each request's output token ids in results.json (for quality comparisons)")
	steps := fs.Bool("steps", false, "write every step's work, layer formats and time to steps.jsonl (what 'morphlab calibrate --steps' fits)")
	reference := fs.String("reference", "", "a results.json `file` of the same requests, run with --keep-tokens (e.g. under fp16): report the greedy outputs' agreement with it")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	spec, slo, err := rf.parse()
	if err != nil {
		return err
	}
	switch {
	case (*memory > 0) == (*kvBlocks > 0):
		return usagef("give one of --memory and --kv-blocks")
	case *clock != "wall" && *clock != "cpu":
		return usagef("--clock %q, want wall or cpu", *clock)
	}
	t, err := rf.load()
	if err != nil {
		return err
	}
	m, kv, err := mf.load()
	if err != nil {
		return err
	}
	if t, err = trace.Clip(t, trace.Limits{Context: m.Config.SeqLen}); err != nil {
		return err
	}
	order, base, err := servingSetup(m, spec, *profile)
	if err != nil {
		return err
	}
	budget := *memory
	if budget == 0 {
		budget = budgetFor(m, base, kv, *blockSize, *maxTokens, *kvBlocks)
	}
	fullBlocks := int((budget - budgetFor(m, base, kv, *blockSize, *maxTokens, 0)) / int64(kv.BytesPerBlock(m.Config, *blockSize)))
	cx, err := executor.NewCPU(m, executor.CPUOptions{Budget: budget, BlockSize: *blockSize, MaxBatchedTokens: *maxTokens, KVType: kv})
	if err != nil {
		return err
	}
	var x executor.Executor = cx
	opt := engine.Options{MaxSeqs: *maxSeqs}
	if *clock == "cpu" {
		x, opt.Clock = replay.CPUTimed{Executor: cx, Threads: cpu.Threads()}, &executor.VirtualClock{}
	}
	reqs, err := replay.Requests(t, m.Config.VocabSize, *promptSeed)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	meta := results.Meta{Command: "run", Executor: "cpu", Clock: *clock, Model: mf.name(), Memory: budget,
		KVBlocksFull: fullBlocks, SLO: slo,
		Trace: results.TraceInfo{Source: t.Source, Format: t.Format, Transforms: slices.Clone(t.Transforms), Requests: len(t.Requests)}}
	fmt.Fprintf(e.stderr, "run: %d requests, policy %s, budget %d bytes (%d KV blocks at full precision, %d attached), clock %s\n",
		len(reqs), spec, budget, fullBlocks, cx.Memory().Blocks, *clock)
	r, events, err := replay.Run(ctx, x, replay.Config{Policy: spec, Order: order, Base: base, Engine: opt, Meta: meta,
		KeepTokens: *keep || *reference != "", KeepSteps: *steps}, reqs)
	if err != nil {
		return err
	}
	if *reference != "" {
		ref, err := results.Load(*reference)
		if err != nil {
			return err
		}
		q := results.Quality{Reference: *reference}
		if q.ExactMatch, q.TokenAgreement, err = results.Agreement(r, ref); err != nil {
			return fmt.Errorf("--reference %s: %v", *reference, err)
		}
		r.Quality = &q
		fmt.Fprintf(e.stderr, "run: against %s, %.1f%% of the requests have the same output, %.1f%% of the tokens agree\n",
			*reference, 100*q.ExactMatch, 100*q.TokenAgreement)
	}
	return rf.write(e, r, events)
}
