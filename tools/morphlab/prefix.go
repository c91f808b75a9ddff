package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/suite"
)

func init() {
	register(&command{name: "prefix", summary: "the prefix-caching study on one deployment: fp16 and morph:default with the cache on and off", run: runPrefix})
}

const prefixHelp = `
Prefix replays a trace whose requests share prefixes (Mooncake's hash ids) under fp16 and morph:default, each with
automatic prefix caching on and off, on the deployment the flags describe (by default the real CPU engine), and
prints the study's table (experiments/suite): TTFT-SLO violations, P95 TTFT, the prompt tokens' hit rate beside
what a cache that never evicts would find, the output tokens made with no layer quantized, and the quality loss
(on the CPU engine, the share of output tokens that differ from fp16's with the cache: greedy decoding, so fp16
without it differs in none; random weights make any quantized layer change most of them). fp16 with the cache is
the baseline morph is judged against. Each run's files go under --out/<policy>[_no-prefix-caching]/, the
table to --out/table.md. 'morphlab reproduce' runs the same study in the simulator on the paper's deployments.

--parallel runs side by side (default 2); on the cpu executor that needs --clock thread --threads 1, each run then
timed by its own thread's CPU time.`

func runPrefix(e *env, args []string) error {
	fs := e.flags("--model M --trace FILE --out DIR [flags]", prefixHelp)
	var df deploy.Flags
	df.Register(fs, "cpu")
	var rf replayFlags
	rf.register(fs)
	parallel := fs.Int("parallel", 2, "`runs` side by side")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	d, err := df.Deployment()
	if err != nil {
		return usagef("%v", err)
	}
	policy := false
	fs.Visit(func(f *flag.Flag) { policy = policy || f.Name == "policy" })
	if policy {
		return usagef("--policy: prefix runs fp16 and morph:default itself")
	}
	slo, err := rf.parse()
	if err != nil {
		return err
	}
	t, err := rf.load()
	if err != nil {
		return err
	}
	if t.HashBlock == 0 {
		return fmt.Errorf("%s: no request has hash ids (Mooncake's), so none shares a prefix to cache", rf.path)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Fprintf(e.stderr, "prefix: %s, %d requests, fp16 and morph:default with the cache on and off, %d at a time\n", t, len(t.Requests), *parallel)
	runs, err := suite.PrefixStudy(ctx, suite.PrefixOptions{Deployment: d, Trace: t, SLO: slo, Parallel: *parallel, Out: rf.out,
		Progress: func(msg string) { fmt.Fprintf(e.stderr, "prefix: %s\n", msg) }})
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(rf.out, "table.md"))
	if err != nil {
		return err
	}
	if err := suite.WritePrefixTable(io.MultiWriter(f, e.stdout), runs); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\n%s\n", suite.ComparePrefix(runs))
	return nil
}
