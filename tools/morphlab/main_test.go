package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/kernels/probe"
)

// runCLI runs the command line in-process and returns the exit status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"nope"}, "morphlab: unknown command \"nope\" (commands: " + strings.Join(names(), ", ") + ")\n"},
		{[]string{"probe", "--bogus"}, "morphlab probe: flag provided but not defined: -bogus (run 'morphlab probe -h' for usage)\n"},
		{[]string{"probe", "--threads", "x"}, "morphlab probe: invalid value \"x\" for flag -threads: parse error (run 'morphlab probe -h' for usage)\n"},
		{[]string{"probe", "--threads", "0"}, "morphlab probe: --threads=0, want at least 1\n"},
		{[]string{"probe", "extra"}, "morphlab probe: unexpected argument \"extra\" (run 'morphlab probe -h' for usage)\n"},
		{[]string{"bench", "--count", "0"}, "morphlab bench: --count=0, want at least 1\n"},
		{[]string{"bench", "--pkg", " "}, "morphlab bench: --pkg is empty, want one or more packages\n"},
	} {
		code, stdout, stderr := runCLI(tc.args...)
		if code != 2 || stderr != tc.want || stdout != "" {
			t.Errorf("morphlab %s: exit %d, stderr %q, stdout %q; want exit 2, stderr %q, no stdout",
				strings.Join(tc.args, " "), code, stderr, stdout, tc.want)
		}
	}
	code, _, stderr := runCLI()
	if code != 2 || !strings.HasPrefix(stderr, "usage: morphlab <command>") {
		t.Errorf("morphlab with no arguments: exit %d, stderr %q; want 2 and the usage", code, stderr)
	}
}

func TestHelp(t *testing.T) {
	code, stdout, stderr := runCLI("help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "\n  bench ") || !strings.Contains(stdout, "\n  probe ") {
		t.Errorf("morphlab help: exit %d, stdout %q, stderr %q; want 0 and both commands listed", code, stdout, stderr)
	}
	for _, args := range [][]string{{"probe", "-h"}, {"help", "probe"}} {
		code, stdout, _ := runCLI(args...)
		if code != 0 || !strings.HasPrefix(stdout, "usage: morphlab probe [flags]") || !strings.Contains(stdout, "-threads N") {
			t.Errorf("morphlab %s: exit %d, stdout %q; want 0 and probe's usage", strings.Join(args, " "), code, stdout)
		}
	}
}

func TestProbeJSON(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "sub", "probe.json")
	code, stdout, stderr := runCLI("probe", "--quick", "--threads", "2", "--json", "--out", out,
		"--cpuprofile", filepath.Join(dir, "cpu.prof"), "--memprofile", filepath.Join(dir, "mem.prof"))
	if code != 0 {
		t.Fatalf("probe --quick --json: exit %d, stderr %q", code, stderr)
	}
	var c probe.Ceilings
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("probe --json printed invalid JSON (%v): %s", err, stdout)
	}
	if c.Threads != 2 || len(c.Bandwidth) != 2 || !(c.FMAPeakGFLOPS > 0) || !(c.Int8DotPeakGOPS > 0) {
		t.Errorf("probe --json: %+v, want 2 threads, 2 bandwidth points, positive peaks", c)
	}
	saved, err := probe.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if saved.FMAPeakGFLOPS != c.FMAPeakGFLOPS || saved.MeasuredAt != c.MeasuredAt {
		t.Errorf("--out file %+v differs from the printed %+v", saved, c)
	}
	if stderr != "wrote "+out+"\n" {
		t.Errorf("stderr %q, want only the wrote line", stderr)
	}
	for _, name := range []string{"cpu.prof", "mem.prof"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v, want a non-empty file", name, err)
		}
	}
}

