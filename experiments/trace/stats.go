package trace

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
)

// Statistics summarizes a trace: its size and rate, how bursty its arrivals are, and its length distributions.
type Statistics struct {
	Requests   int     `json:"requests"`
	Duration   float64 `json:"duration_s"`    // first arrival to last
	MeanRate   float64 `json:"mean_rate"`     // requests / duration, per second
	PeakRate1  float64 `json:"peak_rate_1s"`  // most requests in any 1-s window, per second
	PeakRate10 float64 `json:"peak_rate_10s"` // most requests in any 10-s window, per second
	// InterArrivalCV is the coefficient of variation (standard deviation over mean) of the gaps between
	// consecutive arrivals: 1 for a Poisson process, 1/sqrt(burstiness) for vLLM's gamma arrivals.
	InterArrivalCV float64 `json:"interarrival_cv"`
	// Dispersion1 and Dispersion10 are the index of dispersion (variance over mean) of the request counts in
	// consecutive 1-s and 10-s bins from the first arrival: 1 for a Poisson process, more for bursty arrivals.
	Dispersion1  float64 `json:"dispersion_1s"`
	Dispersion10 float64 `json:"dispersion_10s"`

	Prompt LengthStats `json:"prompt_tokens"`
	Output LengthStats `json:"output_tokens"`

	// Token demand: prompt and output tokens over the duration, per second, and the most prompt plus output
	// tokens that arrive in any 10-s window, per second.
	PromptTokensPerSecond float64 `json:"prompt_tokens_per_s"`
	OutputTokensPerSecond float64 `json:"output_tokens_per_s"`
	PeakTokensPerSecond10 float64 `json:"peak_tokens_per_s_10s"`

	NoArrivals bool `json:"no_arrivals,omitempty"` // a length-only table: the time figures are 0
}

// LengthStats describes one length (prompt or output tokens): percentiles are nearest-rank (the smallest length
// that at least that fraction of requests have), as SOURCES.md quotes them.
type LengthStats struct {
	Mean float64 `json:"mean"`
	Min  int     `json:"min"`
	P50  int     `json:"p50"`
	P90  int     `json:"p90"`
	P99  int     `json:"p99"`
	Max  int     `json:"max"`
	Sum  int64   `json:"sum"`
}

// Stats returns t's statistics. (The type is Statistics: Go does not let a function and a type share the name.)
func Stats(t *Trace) Statistics {
	s := Statistics{Requests: len(t.Requests), NoArrivals: t.NoArrivals}
	s.Prompt = lengthStats(t.Requests, func(r Request) int { return r.PromptTokens })
	s.Output = lengthStats(t.Requests, func(r Request) int { return r.OutputTokens })
	if t.NoArrivals || len(t.Requests) < 2 {
		return s
	}
	arr := make([]float64, len(t.Requests))
	tokens := make([]float64, len(t.Requests))
	for i, r := range t.Requests {
		arr[i] = r.Arrival
		tokens[i] = float64(r.PromptTokens + r.OutputTokens)
	}
	s.Duration = t.Duration()
	if s.Duration > 0 {
		s.MeanRate = float64(s.Requests) / s.Duration
		s.PromptTokensPerSecond = float64(s.Prompt.Sum) / s.Duration
		s.OutputTokensPerSecond = float64(s.Output.Sum) / s.Duration
	}
	s.PeakRate1 = float64(maxInWindow(arr, nil, 1))
	s.PeakRate10 = float64(maxInWindow(arr, nil, 10)) / 10
	s.PeakTokensPerSecond10 = maxInWindow(arr, tokens, 10) / 10

	gaps := make([]float64, len(arr)-1)
	for i := range gaps {
		gaps[i] = arr[i+1] - arr[i]
	}
	if mean, std := stat.PopMeanStdDev(gaps, nil); mean > 0 {
		s.InterArrivalCV = std / mean
	}
	s.Dispersion1 = dispersion(arr, 1)
	s.Dispersion10 = dispersion(arr, 10)
	return s
}

// Stats returns t's statistics.
func (t *Trace) Stats() Statistics { return Stats(t) }

func lengthStats(reqs []Request, length func(Request) int) LengthStats {
	if len(reqs) == 0 {
		return LengthStats{}
	}
	xs := make([]float64, len(reqs))
	var ls LengthStats
	for i, r := range reqs {
		n := length(r)
		xs[i] = float64(n)
		ls.Sum += int64(n)
	}
	slices.Sort(xs)
	q := func(p float64) int { return int(stat.Quantile(p, stat.Empirical, xs, nil)) }
	ls.Mean = float64(ls.Sum) / float64(len(xs))
	ls.Min, ls.Max = int(xs[0]), int(xs[len(xs)-1])
	ls.P50, ls.P90, ls.P99 = q(0.5), q(0.9), q(0.99)
	return ls
}

// maxInWindow returns the largest total weight (count when weights is nil) of the arrivals in any half-open
// window [a, a+width).
func maxInWindow(arr, weights []float64, width float64) float64 {
	best, _ := busiestStart(arr, weights, width)
	return best
}

// busiestStart returns the largest total weight of the arrivals in a window [a, a+width) and the earliest
// arrival a that starts such a window. A busiest window can always start at an arrival, so a two-pointer sweep
// over the sorted arrivals finds it.
func busiestStart(arr, weights []float64, width float64) (best, start float64) {
	var sum float64
	j := 0
	for i := range arr {
		for j < len(arr) && arr[j] < arr[i]+width {
			sum += weight(weights, j)
			j++
		}
		if sum > best {
			best, start = sum, arr[i]
		}
		sum -= weight(weights, i)
	}
	return best, start
}

