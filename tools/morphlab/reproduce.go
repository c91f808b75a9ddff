package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/suite"
	"github.com/morphlab/morphlab/internal/datadir"
)

func init() {
	register(&command{name: "reproduce", summary: "run the experiment suite: MorphServe's comparison with tables and plots", run: runReproduce})
}

const reproduceHelp = `
Reproduce runs the experiment suite (experiments/suite): fp16, static INT8/INT4, selective and the morph modes
on the paper's four deployments and traces, simulated at paper scale, a rate sweep and Table 5; then the layer
sensitivity tables of stories260K (the profiler: Tables 2, 3 and 8 on our real model, and its INT8 curves, W8A8 and
W8A16, beside INT4's) and a run on the real CPU engine beside the simulator's prediction of it. It writes everything under --out and the headline to stdout:
each run's results.json, events.jsonl and table.md, a table.md and plots (PNG and SVG) per setup and workload,
summary.md and summary.json. Missing data files are replaced by seeded stand-ins and summary.md says which
('make data' fetches the real ones). --quick runs two workloads and six policies and skips the profiler and the
real engine; --trace FILE runs the suite on that trace alone; --burst-seed draws the bursts with another seed
than the one the policies' parameters were chosen on.`

func runReproduce(e *env, args []string) error {
	fs := e.flags("[--quick] [--trace FILE] [--out DIR]", reproduceHelp)
	out := fs.String("out", "results/paper", "output `directory`")
	quick := fs.Bool("quick", false, "two workloads and six policies, no profiler and no real-engine run")
	tracePath := fs.String("trace", "", "run the suite on this trace `file` alone")
	policies := fs.String("policies", "", "comma-separated `policies` instead of the suite's")
	noReal := fs.Bool("no-real", false, "skip the real CPU engine's run and its simulated twin")
	noProfile := fs.Bool("no-profile", false, "skip the stories260K sensitivity profile")
	burstSeed := fs.Uint64("burst-seed", suite.DefaultBurstSeed, "`seed` of the bursts and of the capacity probes that size them")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	start := time.Now()
	if *burstSeed == 0 {
		return fmt.Errorf("--burst-seed 0: want a seed >= 1")
	}
	opt := suite.Options{Out: *out, Quick: *quick, TraceFile: *tracePath, BurstSeed: *burstSeed}
	if dir, err := datadir.Dir(); err == nil {
		opt.Data = dir
	}
	if *policies != "" {
		opt.Policies = strings.Split(*policies, ",")
	}
	bar := newProgress(e.stderr, "reproduce")
	opt.Progress = bar.set
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	r, err := suite.Run(ctx, opt)
	bar.clear()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "reproduce: %d simulations in %v\n", len(r.Cells)+len(r.Sweep), time.Since(start).Round(time.Second))
	if !*quick && !*noProfile {
		fmt.Fprintf(e.stderr, "reproduce: profiling stories260K's layers\n")
		if r.Sensitivity, err = suite.Sensitivity(opt.Data, filepath.Join(*out, "sensitivity")); err != nil {
			return err
		}
	}
	if !*quick && !*noReal {
		fmt.Fprintf(e.stderr, "reproduce: fp16 and morph:default on the real CPU engine beside a calibration of the simulator, then simulated\n")
		if r.Real, err = suite.RealEngine(ctx, filepath.Join(*out, "real"), nil); err != nil {
			return err
		}
	}
	if err := r.Write(); err != nil {
		return err
	}
	h := r.Headline()
	for _, m := range []string{"morph:accuracy", "morph:default", "morph:performance", "morph:compute"} {
		if _, ok := h.P95Ratio[m]; ok {
			fmt.Fprintf(e.stdout, "P95 TTFT fp16 / %s: %s; quality loss against static:int4: %.1f%%\n", m, suite.FormatRatio(h.P95Ratio[m]), 100*h.LossRatio[m])
		}
	}
	for _, m := range []string{"morph:default", "morph:compute"} {
		if c, ok := h.Cuts[m]; ok {
			paper := ""
			if m == "morph:default" {
				paper = " (paper 92.45%)"
			}
			fmt.Fprintf(e.stdout, "TTFT-SLO violations cut by %s against fp16: %.1f%% pooled%s, %.1f%% in memory-bound cells, %.1f%% in compute-bound cells\n",
				m, 100*c.Pooled, paper, 100*c.Memory, 100*c.Compute)
		}
	}
	fmt.Fprintf(e.stdout, "summary: %s (%v in all)\n", filepath.Join(*out, "summary.md"), time.Since(start).Round(time.Second))
	return nil
}
