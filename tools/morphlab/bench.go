package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/benchfmt"
	"github.com/morphlab/morphlab/kernels/probe"
)

func init() {
	register(&command{name: "bench", summary: "run kernel benchmarks with go test and tabulate the medians", run: runBench})
}

const benchHelp = `
Bench runs 'go test -run ^$ -bench REGEXP -count N' on the given packages (it needs the go tool on PATH and is
run from the module root), keeps the raw output in Go benchmark format for benchstat, and prints one table per
benchmark: a row per sub-benchmark (its key=value parts as columns) with the median of every metric the
benchmark reports (ns/op, MB/s, GFLOP/s, GB/s, its percentage of the machine's ceiling, ...).

Benchmarks read the machine's ceilings from $MORPHLAB_PROBE. Bench sets it to --probe, or, when that is empty,
keeps $MORPHLAB_PROBE, or uses results/probe.json if it exists; otherwise each test binary runs the probe
itself. Write the file once with 'morphlab probe'.`

func runBench(e *env, args []string) error {
	fs := e.flags("[flags]", benchHelp)
	pkgs := fs.String("pkg", "./kernels/...", "space-separated `packages` to benchmark")
	re := fs.String("bench", ".", "run the benchmarks matching `regexp` (go test -bench)")
	count := fs.Int("count", 6, "run each benchmark `N` times; tables show the medians")
	threads := fs.Int("threads", 0, "run with GOMAXPROCS `N` (go test -cpu); 0 leaves it alone")
	benchtime := fs.String("benchtime", "", "go test -benchtime: a `duration` or a count like 100x")
	short := fs.Bool("short", false, "pass -short, which makes some benchmarks run fewer shapes")
	probeFile := fs.String("probe", "", "ceilings `file` for the benchmarks' ratios (default $MORPHLAB_PROBE, else results/probe.json)")
	out := fs.String("out", "", "keep the raw output in `file` (default results/bench/bench-<time>.txt)")
	asJSON := fs.Bool("json", false, "print the medians as JSON instead of tables")
	if err := e.parse(fs, args); err != nil {
		return err
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
	results, copyErr := copyBenchOutput(e, raw, stdout)
	waitErr := cmd.Wait()
	if err := errors.Join(copyErr, raw.Close()); err != nil {
		return err
	}

	sums := benchfmt.Summarize(results)
	if *asJSON {
		err = writeJSON(e.stdout, sums)
	} else {
		err = printBenchTables(e.stdout, sums)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "raw output in %s (compare runs with benchstat)\n", *out)
	if waitErr != nil {
		return fmt.Errorf("go test failed (%v); raw output in %s", waitErr, *out)
	}
	if len(results) == 0 {
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

// copyBenchOutput copies go test's output to raw line by line, parses the results, shows progress, and echoes
// the lines that are neither results nor configuration (test failures, panics, ok lines) to stderr.
func copyBenchOutput(e *env, raw io.Writer, r io.Reader) ([]benchfmt.Result, error) {
	bar := newProgress(e.stderr, "bench: results")
	defer bar.clear()
	var (
		results []benchfmt.Result
		pkg     string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if _, err := fmt.Fprintln(raw, line); err != nil {
			return results, err
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if res, ok := benchfmt.ParseLine(line); ok {
			res.Pkg = pkg
			results = append(results, res)
			bar.set(len(results), 0)
			continue
		}
		if isConfigLine(line) || line == "PASS" || strings.TrimSpace(line) == "" {
			continue
		}
		bar.clear()
		fmt.Fprintln(e.stderr, line)
	}
	return results, sc.Err()
}

// isConfigLine reports whether line is a "key: value" configuration line of the benchmark format (goos, cpu, ...).
func isConfigLine(line string) bool {
	key, _, ok := strings.Cut(line, ": ")
	return ok && key != "" && !strings.ContainsAny(key, " \t") && key == strings.ToLower(key)
}

// printBenchTables prints one table per package and top-level benchmark: a row per sub-benchmark, with its
// parameters as columns (a procs column when more than one GOMAXPROCS ran), the run count, and the median of
// every unit reported.
func printBenchTables(w io.Writer, sums []benchfmt.Summary) error {
	type group struct {
		pkg, top string
		rows     []benchfmt.Summary
	}
	var groups []*group
	for _, s := range sums {
		top, _ := benchfmt.SplitName(s.Name)
		i := slices.IndexFunc(groups, func(g *group) bool { return g.pkg == s.Pkg && g.top == top })
		if i < 0 {
			groups = append(groups, &group{pkg: s.Pkg, top: top})
			i = len(groups) - 1
		}
		groups[i].rows = append(groups[i].rows, s)
	}
	for gi, g := range groups {
		var keys, units []string
		procs := map[int]bool{}
		for _, s := range g.rows {
			_, params := benchfmt.SplitName(s.Name)
			for _, p := range params {
				if k := paramKey(p); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			for _, u := range s.Units {
				if !slices.Contains(units, u) {
					units = append(units, u)
				}
			}
			procs[s.Procs] = true
		}
		header := slices.Clone(keys)
		if len(procs) > 1 {
			header = append(header, "procs")
		}
		header = append(header, "runs")
		for _, u := range units {
			header = append(header, u)
		}
		if gi > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  %s\n", g.top, g.pkg)
		t := newTable(w, header...)
		for _, s := range g.rows {
			cells := make([]string, 0, len(header))
			_, params := benchfmt.SplitName(s.Name)
			for _, k := range keys {
				cell := "-"
				for _, p := range params {
					if paramKey(p) == k {
						cell = p.Value
					}
				}
				cells = append(cells, cell)
			}
			if len(procs) > 1 {
				cells = append(cells, strconv.Itoa(s.Procs))
			}
			cells = append(cells, strconv.Itoa(s.Runs))
			for _, u := range units {
				cell := "-"
				if v, ok := s.Median[u]; ok {
					cell = formatValue(v)
				}
				cells = append(cells, cell)
			}
			t.row(cells...)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// paramKey names the column of a sub-benchmark part: its key, or "case" for a part that is not key=value.
func paramKey(p benchfmt.Param) string {
	if p.Key == "" {
		return "case"
	}
	return p.Key
}
