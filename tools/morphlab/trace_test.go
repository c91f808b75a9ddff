package main

import (
	"encoding/json"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
)

// TestTraceGenDeterministic: the same flags and seed give the same bytes, another seed other bytes, and the
// output loads back as the trace the package generates.
func TestTraceGenDeterministic(t *testing.T) {
	args := []string{"trace", "gen", "--process", "gamma:5:0.5", "--n", "2000", "--prompt", "lognormal:1020:0.8", "--output", "uniform:1:600"}
	code, a, stderr := runCLI(append(args, "--seed", "7")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, b, _ := runCLI(append(args, "--seed", "7")...)
	_, c, _ := runCLI(append(args, "--seed", "8")...)
	if a != b || a == c || !strings.HasPrefix(a, "arrived_at,num_prefill_tokens,num_decode_tokens\n") {
		t.Fatalf("seed 7 twice equal: %v, seeds 7 and 8 differ: %v", a == b, a != c)
	}
	want, err := trace.Generate(trace.Spec{Process: trace.Gamma{PerSecond: 5, Burstiness: 0.5},
		Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 1020, Sigma: 0.8}, Output: trace.Uniform{Min: 1, Max: 600}}, N: 2000}, 7)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := trace.Write(&sb, want, trace.Vidur); err != nil {
		t.Fatal(err)
	}
	if a != sb.String() {
		t.Error("trace gen's output differs from trace.Generate's trace written as Vidur CSV")
	}
}

