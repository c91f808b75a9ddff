package morph

import (
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/engine"
)

// Signals are what the Serving Monitor reports after an iteration: the engine's queue and pool, and the output
// throughput over the requests that ended in the last Span (their TTFT and TPOT percentiles are Monitor.Latency,
// computed when asked; a rule that smooths a signal over iterations, as Reactive does KV usage, keeps its own
// window).
type Signals struct {
	Iter          int
	Idle          bool
	Time          time.Duration
	Waiting       int
	Running       int
	OldestWait    time.Duration
	WaitingBlocks int
	WaitingTokens int
	HeadBlocks    int
	Free          int
	Used          int
	Total         int
	Usage         float64 // Used / Total at this iteration
	Preempted     int     // at this iteration
	Quantized     int     // layers not in their stored precision
	Throughput    float64 // output tokens per second over the span
}

// Monitor windows the engine's StepInfo into Signals.
type Monitor struct {
	Span time.Duration // how far back ended requests count

	ended []engine.Ended
	ttft  []float64
	tpot  []float64
}

// NewMonitor returns a monitor windowing ended requests over span.
func NewMonitor(span time.Duration) *Monitor { return &Monitor{Span: span} }

// Observe takes one StepInfo (and the quantized layer count it ran with) and returns the signals.
func (m *Monitor) Observe(info engine.StepInfo, quantized int) Signals {
	s := Signals{Iter: info.Iter, Idle: info.Idle, Time: info.Time, Waiting: info.Waiting, Running: info.Running,
		OldestWait: info.OldestWait, WaitingBlocks: info.WaitingBlocks, WaitingTokens: info.WaitingTokens, HeadBlocks: info.HeadBlocks, Free: info.Free,
		Used: info.Used, Total: info.Total, Preempted: info.Preempted, Quantized: quantized}
	if info.Total > 0 {
		s.Usage = float64(info.Used) / float64(info.Total)
	}
	for _, r := range info.Ended {
		if r.Finish == engine.FinishStop || r.Finish == engine.FinishLength {
			m.ended = append(m.ended, r)
		}
	}
	keep := 0
	for keep < len(m.ended) && info.Time-(m.ended[keep].Arrival+m.ended[keep].E2E) > m.Span {
		keep++
	}
	m.ended = m.ended[keep:]
	tokens := 0
	for _, r := range m.ended {
		tokens += r.Output
	}
	s.Throughput = float64(tokens) / m.Span.Seconds()
	return s
}

// ReleaseRate is the KV blocks per second that the requests which ended in the last Span gave back, in blocks of
// blockSize tokens.
func (m *Monitor) ReleaseRate(blockSize int) float64 {
	blocks := 0
	for _, r := range m.ended {
		blocks += (r.Prompt + r.Output + blockSize - 1) / blockSize
	}
	return float64(blocks) / m.Span.Seconds()
}

// Latency returns the median and 95th percentile of TTFT and of TPOT over the requests that ended in the last
// Span, as empirical quantiles (gonum's stat.Empirical: the smallest value at least that share of them reach).
func (m *Monitor) Latency() (ttft50, ttft95, tpot50, tpot95 time.Duration) {
	m.ttft, m.tpot = m.ttft[:0], m.tpot[:0]
	for _, r := range m.ended {
		m.ttft = append(m.ttft, r.TTFT.Seconds())
		if r.Output > 1 {
			m.tpot = append(m.tpot, r.TPOT.Seconds())
		}
	}
	ttft50, ttft95 = quantiles(m.ttft)
	tpot50, tpot95 = quantiles(m.tpot)
	return
}

// quantiles returns the median and 95th percentile of x (seconds), which it sorts.
func quantiles(x []float64) (p50, p95 time.Duration) {
	if len(x) == 0 {
		return 0, 0
	}
	slices.Sort(x)
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	return sec(stat.Quantile(0.5, stat.Empirical, x, nil)), sec(stat.Quantile(0.95, stat.Empirical, x, nil))
}
