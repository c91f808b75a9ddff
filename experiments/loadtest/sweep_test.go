package loadtest

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

func TestParseKneeTarget(t *testing.T) {
	k, err := ParseKneeTarget("E2EL=1.5s")
	if err != nil || k != (KneeTarget{Metric: "e2el", Limit: 1500 * msec}) || k.String() != "P95 E2EL <= 1.5s" {
		t.Errorf("ParseKneeTarget: %+v %q, %v", k, k, err)
	}
	for _, bad := range []string{"e2el", "p99=1s", "ttft=soon"} {
		if _, err := ParseKneeTarget(bad); err == nil {
			t.Errorf("ParseKneeTarget(%q) gave no error", bad)
		}
	}
}

func point(rate, rps, p95e2el float64, rejected int) Point {
	return Point{Rate: rate, Metrics: Metrics{Requests: 10, Completed: 10 - rejected, Rejected: rejected,
		RequestThroughput: rps, TotalOutputTokens: 100 * (10 - rejected), E2EL: Summary{P95: p95e2el}}}
}

func TestKnee(t *testing.T) {
	target := KneeTarget{Metric: "e2el", Limit: time.Second}
	points := []Point{
		point(1, 0.98, 400, 0),
		point(2, 1.95, 1000, 0), // at the limit: meets it
		point(4, 3.1, 1001, 0),  // just over
		point(8, 3.2, 900, 3),   // fast only because it shed load
	}
	k, ok := Knee(points, target)
	if !ok || k.Rate != 2 {
		t.Errorf("knee %+v %v, want the rate-2 point", k, ok)
	}
	if _, ok := Knee(points[2:], target); ok {
		t.Errorf("a knee among points that all miss the target")
	}
}

// TestKneeNoisy: on a measured curve (a fleet's P95 TTFT against 1 s) the rate 46 misses the target and 50 meets it
// again with more throughput; the knee is 42, the highest rate below the first miss, wherever the points stand in
// the list. The highest-throughput rule that meets the target would have said 50.
func TestKneeNoisy(t *testing.T) {
	target := KneeTarget{Metric: "ttft", Limit: time.Second}
	at := func(rate, rps, p95ttft float64) Point {
		return Point{Rate: rate, Metrics: Metrics{Requests: 10, Completed: 10, RequestThroughput: rps, TTFT: Summary{P95: p95ttft}}}
	}
	points := []Point{at(50, 48.6, 870), at(26, 25.8, 47), at(54, 50.1, 2900), at(38, 37.4, 86), at(46, 44.9, 1435),
		at(42, 41.2, 350), at(30, 29.7, 60), at(34, 33.5, 71)}
	if k, ok := Knee(points, target); !ok || k.Rate != 42 || k.Metrics.RequestThroughput != 41.2 {
		t.Errorf("knee %+v %v, want the rate-42 point", k, ok)
	}
	if k, ok := Knee(points[2:3], target); ok {
		t.Errorf("knee %+v of a curve whose only rate misses", k)
	}
	if k, ok := Knee(nil, target); ok {
		t.Errorf("knee %+v of no points", k)
	}
}

func TestPlanCapacity(t *testing.T) {
	// 1.1 req/s at the knee, 50 output tokens per request; 11 req/s needs exactly 10 instances (11/1.1 is
	// 10.000000000000002 in floating point), 11.5 needs 11.
	knee := Metrics{Completed: 20, RequestThroughput: 1.1, TotalOutputTokens: 1000}
	c, err := PlanCapacity(knee, 11, 2.5)
	if err != nil {
		t.Fatal(err)
	}
	// Cost: 10 x 2.5 = 25 per hour for 11 req/s x 50 tokens x 3600 s = 1,980,000 tokens: 12.6263 per million.
	if c.Instances != 10 || c.CostPerHour != 25 || !near(c.CostPerMillionOutputTokens, 25/1.98) {
		t.Errorf("capacity %+v, want 10 instances, 25/h, %v per million", c, 25/1.98)
	}
	if c, _ := PlanCapacity(knee, 11.5, 2.5); c.Instances != 11 {
		t.Errorf("11.5 req/s: %d instances, want 11", c.Instances)
	}
	for _, bad := range []struct{ rps, cost float64 }{{0, 1}, {1, -1}} {
		if _, err := PlanCapacity(knee, bad.rps, bad.cost); err == nil {
			t.Errorf("PlanCapacity(%v, %v) gave no error", bad.rps, bad.cost)
		}
	}
	if _, err := PlanCapacity(Metrics{}, 1, 1); err == nil {
		t.Errorf("no error for a knee without throughput")
	}
}

