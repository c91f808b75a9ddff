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
	"strings"
	"syscall"
	"time"

	"github.com/morphlab/morphlab/engine/server"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/internal/numfmt"
)

func init() {
	register(&command{name: "serve", summary: "serve a model over an OpenAI-compatible HTTP API with Prometheus metrics", run: runServe})
}

const serveHelp = `
Serve runs the engine on the CPU (with --executor cuda in a -tags cuda build, on GPU 0) behind OpenAI's HTTP
API: POST /v1/completions and /v1/chat/completions (SSE with "stream": true), GET /v1/models, /health and
/metrics (Prometheus, vLLM's metric names with the morphlab: prefix).
--memory is the process's memory budget: the CPU executor gets what the process itself (the binary and runtime,
measured once the model is loaded) and a reserve for HTTP leave, and holds the weights, its workspace and KV
blocks in it (without --memory: the weights, the workspace and 32 full-context sequences of KV, and no bound on
the process); the cuda executor's --memory is its budget on the GPU (without it, 0.9 of the GPU's memory);
--scheduler picks continuous (iteration-level) batching or the static and dynamic baselines; the deployment flags
are every command's (experiments/deploy), vLLM's names where vLLM has the knob. With --max-queue N
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

func runServe(e *env, args []string) (err error) {
	fs := e.flags("--model FILE [flags]", serveHelp)
	var df deploy.Flags
	df.Register(fs, "cpu")
	name := fs.String("served-model-name", "", "the model `name` clients ask for (default: the checkpoint's file name without extension)")
	maxQueue := fs.Int("max-queue", 0, "requests waiting for their first batch at most; more get 429 (0: no bound)")
	addr := fs.String("addr", "127.0.0.1:8000", "listen `address`")
	grace := fs.Duration("grace", 30*time.Second, "on SIGINT/SIGTERM, how long running requests may take to finish")
	stepsFile := fs.String("steps", "", "write every step the engine runs (its work, layer formats and wall time) to `file`, JSON lines, the input of 'morphlab calibrate --steps'; written out as the server stops")
	var access accessFlags
	access.register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	var cfg server.Config
	if err := access.apply(&cfg); err != nil {
		return err
	}
	d, err := df.Deployment()
	switch {
	case err != nil:
		return usagef("%v", err)
	case d.Executor == "sim":
		return usagef("--executor sim: serve runs the cpu or cuda executor")
	case *maxQueue < 0 || *grace < 0:
		return usagef("--max-queue %d, --grace %v: want neither negative", *maxQueue, *grace)
	}
	l, err := d.Load()
	if err != nil {
		return err
	}
	if l.Vocab == nil {
		return usagef("%s has no vocabulary: give --tokenizer", d.Model)
	}
	// With --memory on the cpu executor: the process's budget less its mapped files (the cuda executor's --memory
	// is the GPU's).
	var heapLimit int64
	if total := d.KV.Memory; total > 0 && d.Executor == "cpu" {
		own := measureProcess()
		if l.Deployment.KV.Memory, err = engineBudget(total, own, int64(l.Weights.WeightBytes())); err != nil {
			return usagef("--memory: %v", err)
		}
		heapLimit = total - own.file
		fmt.Fprintf(e.stderr, "memory: %s for the process: %s resident after loading less the weights, %s kept for HTTP, %s for the engine\n",
			numfmt.Bytes(total), numfmt.Bytes(total-l.Deployment.KV.Memory-serveReserve), numfmt.Bytes(serveReserve), numfmt.Bytes(l.Deployment.KV.Memory))
	}
	in, err := l.Start()
	if err != nil {
		return err
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(d.Model), filepath.Ext(d.Model))
	}
	if *stepsFile != "" {
		rec, err := deploy.RecordSteps(in.Engine, *stepsFile)
		if err != nil {
			return fmt.Errorf("--steps: %w", err)
		}
		defer func() {
			if cerr := rec.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("--steps: %w", cerr)
			}
		}()
	}
	cfg.Model, cfg.Vocab, cfg.Engine, cfg.MaxQueue, cfg.Grace = *name, l.Vocab, in.Engine, *maxQueue, *grace
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mem := in.Executor.Memory()
	if d.Executor == "cpu" {
		limitHeap(cmp.Or(heapLimit, mem.Budget))
	}
	fmt.Fprintf(e.stderr, "serving %s on http://%s: %s batching, policy %s, %d KV blocks of %d tokens, budget %s (weights %s)\n",
		*name, ln.Addr(), d.Scheduler.Kind, d.Policy, mem.Blocks, d.KV.BlockSize, numfmt.Bytes(mem.Budget), numfmt.Bytes(mem.Weights))
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
			numfmt.Bytes(total), numfmt.Bytes(weights), numfmt.Bytes(overhead-serveReserve), numfmt.Bytes(serveReserve))
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
