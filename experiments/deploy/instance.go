package deploy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/splitmix"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/quant"
)

// Instance is a started deployment: its executor, the engine over it and the controller in the engine's hooks.
// The engine is not running: Replay drives it through a trace, or a server runs its loop.
type Instance struct {
	*Loaded
	Executor   executor.Executor
	Engine     *engine.Engine
	Controller *morph.Controller
	replayed   bool
}

// Start builds the executor (sized by the deployment's pool, its layers in the policy's starting formats), the
// engine over it, and the controller, added to the engine's hooks.
func (l *Loaded) Start() (*Instance, error) { return l.start(instanceLog) }

// instanceLog is the events an instance's engine keeps in its log: Replay takes every event as it is logged
// (engine.Engine.OnEvent), and nothing else reads the log.
const instanceLog = 256

// start is Start with an engine event log of logSize events (0: the engine's default).
func (l *Loaded) start(logSize int) (*Instance, error) {
	if l.started {
		return nil, fmt.Errorf("deploy: %s already started: load the deployment again for another instance", l.Name)
	}
	d := l.Deployment
	start := d.Policy.Start(l.Order, l.Base)
	var x executor.Executor
	var clock executor.Clock = executor.NewWallClock()
	switch d.Executor {
	case "cpu":
		cx, err := executor.NewCPU(l.Weights, executor.CPUOptions{Pool: l.pool(), BlockSize: d.KV.BlockSize,
			MaxBatchedTokens: d.Scheduler.MaxBatchedTokens, Start: start, KVType: l.KVType})
		if err != nil {
			return nil, err
		}
		x = cx
		switch d.Clock {
		case "cpu":
			x, clock = CPUTimed{Executor: cx, Threads: cpu.Threads()}, &executor.VirtualClock{}
		case "thread":
			x, clock = ThreadTimed{Executor: cx}, &executor.VirtualClock{}
		}
	case "sim":
		sx, err := executor.NewSim(executor.SimOptions{Cost: l.cost, Formats: l.formats, Start: start, Outer: quant.F16,
			Pool: l.pool(), BlockSize: d.KV.BlockSize, MaxBatchedTokens: d.Scheduler.MaxBatchedTokens, Seed: d.SimSeed,
			Swap: executor.SwapCost{HostLink: l.hw.HostLink, Blocking: d.BlockingSwaps}})
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", l.Name, d.Device, err)
		}
		x, clock = sx, &executor.VirtualClock{}
	case "cuda":
		var err error
		if x, err = l.startCUDA(start); err != nil {
			return nil, fmt.Errorf("%s on the GPU: %w", l.Name, err)
		}
	}
	s := d.Scheduler
	eng, err := engine.New(x, engine.Options{Scheduler: s.Kind, MaxBatchedTokens: s.MaxBatchedTokens, MaxNumSeqs: s.MaxNumSeqs,
		BatchSize: s.BatchSize, MaxDelay: s.MaxDelay, Clock: clock, LogSize: logSize, QuietTokens: true, PrefixCaching: d.PrefixCaching()})
	if err != nil {
		return nil, err
	}
	c, err := morph.NewController(eng, d.Policy, l.Order, l.Base)
	if err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	eng.OnStep(c.OnStep)
	l.started = true
	return &Instance{Loaded: l, Executor: x, Engine: eng, Controller: c}, nil
}

// ReplayOptions say how a trace is replayed and what the results keep.
type ReplayOptions struct {
	SLO metrics.SLO // the limits for violations and goodput
	// PromptSeed draws the prompts' tokens (0 is 1).
	PromptSeed uint64
	// KeepTokens keeps each request's output tokens in the results (quality comparisons).
	KeepTokens bool
	// KeepSteps keeps every step's work, layer formats and time (results.Run.Steps: what a calibration fits).
	KeepSteps bool
	// Events, when set, is given each lifecycle and control event (no tokens) as the engine logs it, and
	// Instance.Replay returns none: a long replay need not hold them (results.EventLog.Add writes them out). A
	// fleet's replay, which returns no events, ignores it.
	Events func(engine.Event)
	// StopAfterViolations, above 0, ends a fleet's replay early with ErrSLOMissed once more requests than this
	// have missed the TTFT SLO (turned away, or their first token later than SLO.TTFT): a search for the
	// smallest fleet that meets an SLO need not finish a run that has already missed it. Instance.Replay ignores it.
	StopAfterViolations int
}