// TestRunSweep sweeps a server that serves one request at a time (each takes 60 ms), so that latency grows with
// the rate, and draws the curve.
func TestRunSweep(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 20 * time.Millisecond, TokenDelay: 10 * time.Millisecond})
	defer s.Close()
	var seen []float64
	base := filepath.Join(t.TempDir(), "plots", "curve")
	knee := KneeTarget{Metric: "e2el", Limit: time.Second}
	rep, err := Run(context.Background(), Options{
		Config:   Config{URL: s.URL, Model: "m", MaxConcurrency: 1},
		Workload: Workload{Rates: []float64{5, 40}, Duration: 300 * time.Millisecond, Burstiness: 1, Prompts: []openai.Prompt{{Text: "x"}}, OutputTokens: 5, Seed: 1},
		Knee:     &knee, Plot: base, Done: func(p Point) { seen = append(seen, p.Rate) }})
	if err != nil {
		t.Fatal(err)
	}
	points := rep.Runs
	if len(points) != 2 || len(seen) != 2 || points[0].Metrics.Completed != 2 || points[1].Metrics.Completed != 12 {
		t.Fatalf("points %+v", points)
	}
	// At 40 req/s a server that takes 60 ms a request queues: the P95 end-to-end latency (measured from when the
	// request went out, after its wait for the one slot) stays near 60 ms, but the requests go out late.
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.HasPrefix(w, "rate 40: warning: achieved arrival rate") }) {
		t.Errorf("warnings %q, want one for 40 req/s against a 16 req/s server", rep.Warnings)
	}
	if rep.Knee == nil || rep.Knee.Rate != 40 || !rep.TextPrompts || rep.OutputTokens != 5 || rep.PromptTokens != 0 {
		t.Errorf("report %+v; want the 40 req/s knee and text prompts", rep)
	}
	png, _ := os.ReadFile(base + ".png")
	svg, _ := os.ReadFile(base + ".svg")
	if !bytes.HasPrefix(png, []byte("\x89PNG")) || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("E2EL P95")) ||
		!slices.Equal(rep.Plots, []string{base + ".png", base + ".svg"}) {
		t.Errorf("plots %q: %d bytes of PNG, %d of SVG, not the curve", rep.Plots, len(png), len(svg))
	}
}