func weight(w []float64, i int) float64 {
	if w == nil {
		return 1
	}
	return w[i]
}

// dispersion is the variance over the mean of the arrival counts in the whole bins of width seconds from the
// first arrival (a partial last bin is left out, since its count would read as a lull). It is 0 with fewer than
// two whole bins.
func dispersion(arr []float64, width float64) float64 {
	n := math.Floor((arr[len(arr)-1] - arr[0]) / width)
	if n < 2 {
		return 0
	}
	// Only the bins that hold arrivals add to the sum of squares, so a long, sparse trace costs no memory for
	// its empty bins.
	var total, squares, run float64
	bin := -1.0
	for _, a := range arr {
		b := math.Floor((a - arr[0]) / width)
		if b >= n {
			break
		}
		if b != bin {
			squares += run * run
			bin, run = b, 0
		}
		run++
		total++
	}
	squares += run * run
	mean := total / n
	return (squares/n - mean*mean) / mean
}

// Summary is a trace's statistics with where it came from and what was done to it ('morphlab trace stats --json').
type Summary struct {
	Source     string     `json:"source"`
	Format     string     `json:"format"`
	Transforms []string   `json:"transforms"`
	Failed     int        `json:"failed,omitempty"`
	Reordered  int        `json:"reordered,omitempty"`
	Stats      Statistics `json:"stats"`
}

// Summarize returns t's summary.
func Summarize(t *Trace) Summary {
	return Summary{Source: t.Source, Format: t.Format, Transforms: append([]string{}, t.Transforms...), Failed: t.Failed,
		Reordered: t.Reordered, Stats: Stats(t)}
}

// WriteSummaries writes summaries as a Markdown table, a column per trace (named by its file's base name), with a
// row of failed requests when a BurstGPT trace is among them and of reordered records when any trace had some.
func WriteSummaries(w io.Writer, sums []Summary) error {
	header := []string{"statistic"}
	var burst, sorted bool
	for _, s := range sums {
		name := s.Source
		if s.Format != Synthetic {
			name = filepath.Base(name)
		}
		header = append(header, name)
		burst = burst || s.Format == BurstGPT
		sorted = sorted || s.Reordered > 0
	}
	type row struct {
		name string
		cell func(Summary) string
	}
	rows := []row{
		{"format", func(s Summary) string { return s.Format }},
		{"transforms", func(s Summary) string { return strings.Join(s.Transforms, " ") }},
		{"requests", func(s Summary) string { return strconv.Itoa(s.Stats.Requests) }},
		{"duration (s)", func(s Summary) string { return timed(s, s.Stats.Duration) }},
		{"mean rate (req/s)", func(s Summary) string { return timed(s, s.Stats.MeanRate) }},
		{"peak rate, 1-s window", func(s Summary) string { return timed(s, s.Stats.PeakRate1) }},
		{"peak rate, 10-s window", func(s Summary) string { return timed(s, s.Stats.PeakRate10) }},
		{"inter-arrival CV", func(s Summary) string { return timed(s, s.Stats.InterArrivalCV) }},
		{"dispersion, 1-s bins", func(s Summary) string { return timed(s, s.Stats.Dispersion1) }},
		{"dispersion, 10-s bins", func(s Summary) string { return timed(s, s.Stats.Dispersion10) }},
		{"prompt p50 / mean / p90 / p99", func(s Summary) string { return quantiles(s.Stats.Prompt) }},
		{"prompt min / max", func(s Summary) string { return fmt.Sprintf("%d / %d", s.Stats.Prompt.Min, s.Stats.Prompt.Max) }},
		{"output p50 / mean / p90 / p99", func(s Summary) string { return quantiles(s.Stats.Output) }},
		{"output min / max", func(s Summary) string { return fmt.Sprintf("%d / %d", s.Stats.Output.Min, s.Stats.Output.Max) }},
		{"prompt tokens/s", func(s Summary) string { return timed(s, s.Stats.PromptTokensPerSecond) }},
		{"output tokens/s", func(s Summary) string { return timed(s, s.Stats.OutputTokensPerSecond) }},
		{"peak tokens/s, 10-s window", func(s Summary) string { return timed(s, s.Stats.PeakTokensPerSecond10) }},
	}
	if burst {
		rows = slices.Insert(rows, 3, row{"failed (skipped unless --keep-failed)", func(s Summary) string { return strconv.Itoa(s.Failed) }})
	}
	if sorted {
		rows = slices.Insert(rows, 3, row{"records out of order (sorted)", func(s Summary) string { return strconv.Itoa(s.Reordered) }})
	}
	var cells [][]string
	for _, r := range rows {
		line := []string{r.name}
		for _, s := range sums {
			line = append(line, r.cell(s))
		}
		cells = append(cells, line)
	}
	return mdtable.Write(w, header, cells)
}

// timed formats a time-based figure, or "-" for a length-only table, which has no arrivals.
func timed(s Summary, v float64) string {
	if s.Stats.NoArrivals {
		return "-"
	}
	return numfmt.Figure(v)
}

func quantiles(l LengthStats) string {
	return fmt.Sprintf("%d / %s / %d / %d", l.P50, numfmt.Figure(l.Mean), l.P90, l.P99)
}
