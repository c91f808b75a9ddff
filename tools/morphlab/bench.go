package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/internal/benchsum"
	"github.com/morphlab/morphlab/kernels/probe"
	"golang.org/x/perf/benchfmt"
)

func init() {
	register(&command{name: "bench", summary: "run kernel benchmarks with go test and tabulate medians with confidence intervals", run: runBench})
}

const benchHelp = `
Bench runs 'go test -run ^$ -bench REGEXP -count N' on the given packages (it needs the go tool on PATH and is
run from the module root), keeps the raw output in Go benchmark format for benchstat, and prints one table per
benchmark: a row per sub-benchmark (its key=value parts as columns) with, for every metric the benchmark reports
(sec/op, B/s, GFLOP/s, its percentage of the machine's ceiling, ...), the median over the runs and the
half-width of its 95% confidence interval in percent, as benchstat prints them ("1.234m ± 3%"). The interval
needs at least 6 runs; with fewer it is ±∞. --plot draws the medians of one metric as a bar chart with the
intervals as whiskers.

Benchmarks read the machine's ceilings from $MORPHLAB_PROBE. Bench sets it to --probe, or, when that is empty,
keeps $MORPHLAB_PROBE, or uses results/probe.json if it exists; otherwise each test binary runs the probe
itself. Write the file once with 'morphlab probe'.`

