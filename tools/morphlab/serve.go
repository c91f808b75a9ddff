package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/engine/server"
)

func init() {
	register(&command{name: "serve", summary: "serve a model over an OpenAI-compatible HTTP API with Prometheus metrics", run: runServe})
}

const serveHelp = `
Serve runs the engine on the CPU behind OpenAI's HTTP API: POST /v1/completions and /v1/chat/completions (SSE with
"stream": true), GET /v1/models, /health and /metrics (Prometheus, vLLM's metric names with the morphlab: prefix).
--memory is the process's memory budget: the CPU executor gets what the process itself (the binary and runtime,
measured once the model is loaded) and a reserve for HTTP leave, and holds the weights, its workspace and KV
blocks in it (without --memory: the weights, the workspace and 32 full-context sequences of KV, and no bound on
the process);
--scheduler picks continuous (iteration-level) batching or the static and dynamic baselines. With --max-queue N
a request arriving while N wait for their first batch is answered 429 with Retry-After. SIGINT or SIGTERM stops
admitting, lets running requests finish within --grace, and exits 0. The Go collector's soft memory limit is set
to the budget less the binary's mapped pages (unless GOMEMLIMIT is set), so that under load the heap stays near
the budget instead of growing to twice what is live before each collection.

With --api-key (or $MORPHLAB_API_KEY) every request but GET /health and GET /metrics must send
"Authorization: Bearer KEY" (401 otherwise). POST bodies must be application/json (415 otherwise), at most 4 MiB
(413). No web page of another origin may call the server unless --allowed-origins lists its origin. A request
counts against --max-queue from before its body is read, and a prompt too long for the context is refused from
its length before it is tokenized. A client has 10 s for its headers and 30 s for its body; an idle kept-alive
connection is closed after 60 s; --max-connections bounds the open connections. The package doc of
engine/server lists the parameters and error answers.`

func runServe(e *env, args []string) error {
	fs := e.flags("--model FILE [flags]", serveHelp)
	var mf modelFlags
	mf.register(fs)
	name := fs.String("served-model-name", "", "the model `name` clients ask for (default: the checkpoint's file name without extension)")
	memory := fs.String("memory", "", "the process's memory `budget`, e.g. 256MiB or 2GiB, the engine's share what the process and HTTP leave (default: weights, workspace and 32 full-context sequences of KV for the engine)")
	policy := fs.String("scheduler", "continuous", "batching: continuous, dynamic or static")
	blockSize := fs.Int("block-size", 16, "KV block size in `tokens`")
	stepTokens := fs.Int("max-num-batched-tokens", 256, "tokens one iteration feeds at most (the workspace is sized for it)")
	maxSeqs := fs.Int("max-num-seqs", 256, "running sequences at most (continuous batching)")
	batch := fs.Int("batch-size", 32, "batch size of static and dynamic batching")
	maxDelay := fs.Duration("max-delay", 50*time.Millisecond, "dynamic batching: the longest a request waits for its batch to fill")
	maxQueue := fs.Int("max-queue", 0, "requests waiting for their first batch at most; more get 429 (0: no bound)")
	addr := fs.String("addr", "127.0.0.1:8000", "listen `address`")
	grace := fs.Duration("grace", 30*time.Second, "on SIGINT/SIGTERM, how long running requests may take to finish")
	morphPolicy := fs.String("policy", "fp16", "morphing `policy`: fp16, static:int8|int4, selective:N[:int8|int4], morph:MODE[:k=v...] (as morphlab run)")
	profile := fs.String("profile", "", "layer swap order from a 'morphlab profile' `file`")
	var access accessFlags
	access.register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	var cfg server.Config
	if err := access.apply(&cfg); err != nil {
		return err
	}
	spec, err := morph.Parse(*morphPolicy)
	if err != nil {
		return usagef("--policy: %v", err)
	}
	switch {
	case *policy != "continuous" && *policy != "dynamic" && *policy != "static":
		return usagef("--scheduler=%s, want continuous, dynamic or static", *policy)
	case *blockSize < 1 || *stepTokens < 1 || *maxSeqs < 1 || *batch < 1:
		return usagef("--block-size %d, --max-num-batched-tokens %d, --max-num-seqs %d, --batch-size %d: want each at least 1",
			*blockSize, *stepTokens, *maxSeqs, *batch)
	case *maxQueue < 0 || *grace < 0 || *maxDelay < 0:
		return usagef("--max-queue %d, --grace %v, --max-delay %v: want none negative", *maxQueue, *grace, *maxDelay)
	}
	var budget int64
	if *memory != "" {
		b, err := parseBytes(*memory)
		if err != nil {
			return usagef("--memory: %v", err)
		}
		budget = b
	}
	m, vocab, err := mf.load()
	if err != nil {
		return err
	}
	order, base, err := servingSetup(m, spec, *profile)
	if err != nil {
		return err
	}
	var heapLimit int64 // with --memory: the process's budget less its mapped files
	if budget == 0 {
		blocks := 32 * ((m.Config.SeqLen + *blockSize - 1) / *blockSize)
		budget = budgetFor(m, base, m.SequenceKV, *blockSize, *stepTokens, blocks)
	} else {
		own, total := measureProcess(), budget
		if budget, err = engineBudget(total, own, int64(m.WeightBytes())); err != nil {
			return usagef("--memory: %v", err)
		}
		heapLimit = total - own.file
		fmt.Fprintf(e.stderr, "memory: %s for the process: %s resident after loading less the weights, %s kept for HTTP, %s for the engine\n",
			*memory, formatBytes(total-budget-serveReserve), formatBytes(serveReserve), formatBytes(budget))
	}
	x, err := executor.NewCPU(m, executor.CPUOptions{Budget: budget, BlockSize: *blockSize, MaxBatchedTokens: *stepTokens, KVType: m.SequenceKV})
	if err != nil {
		return err
	}
	eng, err := engine.New(x, engine.Options{Scheduler: *policy, MaxSeqs: *maxSeqs, BatchSize: min(*batch, *stepTokens), MaxDelay: *maxDelay})
	if err != nil {
		return err
	}
	controller := morph.NewController(eng, spec, order, base)
	eng.OnStep(controller.OnStep)
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(mf.path), filepath.Ext(mf.path))
	}
	cfg.Model, cfg.Vocab, cfg.Engine, cfg.MaxQueue, cfg.Grace = *name, vocab, eng, *maxQueue, *grace
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	limitHeap(cmp.Or(heapLimit, budget))
	mem := x.Memory()
	fmt.Fprintf(e.stderr, "serving %s on http://%s: %s batching, policy %s, %d KV blocks of %d tokens, budget %s (weights %s)\n",
		*name, ln.Addr(), *policy, spec, mem.Blocks, *blockSize, formatBytes(mem.Budget), formatBytes(mem.Weights))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	announced := make(chan struct{})
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
		fmt.Fprintf(e.stderr, "stopping: finishing running requests (at most %v; a second signal exits now)\n", *grace)
		close(announced)
	}()
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	<-announced // Serve returns nil only once ctx has ended
	fmt.Fprintf(e.stderr, "stopped\n")
	return nil
}

