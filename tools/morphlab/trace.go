package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/experiments/trace"
)

func init() {
	register(&command{name: "trace", summary: "request traces: stats, convert, gen (synthetic) and plot, with snippet and scaling transforms", run: runTrace})
}

const traceHelp = `
Trace reads, summarizes, converts, generates and plots request traces (package experiments/trace). Formats read:
Azure LLM inference 2023 CSV, Mooncake JSON lines, Vidur CSV, length-only tables and BurstGPT CSV, told from the
header or the first line (--trace-format overrides). Every subcommand takes the transform flags, applied in this order
whatever their order on the command line: --window, --busiest/--busiest-by, --thin, --time-scale, --length-scale,
--clip/--max-prompt/--max-output. The paper's "arrival rate downscaled 4.75x" is --time-scale 4.75 (inter-arrival
times stretched 4.75x).

subcommands:
  stats FILE...          count, duration, rates, burstiness, length percentiles and token demand (--json for JSON)
  convert FILE --to F    write the trace as vidur, jsonl (Mooncake), azure or lengths, to --out or stdout
  gen --process P        draw a synthetic trace (poisson:RATE, gamma:RATE:BURSTINESS, onoff:ON:OFF:ONMEAN:OFFMEAN,
                         schedule:60s@2,20s@20,...) with lengths from distributions or a length table
  plot FILE --out F.png  requests/s over time and length histograms, PNG or SVG

Run 'morphlab trace SUBCOMMAND -h' for a subcommand's flags.`

func runTrace(e *env, args []string) error {
	if len(args) == 0 {
		return usagef("want a subcommand: stats, convert, gen or plot (run 'morphlab trace -h' for usage)")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(e.stdout, "usage: morphlab trace SUBCOMMAND [flags]\n\n%s\n", strings.TrimSpace(traceHelp))
		return errHelp
	}
	run := map[string]func(*env, []string) error{
		"stats": runTraceStats, "convert": runTraceConvert, "gen": runTraceGen, "plot": runTracePlot,
	}[sub]
	if run == nil {
		return usagef("unknown subcommand %q (want stats, convert, gen or plot)", sub)
	}
	e.name = "trace " + sub
	return run(e, rest)
}

