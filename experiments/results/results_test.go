package results

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/quant"
)

func msec(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestBuild: three requests with known timelines (one over the TTFT SLO, one rejected) give the hand-computed
// aggregates, violations and precision mix.
func TestBuild(t *testing.T) {
	base := []quant.Format{quant.F16, quant.F16}
	spec, _ := morph.Parse("fp16")
	c, err := morph.NewController(nil, spec, []int{0, 1}, base)
	if err != nil {
		t.Fatal(err)
	}
	// Two iterations: request 0 decodes with no layer quantized, then request 1 with one.
	c.OnStep(engine.StepInfo{Iter: 0, Time: msec(100), Formats: base, Total: 10, Used: 4, Work: []engine.WorkInfo{{Req: 0, Sample: true}}})
	c.OnStep(engine.StepInfo{Iter: 1, Time: msec(200), Formats: []quant.Format{quant.Int4, quant.F16}, Total: 14, Used: 9,
		Work: []engine.WorkInfo{{Req: 0, Sample: true}, {Req: 1, Sample: true}, {Req: 1, Sample: false}}})
	reqs := []engine.TimedRequest{
		{Arrival: 0, Request: engine.Request{Prompt: make([]int32, 10), MaxTokens: 3}},
		{Arrival: msec(50), Request: engine.Request{Prompt: make([]int32, 20), MaxTokens: 2}},
		{Arrival: msec(60), Request: engine.Request{Prompt: make([]int32, 5), MaxTokens: 1}},
	}
	res := []engine.Result{
		{ID: 0, Output: []int32{5, 6, 7}, Finish: engine.FinishLength, Timeline: engine.Timeline{Arrival: 0, FirstToken: msec(100),
			Tokens: []time.Duration{msec(100), msec(200), msec(400)}, Finish: msec(400)}},
		{ID: 1, Output: []int32{8, 9}, Finish: engine.FinishStop, Preemptions: 1, CachedTokens: 16, Timeline: engine.Timeline{Arrival: msec(50),
			FirstToken: msec(2550), Tokens: []time.Duration{msec(2550), msec(2650)}, Finish: msec(2650)}},
		{ID: 2, Finish: engine.FinishRejected, Timeline: engine.Timeline{Arrival: msec(60), Finish: msec(60)}},
	}
	acc := NewAccumulator(Meta{}, c.Recorder.Layers())
	for _, i := range []int{2, 0, 1} { // in the order they end
		acc.Add(reqs[i], res[i], c.Recorder.Take(res[i].ID), true, true)
	}
	r := Build(Meta{Policy: "fp16", KVBlocksFull: 10, SLO: metrics.SLO{TTFT: 2 * time.Second}}, acc, c)
	for i, row := range r.Requests {
		if row.ID != i || row.Prompt != len(reqs[i].Prompt) {
			t.Errorf("row %d: request %d with a prompt of %d, want request %d's %d", i, row.ID, row.Prompt, i, len(reqs[i].Prompt))
		}
	}
	a := r.Aggregates
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if a.Completed != 2 || a.Rejected != 1 || a.SLOViolations != 2 || a.Preemptions != 1 || a.PeakKVBlocks != 9 || a.PeakKVAttached != 14 || a.MaxQuantized != 1 {
		t.Errorf("aggregates %+v", a)
	}
	near("violation rate", a.SLOViolationRate, 2.0/3)
	near("duration", a.DurationS, 2.65)
	near("TTFT median", a.TTFT.Median, (100+2500)/2.0)
	near("TPOT mean", a.TPOT.Mean, (150+100)/2.0) // (400-100)/2 and (2650-2550)/1
	// gaps 100, 200 and 100
	if want := (loadtest.Summary{N: 3, Mean: 400.0 / 3, Std: math.Sqrt(20000.0 / 9), Median: 100, P90: 180, P95: 190, P99: 198}); !nearSummary(a.ITL, want) {
		t.Errorf("ITL %+v, want %+v", a.ITL, want)
	}
	near("output throughput", a.OutputThroughput, 5/2.65)
	if got := r.Requests[1].Mix; len(got) != 3 || got[0] != 0 || got[1] != 1 {
		t.Errorf("request 1 mix %v, want one token with one layer quantized", got)
	}
	near("full-precision share", a.FullPrecision, 1.0/3) // request 0's first token of 3 sampled
	near("prefix hit rate", a.PrefixHitRate, 16.0/35)
	near("request 1's prefix hit rate", r.Requests[1].PrefixHitRate, 16.0/20)
	if a.PrefixCachedTokens != 16 || r.Requests[1].CachedTokens != 16 || r.Requests[0].CachedTokens != 0 {
		t.Errorf("%d prompt tokens cached, request 1's %d, request 0's %d; want 16, 16, 0", a.PrefixCachedTokens, r.Requests[1].CachedTokens, r.Requests[0].CachedTokens)
	}
	dir := t.TempDir()
	if err := r.Write(dir, []engine.Event{{Kind: engine.Token}, {Kind: engine.Swap, Detail: "layers 0->int4"}}); err != nil {
		t.Fatal(err)
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil || back.Aggregates.SLOViolations != 2 || len(back.Requests) != 3 || len(back.Requests[0].Tokens) != 3 ||
		back.Aggregates.PrefixCachedTokens != 16 || back.Requests[1].PrefixHitRate != 0.8 {
		t.Fatalf("load back: %+v, %v", back, err)
	}
	if js, _ := os.ReadFile(filepath.Join(dir, "results.json")); strings.Count(string(js), `"prefix_cached_tokens"`) != 2 {
		t.Errorf("results.json names prefix_cached_tokens %d times, want twice (the aggregate and request 1; 0 is left out)",
			strings.Count(string(js), `"prefix_cached_tokens"`))
	}
	evs, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if lines := strings.Split(strings.TrimSpace(string(evs)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"kind":"swap"`) {
		t.Errorf("events.jsonl %q, want the swap and no token", evs)
	}
	table, _ := os.ReadFile(filepath.Join(dir, "table.md"))
	if !strings.Contains(string(table), "| fp16") || !strings.Contains(string(table), "66.7%") {
		t.Errorf("table.md:\n%s", table)
	}
	exact, tok, err := Agreement(r, back)
	if err != nil || exact != 1 || tok != 1 {
		t.Errorf("a run against itself agrees %v, %v, %v", exact, tok, err)
	}
	back.Requests[0].Tokens = []int32{5, 1, 7}
	if exact, tok, _ = Agreement(r, back); math.Abs(exact-2.0/3) > 1e-9 || math.Abs(tok-4.0/5) > 1e-9 {
		t.Errorf("one token changed: exact %v, tokens %v; want 2/3 and 4/5", exact, tok)
	}
}

// nearSummary reports whether two summaries agree to 1e-9 in every figure.
func nearSummary(a, b loadtest.Summary) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9 }
	return a.N == b.N && near(a.Mean, b.Mean) && near(a.Std, b.Std) && near(a.Median, b.Median) && near(a.P90, b.P90) &&
		near(a.P95, b.P95) && near(a.P99, b.P99)
}

// TestWriteJSON: results.json, written a request and a timeline point at a time, is json.MarshalIndent's output
// and a newline, byte for byte: for a run with requests, timeline, quality, a fleet and strings JSON escapes, and
// for runs with empty and with no requests and timeline.
func TestWriteJSON(t *testing.T) {
	full := &Run{Schema: Schema, Meta: Meta{Command: "simulate", Model: "a <b> & c", Params: json.RawMessage(`{"k":1}`),
		Trace: TraceInfo{Transforms: []string{"clip"}}}, Quality: &Quality{Reference: "r.json", ExactMatch: 0.5},
		Aggregates: Aggregates{TokensByLayers: []int{1, 2}, TokensByPosition: map[string][]int{"int8": {3}}},
		Requests:   []Request{{ID: 0, Finish: "length", Mix: []int32{1, 0}, Tokens: []int32{5}}, {ID: 1, Finish: "rejected", Mix: []int32{}}},
		Timeline:   []morph.Point{{Seconds: 0.5, Iter: 1, KVUsed: 3}, {Seconds: 1, Iter: 2}},
		Fleet:      &Fleet{Router: "round-robin", Replicas: []Replica{{Model: "m", Requests: 2}}, Assigned: []int{0, 0}, Size: []SizePoint{{T: 1, Serving: 1}}}}
	for _, r := range []*Run{full, {Schema: Schema, Requests: []Request{}, Timeline: []morph.Point{}}, {Schema: Schema}} {
		want, err := json.MarshalIndent(r, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := writeJSON(&got, r); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Errorf("written:\n%s\nMarshalIndent:\n%s", got.String(), want)
		}
	}
}

// TestITLFromCounts: the ITL summarized from the count of each gap has the percentiles loadtest.Summarize gives
// for the list of gaps, and its mean and deviation to 1e-12; its mean is the sorted gaps' sum in plain order over
// their count, exactly.
func TestITLFromCounts(t *testing.T) {
	a := NewAccumulator(Meta{}, 1)
	var gaps []float64
	rng := rand.New(rand.NewPCG(1, 2))
	for id := range 200 {
		tl := engine.Timeline{Arrival: 0}
		now := time.Duration(0)
		for range 1 + rng.IntN(60) {
			now += time.Duration(1+rng.IntN(40)) * 250 * time.Microsecond // gaps repeat, as a replay's steps give them
			tl.Tokens = append(tl.Tokens, now)
		}
		for j := 1; j < len(tl.Tokens); j++ {
			gaps = append(gaps, ms(tl.Tokens[j]-tl.Tokens[j-1]))
		}
		tl.FirstToken, tl.Finish = tl.Tokens[0], now
		a.Add(engine.TimedRequest{Request: engine.Request{Prompt: make([]int32, 4), MaxTokens: 60}},
			engine.Result{ID: kv.SeqID(id), Finish: engine.FinishLength, Output: make([]int32, len(tl.Tokens)), Timeline: tl}, []int32{0, 0}, false, true)
	}
	got, want := a.Run(nil, morph.Point{}, 0).Aggregates.ITL, loadtest.Summarize(gaps)
	rel := func(x, y float64) float64 { return math.Abs(x-y) / math.Abs(y) }
	if got.N != want.N || got.Median != want.Median || got.P90 != want.P90 || got.P95 != want.P95 || got.P99 != want.P99 ||
		rel(got.Mean, want.Mean) > 1e-12 || rel(got.Std, want.Std) > 1e-12 {
		t.Errorf("ITL from counts %+v, from the list %+v", got, want)
	}
	slices.Sort(gaps)
	sum := 0.0
	for _, g := range gaps {
		sum += g
	}
	if got.Mean != sum/float64(len(gaps)) {
		t.Errorf("ITL mean %v, the sorted gaps' plain sum over their count %v", got.Mean, sum/float64(len(gaps)))
	}
}