// serveReserve is what --memory keeps for answering HTTP beside the engine: connection buffers, handler goroutines'
// stacks, request bodies and streams. The overload check of tools/loadbench/batching.sh (4x the knee rate for 60 s
// with --max-queue 32) holds its peak resident set within --memory with it.
const serveReserve = 16 << 20

// processMemory is the process's resident memory once the model is loaded, and the part of it that maps files
// (the binary's pages), which the Go collector's limit does not cover.
type processMemory struct{ resident, file int64 }

// measureProcess collects the garbage of loading, returns it to the OS and reads the resident set from
// /proc/self/statm; where there is none (not Linux) it counts the memory the Go runtime holds from the OS.
func measureProcess() processMemory {
	runtime.GC()
	debug.FreeOSMemory()
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		var size, resident, shared int64
		if _, err := fmt.Sscan(string(b), &size, &resident, &shared); err == nil {
			page := int64(os.Getpagesize())
			return processMemory{resident: resident * page, file: shared * page}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return processMemory{resident: int64(ms.Sys - ms.HeapReleased)}
}

// engineBudget splits a process budget of total bytes: the engine (weights, workspace, KV blocks) gets what is left
// once the process's own memory (resident after loading, less the weights, which the engine counts) and
// serveReserve are set aside.
func engineBudget(total int64, own processMemory, weights int64) (int64, error) {
	overhead := max(0, own.resident-weights) + serveReserve
	if total <= overhead+weights {
		return 0, fmt.Errorf("%s leaves nothing for KV blocks: the weights take %s, the process %s and HTTP %s",
			formatBytes(total), formatBytes(weights), formatBytes(overhead-serveReserve), formatBytes(serveReserve))
	}
	return total - overhead, nil
}

// limitHeap sets the Go collector's soft memory limit to budget bytes, unless GOMEMLIMIT sets one. Without it
// the heap of a loaded server grows to twice its live size between collections (GOGC=100): a server holding its
// budget would use twice the budget.
func limitHeap(budget int64) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(budget)
	}
}

// parseBytes reads a size: an integer with an optional unit, B, KiB, MiB, GiB (powers of 1024) or KB, MB, GB
// (powers of 1000).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		scale  int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, scale := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, scale = n, u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v <= 0 || v*float64(scale) > 1<<62 {
		return 0, fmt.Errorf("%q, want a positive size such as 512MiB, 2GiB or 1000000", s)
	}
	return int64(v * float64(scale)), nil
}
