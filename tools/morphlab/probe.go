package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
	"github.com/morphlab/morphlab/kernels/probe"
)

func init() {
	register(&command{name: "probe", summary: "measure this machine's ceilings: memory bandwidth, FMA and int8 peaks", run: runProbe})
}

const probeHelp = `
Probe measures the ceilings that kernel benchmarks report their ratios to: the memory read bandwidth at working
sets from L1 to DRAM (the working set is the total over all threads, each reading its own slice), the f32 FMA
peak and the int8 dot-product peak, with the widest vector instructions this CPU has. Each number is the median of
five runs; the whole probe takes a few seconds. It prints a table (or JSON with --json) and writes the JSON file
that 'morphlab bench' passes to the benchmarks as $MORPHLAB_PROBE.`

func runProbe(e *env, args []string) error {
	fs := e.flags("[flags]", probeHelp)
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "measure on `N` threads")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	out := fs.String("out", "results/probe.json", "write the ceilings as JSON to `file` (\"\" for none)")
	quick := fs.Bool("quick", false, "measure two cache sizes once each, in milliseconds: a smoke test, not a ceiling")
	var prof profileFlags
	prof.Register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *threads < 1 {
		return usagef("--threads=%d, want at least 1", *threads)
	}
	stop, err := prof.start(e.stderr)
	if err != nil {
		return err
	}

	opt := probe.DefaultOptions()
	if *quick {
		opt = probe.QuickOptions()
	}
	bar := newProgress(e.stderr, "probe")
	opt.Progress = bar.set
	c := probe.MeasureWith(*threads, opt)
	bar.clear()
	if err := stop(); err != nil {
		return err
	}

	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return fmt.Errorf("--out %s: %w", *out, err)
		}
		if err := c.Save(*out); err != nil {
			return err
		}
	}
	if *asJSON {
		err = writeJSON(e.stdout, c)
	} else {
		err = printCeilings(e, c)
	}
	if err == nil && *out != "" {
		fmt.Fprintf(e.stderr, "wrote %s\n", *out)
	}
	return err
}

// printCeilings writes the ceilings as a header and a table of bandwidth by working set.
func printCeilings(e *env, c probe.Ceilings) error {
	fmt.Fprintf(e.stdout, "cpu:      %s (%d logical CPUs, measured on %d threads)\n", c.CPU, c.Cores, c.Threads)
	fmt.Fprintf(e.stdout, "features: %s\n", strings.Join(c.Features, " "))
	fmt.Fprintf(e.stdout, "f32 FMA peak:  %s GFLOP/s (%s)\n", numfmt.Figure(c.FMAPeakGFLOPS), c.FMAKernel)
	fmt.Fprintf(e.stdout, "int8 dot peak: %s GOP/s (%s)\n\n", numfmt.Figure(c.Int8DotPeakGOPS), c.Int8Kernel)
	var rows [][]string
	for _, p := range c.Bandwidth {
		rows = append(rows, []string{numfmt.Bytes(p.Bytes), numfmt.Figure(p.GBps), numfmt.Bytes(p.Bytes / int64(c.Threads))})
	}
	if err := mdtable.Write(e.stdout, []string{"working set", "read GB/s", "per thread"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "(read kernel: %s)\n", c.ReadKernel)
	return err
}
