package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/suite"
	"github.com/morphlab/morphlab/experiments/trace"
)

func init() {
	register(&command{name: "plan", summary: "the cheapest deployment (device, policy, fixed or autoscaled fleet) that serves a trace within an SLO and a quality budget", run: runPlan})
}

const planHelp = `
Plan simulates --model serving the trace on fleets of each device of --devices (the largest first) under each policy of
--policies, fixed and behind each autoscaler of --autoscalers (morph-aware with morphing policies only), and answers
the cheapest that keeps at most --violations of the requests beyond --slo, the P95 TTFT within the SLO's TTFT and
the quality loss within --quality-loss (experiments/suite.Cheapest). A candidate is searched only below the
cheapest found so far: a fixed fleet's size from the fleet that meets the trace's first ten minutes, then by
galloping and bisecting; an autoscaled fleet keeps that many replicas and takes the highest target that meets.
It writes plan.md (every candidate considered: device, policy, fleet, $/h, $/M output tokens, violations, P95 TTFT,
quality loss, or why it was pruned; the winner's replica's Latency-RPS curve and the instances the capacity method
gives beside the winner), plan.json, the winner's results.json and latency-rps.png under --out, and prints plan.md.
The trace flags pick and stretch the trace: --time-scale 0.5 replays it at twice its rate.`

func runPlan(e *env, args []string) error {
	fs := e.flags("--trace FILE --model M --quality-loss PERCENT [--slo ttft=2s] [--devices l4,a100,h100,h200] [--out DIR]", planHelp)
	var tf trace.Flags
	tf.Register(fs)
	tracePath := fs.String("trace", "", "request trace `file`")
	spec := suite.PlanSpec{Progress: func(msg string) { fmt.Fprintf(e.stderr, "plan: %s\n", msg) }}
	fs.StringVar(&spec.Model, "model", "llama-2-7b", "catalog `model`")
	slo := fs.String("slo", "ttft=2s", "SLO `limits` a request must meet: ttft=..,tpot=..,e2el=..")
	fs.Float64Var(&spec.MaxViolations, "violations", 0.01, "the most `share` of requests beyond the SLO")
	loss := fs.Float64("quality-loss", -1, "the most quality loss, in `percent` of perplexity")
	devices := fs.String("devices", strings.Join(suite.PlanDevices, ","), "`devices` to try, comma-separated")
	policies := fs.String("policies", strings.Join(suite.Policies, ","), "`policies` to try, comma-separated")
	autoscalers := fs.String("autoscalers", "hpa,morph-aware", "autoscaler `rules` to try with each policy, comma-separated (\"\": fixed fleets only)")
	fs.DurationVar(&spec.Delay, "scale-delay", suite.DefaultPlanDelay, "the autoscalers' provisioning `delay`")
	out := fs.String("out", "results/plan", "output `directory`")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *tracePath == "" || *loss < 0 {
		return usagef("--trace and --quality-loss are required (run 'morphlab plan -h' for usage)")
	}
	var err error
	if spec.SLO, err = metrics.ParseSLO(*slo); err != nil || spec.SLO.TTFT == 0 {
		return usagef("--slo %q: want a TTFT limit, such as ttft=2s (%v)", *slo, err)
	}
	if spec.Trace, err = tf.Load(*tracePath); err != nil {
		return err
	}
	spec.MaxLoss, spec.Devices, spec.Policies = *loss/100, strings.Split(*devices, ","), strings.Split(*policies, ",")
	spec.Controllers = strings.FieldsFunc(*autoscalers, func(r rune) bool { return r == ',' })
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p, err := suite.Cheapest(ctx, spec)
	if err != nil {
		return err
	}
	if err := p.Write(*out); err != nil {
		return err
	}
	return p.WriteSummary(e.stdout)
}