// ErrSLOMissed is a fleet's replay ended early by ReplayOptions.StopAfterViolations.
var ErrSLOMissed = errors.New("deploy: more requests missed the TTFT SLO than the replay stops after")

// Replay runs t (clipped to the model's context) through the instance, every request at its arrival, to the
// end, and returns the results and the engine's lifecycle and control events (no tokens; none when o.Events
// takes them). An instance replays once. It holds the prompts of the requests in flight only, and their results
// until they end.
func (in *Instance) Replay(ctx context.Context, t *trace.Trace, o ReplayOptions) (*results.Run, []engine.Event, error) {
	if in.replayed {
		return nil, nil, fmt.Errorf("deploy: this instance of %s has replayed a trace already: start another", in.Name)
	}
	in.replayed = true
	g := in.Engine.Geometry()
	t, err := trace.Clip(t, trace.Limits{Context: g.Context})
	if err != nil {
		return nil, nil, err
	}
	src := newPromptSource(g.Vocab, max(o.PromptSeed, 1), hashBlock(t))
	if src == nil {
		return nil, nil, fmt.Errorf("deploy: vocabulary of %d tokens, want > 3", g.Vocab)
	}
	e := in.Engine
	var events []engine.Event
	keep := o.Events
	if keep == nil {
		keep = func(ev engine.Event) { events = append(events, ev) }
	}
	e.OnEvent(func(ev engine.Event) {
		if ev.Kind != engine.Token {
			keep(ev)
		}
	})
	var steps []costmodel.Sample
	if o.KeepSteps {
		e.OnStep(func(info engine.StepInfo) {
			if !info.Idle {
				steps = append(steps, StepSample(info))
			}
		})
	}
	if in.Deployment.Clock == "thread" {
		runtime.LockOSThread() // the steps run on this goroutine, and ThreadTimed reads its thread's clock
		defer runtime.UnlockOSThread()
	}
	arrivals := traceArrivals{t: t, src: src, marks: map[int][]byte{}}
	acc := results.NewAccumulator(results.Meta{}, in.Controller.Recorder.Layers())
	acc.Grow(len(t.Requests))
	err = e.ReplayEach(ctx, arrivals, func(i int, res engine.Result) {
		delete(arrivals.marks, i)
		acc.AddRequest(arrivals.lengths(i), res, in.Controller.Recorder.Take(res.ID), o.KeepTokens, true)
	})
	if err != nil {
		return nil, nil, err
	}
	d, mem := in.Deployment, in.Executor.Memory()
	rec, err := d.record()
	if err != nil {
		return nil, nil, err
	}
	meta := replayMeta(t, o)
	meta.Command, meta.Executor, meta.Clock, meta.Model = "run", d.Executor, d.Clock, in.Name
	meta.Policy, meta.Params, meta.Deployment = d.Policy.String(), morph.Params(d.Policy), &rec
	meta.Memory, meta.KVBlocksFull, meta.BlockSize = mem.Budget, mem.FullBlocks, g.BlockSize
	switch d.Executor {
	case "sim":
		meta.Command, meta.Device = "simulate", d.Device
	case "cuda":
		meta.Device = d.Device
	}
	r := results.Build(meta, acc, in.Controller)
	r.Steps = steps
	return r, events, nil
}

// traceArrivals are a trace's requests as the engine's replay draws them, each prompt drawn when its request
// arrives (by a promptSource, in trace order: the tokens Requests gives), and drawn again when the engine reloads
// a prompt it let go of while the request waited (engine.PromptReloader).
type traceArrivals struct {
	t   *trace.Trace
	src *promptSource
	// marks are the source's marks of the requests in flight, for Prompt.
	marks map[int][]byte
}

func (a traceArrivals) Len() int { return len(a.t.Requests) }

func (a traceArrivals) Arrival(i int) time.Duration {
	return time.Duration(a.t.Requests[i].Arrival * float64(time.Second))
}

func (a traceArrivals) Request(i int) engine.Request {
	a.marks[i] = a.src.mark()
	return a.src.request(a.t.Requests[i], a.Arrival(i)).Request
}

// Prompt is request i's prompt again.
func (a traceArrivals) Prompt(i int) []int32 { return a.src.again(a.t.Requests[i], a.marks[i]) }

