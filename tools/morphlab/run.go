package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/suite"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/numfmt"
)

func init() {
	register(&command{name: "run", summary: "replay a trace on the CPU engine under a policy (fp16, static, selective, morph)",
		run: func(e *env, args []string) error { return runReplay(e, args, "cpu", runHelp) }})
	register(&command{name: "simulate", summary: "replay a trace at paper scale in virtual time (the sim executor) under a policy",
		run: func(e *env, args []string) error { return runReplay(e, args, "sim", simulateHelp) }})
}

const runHelp = `
Run replays a request trace on the real engine (the CPU executor) under a memory budget and a policy, and writes
results.json (each request's TTFT, TPOT, E2E latency, tokens and precision mix; vLLM's aggregates, the TTFT-SLO
violation rate, preemptions, KV use), events.jsonl (swaps, KV regions, the controller's decisions) and table.md
into --out. The model is a checkpoint file or a model name (seeded random weights at its shape); --dtype sets
its full precision (the precision fp16 serves in). Prompts are seeded random tokens of the trace's lengths.

The deployment flags are every command's (experiments/deploy): the budget is --kv-blocks (the full-precision
weights, the workspace and that many KV blocks) or --memory, by default 32 full-context sequences' blocks;
--clock wall replays in real time, --clock cpu in virtual time advanced by each step's CPU time over the kernel
threads, which a loaded machine does not skew. Policies: fp16, static:int8, static:int4,
selective:N[:int8|int4], morph:accuracy|default|performance|predictive|slo[:k=v...] (engine/morph's package doc);
--profile takes the swap order from a 'morphlab profile' file, else front to back. --steps also writes
steps.jsonl, each step's work, layer formats and time, which 'morphlab calibrate --steps' fits. --executor sim
makes it 'morphlab simulate'. --replicas N or --autoscale replays the trace on a fleet (experiments/deploy.Fleet; see
'morphlab simulate -h').`

const simulateHelp = `
Simulate replays a request trace through the same engine, scheduler, KV manager and morph controller as 'morphlab
run', with the sim executor in place of the CPU one: each step's time comes from the cost model of --model on
--device (the catalog's shapes and datasheet ceilings, efficiencies fitted to Vidur's measured operator times; on
--device cpu, from a 'morphlab calibrate' file), weights and KV are accounted by format, and swaps cross the host
link (overlapped unless --blocking-swaps). It writes the same results.json, events.jsonl and table.md as run.

The budget is --kv-blocks (full-precision weights, the workspace and that many KV blocks: the paper's FP16 pools
are 958 blocks for the 7B models on an L4, 2,599 for Llama-3-8B on an L4, 3,435 for CodeLlama-34B on an A100),
--memory, or else --gpu-memory-utilization of the device's memory (default 0.9). The same inputs give the same
results.json, byte for byte.

--replicas N serves the trace on a fleet of N replicas of the deployment on one timeline behind --router
(round-robin, least-outstanding, least-kv, morph-aware), with admission control (--max-queue, --rate-limit and
--rate-burst turn requests away, each with its reason) and, with --autoscale METRIC=TARGET, a target-tracking
autoscaler (Kubernetes' HPA rule, or with --autoscale-controller morph-aware that rule scaling out only for load
the replicas' morphing cannot absorb and in only over replicas restored with no queue) that adds replicas --scale-delay
after asking for them and removes them after --scale-cooldown. results.json then holds the fleet's aggregates, each replica's, the fleet's size over time,
replica-hours and cost at the catalog's on-demand price of the device; fleet.png and fleet.svg plot the replicas
and the queue over time.

--fail-replica R@AT+DOWN,... kills replica R (from 0) AT into the run and starts it again DOWN later, behind a
proxy that handles it as HAProxy with health checks, retry-on and option redispatch does: the proxy marks it down
--fail-detect after its death and until then sends the requests the router gives it on to another replica; of the
requests in it, those whose response had begun are lost (finish "error"; --fail-response admission: those its
engine had taken in, as morphlab serve sends its headers then; first-token: those with a token) and the others
are sent on; it serves again --fail-restart after its restart. results.json records each fault with its times and counts
(fleet.faults) and each request's retries.

--loadtest REPORT serves, in the place of the server a 'morphlab loadtest --json' report measured, the same
requests (each rate's arrivals and lengths, drawn again from the report's seed; the load test must have sent
synthetic prompts) on the deployment or fleet: each rate's results go to --out/rate-R, the Latency-RPS curve with
its knee and capacity (under the report's --knee and --target-rps) to --out/loadtest.json, which 'morphlab
loadtest --compare' sets beside the measured one, and the curve to --out/latency-rps.png and .svg.`

