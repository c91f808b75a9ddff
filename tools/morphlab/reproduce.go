package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/suite"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/profiling/sensitivity"
)

func init() {
	register(&command{name: "reproduce", summary: "run the experiment suite: MorphServe's comparison with tables and plots", run: runReproduce})
}

const reproduceHelp = `
Reproduce runs the experiment suite (experiments/suite): fp16, static INT8/INT4, selective and the morph modes
on the paper's four deployments and traces, simulated at paper scale, a rate sweep and Table 5; then the layer
sensitivity tables of stories260K (the profiler: Tables 2, 3 and 8 on our real model) and a run on the real CPU
engine beside the simulator's prediction of it. It writes everything under --out and the headline to stdout:
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
		if r.Sensitivity, err = sensitivityTables(e, opt.Data, filepath.Join(*out, "sensitivity")); err != nil {
			return err
		}
	}
	if !*quick && !*noReal {
		if r.Real, err = realPairs(e, filepath.Join(*out, "real")); err != nil {
			return err
		}
	}
	if err := r.Write(); err != nil {
		return err
	}
	h := r.Headline()
	fmt.Fprintf(e.stdout, "TTFT-SLO violations cut by morph:default against fp16: %.1f%% (paper 92.45%%)\n", 100*h.ViolationCut)
	for _, m := range []string{"morph:accuracy", "morph:default", "morph:performance"} {
		fmt.Fprintf(e.stdout, "P95 TTFT fp16 / %s: %s; quality loss against static:int4: %.1f%%\n", m, suite.FormatRatio(h.P95Ratio[m]), 100*h.LossRatio[m])
	}
	fmt.Fprintf(e.stdout, "summary: %s (%v in all)\n", filepath.Join(*out, "summary.md"), time.Since(start).Round(time.Second))
	return nil
}

// runQuiet runs a subcommand in-process with its output kept, and returns an error with its stderr on failure.
func runQuiet(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		return "", fmt.Errorf("%s: %s", args[0], strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// sensitivityTables profiles stories260K (the real weights when the data has them, else its shape with seeded
// weights and a stand-in text) and returns the profiler's tables for summary.md.
func sensitivityTables(e *env, data, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	find := func(rel string) string {
		if data == "" {
			return ""
		}
		p := filepath.Join(data, filepath.FromSlash(rel))
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	modelPath, tok := find("models/stories260K.bin"), find("models/tok512.bin")
	text := find("eval/tinystories_val.txt")
	if text == "" {
		text = find("eval/wiki.test.raw")
	}
	if modelPath == "" || tok == "" || text == "" {
		return "## Layer sensitivity (stories260K)\n\nSkipped: stories260K, tok512 and an evaluation text are not in the data directory (`make data` fetches them).\n", nil
	}
	fmt.Fprintf(e.stderr, "reproduce: profiling stories260K's layers on %s\n", filepath.Base(text))
	profile := filepath.Join(dir, "profile-int4-rtn.json")
	if _, err := runQuiet("profile", "--model", modelPath, "--tokenizer", tok, "--format", "int4", "--method", "rtn",
		"--calib", text, "--calib-paragraphs", "100", "--calib-tokens", "10000", "--eval", text, "--eval-paragraphs", "150",
		"--orders", "lis,front,back,random", "--seeds", "3", "--all-ks", "--out", profile, "--plot", filepath.Join(dir, "curves.png")); err != nil {
		return "", err
	}
	p, err := sensitivity.Load(profile)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Layer sensitivity of stories260K (Tables 2, 3 and 8 on our real model)\n\n"+
		"Perplexity on %s after the first k layers of each order are quantized to INT4 (RTN); the additivity rows are "+
		"Table 2's: a layer's added perplexity alone and after the layers before it in the LIS order. Profile: "+
		"`sensitivity/profile-int4-rtn.json`, plot `sensitivity/curves.png`.\n\n```\n", filepath.Base(text))
	if err := profileTables(&b, p); err != nil {
		return "", err
	}
	b.WriteString("```\n")
	return b.String(), nil
}

// realPairs replays 30 s of Poisson arrivals on the real CPU engine (stories110M's shape, F16 layers and KV, one
// kernel thread, on the CPU-time clock) under fp16 and morph:default, calibrates the simulator on this CPU the same
// way, and simulates the same runs (tools/fidelity.sh is the longer comparison).
func realPairs(e *env, dir string) ([]suite.RealPair, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	t, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: 1.5}, Duration: 30,
		Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 120, Sigma: 0.6}, Output: trace.LogNormal{Median: 48, Sigma: 0.6}}}, 1)
	if err != nil {
		return nil, err
	}
	if t, err = trace.Clip(t, trace.Limits{Context: 1024, Output: 192}); err != nil {
		return nil, err
	}
	tracePath := filepath.Join(dir, "poisson.csv")
	if err := writeTraceFile(tracePath, t); err != nil {
		return nil, err
	}
	budget := []string{"--kv-type", "f16", "--kv-blocks", "48", "--max-tokens", "512", "--trace", tracePath}
	fmt.Fprintf(e.stderr, "reproduce: calibrating the simulator on this CPU (stories110M)\n")
	calib := filepath.Join(dir, "cpu-calibration.json")
	if _, err := runQuiet("calibrate", "--model", "stories110M", "--threads", "1", "--format", "f16,int4", "--kv-type", "f16",
		"--clock", "cpu", "--out", calib); err != nil {
		return nil, err
	}
	var pairs []suite.RealPair
	for _, p := range []string{"fp16", "morph:default"} {
		fmt.Fprintf(e.stderr, "reproduce: %s on the real CPU engine and in the simulator\n", p)
		realDir, simDir := filepath.Join(dir, "cpu-"+suite.DirName(p)), filepath.Join(dir, "sim-"+suite.DirName(p))
		if _, err := runQuiet(append([]string{"run", "--shape", "stories110M", "--threads", "1", "--format", "f16", "--policy", p,
			"--clock", "cpu", "--out", realDir}, budget...)...); err != nil {
			return nil, err
		}
		if _, err := runQuiet(append([]string{"simulate", "--model", "stories110M", "--gpu", "cpu", "--calibration", calib,
			"--policy", p, "--out", simDir}, budget...)...); err != nil {
			return nil, err
		}
		real, err := results.Load(filepath.Join(realDir, "results.json"))
		if err != nil {
			return nil, err
		}
		sim, err := results.Load(filepath.Join(simDir, "results.json"))
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, suite.RealPair{Policy: p, Real: real, Sim: sim})
	}
	return pairs, nil
}

func writeTraceFile(path string, t *trace.Trace) error {
	var b bytes.Buffer
	if err := trace.Write(&b, t, "vidur"); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
