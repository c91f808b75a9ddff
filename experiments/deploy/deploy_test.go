package deploy

import (
	"context"
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/quant"
)

// burst is a seeded on/off burst of n requests.
func burst(t testing.TB, n, maxPrompt, maxOutput int) *trace.Trace {
	t.Helper()
	tr, err := trace.Generate(trace.Spec{Process: trace.OnOff{OnRate: 12, OffRate: 1, OnMean: 5, OffMean: 10},
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 20, Max: maxPrompt}, Output: trace.Uniform{Min: 10, Max: maxOutput}}, N: n}, 7)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func mustPolicy(t testing.TB, name string) morph.Policy {
	t.Helper()
	p, err := morph.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPools: a pool of N blocks is the full-precision budget of N blocks on both executors, a policy that starts
// quantized attaches more on the same budget, a budget in bytes holds the blocks that fit, and the defaults (32
// full-context sequences on the cpu executor, 90% of the device on the sim) size the pool as documented.
func TestPools(t *testing.T) {
	for _, c := range []struct {
		name   string
		d      Deployment
		blocks int // the full-precision pool
	}{
		{"cpu, blocks", Deployment{Model: "stories260K", KV: KV{Blocks: 40}}, 40},
		{"sim, blocks", Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: KV{Blocks: 958}}, 958},
		{"cpu, default", Deployment{Model: "stories260K"}, 32 * 512 / 16},
		{"cpu, blocks of 8", Deployment{Model: "stories260K", KV: KV{Blocks: 40, BlockSize: 8}}, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, err := c.d.Build()
			if err != nil {
				t.Fatal(err)
			}
			mem := in.Executor.Memory()
			if mem.FullBlocks != c.blocks || mem.Blocks != c.blocks || mem.Budget != mem.Weights+mem.Workspace+int64(c.blocks)*mem.BlockBytes {
				t.Fatalf("memory %+v, want a budget of the weights, the workspace and %d blocks, all attached", mem, c.blocks)
			}
			q := c.d
			q.Policy = mustPolicy(t, "static:int4")
			qin, err := q.Build()
			if err != nil {
				t.Fatal(err)
			}
			qm := qin.Executor.Memory()
			if qm.Budget != mem.Budget || qm.FullBlocks != c.blocks || qm.Blocks <= c.blocks || qm.Weights >= mem.Weights {
				t.Errorf("static:int4: %+v, want the same budget and full-precision pool, more blocks attached", qm)
			}
			b := c.d
			b.KV.Blocks, b.Memory = 0, mem.Budget+mem.BlockBytes/2
			bm, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if m := bm.Executor.Memory(); m.FullBlocks != c.blocks || m.Budget != b.Memory {
				t.Errorf("a budget of %d bytes: %+v, want %d blocks", b.Memory, m, c.blocks)
			}
		})
	}
	in, err := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100"}.Build()
	if err != nil {
		t.Fatal(err)
	}
	hw, _ := catalog.HardwareByName("a100")
	if got, want := in.Executor.Memory().Budget, int64(0.9*float64(hw.Memory)); got != want {
		t.Errorf("the sim's default budget %d, want 90%% of the A100's %d bytes", got, hw.Memory)
	}
}