// parseFiles parses args, letting flags come before, between or after the positional arguments (the files),
// and returns the files.
func (e *env) parseFiles(fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				e.usage()
				return nil, errHelp
			}
			return nil, usagef("%v (run 'morphlab %s -h' for usage)", err, e.name)
		}
		if fs.NArg() == 0 {
			e.warnDeprecated(fs)
			return files, nil
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// oneFile parses args for a subcommand that takes exactly one trace file.
func (e *env) oneFile(fs *flag.FlagSet, args []string) (string, error) {
	files, err := e.parseFiles(fs, args)
	if err != nil {
		return "", err
	}
	if len(files) != 1 {
		return "", usagef("want one trace file, have %d (run 'morphlab %s -h' for usage)", len(files), e.name)
	}
	return files[0], nil
}

const traceStatsHelp = `
Stats loads each trace, applies the transforms and prints its statistics, one column a trace: request count,
duration (first arrival to last), mean rate, peak rates in any 1-s and 10-s window, the coefficient of variation
of inter-arrival times (1 for Poisson), the index of dispersion of counts in 1-s and 10-s bins (1 for Poisson),
prompt and output length percentiles (nearest rank) and token demand per second.`

func runTraceStats(e *env, args []string) error {
	fs := e.flags("FILE... [flags]", traceStatsHelp)
	var tf trace.Flags
	tf.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	files, err := e.parseFiles(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("want one or more trace files (run 'morphlab trace stats -h' for usage)")
	}
	var sums []trace.Summary
	for _, f := range files {
		t, err := tf.Load(f)
		if err != nil {
			return err
		}
		sums = append(sums, trace.Summarize(t))
	}
	if *asJSON {
		return writeJSON(e.stdout, sums)
	}
	return trace.WriteSummaries(e.stdout, sums)
}

const traceConvertHelp = `
Convert loads a trace, applies the transforms and writes it in another format: vidur (Vidur's CSV,
arrived_at,num_prefill_tokens,num_decode_tokens), jsonl (Mooncake's JSON lines, hash_ids kept), azure (Azure's
CSV) or lengths (a length-only table). Arrivals are written to the nanosecond (Azure: 100 ns), so the output
loads back to the same requests.`

func runTraceConvert(e *env, args []string) error {
	fs := e.flags("FILE --to FORMAT [--out FILE] [flags]", traceConvertHelp)
	var tf trace.Flags
	tf.Register(fs)
	to := fs.String("to", "", "output `format`: vidur, jsonl, azure or lengths")
	out := fs.String("out", "", "write to `file` instead of stdout")
	file, err := e.oneFile(fs, args)
	if err != nil {
		return err
	}
	if err := checkWriteFormat(*to); err != nil {
		return err
	}
	t, err := tf.Load(file)
	if err != nil {
		return err
	}
	return e.writeTrace(t, *to, *out)
}

func checkWriteFormat(to string) error {
	for _, f := range trace.WriteFormats {
		if to == f {
			return nil
		}
	}
	return usagef("--to=%q, want one of %s", to, strings.Join(trace.WriteFormats, ", "))
}

// writeTrace writes t in format to path, or to stdout when path is "", and says what it wrote on stderr.
func (e *env) writeTrace(t *trace.Trace, format, path string) error {
	var buf bytes.Buffer
	if err := trace.Write(&buf, t, format); err != nil {
		return err
	}
	if path == "" {
		_, err := e.stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFileAll(path, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote %s: %s\n", path, t)
	return nil
}

func writeFileAll(path string, data []byte) error {
	f, err := createFile(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const traceGenHelp = `
Gen draws a synthetic trace: arrivals from --process, lengths from --prompt and --output distributions or from
a length table (--lengths FILE, rows sampled with replacement, or given arrivals in file order with --in-order),
--n requests or all those before --duration (whichever ends first). Then the transforms apply. The same flags and
--seed give the same bytes.

processes:
  poisson:RATE                       exponential gaps, mean 1/RATE (CV 1)
  gamma:RATE:BURSTINESS              gamma gaps as vLLM's benchmark_serving draws them: shape BURSTINESS,
                                     scale 1/(RATE x BURSTINESS), CV 1/sqrt(BURSTINESS)
  onoff:ONRATE:OFFRATE:ONMEAN:OFFMEAN  Poisson at ONRATE / OFFRATE in states of exponential length (means in s)
  schedule:60s@2,20s@20,60s@2        piecewise-constant Poisson rate; ends with the last segment
length distributions: fixed:N, uniform:MIN:MAX, lognormal:MEDIAN:SIGMA`

func runTraceGen(e *env, args []string) error {
	fs := e.flags("--process P (--n N | --duration D) [flags]", traceGenHelp)
	var tf trace.Flags
	tf.Register(fs)
	process := fs.String("process", "", "arrival `process`, e.g. poisson:5 or gamma:5:0.5")
	n := fs.Int("n", 0, "number of `requests`")
	duration := fs.String("duration", "", "draw the arrivals before `D` (e.g. 10m, 600)")
	prompt := fs.String("prompt", "lognormal:1020:0.9", "prompt length `distribution`")
	output := fs.String("output", "lognormal:129:0.9", "output length `distribution`")
	lengths := fs.String("lengths", "", "take lengths from the trace or length table `file` instead")
	inOrder := fs.Bool("in-order", false, "with --lengths: give the file's rows arrivals in order (the first --n rows if set) instead of sampling them")
	to := fs.String("to", "vidur", "output `format`: vidur, jsonl, azure")
	out := fs.String("out", "", "write to `file` instead of stdout")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *process == "" {
		return usagef("--process is required (run 'morphlab trace gen -h' for usage)")
	}
	p, err := trace.ParseProcess(*process)
	if err != nil {
		return usageError{"--process: " + err.Error()}
	}
	if err := checkWriteFormat(*to); err != nil {
		return err
	}
	var until float64
	if *duration != "" {
		if until, err = trace.ParseSeconds(*duration); err != nil || until <= 0 {
			return usagef("--duration=%q, want a time above 0 like 10m or 600", *duration)
		}
	}
	if *n < 0 {
		return usagef("--n=%d, want at least 0", *n)
	}
	if *inOrder && *lengths == "" {
		return usagef("--in-order needs --lengths")
	}
	var t *trace.Trace
	switch {
	case *inOrder:
		tab, err := trace.Load(*lengths, trace.LoadOptions{Format: tf.Format})
		if err != nil {
			return err
		}
		if *n > 0 && *n < len(tab.Requests) {
			cut := *tab
			cut.Requests = tab.Requests[:*n]
			cut.Transforms = append(append([]string(nil), tab.Transforms...), "head="+strconv.Itoa(*n))
			tab = &cut
		}
		if t, err = trace.WithArrivals(tab, p, tf.Seed); err != nil {
			return err
		}
	default:
		if *n == 0 && until == 0 {
			return usagef("want --n or --duration")
		}
		var src trace.LengthSource
		if *lengths != "" {
			tab, err := trace.Load(*lengths, trace.LoadOptions{Format: tf.Format})
			if err != nil {
				return err
			}
			src = trace.Table{From: tab}
		} else {
			pd, err := trace.ParseDist(*prompt)
			if err != nil {
				return usageError{"--prompt: " + err.Error()}
			}
			od, err := trace.ParseDist(*output)
			if err != nil {
				return usageError{"--output: " + err.Error()}
			}
			src = trace.Independent{Prompt: pd, Output: od}
		}
		if t, err = trace.Generate(trace.Spec{Process: p, Lengths: src, N: *n, Duration: until}, tf.Seed); err != nil {
			return err
		}
	}
	if t, err = tf.Apply(t); err != nil {
		return err
	}
	return e.writeTrace(t, *to, *out)
}

const tracePlotHelp = `
Plot loads a trace, applies the transforms and draws requests/s over time (1-s bins, or 10-s, 100-s, ... bins
for long traces) above histograms of the prompt and output lengths, as PNG or SVG by --out's extension.`

func runTracePlot(e *env, args []string) error {
	fs := e.flags("FILE --out F.png|F.svg [flags]", tracePlotHelp)
	var tf trace.Flags
	tf.Register(fs)
	out := fs.String("out", "", "image `file`, .png or .svg")
	file, err := e.oneFile(fs, args)
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required (a .png or .svg file)")
	}
	format, err := trace.PlotFormat(*out)
	if err != nil {
		return usageError{"--out: " + err.Error()}
	}
	t, err := tf.Load(file)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := trace.Plot(&buf, t, format); err != nil {
		return err
	}
	if err := writeFileAll(*out, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote %s: %s\n", *out, t)
	return nil
}
