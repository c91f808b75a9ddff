package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/replay"
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

func runSimulate(e *env, args []string) error {
	fs := e.flags("--model M --gpu G --trace FILE --policy P --out DIR [flags]", simulateHelp)
	var rf replayFlags
	rf.register(fs)
	o := replay.DefaultSim("", "")
	fs.StringVar(&o.Model, "model", "llama-2-7b", "catalog `model`")
	fs.StringVar(&o.GPU, "gpu", "l4", "catalog `device` (l4, a40, a100, h100, h200, cpu)")
	fs.StringVar(&o.Calibration, "calibration", "", "CPU step-time calibration `file` (with --gpu cpu)")
	kvFlag := fs.String("kv-type", "f16", "KV cache element `type`: f32, f16 or int8")
	fs.IntVar(&o.KVBlocks, "kv-blocks", 0, "budget: full-precision weights, workspace and `N` KV blocks")
	fs.Int64Var(&o.Memory, "memory", 0, "memory budget in `bytes`")
	fs.Float64Var(&o.Utilization, "memory-utilization", o.Utilization, "without --kv-blocks or --memory, this `share` of the device's memory")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV block size in `tokens`")
	fs.IntVar(&o.MaxTokens, "max-tokens", o.MaxTokens, "tokens a step feeds at most (chunked prefill budget)")
	fs.IntVar(&o.MaxSeqs, "max-seqs", o.MaxSeqs, "running requests at most")
	fs.BoolVar(&o.Blocking, "blocking-swaps", false, "a swap's transfer blocks the step that applies it (default: overlapped)")
	fs.Uint64Var(&o.Seed, "sim-seed", o.Seed, "`seed` of the tokens the sim draws")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	spec, slo, err := rf.parse()
	if err != nil {
		return err
	}
	if o.KV, err = model.ParseKVType(*kvFlag); err != nil {
		return usagef("--kv-type: %v", err)
	}
	switch {
	case o.KVBlocks < 0 || o.Memory < 0 || !(o.Utilization > 0 && o.Utilization <= 1):
		return usagef("--kv-blocks %d, --memory %d, --memory-utilization %g: want >= 0, >= 0 and in (0, 1]", o.KVBlocks, o.Memory, o.Utilization)
	case o.GPU == "cpu" && o.Calibration == "":
		return usagef("--gpu cpu needs a --calibration file from 'morphlab calibrate'")
	}
	if _, err := catalog.ModelByName(o.Model); err != nil {
		return usagef("--model: %v", err)
	}
	if _, err := catalog.HardwareByName(o.GPU); err != nil {
		return usagef("--gpu: %v", err)
	}
	t, err := rf.load()
	if err != nil {
		return err
	}
	s, err := replay.NewSim(spec, o)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, events, err := s.Replay(ctx, t, slo)
	if err != nil {
		return err
	}
	return rf.write(e, r, events)
}
