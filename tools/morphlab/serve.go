package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"path/filepath"
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
--memory is the engine's memory budget, as in every command: the executor holds the weights, its workspace and
KV blocks in it (the cuda executor on the GPU; without --memory or --kv-blocks, 0.9 of the GPU's memory, and on
the CPU the weights, the workspace and 32 full-context sequences of KV). --max-process-memory bounds the whole
process (cpu executor): the engine gets what the process itself (the binary and runtime, measured once the model
is loaded) and a reserve for HTTP leave, or its --memory or --kv-blocks if that fits. --scheduler picks continuous
(iteration-level) batching or the static and dynamic baselines; the deployment flags are every command's
(experiments/deploy), vLLM's names where vLLM has the knob. With --max-queue N a request arriving while N wait
for their first batch is answered 429 with Retry-After. SIGINT, SIGTERM or SIGHUP stops admitting, lets running requests
finish within --grace, and exits 0. The Go collector's soft memory limit is set to --max-process-memory less the
binary's mapped pages, or else to the engine's budget (unless GOMEMLIMIT is set), so that under load the heap
stays near the budget instead of growing to twice what is live before each collection.

With --api-key (or $MORPHLAB_API_KEY) every request but GET /health and GET /metrics must send
"Authorization: Bearer KEY" (401 otherwise). POST bodies must be application/json (415 otherwise), at most 4 MiB
(413). No web page of another origin may call the server unless --allowed-origins lists its origin. A request
counts against --max-queue from when its body begins, and a prompt too long for the context is refused from
its length before it is tokenized. A client has 10 s for its headers and 30 s for its body; an idle kept-alive
connection is closed after 60 s; a write that waits --write-timeout for a client that reads nothing cancels the
request and closes the connection; --max-connections bounds the open connections. The package doc of
engine/server lists the parameters and error answers.`

func runServe(e *env, args []string) (err error) {
	fs := e.flags("--model FILE [flags]", serveHelp)
	var df deploy.Flags
	df.Register(fs, "cpu")
	name := fs.String("served-model-name", "", "the model `name` clients ask for (default: the checkpoint's file name without extension)")
	maxQueue := fs.Int("max-queue", 0, "requests waiting for their first batch at most; more get 429 (0: no bound)")
	addr := fs.String("addr", "127.0.0.1:8000", "listen `address`")
	grace := fs.Duration("grace", 30*time.Second, "on SIGINT/SIGTERM/SIGHUP, how long running requests may take to finish")
	stepsFile := fs.String("steps", "", "write every step the engine runs (its work, layer formats and wall time) to `file`, JSON lines, the input of 'morphlab calibrate --steps'; written out as the server stops")
	maxProcess := fs.String("max-process-memory", "", "the whole process's memory budget `size` (cpu executor): the engine gets what the binary, the runtime and HTTP leave; default: no bound")
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
	case *maxProcess != "" && d.Executor != "cpu":
		return usagef("--max-process-memory bounds the cpu executor's process; the %s executor's budget is --memory on its device", d.Executor)
	}
	var processBudget int64
	if *maxProcess != "" {
		if processBudget, err = deploy.ParseBytes(*maxProcess); err != nil {
			return usagef("--max-process-memory: %v", err)
		}
	}
	l, err := d.Load()
	if err != nil {
		return err
	}
	if l.Vocab == nil {
		return usagef("%s has no vocabulary: give --tokenizer", d.Model)
	}
	// With --max-process-memory: the engine's share is what the process leaves, and the heap's limit the budget
	// less the process's mapped files.
	var heapLimit, engineShare int64
	if processBudget > 0 {
		own := server.MeasureProcess()
		if engineShare, err = server.EngineBudget(processBudget, own, int64(l.Weights.WeightBytes())); err != nil {
			return usagef("--max-process-memory: %v", err)
		}
		if d.Memory > engineShare {
			return overProcess(processBudget, engineShare, d.Memory)
		}
		if d.Memory == 0 && d.KV.Blocks == 0 {
			l.Deployment.Memory = engineShare
		}
		heapLimit = processBudget - own.File
	}
	in, err := l.Start()
	if err != nil {
		return err
	}
	mem := in.Executor.Memory()
	if processBudget > 0 {
		if mem.Budget > engineShare { // --kv-blocks, known once the executor is sized
			return overProcess(processBudget, engineShare, mem.Budget)
		}
		fmt.Fprintf(e.stderr, "memory: %s for the process: %s resident after loading less the weights, %s kept for HTTP, %s for the engine\n",
			numfmt.Bytes(processBudget), numfmt.Bytes(processBudget-engineShare-server.HTTPReserve), numfmt.Bytes(server.HTTPReserve), numfmt.Bytes(mem.Budget))
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
	var small *server.PoolError
	if errors.As(err, &small) {
		return usagef("%v: give it more blocks (--kv-blocks, or a larger --memory)", err)
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if d.Executor == "cpu" {
		server.LimitHeap(cmp.Or(heapLimit, mem.Budget))
	}
	fmt.Fprintf(e.stderr, "serving %s on http://%s: %s batching, policy %s, %d KV blocks of %d tokens, budget %s (weights %s)\n",
		*name, ln.Addr(), d.Scheduler.Kind, d.Policy, mem.Blocks, d.KV.BlockSize, numfmt.Bytes(mem.Budget), numfmt.Bytes(mem.Weights))
	// SIGHUP too: a closed terminal or a dropped SSH session drains the server as SIGTERM does, so that no
	// stream ends without its [DONE].
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
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

// overProcess is the error of an engine budget (--memory or --kv-blocks) beyond what --max-process-memory leaves.
func overProcess(process, share, engine int64) error {
	return usagef("--max-process-memory %s leaves the engine %s, and its budget (--memory or --kv-blocks) is %s",
		numfmt.Bytes(process), numfmt.Bytes(share), numfmt.Bytes(engine))
}