// lengths is request i as the results count it: its arrival, its prompt's length and its output limit.
func (a traceArrivals) lengths(i int) loadtest.Request {
	r := a.t.Requests[i]
	return loadtest.Request{Arrival: a.Arrival(i), PromptTokens: r.PromptTokens, MaxTokens: r.OutputTokens}
}

// Requests turns a trace into requests with prompts of its lengths, in trace order, their tokens drawn uniformly
// from ids [3, vocab) (ids 0-2 are the llama2.c vocabularies' unknown, BOS and EOS). Where a request has hash ids
// (Mooncake's: each stands for the next t.HashBlock prompt tokens, and equal leading ids mean a shared prefix), the
// tokens of each id's block are drawn from a stream of their own, seeded by the seed and the id, so that equal ids
// give equal tokens and requests share real prefixes where the trace says they do; the tokens beyond the ids, and
// every token of a request without them, come from one stream over the trace drawn with the seed.
func Requests(t *trace.Trace, vocab int, seed uint64) ([]engine.TimedRequest, error) {
	src := newPromptSource(vocab, seed, hashBlock(t))
	if src == nil {
		return nil, fmt.Errorf("deploy: vocabulary of %d tokens, want > 3", vocab)
	}
	out := make([]engine.TimedRequest, len(t.Requests))
	for i, r := range t.Requests {
		out[i] = src.request(r, time.Duration(r.Arrival*float64(time.Second)))
	}
	return out, nil
}

// hashBlock is the prompt tokens each of t's hash ids stands for (Mooncake's when the trace does not say).
func hashBlock(t *trace.Trace) int {
	if t.HashBlock > 0 {
		return t.HashBlock
	}
	return trace.MooncakeBlock
}

// hashStream is the PCG stream of a hash id's tokens: the id hashed, so that nearby ids start far apart.
func hashStream(id int64) uint64 { return splitmix.Hash(uint64(id)) }

// UnboundedCacheHits is what prefix caching finds of t's prompts (as Requests builds them) in a cache that never
// evicts, the requests served one after another in trace order: for each request, the prompt tokens in its
// leading full blocks of blockSize tokens, up to all its tokens but the last, that an earlier request's prompt
// filled with the same tokens. It is read off the hash ids alone: a block's tokens are those of the hash-id
// prefix that covers it, so two requests share a block where their ids agree up to the one that holds its last
// token (tokens past a request's ids are its own). The replay measures the same under a big enough pool
// (MaxNumSeqs 1), block for block; a real pool, with requests side by side and evictions, finds less.
func UnboundedCacheHits(t *trace.Trace, blockSize int) []int {
	block := hashBlock(t)
	seen := map[string]bool{}
	key := func(ids []int64, b int) (string, bool) {
		last := ((b+1)*blockSize - 1) / block // the hash block holding the block's last token
		if last >= len(ids) {
			return "", false
		}
		k := make([]byte, 0, 8*(last+2))
		k = binary.LittleEndian.AppendUint64(k, uint64(b))
		for _, id := range ids[:last+1] {
			k = binary.LittleEndian.AppendUint64(k, uint64(id))
		}
		return string(k), true
	}
	out := make([]int, len(t.Requests))
	for i, r := range t.Requests {
		// Blocks hit up to the first miss (and short of the last token); every full block is cached after. A
		// block past the ids has no key, nor has any after it.
		hitting := true
		for b := 0; b < r.PromptTokens/blockSize; b++ {
			k, ok := key(r.HashIDs, b)
			if !ok {
				break
			}
			hitting = hitting && b < (r.PromptTokens-1)/blockSize && seen[k]
			if hitting {
				out[i] += blockSize
			}
			seen[k] = true
		}
	}
	return out
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

// ThreadTimed is an executor whose steps take the CPU time of the thread that ran them, for runs side by side in
// one process, each on one kernel thread (kernels then run on the caller's thread) and on a goroutine locked to
// its thread (Replay locks it): each run counts only its own work, as CPUTimed counts a process's.
type ThreadTimed struct {
	executor.Executor
}

// Step runs the step and times it by the thread's CPU time.
func (c ThreadTimed) Step(b *executor.Batch) (executor.Result, error) {
	u := ThreadCPU()
	r, err := c.Executor.Step(b)
	r.Duration = ThreadCPU() - u
	return r, err
}

// ThreadCPU is the CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// ProcessCPU is the CPU time (user and system) the process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
