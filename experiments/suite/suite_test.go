package suite

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// TestSuite runs a reduced suite twice (one setup, four policies, the quick workloads and sweep, stand-in traces):
// every simulated file is the same byte for byte, and the same when each run runs again from its results.json;
// the plots decode as PNG, summary.md carries the headline, and morphing cuts fp16's violations on the burst.
func TestSuite(t *testing.T) {
	run := func(out string) *Report {
		r, err := Run(context.Background(), Options{Out: out, Quick: true, Setups: []Setup{PaperSetups[1]},
			Policies: []string{"fp16", "static:int8", "static:int4", "morph:default"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Write(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := t.TempDir(), t.TempDir()
	r := run(a)
	run(b)
	var files int
	err := filepath.Walk(a, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, _ := os.ReadFile(p)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".json") && !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs of the same inputs", rel)
		}
		if strings.HasSuffix(p, ".png") {
			if _, err := png.Decode(bytes.NewReader(x)); err != nil {
				t.Errorf("%s: %v", rel, err)
			}
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := rerunAll(t, a); n != len(r.Cells) {
		t.Errorf("%d results run again, the suite wrote %d", n, len(r.Cells))
	}
	summary, err := os.ReadFile(filepath.Join(a, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Headline", "TTFT-SLO violations cut", "## Rate sweep", "stand-in", "pareto.png",
		"three ways", "| +0.749%", "| SmoothQuant (Xiao et al., ICML 2023)"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
	f, m := r.Cell("llama-2-7b-l4", "burst", "fp16"), r.Cell("llama-2-7b-l4", "burst", "morph:default")
	if f == nil || m == nil || f.Run.Aggregates.SLOViolations == 0 || m.Run.Aggregates.SLOViolations >= f.Run.Aggregates.SLOViolations {
		t.Errorf("burst: fp16 and morph:default cells %v %v: want fp16 violations that morphing cuts", f, m)
	}
	if ev, err := os.ReadFile(filepath.Join(a, "llama-2-7b-l4", "burst", "morph_default", "events.jsonl")); err != nil ||
		!strings.Contains(string(ev), `"kind":"swap"`) || !strings.Contains(string(ev), `"kind":"finished"`) {
		t.Errorf("burst, morph:default: events.jsonl without its swaps and requests (%v)", err)
	}
	if s := r.Cell("llama-2-7b-l4", "burst", "static:int4"); s == nil || s.Loss <= m.Loss || m.Loss <= 0 {
		t.Errorf("quality: static:int4 %v, morph:default %v; want 0 < morph < static", s, m)
	}
	// static:int8 makes every token with every layer in W8A8: SmoothQuant's all-layer increase.
	if c := r.Cell("llama-2-7b-l4", "burst", "static:int8"); c == nil || math.Abs(c.Loss-(5.515/5.474-1)) > 1e-12 {
		t.Errorf("static:int8 quality %v, want the published W8A8 increase %v", c, 5.515/5.474-1)
	}
	t.Logf("%d files; headline %+v", files, r.Headline())
}

// TestBurstSeed: another burst seed draws another burst (sized with its own capacity probes), and
// DefaultBurstSeed sizes the 7B burst at the suite's 1.95 req/s.
func TestBurstSeed(t *testing.T) {
	draw := func(seed uint64) *Report {
		r := &Report{Options: Options{Setups: []Setup{PaperSetups[1]}, BurstSeed: seed}}
		if err := r.sizeBursts(context.Background()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := draw(DefaultBurstSeed), draw(2)
	ta, tb := a.Bursts["llama-2-7b-l4"], b.Bursts["llama-2-7b-l4"]
	if len(ta.Requests) == len(tb.Requests) && ta.Requests[0].Arrival == tb.Requests[0].Arrival {
		t.Errorf("seeds %d and 2 drew the same burst (%d requests)", DefaultBurstSeed, len(ta.Requests))
	}
	if math.Abs(a.Capacity["llama-2-7b-l4"]-1.95) > 0.01 {
		t.Errorf("seed %d: capacity %.3f req/s, want the suite's 1.95", DefaultBurstSeed, a.Capacity["llama-2-7b-l4"])
	}
}

// TestUserTrace: --trace runs the suite on a user's file as its only workload.
func TestUserTrace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.csv")
	rows := "arrived_at,num_prefill_tokens,num_decode_tokens\n"
	for i := range 50 {
		rows += strings.Join([]string{itoa(i / 5), itoa(100 + i), itoa(50)}, ",") + "\n"
	}
	if err := os.WriteFile(p, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Options{Out: dir, TraceFile: p, Quick: true, Setups: []Setup{PaperSetups[0]}, Policies: []string{"fp16", "morph:default"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Workloads) != 1 || r.Workloads[0].Name != "user" || len(r.Cells) != 2 || r.Cells[0].Run.Aggregates.Completed != 50 {
		t.Fatalf("workloads %v, %d cells", r.Workloads, len(r.Cells))
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestHeadlineBound: a cell where static:int4 misses the SLO as often as fp16 is reported as precision-bound and
// left out of the cut over the other cells, but not out of the pooled cut.
func TestHeadlineBound(t *testing.T) {
	cell := func(setup, workload, policy string, violations int) *Cell {
		run := &results.Run{}
		run.Aggregates.SLOViolations = violations
		run.Aggregates.TTFT.P95 = 1000
		return &Cell{Setup: Setup{Name: setup}, Workload: workload, Policy: policy, Run: run, Loss: math.NaN()}
	}
	r := &Report{Options: Options{Policies: []string{"fp16", "static:int4", "morph:default", "morph:compute"}}, Cells: []*Cell{
		cell("a", "w1", "fp16", 40), cell("a", "w1", "static:int4", 0), cell("a", "w1", "morph:default", 4), cell("a", "w1", "morph:compute", 2),
		cell("a", "w2", "fp16", 60), cell("a", "w2", "static:int4", 61), cell("a", "w2", "morph:default", 60), cell("a", "w2", "morph:compute", 6),
		cell("b", "w1", "fp16", 0), cell("b", "w1", "static:int4", 0), cell("b", "w1", "morph:default", 0), cell("b", "w1", "morph:compute", 1),
	}}
	h := r.Headline()
	if !slices.Equal(h.Bound, []string{"a/w2"}) || h.BoundViolations != 60 || h.FP16Violations != 100 {
		t.Errorf("bound %v with %d of %d fp16 violations, want [a/w2] with 60 of 100", h.Bound, h.BoundViolations, h.FP16Violations)
	}
	if math.Abs(h.ViolationCut-0.36) > 1e-12 || math.Abs(h.CutElsewhere-0.9) > 1e-12 {
		t.Errorf("cut %g pooled, %g elsewhere; want 0.36 and 0.9", h.ViolationCut, h.CutElsewhere)
	}
	// Three ways: pooled over 100 fp16 violations, memory-bound over a/w1 and b/w1 (40), compute-bound over a/w2 (60).
	for p, want := range map[string]Cut{"morph:default": {0.36, 0.9, 0}, "morph:compute": {0.91, 1 - 3.0/40, 0.9}, "static:int4": {0.39, 1, -1.0 / 60}} {
		c := h.Cuts[p]
		if math.Abs(c.Pooled-want.Pooled) > 1e-12 || math.Abs(c.Memory-want.Memory) > 1e-12 || math.Abs(c.Compute-want.Compute) > 1e-12 {
			t.Errorf("%s: cuts %+v, want %+v", p, c, want)
		}
	}
	if _, ok := h.Cuts["fp16"]; ok || len(h.Cuts) != 3 {
		t.Errorf("cuts for %v, want every policy but fp16", h.Cuts)
	}
}

// TestPrefixStudy: on a user's trace with Mooncake hash ids (conversations behind a shared system prompt, at
// more requests than the setup serves), the suite runs fp16 and morph:default again without the prefix cache:
// with it, fp16 finds most prompt tokens cached (no more than an unbounded cache would) and misses the SLO less
// often than without it; summary.md carries the table and what it means for the headline. Every run of the study
// runs again from its results.json to the same bytes.
func TestPrefixStudy(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	tr := &trace.Trace{Source: "conversations", Format: trace.Mooncake, HashBlock: trace.MooncakeBlock}
	turns := make([][]int64, 30)
	next := int64(1)
	for i := range 400 {
		c := rng.IntN(len(turns)) // a conversation's next turn: its last prompt and one more block
		ids := turns[c]
		if len(ids) == 0 {
			ids = []int64{0} // the system prompt
		}
		ids = append(slices.Clone(ids), next)
		next++
		turns[c] = ids
		tr.Requests = append(tr.Requests, trace.Request{Arrival: float64(i) / 8, PromptTokens: 512*len(ids) - rng.IntN(400),
			OutputTokens: 20 + rng.IntN(200), HashIDs: ids})
	}
	path := filepath.Join(t.TempDir(), "conv.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Write(f, tr, trace.Mooncake); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out := t.TempDir()
	r, err := Run(context.Background(), Options{Out: out, Quick: true, TraceFile: path, Setups: []Setup{PaperSetups[2]},
		Policies: []string{"fp16", "morph:default"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
	if len(r.Prefix) != 4 {
		t.Fatalf("%d runs in the study, want fp16 and morph:default with the cache on and off", len(r.Prefix))
	}
	on, off := prefixRun(r.Prefix, "llama-3-8b-l4", "user", "fp16", true), prefixRun(r.Prefix, "llama-3-8b-l4", "user", "fp16", false)
	a, b := on.Run.Aggregates, off.Run.Aggregates
	t.Logf("fp16: %d violations and %.3f hit rate with the cache (%.3f unbounded), %d violations without", a.SLOViolations, a.PrefixHitRate, on.Unbounded, b.SLOViolations)
	if on.Run != r.Cell("llama-3-8b-l4", "user", "fp16").Run || b.PrefixHitRate != 0 || a.PrefixHitRate < 0.5 || a.PrefixHitRate > on.Unbounded ||
		b.SLOViolations == 0 || a.SLOViolations >= b.SLOViolations {
		t.Errorf("fp16 with the cache: %+v; without: %+v", a, b)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	for _, want := range []string{"## Prefix caching on and off", "| llama-3-8b-l4 | fp16          | on (baseline) |", "the cache alone cuts fp16's by",
		"With it off there (the runs above), its pooled violation cut would be"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, summary)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "llama-3-8b-l4", "user", "morph_default_no-prefix-caching", "results.json")); err != nil {
		t.Error(err)
	}
	if n := rerunAll(t, out); n != 4 { // the runs with the cache off too, their tokens kept, run again to the same bytes
		t.Errorf("%d results run again, want 4", n)
	}
}
