package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/replay"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
)

// burstFile writes a seeded on/off burst of n requests and returns its path.
func burstFile(t testing.TB, dir string, n int) string {
	tr, err := trace.Generate(trace.Spec{Process: trace.OnOff{OnRate: 12, OffRate: 1, OnMean: 5, OffMean: 10},
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 50, Max: 900}, Output: trace.Uniform{Min: 20, Max: 400}}, N: n}, 7)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "burst.csv")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := trace.Write(f, tr, "vidur"); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSimulate: simulate writes results with every request served, the same inputs give byte-identical
// results.json, morph:default cuts fp16's SLO violations on a bursty load, and bad flags are one-line usage errors.
func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	tr := burstFile(t, dir, 600)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	runs := map[string]*results.Run{}
	for _, c := range []struct{ name, policy string }{{"fp16", "fp16"}, {"morph", "morph:default"}, {"morph-again", "morph:default"}} {
		code, stdout, stderr := runCLI("simulate", "--model", "llama-2-7b", "--gpu", "l4", "--trace", tr, "--policy", c.policy,
			"--kv-blocks", "958", "--out", filepath.Join(dir, c.name))
		if code != 0 || !strings.Contains(stdout, c.policy) {
			t.Fatalf("simulate %s: exit %d, %q, %q", c.policy, code, stdout, stderr)
		}
		r, err := results.Load(filepath.Join(dir, c.name, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Aggregates.Completed != 600 || r.Meta.KVBlocksFull != 958 || r.Meta.Executor != "sim" {
			t.Fatalf("%s: %d of 600 completed, pool %d, executor %q", c.policy, r.Aggregates.Completed, r.Meta.KVBlocksFull, r.Meta.Executor)
		}
		runs[c.name] = r
	}
	if !bytes.Equal(read("morph"), read("morph-again")) {
		t.Error("two simulations of the same inputs wrote different results.json")
	}
	f, m := runs["fp16"].Aggregates, runs["morph"].Aggregates
	if f.SLOViolations == 0 || m.SLOViolations >= f.SLOViolations || m.SwapActions == 0 {
		t.Errorf("fp16 %d violations, morph:default %d with %d swaps: the burst should overload fp16 and morphing help", f.SLOViolations, m.SLOViolations, m.SwapActions)
	}
	t.Logf("fp16: %d violations, P95 TTFT %.0f ms; morph:default: %d, %.0f ms, %d swaps, %.0f%% tokens at full precision",
		f.SLOViolations, f.TTFT.P95, m.SLOViolations, m.TTFT.P95, m.SwapActions, 100*m.FullPrecision)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", tr, "--out", dir, "--model", "gpt-9"}, `unknown model "gpt-9"`},
		{[]string{"--trace", tr, "--out", dir, "--gpu", "tpu"}, `unknown device "tpu"`},
		{[]string{"--trace", tr, "--out", dir, "--gpu", "cpu", "--model", "stories110M"}, "needs a --calibration"},
		{[]string{"--out", dir}, "--trace is required"},
		{[]string{"--trace", tr, "--out", dir, "--memory-utilization", "2"}, "--memory-utilization 2"},
	} {
		code, _, stderr := runCLI(append([]string{"simulate"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("simulate %v: exit %d, %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// BenchmarkSimulateAzure simulates the whole 1-hour Azure conversation trace (19,366 requests) for Llama-2-7B on
// an A100 under fp16 and morph:default; run it with GOMAXPROCS=1. It reports simulated requests per second of
// wall time, the CPU seconds a simulation took (steadier than wall time on a shared machine), and the heap in use
// at the end. Without the data it runs a generated trace of as many requests.
func BenchmarkSimulateAzure(b *testing.B) {
	var tr *trace.Trace
	if p, err := datadir.Path("traces/azure2023/AzureLLMInferenceTrace_conv.csv"); err == nil {
		if tr, err = trace.Load(p, trace.LoadOptions{}); err != nil {
			b.Fatal(err)
		}
	} else {
		if tr, err = trace.Load(burstFile(b, b.TempDir(), 19366), trace.LoadOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, policy := range []string{"fp16", "morph:default"} {
		b.Run("policy="+policy, func(b *testing.B) {
			spec, err := morph.Parse(policy)
			if err != nil {
				b.Fatal(err)
			}
			var heap uint64
			cpu0 := replay.ProcessCPU()
			for range b.N {
				s, err := replay.NewSim(spec, replay.DefaultSim("llama-2-7b", "a100"))
				if err != nil {
					b.Fatal(err)
				}
				r, _, err := s.Replay(context.Background(), tr, loadtest.SLO{TTFT: 2e9})
				if err != nil || r.Aggregates.Completed != len(tr.Requests) {
					b.Fatalf("%v, %d completed", err, r.Aggregates.Completed)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapInuse)
			}
			b.ReportMetric((replay.ProcessCPU()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
		})
	}
}