// TestTraceConvertStats generates a trace, converts it through every format and back, and checks that stats
// --json reads the same figures from each file.
func TestTraceConvertStats(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "gen.csv")
	if code, _, stderr := runCLI("trace", "gen", "--process", "poisson:4", "--duration", "10m", "--out", src); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	files := []string{src}
	for _, to := range []string{"jsonl", "azure", "vidur"} {
		out := filepath.Join(dir, "conv."+to)
		if code, _, stderr := runCLI("trace", "convert", files[len(files)-1], "--to", to, "--out", out); code != 0 {
			t.Fatalf("convert --to %s: exit %d: %s", to, code, stderr)
		}
		files = append(files, out)
	}
	code, stdout, stderr := runCLI(append([]string{"trace", "stats", "--json"}, files...)...)
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, stderr)
	}
	var sums []trace.Summary
	if err := json.Unmarshal([]byte(stdout), &sums); err != nil {
		t.Fatal(err)
	}
	if len(sums) != 4 || sums[0].Format != "vidur" || sums[1].Format != "mooncake" || sums[2].Format != "azure" {
		t.Fatalf("stats of %d traces: %+v", len(sums), sums)
	}
	ref := sums[0].Stats
	if ref.Requests < 2200 || ref.Requests > 2600 || ref.Duration > 600 || ref.Duration < 590 {
		t.Errorf("10 minutes at 4/s gave %d requests over %g s", ref.Requests, ref.Duration)
	}
	for _, s := range sums[1:] {
		if s.Stats.Requests != ref.Requests || s.Stats.Prompt != ref.Prompt || s.Stats.Output != ref.Output ||
			abs(s.Stats.Duration-ref.Duration) > 1e-6 || s.Stats.PeakRate10 != ref.PeakRate10 {
			t.Errorf("%s: %+v, want the figures of %s: %+v", s.Source, s.Stats, sums[0].Source, ref)
		}
	}
	// The table names each file and the transforms applied.
	code, stdout, _ = runCLI("trace", "stats", src, "--window", "60s+120s", "--time-scale", "4.75")
	if code != 0 || !strings.Contains(stdout, "| transforms ") || !strings.Contains(stdout, "window=60s+120s time-scale=4.75") || !strings.Contains(stdout, "gen.csv") {
		t.Errorf("stats table: exit %d:\n%s", code, stdout)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestTraceConvertAzureToVidur converts the shared Azure conversation trace to Vidur's format and checks it
// against Vidur's own copy: the same lengths, arrivals within 1 µs.
func TestTraceConvertAzureToVidur(t *testing.T) {
	azure := datadir.ForTest(t, "traces/azure2023/AzureLLMInferenceTrace_conv.csv")
	vidur := datadir.ForTest(t, "traces/vidur/splitwise_conv.csv")
	code, stdout, stderr := runCLI("trace", "convert", azure, "--to", "vidur")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got, err := trace.Parse("converted", []byte(stdout), trace.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := trace.Load(vidur, trace.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Requests) != len(want.Requests) {
		t.Fatalf("%d requests, want %d", len(got.Requests), len(want.Requests))
	}
	for i, r := range got.Requests {
		w := want.Requests[i]
		if r.PromptTokens != w.PromptTokens || r.OutputTokens != w.OutputTokens || abs(r.Arrival-w.Arrival) > 1e-6 {
			t.Fatalf("request %d: %+v, Vidur has %+v", i, r, w)
		}
	}
}

func TestTracePlot(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "gen.jsonl")
	if code, _, stderr := runCLI("trace", "gen", "--process", "onoff:20:1:5:20", "--n", "3000", "--to", "jsonl", "--out", src); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	for _, name := range []string{"p.png", "p.svg"} {
		out := filepath.Join(dir, "plots", name)
		code, _, stderr := runCLI("trace", "plot", src, "--busiest", "300s", "--out", out)
		if code != 0 || !strings.HasPrefix(stderr, "wrote "+out) {
			t.Fatalf("plot %s: exit %d: %s", name, code, stderr)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".png") {
			if _, err := png.Decode(f); err != nil {
				t.Errorf("%s: %v", out, err)
			}
		} else if b, _ := os.ReadFile(out); !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "busiest=300s/requests") {
			t.Errorf("%s is not the SVG plot of the busiest window", out)
		}
		f.Close()
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1.5,-3,5\n"), 0o644)
	good := filepath.Join(dir, "good.csv")
	os.WriteFile(good, []byte("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1.5,3,5\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trace"}, 2, "morphlab trace: want a subcommand: stats, convert, gen or plot (run 'morphlab trace -h' for usage)\n"},
		{[]string{"trace", "nope"}, 2, "morphlab trace: unknown subcommand \"nope\" (want stats, convert, gen or plot)\n"},
		{[]string{"trace", "stats"}, 2, "morphlab trace: want one or more trace files (run 'morphlab trace stats -h' for usage)\n"},
		{[]string{"trace", "stats", bad}, 1, "morphlab trace: " + bad + ":3: num_prefill_tokens: negative length \"-3\"\n"},
		{[]string{"trace", "stats", good, "--thin", "2"}, 1, "morphlab trace: --thin: thin 2: want a probability in (0, 1]\n"},
		{[]string{"trace", "stats", good, "--bogus"}, 2, "morphlab trace: flag provided but not defined: -bogus (run 'morphlab trace stats -h' for usage)\n"},
		{[]string{"trace", "convert", good, good, "--to", "vidur"}, 2, "morphlab trace: want one trace file, have 2 (run 'morphlab trace convert -h' for usage)\n"},
		{[]string{"trace", "convert", good, "--to", "parquet"}, 2, "morphlab trace: --to=\"parquet\", want one of vidur, mooncake, jsonl, azure, lengths\n"},
		{[]string{"trace", "gen", "--n", "5"}, 2, "morphlab trace: --process is required (run 'morphlab trace gen -h' for usage)\n"},
		{[]string{"trace", "gen", "--process", "poisson:0", "--n", "5"}, 2, "morphlab trace: --process: arrival process \"poisson:0\": want poisson:RATE with RATE > 0\n"},
		{[]string{"trace", "gen", "--process", "poisson:1"}, 2, "morphlab trace: want --n or --duration\n"},
		{[]string{"trace", "gen", "--process", "poisson:1", "--n", "5", "--prompt", "fixed:0"}, 2, "morphlab trace: --prompt: length distribution \"fixed:0\": want fixed:N with N >= 1\n"},
		{[]string{"trace", "plot", good}, 2, "morphlab trace: --out is required (a .png or .svg file)\n"},
		{[]string{"trace", "plot", good, "--out", "x.pdf"}, 2, "morphlab trace: --out: x.pdf: want a .png or .svg file\n"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != c.code || stderr != c.want || stdout != "" {
			t.Errorf("morphlab %s: exit %d, stderr %q, stdout %q; want exit %d, stderr %q", strings.Join(c.args, " "), code, stderr, stdout, c.code, c.want)
		}
	}
	code, stdout, _ := runCLI("trace", "gen", "-h")
	if code != 0 || !strings.HasPrefix(stdout, "usage: morphlab trace gen ") || !strings.Contains(stdout, "-time-scale FACTOR") {
		t.Errorf("trace gen -h: exit %d, %q", code, stdout)
	}
}

// TestTraceFlagsBesideModelFlags: the commands that replay a trace on a model (run, simulate) register both sets
// of flags on one flag set, so their names must not clash (the flag package panics on a redefinition).
func TestTraceFlagsBesideModelFlags(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var mf modelFlags
	mf.register(fs)
	var tf trace.Flags
	tf.Register(fs)
	if err := fs.Parse([]string{"--dtype", "int4", "--trace-format", "azure", "--busiest", "72s"}); err != nil {
		t.Fatal(err)
	}
	if mf.format != "int4" || tf.Format != "azure" || tf.Busiest != 72 {
		t.Errorf("model format %q, trace format %q, busiest %g", mf.format, tf.Format, tf.Busiest)
	}
}
