//go:build unix

package engine

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/kernels/cpu"
)

// shareGPTLengths draws n (prompt, output) lengths from the ShareGPT length trace, scaled from its 8K context to ctx
// (each length times ctx/8192, at least 1).
func shareGPTLengths(tb testing.TB, n, ctx int, seed uint64) [][2]int {
	f, err := os.Open(datadir.ForTest(tb, "traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		tb.Fatal(err)
	}
	rows = rows[1:] // header
	rng := rand.New(rand.NewPCG(seed, 2))
	scale := float64(ctx) / 8192
	var out [][2]int
	for range n {
		r := rows[rng.IntN(len(rows))]
		p, err1 := strconv.Atoi(r[0])
		d, err2 := strconv.Atoi(r[1])
		if err1 != nil || err2 != nil {
			tb.Fatalf("bad row %v", r)
		}
		ps, ds := max(1, int(math.Round(float64(p)*scale))), max(1, int(math.Round(float64(d)*scale)))
		out = append(out, [2]int{min(ps, ctx-2), min(ds, ctx-1-min(ps, ctx-2))})
	}
	return out
}

// serveStats are vLLM benchmark_serving's metrics over one run.
type serveStats struct {
	Duration                time.Duration
	Requests, OutputTokens  int
	ReqPerSec, OutTokPerSec float64
	MeanTTFT, MeanTPOT      time.Duration
	Preemptions             int
	Overhead                float64 // share of the engine's step wall time spent outside the executor
	MeanBatch               float64 // sequences in iterations that decode (padding included)
}

// envInt reads an integer setting of the serving benchmarks from the environment.
func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

func stories110M(b *testing.B) *model.Model {
	cfg, err := model.ShapeByName("stories110M")
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.FromCheckpoint(model.Synthesize(cfg, 110))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkServe compares continuous, static and dynamic batching on a synthetic stories110M (F32) at the same
// offered load: MORPHLAB_SERVE_REQUESTS requests (default 64; ShareGPT lengths scaled to the 1024-token context,
// output lengths forced as vLLM's benchmark does with ignore_eos) arrive as a Poisson process of
// MORPHLAB_SERVE_RATE requests/s (default 0: all at once); batch size and running sequences at most
// MORPHLAB_SERVE_BATCH (default 32), 512 tokens an iteration, dynamic batching's delay 100 ms, and a KV pool that
// holds a full batch of padded sequences.
//
//	MORPHLAB_SERVE_REQUESTS=16 MORPHLAB_SERVE_BATCH=8 go test -run '^$' -bench BenchmarkServe -benchtime 1x -timeout 60m ./engine/
func BenchmarkServe(b *testing.B) {
	n, batch, rate := envInt(b, "MORPHLAB_SERVE_REQUESTS", 64), envInt(b, "MORPHLAB_SERVE_BATCH", 32), envInt(b, "MORPHLAB_SERVE_RATE", 0)
	m := stories110M(b)
	lengths := shareGPTLengths(b, n, m.Config.SeqLen, 1)
	for _, policy := range []string{"continuous", "static", "dynamic"} {
		b.Run("policy="+policy, func(b *testing.B) {
			var st serveStats
			for range b.N {
				st = serveTrace(b, m, policy, lengths, float64(rate), batch)
			}
			b.ReportMetric(st.OutTokPerSec, "out-tok/s")
			b.ReportMetric(st.ReqPerSec, "req/s")
			b.ReportMetric(st.MeanTTFT.Seconds()*1e3, "ttft-ms")
			b.ReportMetric(st.MeanTPOT.Seconds()*1e3, "tpot-ms")
			b.ReportMetric(float64(st.Preemptions), "preemptions")
			b.ReportMetric(100*st.Overhead, "overhead-%")
			b.ReportMetric(st.MeanBatch, "decode-batch")
			b.Logf("%s: %+v", policy, st)
		})
	}
}

// BenchmarkDecodeOverhead measures the share of step time the engine spends outside the executor (scheduling,
// block tables, batch building, token delivery) with 32 sequences decoding on a synthetic stories110M: 32 requests
// of 8 prompt tokens and 48 output tokens, all at once. Profile it with
//
//	go test -run '^$' -bench BenchmarkDecodeOverhead -benchtime 1x -cpuprofile /tmp/decode.prof ./engine/
//	go tool pprof -top /tmp/decode.prof
func BenchmarkDecodeOverhead(b *testing.B) {
	m := stories110M(b)
	lengths := make([][2]int, 32)
	for i := range lengths {
		lengths[i] = [2]int{8, 48}
	}
	b.ResetTimer()
	var st serveStats
	for range b.N {
		st = serveTrace(b, m, "continuous", lengths, 0, 32)
	}
	b.ReportMetric(100*st.Overhead, "overhead-%")
	b.ReportMetric(st.MeanBatch, "decode-batch")
	b.ReportMetric(st.MeanTPOT.Seconds()*1e3, "tpot-ms")
}

// cpuTimed is the CPU executor with each step's duration taken as the process CPU time it used divided by the
// kernel threads: on a shared, loaded machine this is steadier than wall time, and it equals wall time on an idle
// one whose threads are all busy. Wall time spent in the executor is kept too, for the overhead share.
type cpuTimed struct {
	*executor.CPU
	wall time.Duration
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuTimed) Step(b *executor.Batch) (executor.Result, error) {
	w, u := time.Now(), processCPU()
	r, err := c.CPU.Step(b)
	r.Duration = (processCPU() - u) / time.Duration(cpu.Threads())
	c.wall += time.Since(w)
	return r, err
}

// serveTrace serves requests of the given (prompt, output) lengths with random prompt tokens, arriving as a
// Poisson process of rate requests/s (0: all at time 0), replayed on a virtual clock advanced by each step's CPU time
// (cpuTimed). It returns vLLM's benchmark metrics.
func serveTrace(tb testing.TB, m *model.Model, policy string, lengths [][2]int, rate float64, batch int) serveStats {
	const blockSize, maxTokens = 16, 512
	blocks := batch * (m.Config.SeqLen/blockSize + 2)
	budget := int64(m.WeightBytes()) + executor.WorkspaceBytes(m.Config, maxTokens) + int64(blocks*model.KVBytesPerBlock(m.Config, blockSize))
	cx, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Bytes: budget}, BlockSize: blockSize, MaxBatchedTokens: maxTokens})
	if err != nil {
		tb.Fatal(err)
	}
	x := &cpuTimed{CPU: cx}
	clock := &executor.VirtualClock{}
	var stepWall time.Duration
	var decodeSeqs, decodeIters int
	e, err := New(x, Options{Scheduler: policy, MaxBatchedTokens: maxTokens, MaxNumSeqs: batch, BatchSize: batch, MaxDelay: 100 * time.Millisecond,
		Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	e.OnStep(func(info StepInfo) {
		stepWall += info.Wall
		if t := len(info.Work); t > 0 && info.Work[0].Tokens == 1 {
			decodeSeqs += t
			decodeIters++
		}
	})
	rng := rand.New(rand.NewPCG(7, 7))
	reqs := make([]TimedRequest, len(lengths))
	for i := range reqs {
		if i > 0 && rate > 0 {
			reqs[i].Arrival = reqs[i-1].Arrival + time.Duration(rng.ExpFloat64()/rate*float64(time.Second))
		}
		p := make([]int32, lengths[i][0])
		for j := range p {
			p[j] = int32(rng.IntN(m.Config.VocabSize))
		}
		reqs[i].Request = Request{Prompt: p, MaxTokens: lengths[i][1]}
	}
	results, err := e.Replay(context.Background(), reqs)
	if err != nil {
		tb.Fatalf("%s: %v", policy, err)
	}
	var st serveStats
	var first, last time.Duration = math.MaxInt64, 0
	var ttft, tpot time.Duration
	for i, r := range results {
		if r.Err != nil || len(r.Output) != lengths[i][1] {
			tb.Fatalf("request %d: %d tokens of %d, %v", i, len(r.Output), lengths[i][1], r.Err)
		}
		tl := r.Timeline
		first, last = min(first, tl.Arrival), max(last, tl.Finish)
		ttft += tl.FirstToken - tl.Arrival
		if n := len(r.Output); n > 1 {
			tpot += (tl.Finish - tl.FirstToken) / time.Duration(n-1)
		}
		st.OutputTokens += len(r.Output)
		st.Preemptions += r.Preemptions
	}
	st.Requests = len(results)
	st.Duration = last - first
	st.ReqPerSec = float64(st.Requests) / st.Duration.Seconds()
	st.OutTokPerSec = float64(st.OutputTokens) / st.Duration.Seconds()
	st.MeanTTFT = ttft / time.Duration(st.Requests)
	st.MeanTPOT = tpot / time.Duration(st.Requests)
	st.Overhead = 1 - x.wall.Seconds()/stepWall.Seconds()
	if decodeIters > 0 {
		st.MeanBatch = float64(decodeSeqs) / float64(decodeIters)
	}
	return st
}

// TestServeTraceSmall runs the throughput experiment's driver on a small synthetic model and a handful of
// requests, so that the benchmark's code is exercised by the ordinary test run.
func TestServeTraceSmall(t *testing.T) {
	m := synthModel(t)
	n := 12
	if testing.Short() {
		n = 6 // the race detector run
	}
	lengths := shareGPTLengths(t, n, 256, 3)
	for i := range lengths {
		lengths[i] = [2]int{min(lengths[i][0], 100), min(lengths[i][1], 30)}
	}
	var out []string
	for _, policy := range []string{"continuous", "static", "dynamic"} {
		st := serveTrace(t, m, policy, lengths, 0, 8)
		if st.OutputTokens == 0 || st.OutTokPerSec <= 0 || st.Overhead < 0 || st.Overhead >= 1 {
			t.Errorf("%s: %+v", policy, st)
		}
		out = append(out, fmt.Sprintf("%s %.0f tok/s", policy, st.OutTokPerSec))
	}
	t.Log(slices.Clip(out))
}
