package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/morphlab/morphlab/experiments/suite"
	"github.com/morphlab/morphlab/internal/datadir"
)

func init() {
	register(&command{name: "fleet-study", summary: "the cheapest fleet of each strategy (fixed, static, morphing, HPA, morph-aware autoscaling) at equal SLO, and its cost", run: runFleetStudy})
}

const fleetStudyHelp = `
Fleet-study finds, for each of the paper's setups and the whole hour of the Azure 2023 conversation and code
traces at their real rates and twice them, the cheapest fleet of each strategy that keeps TTFT-SLO violations at
most 1% and the P95 TTFT at most 2 s: fixed fleets of fp16, static:int8, static:int4, morph:default and
morph:compute replicas (the fewest that meet the SLO); fp16, morph:default and morph:compute replicas behind the
HPA rule, and morph:default and morph:compute behind the morph-aware controller (the cheapest autoscaler target),
each at every provisioning delay of --delays; all simulated (experiments/suite.FleetStudy). It writes fleet.md (per
delay each strategy's cost relative to fp16 with the HPA, quality loss, violations and P95 TTFT as geometric means,
where each wins, the morph-aware controller against its fixed fleet and static:int4, one burst while replicas
provision, and a table per setup), fleet.json, each chosen fleet's results and plots, cost-vs-quality-DELAY.png
(the Pareto front marked) and premise.png under --out, and prints fleet.md. See BENCHMARKS.md for its time; --hours
replays less of each trace.`

func runFleetStudy(e *env, args []string) error {
	fs := e.flags("[--out DIR] [--hours H] [--delays D,...] [--cpuprofile FILE]", fleetStudyHelp)
	out := fs.String("out", "results/fleet", "output `directory`")
	hours := fs.Float64("hours", 1, "how much of each trace replays, in `hours` from its start")
	delayList := fs.String("delays", "30s,2m,5m,10m", "the autoscaled strategies' provisioning `delays`, comma-separated")
	var prof profileFlags
	prof.Register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if !(*hours > 0 && *hours <= 1) {
		return usagef("--hours %g, want (0, 1]", *hours)
	}
	delays, err := suite.ParseDelays(*delayList)
	if err != nil {
		return usagef("--%v", err)
	}
	opt := suite.FleetOptions{Out: *out, Hours: *hours, Delays: delays, Progress: func(msg string) { fmt.Fprintf(e.stderr, "fleet-study: %s\n", msg) }}
	if dir, err := datadir.Dir(); err == nil {
		opt.Data = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stopProfile, err := prof.start(e.stderr)
	if err != nil {
		return err
	}
	r, err := suite.FleetStudy(ctx, opt)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	return r.WriteSummary(e.stdout)
}