// runReplay is run and simulate: it deploys the model as the flags say, replays the trace and writes the results.
func runReplay(e *env, args []string, executor, help string) error {
	fs := e.flags("--model M --trace FILE --policy P --out DIR [flags]", help)
	var df deploy.Flags
	df.Register(fs, executor)
	var ff deploy.FleetFlags
	ff.Register(fs)
	var rf replayFlags
	rf.register(fs)
	promptSeed := fs.Uint64("prompt-seed", 1, "`seed` of the prompts' random tokens")
	keep := fs.Bool("keep-tokens", false, "keep each request's output token ids in results.json (for quality comparisons)")
	steps := fs.Bool("steps", false, "write every step's work, layer formats and time to steps.jsonl (what 'morphlab calibrate --steps' fits)")
	reference := fs.String("reference", "", "a results.json `file` of the same requests, run with --keep-tokens (e.g. under fp16): report the greedy outputs' agreement with it")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	d, err := df.Deployment()
	if err != nil {
		return usagef("%v", err)
	}
	slo, err := rf.parse()
	if err != nil {
		return err
	}
	fleet, isFleet, err := ff.Fleet(d)
	if err != nil {
		return usagef("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if (isFleet || rf.loadtest != "") && (*keep || *steps || *reference != "") {
		return usagef("--keep-tokens, --steps and --reference are for one replica replaying a trace")
	}
	if rf.loadtest != "" {
		opts := deploy.ReplayOptions{SLO: slo, PromptSeed: *promptSeed}
		return replayLoadtest(ctx, e, &rf, d.Model, slo, func(ctx context.Context, t *trace.Trace) (*results.Run, []engine.Event, error) {
			if isFleet {
				r, err := fleet.Replay(ctx, t, opts)
				return r, nil, err
			}
			in, err := d.Build()
			if err != nil {
				return nil, nil, err
			}
			return in.Replay(ctx, t, opts)
		})
	}
	t, err := rf.load()
	if err != nil {
		return err
	}
	events, err := results.CreateEventLog(rf.out) // a fleet's stays empty
	if err != nil {
		return err
	}
	defer events.Close()
	if isFleet {
		fmt.Fprintf(e.stderr, "%s: %d requests on a fleet of %d replicas of %s (%s router)\n", e.name, len(t.Requests), len(fleet.Replicas), d.Model, fleet.Router)
		r, err := fleet.Replay(ctx, t, deploy.ReplayOptions{SLO: slo, PromptSeed: *promptSeed})
		if err != nil {
			return err
		}
		if err := suite.PlotFleet(filepath.Join(rf.out, "fleet"), r); err != nil {
			return err
		}
		return rf.write(e, r, events)
	}
	in, err := d.Build()
	if err != nil {
		return err
	}
	mem := in.Executor.Memory()
	fmt.Fprintf(e.stderr, "%s: %d requests, %s on %s, policy %s, budget %s (%d KV blocks at full precision, %d attached), clock %s\n",
		e.name, len(t.Requests), in.Name, d.Executor, d.Policy, numfmt.Bytes(mem.Budget), mem.FullBlocks, mem.Blocks, d.Clock)
	r, _, err := in.Replay(ctx, t, deploy.ReplayOptions{SLO: slo, PromptSeed: *promptSeed, KeepTokens: *keep || *reference != "",
		KeepSteps: *steps, Events: events.Add})
	if err != nil {
		return err
	}
	if *reference != "" {
		if r.Quality, err = results.Against(r, *reference); err != nil {
			return fmt.Errorf("--reference: %v", err)
		}
		q := r.Quality
		fmt.Fprintf(e.stderr, "%s: against %s, %.1f%% of the requests have the same output, %.1f%% of the tokens agree\n",
			e.name, *reference, 100*q.ExactMatch, 100*q.TokenAgreement)
	}
	return rf.write(e, r, events)
}

// replayLoadtest serves, in the place of the server, every rate of the load test whose report --loadtest names:
// the same requests, each rate's through replay into --out/rate-R, the curve with its knee and capacity (under
// the report's targets) into --out/loadtest.json and to stdout.
func replayLoadtest(ctx context.Context, e *env, rf *replayFlags, model string, slo metrics.SLO,
	replay func(context.Context, *trace.Trace) (*results.Run, []engine.Event, error)) error {
	src, err := loadtest.LoadReport(rf.loadtest)
	if err != nil {
		return err
	}
	w, err := src.Workload()
	if err != nil {
		return fmt.Errorf("--loadtest %s: %v", rf.loadtest, err)
	}
	o := loadtest.Options{Config: loadtest.Config{Model: model}, Workload: w, SLO: slo, Knee: src.KneeTarget, Plot: filepath.Join(rf.out, "latency-rps")}
	if c := src.Capacity; c != nil {
		o.TargetRPS, o.CostPerHour = c.TargetRPS, c.CostPerInstance
	}
	o.Serve = func(ctx context.Context, rate float64, reqs []loadtest.Request) (loadtest.Metrics, error) {
		r, events, err := replay(ctx, loadtest.TraceOf(reqs, fmt.Sprintf("%s at %v req/s", rf.loadtest, rate)))
		if err != nil {
			return loadtest.Metrics{}, err
		}
		a := r.Aggregates
		fmt.Fprintf(e.stderr, "%s: rate %v: %d requests, %d completed, %.3g req/s\n", e.name, rate, a.Requests, a.Completed, a.RequestThroughput)
		return a.Metrics, r.Write(filepath.Join(rf.out, fmt.Sprintf("rate-%v", rate)), events)
	}
	rep, err := loadtest.Run(ctx, o)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rf.out, "loadtest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if rf.json {
		return writeJSON(e.stdout, rep)
	}
	return rep.Write(e.stdout)
}