func TestProbeTableAndFailure(t *testing.T) {
	code, stdout, stderr := runCLI("probe", "--quick", "--out", "")
	if code != 0 || stderr != "" {
		t.Fatalf("probe --quick: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"f32 FMA peak:", "int8 dot peak:", "working set", "32 KiB", "1 MiB"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("probe table has no %q:\n%s", want, stdout)
		}
	}

	// A file where the output directory should be: the failure is exit 1 and one line naming the path.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(blocker, "probe.json")
	code, _, stderr = runCLI("probe", "--quick", "--out", out)
	if code != 1 || !strings.HasPrefix(stderr, "morphlab probe: ") || !strings.Contains(stderr, out) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("probe --out %s: exit %d, stderr %q; want 1 and one line naming the file", out, code, stderr)
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	quiet := newProgress(&buf, "x")
	quiet.set(1, 2)
	quiet.clear()
	if buf.Len() != 0 {
		t.Errorf("progress on a non-terminal wrote %q, want nothing", buf.String())
	}
	var off *progress
	off.set(1, 2) // a nil bar is off
	off.clear()

	bar := drawProgress(&buf, "probe", false)
	bar.set(2, 4)
	time.Sleep(60 * time.Millisecond) // past the bar's throttle
	bar.set(3, 4)
	if got := buf.String(); !strings.Contains(got, "probe") || !strings.Contains(got, "3/4") {
		t.Errorf("progress drew %q, want the label and 3/4", got)
	}
	buf.Reset()
	bar.clear()
	if got := buf.String(); !strings.HasPrefix(got, "\r") || strings.Contains(got, "probe") {
		t.Errorf("clear wrote %q, want a carriage return and blanks", got)
	}
}

// TestCommandsRegistered: every subcommand this build implements is in the table that help and dispatch read.
func TestCommandsRegistered(t *testing.T) {
	want := []string{"bench", "calibrate", "costmodel", "data", "device-fidelity", "failover", "fidelity", "fleet-study", "generate", "loadtest",
		"perplexity", "prefix", "probe", "profile", "quantize", "reproduce", "run", "serve", "simulate", "synth", "trace"}
	got := names()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("command %q is not registered (have %v)", w, got)
		}
	}
}

// TestDeprecatedFlags: no command's -h lists a deprecated flag name, and a deprecated name still sets its flag
// and says, one line each on stderr, which name to use.
func TestDeprecatedFlags(t *testing.T) {
	deploy := []string{"shape", "format", "gpu", "kv-type", "max-tokens", "max-seqs", "memory-utilization"}
	hidden := map[string][]string{"run": deploy, "simulate": deploy, "serve": deploy, "prefix": deploy,
		"calibrate": {"shape", "kv-type", "format"}, "costmodel": {"gpu", "format", "kv-type"},
		"generate": {"format", "kv-type"}, "perplexity": {"format", "kv-type"}}
	listed := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	for _, name := range names() {
		code, stdout, stderr := runCLI(name, "-h")
		if code != 0 || stderr != "" {
			t.Errorf("morphlab %s -h: exit %d, stderr %q; want 0 and none", name, code, stderr)
		}
		if strings.Contains(stdout, "deprecated") {
			t.Errorf("morphlab %s -h mentions a deprecated flag:\n%s", name, stdout)
		}
		var flags []string
		for _, m := range listed.FindAllStringSubmatch(stdout, -1) {
			flags = append(flags, m[1])
		}
		for _, old := range hidden[name] {
			if slices.Contains(flags, old) {
				t.Errorf("morphlab %s -h lists --%s", name, old)
			}
		}
		if len(hidden[name]) > 0 && !slices.Contains(flags, "model") {
			t.Errorf("morphlab %s -h lists no --model: %q", name, flags)
		}
	}

	// The deployment's limits are in the error that rejects them: each deprecated name set its flag.
	code, stdout, stderr := runCLI("simulate", "--shape", "llama-2-7b", "--gpu", "l4", "--trace", "t.csv", "--out", t.TempDir(),
		"--max-tokens", "-5", "--max-seqs", "-7")
	want := "morphlab: --gpu is deprecated; use --device\n" +
		"morphlab: --max-seqs is deprecated; use --max-num-seqs\n" +
		"morphlab: --max-tokens is deprecated; use --max-num-batched-tokens\n" +
		"morphlab: --shape is deprecated; use --model\n" +
		"morphlab simulate: max batched tokens -5, max sequences -7, batch size -5, max delay 50ms, threads 0: want none negative\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Errorf("simulate with deprecated names: exit %d, stdout %q, stderr\n%s\nwant exit 2 and\n%s", code, stdout, stderr, want)
	}
	code, stdout, stderr = runCLI("costmodel", "--model", "llama-2-7b", "--gpu", "a40", "--tokens", "1", "--json")
	if code != 0 || stderr != "morphlab: --gpu is deprecated; use --device\n" || !strings.Contains(stdout, `"device": "a40"`) {
		t.Errorf("costmodel --gpu a40: exit %d, stderr %q, stdout\n%s\nwant 0, the warning and device a40", code, stderr, stdout)
	}
}
