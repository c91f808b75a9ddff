package loadtest

import (
	"math"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/experiments/metrics"
)

const msec = time.Millisecond

func durs(ms ...float64) []time.Duration {
	var d []time.Duration
	for _, m := range ms {
		d = append(d, time.Duration(m*float64(time.Millisecond)))
	}
	return d
}

// recorded is a run of five requests with hand-picked stream timings: three completed (one whose usage counts
// more tokens than it sent chunks, one with a single token), one rejected, one failed.
func recorded() *Result {
	var reqs []Request
	for i := range 5 {
		reqs = append(reqs, Request{Arrival: time.Duration(i) * time.Second, MaxTokens: 4})
	}
	return &Result{
		Requests: reqs,
		Duration: 10 * time.Second,
		Outcomes: []Outcome{
			{Status: Completed, Sent: 0, TTFT: 100 * msec, ITL: durs(20, 30, 10), Latency: 160 * msec, OutputTokens: 4, PromptTokens: 10},
			{Status: Completed, Sent: 1100 * msec, TTFT: 200 * msec, ITL: durs(60), Latency: 260 * msec, OutputTokens: 3, PromptTokens: 20},
			{Status: Completed, Sent: 2200 * msec, TTFT: 300 * msec, Latency: 300 * msec, OutputTokens: 1, PromptTokens: 30},
			{Status: Rejected, Sent: 3300 * msec, HTTPStatus: 429, Error: "HTTP 429: full"},
			{Status: Failed, Sent: 4400 * msec, HTTPStatus: 500, Error: "HTTP 500: broken"},
		},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func checkSummary(t *testing.T, name string, got, want Summary) {
	t.Helper()
	if got.N != want.N || !near(got.Mean, want.Mean) || !near(got.Std, want.Std) || !near(got.Median, want.Median) ||
		!near(got.P90, want.P90) || !near(got.P95, want.P95) || !near(got.P99, want.P99) {
		t.Errorf("%s: %+v\nwant %+v", name, got, want)
	}
}

// TestComputeGolden checks every metric against values worked out by hand from vLLM's definitions.
func TestComputeGolden(t *testing.T) {
	m := Compute(recorded(), metrics.SLO{TTFT: 250 * msec, TPOT: 25 * msec})
	if m.Requests != 5 || m.Completed != 3 || m.Rejected != 1 || m.Failed != 1 {
		t.Errorf("counts %d/%d/%d/%d, want 5 requests, 3 completed, 1 rejected, 1 failed", m.Requests, m.Completed, m.Rejected, m.Failed)
	}
	if m.FirstError != "HTTP 429: full" {
		t.Errorf("first error %q, want the 429's", m.FirstError)
	}
	// Tokens over completed requests: input 10+20+30, output 4+3+1; per second of the 10 s duration.
	if m.TotalInputTokens != 60 || m.TotalOutputTokens != 8 {
		t.Errorf("tokens in %d out %d, want 60 and 8", m.TotalInputTokens, m.TotalOutputTokens)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"duration", m.DurationS, 10},
		{"request throughput", m.RequestThroughput, 0.3},
		{"output throughput", m.OutputThroughput, 0.8},
		{"total token throughput", m.TotalTokenThroughput, 6.8},
		// Good: the first (TTFT 100 <= 250, TPOT 20 <= 25); not the second (TPOT 30) nor the third (TTFT 300).
		{"goodput", m.RequestGoodput, 0.1},
		{"asked rate", m.AskedRate, 1},           // 4 gaps over 4 s of arrivals
		{"arrival rate", m.ArrivalRate, 4 / 4.4}, // 4 gaps over 4.4 s of sending
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s %v, want %v", c.name, c.got, c.want)
		}
	}
	// TTFT 100, 200, 300: std sqrt((100²+0+100²)/3); P90 at rank 2*0.9 = 1.8: 200 + 0.8*100.
	checkSummary(t, "TTFT", m.TTFT, Summary{3, 200, math.Sqrt(20000.0 / 3), 200, 280, 290, 298})
	// TPOT (160-100)/3 = 20 and (260-200)/(3-1) = 30; the one-token request has none. P90 at rank 0.9: 29.
	checkSummary(t, "TPOT", m.TPOT, Summary{2, 25, 5, 25, 29, 29.5, 29.9})
	// ITL pooled: 10, 20, 30, 60; median at rank 1.5: 25; P90 at rank 2.7: 30 + 0.7*30.
	checkSummary(t, "ITL", m.ITL, Summary{4, 30, math.Sqrt(350), 25, 51, 55.5, 59.1})
	// E2EL 160, 260, 300: deviations -80, 20, 60.
	checkSummary(t, "E2EL", m.E2EL, Summary{3, 240, math.Sqrt(10400.0 / 3), 260, 292, 296, 299.2})
	if w := m.RateWarning(); w != "warning: achieved arrival rate 0.909 req/s is -9.1% off the asked 1 req/s" {
		t.Errorf("rate warning %q", w)
	}
	// An E2EL limit is met at equality: all three completed requests are good.
	if g := Compute(recorded(), metrics.SLO{E2EL: 300 * msec}).RequestGoodput; !near(g, 0.3) {
		t.Errorf("goodput with e2el<=300ms %v, want 0.3", g)
	}
	if g := Compute(recorded(), metrics.SLO{}).RequestGoodput; g != 0 {
		t.Errorf("goodput without an SLO %v, want 0", g)
	}
}

func TestComputeEmpty(t *testing.T) {
	m := Compute(&Result{Outcomes: []Outcome{{Status: Failed, Sent: -1}}, Requests: []Request{{}}, Duration: time.Second}, metrics.SLO{})
	if m.Failed != 1 || m.TTFT != (Summary{}) || m.RequestThroughput != 0 || m.ArrivalRate != 0 || m.RateWarning() != "" {
		t.Errorf("metrics of a run with nothing completed: %+v", m)
	}
}

// TestPercentileNumpy checks numpy.percentile's default results, and that gonum's LinInterp differs from it.
func TestPercentileNumpy(t *testing.T) {
	for _, c := range []struct {
		x    []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4, 7, 10}, 50, 3.5},
		{[]float64{15, 20, 35, 40, 50}, 40, 29},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 9.55},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 9.91},
		{[]float64{5}, 99, 5},
		{[]float64{1, 2}, 100, 2},
		{[]float64{1, 2}, 0, 1},
	} {
		if got := Percentile(c.x, c.p); !near(got, c.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.x, c.p, got, c.want)
		}
	}
	if q := stat.Quantile(0.5, stat.LinInterp, []float64{1, 2, 3, 4}, nil); q == 2.5 {
		t.Errorf("gonum's LinInterp median of 1..4 is now numpy's 2.5: Percentile could use it")
	}
}
