package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/suite"
)

func init() {
	register(&command{name: "rerun", summary: "run a results.json again from its own record", run: runRerun})
}

const rerunHelp = `
Rerun runs again what a results.json records (experiments/deploy.Rerun): the deployment after its defaults, or the
fleet; the trace, its file read again and checked against the recorded sha256 or its generator drawn again with its
seed, each transform reapplied; the prompt seed and the SLO. It writes results.json, events.jsonl and table.md (a
fleet's fleet.png and fleet.svg, steps.jsonl when the run kept its steps) into --out. A simulation gives the same
results.json byte for byte when this morphlab build is the one that ran it (meta.morphlab names the build). The
cpu executor times its steps anew, on the wall clock or the CPU-time clock alike, so its timings, and the batches
and swaps that follow from them, differ within the machine's noise. A trace, calibration or profile file that
changed or is missing is an error naming it; results written before meta recorded the deployment (schema 1)
cannot be run again.`

func runRerun(e *env, args []string) error {
	fs := e.flags("RESULTS.json --out DIR", rerunHelp)
	out := fs.String("out", "", "output `directory`")
	files, err := e.parseFiles(fs, args)
	switch {
	case err != nil:
		return err
	case len(files) != 1:
		return usagef("want one results.json, have %d (run 'morphlab rerun -h' for usage)", len(files))
	case *out == "":
		return usagef("--out is required")
	}
	old, err := results.Load(files[0])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, events, err := deploy.Rerun(ctx, old)
	if err != nil {
		return fmt.Errorf("%s: %v", files[0], err)
	}
	if r.Fleet != nil {
		if err := suite.PlotFleet(filepath.Join(*out, "fleet"), r); err != nil {
			return err
		}
	}
	if err := r.Write(*out, events); err != nil {
		return err
	}
	return results.WriteTable(e.stdout, []*results.Run{r})
}