func runBench(e *env, args []string) error {
	fs := e.flags("[flags]", benchHelp)
	pkgs := fs.String("pkg", "./kernels/...", "space-separated `packages` to benchmark")
	re := fs.String("bench", ".", "run the benchmarks matching `regexp` (go test -bench)")
	count := fs.Int("count", 6, "run each benchmark `N` times; tables show the medians (6 or more for an interval)")
	threads := fs.Int("threads", 0, "run with GOMAXPROCS `N` (go test -cpu); 0 leaves it alone")
	benchtime := fs.String("benchtime", "", "go test -benchtime: a `duration` or a count like 100x")
	short := fs.Bool("short", false, "pass -short, which makes some benchmarks run fewer shapes")
	probeFile := fs.String("probe", "", "ceilings `file` for the benchmarks' ratios (default $MORPHLAB_PROBE, else results/probe.json)")
	out := fs.String("out", "", "keep the raw output in `file` (default results/bench/bench-<time>.txt)")
	confidence := fs.Float64("confidence", 0.95, "confidence `level` of the intervals, in (0, 1)")
	plotFile := fs.String("plot", "", "draw the medians of --plot-unit as a bar chart into `file` (.png, .svg or .pdf)")
	plotUnit := fs.String("plot-unit", "sec/op", "the `unit` --plot draws (as the tables name it: sec/op, B/s, GFLOP/s, ...)")
	asJSON := fs.Bool("json", false, "print the summaries as JSON instead of tables")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if !(*confidence > 0 && *confidence < 1) {
		return usagef("--confidence=%v, want a level between 0 and 1", *confidence)
	}
	if *plotFile != "" {
		if err := checkPlotName(*plotFile); err != nil {
			return err
		}
	}
	if *count < 1 {
		return usagef("--count=%d, want at least 1", *count)
	}
	if *threads < 0 {
		return usagef("--threads=%d, want 0 or more", *threads)
	}
	pkgList := strings.Fields(*pkgs)
	if len(pkgList) == 0 {
		return usagef("--pkg is empty, want one or more packages")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return errors.New("the go tool is not on PATH: bench runs go test")
	}
	if *out == "" {
		*out = "results/bench/bench-" + time.Now().UTC().Format("20060102-150405") + ".txt"
	}
	ceilings, err := ceilingsFile(*probeFile)
	if err != nil {
		return err
	}

	testArgs := []string{"test", "-run", "^$", "-bench", *re, "-count", strconv.Itoa(*count)}
	if *threads > 0 {
		testArgs = append(testArgs, "-cpu", strconv.Itoa(*threads))
	}
	if *benchtime != "" {
		testArgs = append(testArgs, "-benchtime", *benchtime)
	}
	if *short {
		testArgs = append(testArgs, "-short")
	}
	cmd := exec.Command(goTool, append(testArgs, pkgList...)...)
	cmd.Env = os.Environ()
	if ceilings != "" {
		cmd.Env = append(cmd.Env, probe.EnvFile+"="+ceilings)
	}
	// go test's stderr and the lines echoed from its stdout go to the same place, one write at a time.
	if _, isFile := e.stderr.(*os.File); !isFile {
		e.stderr = &lockedWriter{w: e.stderr}
	}
	cmd.Stderr = e.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	raw, err := createFile(*out)
	if err != nil {
		return err
	}
	defer raw.Close()
	fmt.Fprintf(e.stderr, "running: go %s\n", strings.Join(cmd.Args[1:], " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	copyErr := copyBenchOutput(e, raw, stdout)
	waitErr := cmd.Wait()
	if err := errors.Join(copyErr, raw.Close()); err != nil {
		return err
	}

	sums, notes, err := benchsum.ReadFile(*out, *confidence)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(e.stderr, n)
	}
	if *asJSON {
		err = writeJSON(e.stdout, sums)
	} else {
		err = benchsum.WriteTables(e.stdout, sums)
	}
	if err != nil {
		return err
	}
	if *plotFile != "" && len(sums) > 0 {
		if err := benchsum.Plot(*plotFile, sums, *plotUnit); err != nil {
			return fmt.Errorf("--plot: %v", err)
		}
		fmt.Fprintf(e.stderr, "plot in %s\n", *plotFile)
	}
	fmt.Fprintf(e.stderr, "raw output in %s (compare runs with benchstat)\n", *out)
	if waitErr != nil {
		return fmt.Errorf("go test failed (%v); raw output in %s", waitErr, *out)
	}
	if len(sums) == 0 {
		return fmt.Errorf("no benchmark matched %q in %s", *re, *pkgs)
	}
	return nil
}

// ceilingsFile returns the ceilings file to give the benchmarks: flag, else $MORPHLAB_PROBE (kept as it is), else
// results/probe.json when it exists, else "" (each test binary then measures). A named file must load.
func ceilingsFile(flag string) (string, error) {
	path := flag
	if path == "" && os.Getenv(probe.EnvFile) == "" {
		if _, err := os.Stat("results/probe.json"); err == nil {
			path = "results/probe.json"
		}
	}
	if path == "" {
		return "", nil
	}
	if _, err := probe.Load(path); err != nil {
		return "", err
	}
	return path, nil
}

// copyBenchOutput copies go test's output to raw line by line, counts the results on the progress bar, and echoes
// the lines that are neither results nor configuration (test failures, panics, ok lines) to stderr. Each line is
// classified by benchfmt itself; the results are read back from the raw file afterwards.
func copyBenchOutput(e *env, raw io.Writer, r io.Reader) error {
	bar := newProgress(e.stderr, "bench: results")
	defer bar.clear()
	var (
		classify benchfmt.Reader
		results  int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if _, err := fmt.Fprintln(raw, line); err != nil {
			return err
		}
		classify.Reset(strings.NewReader(line), "")
		if classify.Scan() {
			if _, ok := classify.Result().(*benchfmt.Result); ok {
				results++
				bar.set(results, 0)
				continue
			}
		}
		if isConfigLine(line) || line == "PASS" || strings.TrimSpace(line) == "" || isBenchNameLine(line) {
			continue
		}
		bar.clear()
		fmt.Fprintln(e.stderr, line)
	}
	return sc.Err()
}

// isConfigLine reports whether line is a "key: value" configuration line of the benchmark format (goos, cpu, ...).
func isConfigLine(line string) bool {
	key, _, ok := strings.Cut(line, ": ")
	return ok && key != "" && !strings.ContainsAny(key, " \t") && key == strings.ToLower(key)
}

// isBenchNameLine reports whether line is a benchmark's bare name, which go test prints before the log lines of a
// benchmark that logs.
func isBenchNameLine(line string) bool {
	return strings.HasPrefix(line, "Benchmark") && !strings.ContainsAny(line, " \t")
}
