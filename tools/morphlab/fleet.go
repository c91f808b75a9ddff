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
	register(&command{name: "fleet-study", summary: "the cheapest fleet of each strategy (autoscaling, static INT4, morphing) at equal SLO, and its cost", run: runFleetStudy})
}

const fleetStudyHelp = `
Fleet-study finds, for each of the paper's setups and the whole hour of the Azure 2023 conversation and code
traces at their real rates and twice them, the cheapest fleet of each strategy that keeps TTFT-SLO violations at
most 1% and the P95 TTFT at most 2 s: fixed fleets of fp16, static:int4 and morph:default replicas (the fewest
that meet the SLO) and autoscaled fleets of fp16 and morph:default replicas (the cheapest autoscaler target), all
simulated (experiments/suite.FleetStudy). It writes fleet.md (the cost of each strategy relative to fp16 with
autoscaling, and a table per setup), fleet.json, each chosen fleet's results and plots, and cost-vs-slo.png under
--out, and prints fleet.md. About 12 minutes on two cores (BENCHMARKS.md); --hours replays less of each trace.`

func runFleetStudy(e *env, args []string) error {
	fs := e.flags("[--out DIR] [--hours H]", fleetStudyHelp)
	out := fs.String("out", "results/fleet", "output `directory`")
	hours := fs.Float64("hours", 1, "how much of each trace replays, in `hours` from its start")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if !(*hours > 0 && *hours <= 1) {
		return usagef("--hours %g, want (0, 1]", *hours)
	}
	opt := suite.FleetOptions{Out: *out, Hours: *hours, Progress: func(msg string) { fmt.Fprintf(e.stderr, "fleet-study: %s\n", msg) }}
	if dir, err := datadir.Dir(); err == nil {
		opt.Data = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := suite.FleetStudy(ctx, opt)
	if err != nil {
		return err
	}
	return r.WriteSummary(e.stdout)
}
