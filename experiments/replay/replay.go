// Package replay runs a trace through the engine under a policy and collects its results: the one code path of
// `morphlab run` (the CPU executor), `morphlab simulate` (the sim executor) and the experiment suite. It turns a
// trace into timed requests with seeded prompt tokens, wires the morph controller in as the engine's hook, drives
// the engine's Replay on the chosen clock, keeps the lifecycle and control events as they happen, and assembles
// results.Run.
package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/quant"
)

// Requests turns a trace into requests with prompts of its lengths, drawn uniformly from token ids [3, vocab) with
// the given seed (ids 0-2 are the llama2.c vocabularies' unknown, BOS and EOS), in trace order.
func Requests(t *trace.Trace, vocab int, seed uint64) ([]engine.TimedRequest, error) {
	if vocab <= 3 {
		return nil, fmt.Errorf("replay: vocabulary of %d tokens, want > 3", vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]engine.TimedRequest, len(t.Requests))
	for i, r := range t.Requests {
		p := make([]int32, r.PromptTokens)
		for j := range p {
			p[j] = int32(3 + rng.IntN(vocab-3))
		}
		out[i] = engine.TimedRequest{Arrival: time.Duration(r.Arrival * float64(time.Second)),
			Request: engine.Request{Prompt: p, MaxTokens: r.OutputTokens}}
	}
	return out, nil
}

// Config is one replay.
type Config struct {
	Policy     morph.Spec
	Order      []int          // the swap order (a permutation of the layers)
	Base       []quant.Format // the layers' full-precision formats
	Engine     engine.Options // its Clock chooses the run's clock
	Meta       results.Meta   // what the results say was run; Policy, Params, KV and block size are filled in
	KeepTokens bool           // keep each request's output tokens in the results
	KeepSteps  bool           // keep every step's work, layer formats and time in the results (Run.Steps)
}

// Run replays reqs on x and returns the results and the engine's lifecycle and control events (no tokens).
func Run(ctx context.Context, x executor.Executor, cfg Config, reqs []engine.TimedRequest) (*results.Run, []engine.Event, error) {
	e, err := engine.New(x, cfg.Engine)
	if err != nil {
		return nil, nil, err
	}
	c := morph.NewController(e, cfg.Policy, cfg.Order, cfg.Base)
	e.OnStep(c.OnStep)
	var events []engine.Event
	var cursor uint64
	var steps []costmodel.Sample
	e.OnStep(func(info engine.StepInfo) {
		if cfg.KeepSteps && !info.Idle {
			steps = append(steps, StepSample(info))
		}
		evs, next := e.LogSince(cursor)
		cursor = next
		for _, ev := range evs {
			if ev.Kind != engine.Token {
				events = append(events, ev)
			}
		}
	})
	blocks := x.Memory().Blocks
	res, err := e.Replay(ctx, reqs)
	if err != nil {
		return nil, nil, err
	}
	evs, _ := e.LogSince(cursor)
	for _, ev := range evs {
		if ev.Kind != engine.Token {
			events = append(events, ev)
		}
	}
	meta := cfg.Meta
	meta.Policy = cfg.Policy.String()
	if cfg.Policy.Kind == "morph" {
		p := cfg.Policy.Params
		meta.Params = &p
	}
	meta.BlockSize = e.Geometry().BlockSize
	if meta.KVBlocksFull == 0 {
		meta.KVBlocksFull = blocks
	}
	r := results.Build(meta, reqs, res, c, cfg.KeepTokens)
	r.Steps = steps
	return r, events, nil
}

// StepSample is a step's work, its layers' formats and the executor's time for it, as the CPU calibration fits them.
func StepSample(info engine.StepInfo) costmodel.Sample {
	s := costmodel.Sample{Layers: costmodel.CountFormats(info.Formats), Seconds: info.Duration.Seconds()}
	for _, w := range info.Work {
		s.Work.AddSeq(w.Tokens, w.Start+w.Tokens, w.Sample)
	}
	return s
}

// CPUTimed is an executor whose steps take the process CPU time they used divided by threads, instead of their
// wall time: on a shared, loaded machine a virtual-time run with it replays what an unloaded machine with that
// many busy threads would, while every step is still computed for real.
type CPUTimed struct {
	executor.Executor
	Threads int
}

// Step runs the step and times it by CPU time.
func (c CPUTimed) Step(b *executor.Batch) (executor.Result, error) {
	u := ProcessCPU()
	r, err := c.Executor.Step(b)
	r.Duration = (ProcessCPU() - u) / time.Duration(max(1, c.Threads))
	return r, err
}

// ProcessCPU is the CPU time (user and system) the process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