// TestDefaultsAndErrors: zero fields take the documented defaults, and inconsistent deployments fail in one line
// naming what is wrong.
func TestDefaultsAndErrors(t *testing.T) {
	l, err := Deployment{Model: "stories260K", DType: "f16"}.Load()
	if err != nil {
		t.Fatal(err)
	}
	d := l.Deployment
	if d.Executor != "cpu" || d.Clock != "wall" || d.KV.BlockSize != 16 || d.Scheduler.Kind != "continuous" ||
		d.Scheduler.MaxBatchedTokens != 512 || d.Scheduler.MaxNumSeqs != 256 || d.Scheduler.BatchSize != 32 ||
		d.Policy.String() != "fp16" || l.KVType != model.KVF16 || l.Base[0] != quant.F16 || l.Name != "stories260K (synthetic, seed 1)" {
		t.Errorf("defaults: %+v, KV %v, base %v, name %q", d, l.KVType, l.Base, l.Name)
	}
	if l, err := (Deployment{Model: "stories260K"}).Load(); err != nil || l.KVType != model.KVF32 {
		t.Errorf("f32 layers: KV %v (%v), want f32", l.KVType, err)
	}
	for _, c := range []struct {
		d    Deployment
		want string
	}{
		{Deployment{}, "no model"},
		{Deployment{Model: "stories260K", Executor: "gpu"}, `executor "gpu"`},
		{Deployment{Model: "stories260K", Executor: "sim"}, "the sim needs a device"},
		{Deployment{Model: "stories260K", Device: "a100"}, "the cpu executor runs on this CPU"},
		{Deployment{Model: "stories260K", Executor: "sim", Device: "cpu"}, "needs a calibration file"},
		{Deployment{Model: "stories260K", Memory: 1 << 30, KV: KV{Blocks: 4}}, "give one of them"},
		{Deployment{Model: "stories260K", MemoryUtilization: 0.5}, "size the cpu executor's pool in blocks or bytes"},
		{Deployment{Model: "stories260K", Scheduler: Scheduler{Kind: "fifo"}}, `scheduler "fifo"`},
		{Deployment{Model: "stories260K", Clock: "sun"}, `clock "sun"`},
		{Deployment{Model: "gpt-9"}, `model "gpt-9" is neither a file nor a model name`},
		{Deployment{Model: "stories260K", Memory: 1000}, "does not hold"},
		{Deployment{Model: "stories260K", KV: KV{DType: "f8"}}, "KV dtype"},
		{Deployment{Model: "stories260K", Executor: "cuda", Device: "cpu"}, "runs on a GPU"},
		{Deployment{Model: "stories260K", Executor: "cuda", Clock: "cpu"}, "runs on the wall clock"},
		{Deployment{Model: "stories260K", Executor: "cuda", Calibration: "cpu.json"}, "the cuda executor times its own steps"},
		{Deployment{Model: "stories260K", Executor: "cuda", DType: "f16", KV: KV{DType: "int8"}}, "keeps its KV cache in the layers' type"},
	} {
		_, err := c.d.Build()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want one line with %q", c.d, err, c.want)
		}
	}
}

// TestFlags: the flags fill a deployment with the same names and units in every command, old names are aliases,
// and bad values are errors naming the flag.
func TestFlags(t *testing.T) {
	parse := func(args ...string) (Deployment, error) {
		var f Flags
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs, "cpu")
		if err := fs.Parse(args); err != nil {
			return Deployment{}, err
		}
		return f.Deployment()
	}
	d, err := parse("--model", "llama-2-7b", "--executor", "sim", "--device", "l4", "--max-num-batched-tokens", "2048",
		"--max-num-seqs", "64", "--block-size", "32", "--kv-cache-dtype", "int8", "--memory", "20GiB", "--policy", "morph:default:persistence=2")
	if err != nil {
		t.Fatal(err)
	}
	if d.Scheduler.MaxBatchedTokens != 2048 || d.Scheduler.MaxNumSeqs != 64 || d.KV.BlockSize != 32 || d.KV.DType != "int8" ||
		d.Memory != 20<<30 || d.Policy.String() != "morph:default:persistence=2" || d.Clock != "virtual" {
		t.Errorf("flags gave %+v", d)
	}
	a, err := parse("--shape", "llama-2-7b", "--executor", "sim", "--gpu", "l4", "--max-tokens", "2048", "--max-seqs", "64",
		"--kv-type", "int8", "--memory-utilization", "0.5")
	if err != nil {
		t.Fatal(err)
	}
	if a.Model != "llama-2-7b" || a.Device != "l4" || a.Scheduler.MaxBatchedTokens != 2048 || a.Scheduler.MaxNumSeqs != 64 ||
		a.KV.DType != "int8" || a.MemoryUtilization != 0.5 {
		t.Errorf("aliases gave %+v", a)
	}
	// Prefix caching is on by default; vLLM's switch pair turns it off and on, the last given winning.
	for args, off := range map[string]bool{
		"":                              false,
		"--no-enable-prefix-caching":    true,
		"--enable-prefix-caching=false": true,
		"--no-enable-prefix-caching --enable-prefix-caching": false,
		"--enable-prefix-caching --no-enable-prefix-caching": true,
	} {
		d, err := parse(append([]string{"--model", "stories260K"}, strings.Fields(args)...)...)
		if err != nil || d.KV.NoPrefixCaching != off || d.PrefixCaching() == off {
			t.Errorf("%q: NoPrefixCaching %v, PrefixCaching() %v (%v); want off %v", args, d.KV.NoPrefixCaching, d.PrefixCaching(), err, off)
		}
	}
	if d, err := parse("--model", "stories260K", "--scheduler", "dynamic"); err != nil || d.KV.NoPrefixCaching || d.PrefixCaching() {
		t.Errorf("dynamic batching: NoPrefixCaching %v, PrefixCaching() %v (%v); want the setting left on and unused", d.KV.NoPrefixCaching, d.PrefixCaching(), err)
	}
	for args, want := range map[string]string{
		"--model stories260K --enable-prefix-caching=maybe": `invalid boolean value "maybe" for -enable-prefix-caching`,
		"--model stories260K --memory lots":                 `--memory: "lots", want a positive size`,
		"--model stories260K --policy morph:x":              `--policy: policy "morph:x"`,
		"--model gpt-9":                                     `--model: model "gpt-9"`,
		"--model stories260K --device tpu":                  `--device: unknown device "tpu"`,
		"--policy fp16":                                     "--model is required",
		"--model stories260K --scheduler fifo":              `scheduler "fifo"`,
		"--model stories260K --max-num-seqs -1":             "want none negative",
		"--model stories260K --executor sim":                "the sim needs a device",
		"--model stories260K --kv-blocks 3 --memory 1GiB":   "give one of them",
	} {
		if _, err := parse(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	for s, want := range map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "1.5KiB": 1536, "1000000": 1e6, "3MB": 3e6, "64B": 64} {
		if got, err := ParseBytes(s); got != want || err != nil {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1MiB", "MiB", "1TiB5", "1e30GiB"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q): no error", s)
		}
	}
}

