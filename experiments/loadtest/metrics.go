package loadtest

import (
	"fmt"
	"math"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/experiments/metrics"
)

// Summary summarizes a latency in milliseconds: the count of values and their mean, population standard
// deviation, median and percentiles, with percentiles as numpy's default (linear interpolation between the
// closest ranks), which vLLM uses. An empty set summarizes to zeros, as vLLM's `np.mean(x or 0)` does.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean_ms"`
	Std    float64 `json:"std_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
}

// Metrics are a run's figures, each as vLLM's benchmark_serving defines it.
type Metrics struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Rejected  int `json:"rejected"` // 429s
	Failed    int `json:"failed"`   // other statuses, connection errors, broken streams, timeouts
	// FirstError is the error of the first request (in arrival order) that was rejected or failed.
	FirstError string `json:"first_error,omitempty"`

	DurationS float64 `json:"duration_s"` // from the start to the end of the last response
	// AskedRate is the schedule's arrival rate, (n-1) over the span from the first arrival to the last;
	// ArrivalRate is the same over the times the requests were actually sent. Both are 0 with fewer than two
	// requests (or a schedule with every arrival at once).
	AskedRate   float64 `json:"asked_rate"`
	ArrivalRate float64 `json:"arrival_rate"`

	TotalInputTokens     int         `json:"total_input_tokens"`  // over completed requests
	TotalOutputTokens    int         `json:"total_output_tokens"` // over completed requests
	RequestThroughput    float64     `json:"request_throughput"`  // completed requests per second of the duration
	RequestGoodput       float64     `json:"request_goodput"`     // completed requests meeting the SLO, per second; 0 without an SLO
	OutputThroughput     float64     `json:"output_throughput"`   // output tokens per second
	TotalTokenThroughput float64     `json:"total_token_throughput"`
	SLO                  metrics.SLO `json:"slo"`

	TTFT Summary `json:"ttft"`
	TPOT Summary `json:"tpot"` // per request with more than one output token: (E2EL - TTFT) / (output tokens - 1)
	ITL  Summary `json:"itl"`  // over all gaps of all completed requests, pooled
	E2EL Summary `json:"e2el"`
}

// Compute returns the metrics of a run, with goodput against slo.
func Compute(res *Result, slo metrics.SLO) Metrics {
	m := Metrics{Requests: len(res.Outcomes), DurationS: res.Duration.Seconds(), SLO: slo}
	var ttfts, tpots, itls, e2els []float64
	good := 0
	for _, o := range res.Outcomes {
		if o.Status != Completed && m.FirstError == "" {
			m.FirstError = o.Error
		}
		switch o.Status {
		case Rejected:
			m.Rejected++
			continue
		case Failed:
			m.Failed++
			continue
		}
		m.Completed++
		m.TotalInputTokens += o.PromptTokens
		m.TotalOutputTokens += o.OutputTokens
		tpot := 0.0 // for one output token, as vLLM counts it for goodput
		if o.OutputTokens > 1 {
			tpot = ms(o.Latency-o.TTFT) / float64(o.OutputTokens-1)
			tpots = append(tpots, tpot)
		}
		ttfts = append(ttfts, ms(o.TTFT))
		e2els = append(e2els, ms(o.Latency))
		for _, g := range o.ITL {
			itls = append(itls, ms(g))
		}
		if !slo.IsZero() && meets(slo.TTFT, ms(o.TTFT)) && meets(slo.TPOT, tpot) && meets(slo.E2EL, ms(o.Latency)) {
			good++
		}
	}
	if d := m.DurationS; d > 0 {
		m.RequestThroughput = float64(m.Completed) / d
		m.RequestGoodput = float64(good) / d
		m.OutputThroughput = float64(m.TotalOutputTokens) / d
		m.TotalTokenThroughput = float64(m.TotalInputTokens+m.TotalOutputTokens) / d
	}
	var arrivals, sent []time.Duration
	for i, o := range res.Outcomes {
		if i < len(res.Requests) {
			arrivals = append(arrivals, res.Requests[i].Arrival)
		}
		if o.Sent >= 0 {
			sent = append(sent, o.Sent)
		}
	}
	m.AskedRate = rate(arrivals)
	m.ArrivalRate = rate(sent)
	m.TTFT, m.TPOT, m.ITL, m.E2EL = Summarize(ttfts), Summarize(tpots), Summarize(itls), Summarize(e2els)
	return m
}

// meets reports whether v (milliseconds) is within limit, or no limit is given.
func meets(limit time.Duration, v float64) bool { return limit == 0 || v <= ms(limit) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rate is (n-1) over the span of times (in any order), or 0 when it cannot be told.
func rate(times []time.Duration) float64 {
	if len(times) < 2 {
		return 0
	}
	span := slices.Max(times) - slices.Min(times)
	if span <= 0 {
		return 0
	}
	return float64(len(times)-1) / span.Seconds()
}

// RateWarning returns a warning when the achieved arrival rate is more than 5% off the asked one (the client
// could not keep up, or --max-concurrency held requests back), else "".
func (m Metrics) RateWarning() string {
	if m.AskedRate == 0 || math.Abs(m.ArrivalRate/m.AskedRate-1) <= 0.05 {
		return ""
	}
	return fmt.Sprintf("warning: achieved arrival rate %.3g req/s is %+.1f%% off the asked %.3g req/s", m.ArrivalRate, 100*(m.ArrivalRate/m.AskedRate-1), m.AskedRate)
}

// Summarize summarizes values (milliseconds).
func Summarize(values []float64) Summary {
	if len(values) == 0 {
		return Summary{}
	}
	x := slices.Clone(values)
	slices.Sort(x)
	mean, std := stat.PopMeanStdDev(x, nil)
	return Summary{N: len(x), Mean: mean, Std: std, Median: Percentile(x, 50),
		P90: Percentile(x, 90), P95: Percentile(x, 95), P99: Percentile(x, 99)}
}

// Percentile returns the p-th percentile (0-100) of sorted x as numpy.percentile does by default: the value at
// rank (n-1)p/100, interpolated linearly between the two closest ranks (Hyndman and Fan's definition 7).
// gonum's stat.Quantile does not offer it: its LinInterp kind interpolates at rank np/100 (definition 4), which
// gives 2 and not numpy's 2.5 for the median of 1, 2, 3, 4; vLLM's figures use numpy's.
func Percentile(x []float64, p float64) float64 {
	h := float64(len(x)-1) * p / 100
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= len(x) {
		return x[len(x)-1]
	}
	return x[i] + (h-lo)*(x[i+1]-x[i])
}
