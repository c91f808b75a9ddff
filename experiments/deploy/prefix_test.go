package deploy

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/quant"
)

// conversations is a generated multi-turn trace with Mooncake-style hash ids, one request every half second:
// every prompt starts with a shared system block (id 0), a conversation's next turn repeats its last turn's ids
// and adds 1-3 of its own, and a prompt ends part way into its last id's block; outputs are 5-40 tokens.
func conversations(n, convs, block int, seed uint64) *trace.Trace {
	rng := rand.New(rand.NewPCG(seed, 8))
	next := int64(1)
	turns := make([][]int64, convs)
	t := &trace.Trace{Source: "conversations", Format: trace.Mooncake, HashBlock: block}
	for i := range n {
		c := rng.IntN(convs)
		ids := slices.Clone(turns[c])
		if len(ids) == 0 {
			ids = []int64{0}
		}
		for range 1 + rng.IntN(3) {
			ids = append(ids, next)
			next++
		}
		turns[c] = ids
		prompt := (len(ids)-1)*block + 1 + rng.IntN(block)
		t.Requests = append(t.Requests, trace.Request{Arrival: float64(i) / 2, PromptTokens: prompt, OutputTokens: 5 + rng.IntN(36), HashIDs: ids})
	}
	return t
}

// TestRequestsSharePrefixes: equal hash ids give equal prompt tokens and different ids different ones, block by
// block of the trace's HashBlock; a trace without hash ids gets the prompts it always had, one seeded stream over
// the requests.
func TestRequestsSharePrefixes(t *testing.T) {
	tr := &trace.Trace{HashBlock: 8, Requests: []trace.Request{
		{PromptTokens: 20, HashIDs: []int64{0, 1, 2}},
		{PromptTokens: 12, HashIDs: []int64{0, 1}},
		{PromptTokens: 30, HashIDs: []int64{0, 3}}, // 14 tokens past its ids: its own
		{PromptTokens: 10},
	}}
	reqs, err := Requests(tr, 1000, 9)
	if err != nil {
		t.Fatal(err)
	}
	p := func(i int) []int32 { return reqs[i].Prompt }
	if !slices.Equal(p(0)[:12], p(1)) || !slices.Equal(p(0)[:8], p(2)[:8]) || slices.Equal(p(0)[8:16], p(2)[8:16]) {
		t.Errorf("prompts %v, %v, %v: want the first 12 tokens shared by 0 and 1, the first 8 by 0 and 2", p(0), p(1), p(2))
	}
	if slices.Equal(p(0)[:8], p(0)[8:16]) || slices.Equal(p(2)[16:24], p(3)[:8]) {
		t.Errorf("different ids, or tokens past the ids, gave equal tokens: %v, %v", p(0), p(2))
	}
	for _, q := range reqs {
		for _, tok := range q.Prompt {
			if tok < 3 || tok >= 1000 {
				t.Fatalf("token %d outside [3, 1000)", tok)
			}
		}
	}
	if other, _ := Requests(tr, 1000, 10); slices.Equal(other[0].Prompt, p(0)) {
		t.Error("another seed drew the same hash blocks")
	}
	// Without hash ids: the seeded stream, as before prefixes were shared.
	plain := &trace.Trace{Requests: []trace.Request{{PromptTokens: 5}, {PromptTokens: 7}}}
	got, _ := Requests(plain, 1000, 9)
	rng := rand.New(rand.NewPCG(9, 0x5eed))
	for _, q := range got {
		for j, tok := range q.Prompt {
			if want := int32(3 + rng.IntN(997)); tok != want {
				t.Fatalf("token %d of a prompt without hash ids is %d, want %d", j, tok, want)
			}
		}
	}
}

// TestCPUOutputsWithPrefixCaching: on the real CPU engine at full precision, a conversation trace replayed with
// prefix caching gives every request exactly the greedy output it gets without it, while the cache serves part of
// the prompts and the small pool preempts. (Under a morph policy the layers' precisions at each step depend on the
// timing, and so do the outputs, cache or not.)
func TestCPUOutputsWithPrefixCaching(t *testing.T) {
	tr, err := trace.TimeScale(conversations(40, 10, 24, 3), 1e-4) // all within 2 ms: the pool preempts
	if err != nil {
		t.Fatal(err)
	}
	var runs [2]*results.Run
	for i, off := range []bool{true, false} {
		d := Deployment{Model: "stories260K", KV: KV{Blocks: 28, NoPrefixCaching: off}, Clock: "cpu", Scheduler: Scheduler{MaxBatchedTokens: 96}}
		in, err := d.Build()
		if err != nil {
			t.Fatal(err)
		}
		if runs[i], _, err = in.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: time.Second}, KeepTokens: true}); err != nil {
			t.Fatal(err)
		}
	}
	exact, _, err := results.Agreement(runs[0], runs[1])
	if err != nil || exact != 1 {
		t.Errorf("greedy outputs with and without prefix caching: %.3f identical (%v), want all", exact, err)
	}
	off, on := runs[0].Aggregates, runs[1].Aggregates
	t.Logf("prefix hit rate %.3f; %d preemptions", on.PrefixHitRate, on.Preemptions)
	if off.PrefixCachedTokens != 0 || on.PrefixHitRate < 0.2 || on.Preemptions == 0 || on.Completed != len(tr.Requests) {
		t.Errorf("prefix hit rate %.3f with the cache, %d cached tokens without, %d preemptions; %d of %d completed",
			on.PrefixHitRate, off.PrefixCachedTokens, on.Preemptions, on.Completed, len(tr.Requests))
	}
}