// TestReplay: a trace replays on the cpu executor and on the sim with every request served; the results say what
// was deployed; the sim's results are the same on a second instance; an instance replays once.
func TestReplay(t *testing.T) {
	tr := burst(t, 60, 120, 40)
	ctx := context.Background()
	d := Deployment{Model: "stories260K", KV: KV{Blocks: 40}, Clock: "cpu", Policy: mustPolicy(t, "morph:performance:persistence=1"),
		Scheduler: Scheduler{MaxBatchedTokens: 128}}
	in, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	r, events, err := in.Replay(ctx, tr, ReplayOptions{SLO: metrics.SLO{TTFT: time.Second}, KeepSteps: true})
	if err != nil {
		t.Fatal(err)
	}
	m := r.Meta
	if r.Aggregates.Completed != 60 || m.Command != "run" || m.Executor != "cpu" || m.Clock != "cpu" || m.KVBlocksFull != 40 ||
		m.Policy != "morph:performance:persistence=1" || !strings.Contains(string(m.Params), `"persistence":1`) || len(r.Steps) == 0 || len(events) == 0 {
		t.Fatalf("cpu replay: %d completed, meta %+v, %d steps, %d events", r.Aggregates.Completed, m, len(r.Steps), len(events))
	}
	if _, _, err := in.Replay(ctx, tr, ReplayOptions{}); err == nil || !strings.Contains(err.Error(), "replayed a trace already") {
		t.Errorf("a second replay on one instance: %v", err)
	}
	s := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: KV{Blocks: 958}, Policy: mustPolicy(t, "morph:default")}
	a, b := replaySim(t, s, tr), replaySim(t, s, tr)
	if a.Aggregates.Completed != 60 || a.Meta.Command != "simulate" || a.Meta.Device != "l4" || a.Meta.Clock != "virtual" ||
		a.Aggregates.TTFT != b.Aggregates.TTFT || a.Aggregates.TPOT != b.Aggregates.TPOT {
		t.Errorf("sim replays: %+v then %+v", a.Aggregates, b.Aggregates)
	}
}

func replaySim(t *testing.T, d Deployment, tr *trace.Trace) *results.Run {
	in, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := in.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// BenchmarkSimulateAzure simulates the whole 1-hour Azure conversation trace (19,366 requests) for Llama-2-7B on
// an A100 under fp16 and morph:default; run it with GOMAXPROCS=1. It reports simulated requests per second of
// wall time, the CPU seconds a simulation took (steadier than wall time on a shared machine), and the heap in use
// at the end. Without the data it runs a generated trace of as many requests.
func BenchmarkSimulateAzure(b *testing.B) {
	tr := azureHour(b)
	for _, policy := range []string{"fp16", "morph:default"} {
		b.Run("policy="+policy, func(b *testing.B) {
			d := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100", Policy: mustPolicy(b, policy),
				Scheduler: Scheduler{MaxBatchedTokens: 2048}}
			var heap uint64
			cpu0 := ProcessCPU()
			for range b.N {
				in, err := d.Build()
				if err != nil {
					b.Fatal(err)
				}
				r, _, err := in.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2e9}})
				if err != nil || r.Aggregates.Completed != len(tr.Requests) {
					b.Fatalf("%v, %d completed", err, r.Aggregates.Completed)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapInuse)
			}
			b.ReportMetric((ProcessCPU()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(heap)/(1<<20), "MiB-heap")
		})
	}
}

// azureHour is the 1-hour Azure conversation trace, or without the data a generated trace of as many requests.
func azureHour(tb testing.TB) *trace.Trace {
	p, err := datadir.Path("traces/azure2023/AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		return burst(tb, 19366, 900, 400)
	}
	tr, err := trace.Load(p, trace.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}