// TestRunServe: with Serve in place of a server, Run hands it each rate's requests (the same as the report's
// Workload makes again) and finds the knee and the capacity from what it returns.
func TestRunServe(t *testing.T) {
	w := Workload{Rates: []float64{10, 20, 30, 40}, Duration: 2 * time.Second, Burstiness: 0.5, PromptTokens: 16, OutputTokens: 8,
		RangeRatio: 0.5, Vocab: 100, Seed: 3}
	served := map[float64][]Request{}
	knee := KneeTarget{Metric: "ttft", Limit: 100 * time.Millisecond}
	serve := func(_ context.Context, rate float64, reqs []Request) (Metrics, error) {
		served[rate] = reqs
		out := 0
		for _, r := range reqs {
			out += r.MaxTokens
		}
		// TTFT P95 of 4 ms a req/s: 30 misses 100 ms; 40 meets it again, as a noisy run can.
		p95 := 4 * rate
		if rate == 40 {
			p95 = 50
		}
		return Metrics{Requests: len(reqs), Completed: len(reqs), RequestThroughput: rate * 0.9, TotalOutputTokens: out, TTFT: Summary{P95: p95}}, nil
	}
	rep, err := Run(context.Background(), Options{Config: Config{Model: "m"}, Workload: w, Knee: &knee, TargetRPS: 45, CostPerHour: 2, Serve: serve})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Knee == nil || rep.Knee.Rate != 20 || rep.Capacity == nil || rep.Capacity.Instances != 3 || len(served) != 4 || len(served[40]) != 80 {
		t.Fatalf("knee %+v, capacity %+v, %d rates served; want 20, 3 instances for 45 req/s at 18 each, 4 rates", rep.Knee, rep.Capacity, len(served))
	}
	again, err := rep.Workload()
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range w.Rates {
		reqs, err := again.Requests(rate)
		if err != nil || !slices.EqualFunc(reqs, served[rate], func(a, b Request) bool {
			return a.Arrival == b.Arrival && a.PromptTokens == b.PromptTokens && a.MaxTokens == b.MaxTokens && slices.Equal(a.Prompt.Tokens, b.Prompt.Tokens)
		}) {
			t.Errorf("rate %v: the report's workload made other requests (%v)", rate, err)
		}
	}
	tr := TraceOf(served[10], "x")
	if len(tr.Requests) != 20 || tr.Requests[19].Arrival != served[10][19].Arrival.Seconds() || tr.Requests[19].OutputTokens != served[10][19].MaxTokens ||
		tr.Requests[19].PromptTokens != len(served[10][19].Prompt.Tokens) {
		t.Errorf("TraceOf: %+v", tr.Requests[19])
	}
	rep.PromptTokens = 0
	if _, err := rep.Workload(); err == nil || !strings.Contains(err.Error(), "prompt_tokens") {
		t.Errorf("a report without its lengths: %v", err)
	}
	for _, bad := range []Workload{{}, {Rates: []float64{1}}, {Rates: []float64{1}, Duration: time.Second}, {Rates: []float64{-1}, Duration: time.Second, Burstiness: 1, OutputTokens: 1},
		{Rates: []float64{1}, Duration: time.Second, Burstiness: 1, OutputTokens: 1, RangeRatio: 1}} {
		if _, err := Run(context.Background(), Options{Workload: bad, Serve: serve}); err == nil {
			t.Errorf("workload %+v: no error", bad)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestWriteTables checks the tables of the recorded run against testdata/metrics.md (go test -update rewrites
// it; on a mismatch the output is left in testdata/metrics.md.got).
func TestWriteTables(t *testing.T) {
	pts := []Point{{Rate: 1, Metrics: Compute(recorded(), metrics.SLO{})}}
	c, err := PlanCapacity(pts[0].Metrics, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	done := func(rate, rps, p95 float64) Point {
		return Point{Rate: rate, Metrics: Metrics{Requests: 4, Completed: 4, RequestThroughput: rps, E2EL: Summary{P95: p95}}}
	}
	// Knees under P95 E2EL <= 1s: static's at rate 1 (0.9 req/s), continuous's at rate 2 (1.8 req/s, 2x); none for slow.
	curves := []Curve{
		{Label: "static", Points: []Point{done(1, 0.9, 800), done(2, 1.5, 1500)}},
		{Label: "continuous", Points: []Point{done(1, 1, 300), done(2, 1.8, 600)}},
		{Label: "slow", Points: []Point{done(1, 0.9, 2000)}},
	}
	var b bytes.Buffer
	tables := append(MetricsTables(Compute(recorded(), metrics.SLO{TTFT: 250 * msec})),
		SweepTable(pts, &pts[0]), CapacityTable(c), CompareTable(curves, KneeTarget{Metric: "e2el", Limit: time.Second}),
		RatesTable(curves, KneeTarget{Metric: "e2el", Limit: time.Second}))
	if err := WriteTables(&b, tables...); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "metrics.md")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		_ = os.WriteFile(golden+".got", b.Bytes(), 0o644)
		t.Errorf("tables differ from %s; got %s.got:\n%s", golden, golden, b.String())
	}
}