// checkUnboundedHits replays tr in the sim one request at a time under a pool that never evicts, and checks that
// every request finds cached exactly the tokens UnboundedCacheHits reads off the hash ids; then under the real
// pool (958 blocks, requests side by side), where no request can find more. It returns both hit rates.
func checkUnboundedHits(t *testing.T, tr *trace.Trace) (unbounded, pooled float64) {
	t.Helper()
	d := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100", Scheduler: Scheduler{MaxBatchedTokens: 2048}, Policy: mustPolicy(t, "fp16")}
	clipped, err := trace.Clip(tr, trace.Limits{Context: 4096})
	if err != nil {
		t.Fatal(err)
	}
	want := UnboundedCacheHits(clipped, DefaultBlockSize)
	blocks := 0
	for _, r := range clipped.Requests {
		blocks += (r.PromptTokens + r.OutputTokens + DefaultBlockSize - 1) / DefaultBlockSize
	}
	serial := d
	serial.KV.Blocks, serial.Scheduler.MaxNumSeqs = blocks+64, 1
	pool := d
	pool.KV.Blocks = 958
	a, b := replaySim(t, serial, tr), replaySim(t, pool, tr)
	prompts, hits := 0, 0
	for i, r := range a.Requests {
		prompts += r.Prompt
		hits += want[i]
		if r.CachedTokens != want[i] || b.Requests[i].CachedTokens > want[i] {
			t.Fatalf("request %d of %d prompt tokens: %d cached one at a time and %d side by side, the hash ids say %d",
				i, r.Prompt, r.CachedTokens, b.Requests[i].CachedTokens, want[i])
		}
	}
	if a.Aggregates.PrefixCachedTokens != hits || a.Aggregates.Preemptions != 0 {
		t.Fatalf("%d tokens cached, %d preemptions; the hash ids say %d", a.Aggregates.PrefixCachedTokens, a.Aggregates.Preemptions, hits)
	}
	return float64(hits) / float64(prompts), b.Aggregates.PrefixHitRate
}

// TestUnboundedHitsGenerated: the hit rate that an unbounded cache measures on a generated conversation trace is
// the one its hash ids give, request by request (the twin of TestUnboundedHitsMooncake).
func TestUnboundedHitsGenerated(t *testing.T) {
	unbounded, pooled := checkUnboundedHits(t, conversations(150, 12, trace.MooncakeBlock, 4))
	t.Logf("prefix hit rate: %.4f unbounded (the hash ids'), %.4f under the real pool", unbounded, pooled)
	if unbounded < 0.3 || pooled <= 0 {
		t.Errorf("hit rates %.4f and %.4f: the trace is meant to share most of each prompt", unbounded, pooled)
	}
}

// TestUnboundedHitsMooncake: on the Mooncake conversation trace's busiest 72 s (as the suite cuts it), the
// measured hit rate under an unbounded cache is the one its hash ids give, request by request; the real pool's is
// reported beside it.
func TestUnboundedHitsMooncake(t *testing.T) {
	p, err := datadir.Path("traces/mooncake/conversation_trace.jsonl")
	if err != nil {
		t.Skipf("the Mooncake trace is not in the data directory: %v", err)
	}
	tr, err := trace.Load(p, trace.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = trace.Spread(tr, 1); err != nil {
		t.Fatal(err)
	}
	if tr, err = trace.Busiest(tr, 72, trace.ByRequests); err != nil {
		t.Fatal(err)
	}
	unbounded, pooled := checkUnboundedHits(t, tr)
	t.Logf("Mooncake conversation, busiest 72 s (%d requests), Llama-2-7B's 4K context: prefix hit rate %.4f unbounded (the hash ids'), %.4f under the real pool (958 blocks)",
		len(tr.Requests), unbounded, pooled)
}

// TestSimPrefillsOnlyUncached: in the sim, a prompt of 1000 tokens whose first 992 are cached (62 blocks; the
// last, partial block and the token before it are computed) takes the cost model's time for 8 tokens over a
// 1000-token context, and 1000 tokens without the cache.
func TestSimPrefillsOnlyUncached(t *testing.T) {
	tr := &trace.Trace{HashBlock: 2048, Requests: []trace.Request{
		{Arrival: 0, PromptTokens: 1000, OutputTokens: 1, HashIDs: []int64{7}},
		{Arrival: 10, PromptTokens: 1000, OutputTokens: 1, HashIDs: []int64{7}},
	}}
	for _, off := range []bool{false, true} {
		d := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100", KV: KV{Blocks: 500, NoPrefixCaching: off},
			Scheduler: Scheduler{MaxBatchedTokens: 2048}}
		in, err := d.Build()
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := in.Replay(context.Background(), tr, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fed := 1000
		if !off {
			fed = 8
		}
		var w costmodel.Work
		w.AddSeq(fed, 1000, true)
		want := in.cost.StepTime(w, []costmodel.LayerFormat{{Format: quant.F16, Layers: in.Config.NLayers}})
		if got := r.Requests[1].TTFT; math.Abs(got-ms(want)) > 1e-9 || r.Requests[1].CachedTokens != 1000-fed {
			t.Errorf("cache off %v: the second prompt's TTFT %.4f ms with %d tokens cached, want %.4f ms (%d tokens fed)",
				off, got, r.Requests[1].CachedTokens, ms(want), fed)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
