package loadtest

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/openai"
)

// FromTrace returns the requests that replay t: each at the trace's own arrival, asking for its output tokens.
// Without prompts each prompt is random token ids of the trace's prompt length (LengthWorkload, from [3, vocab)
// with seed); with prompts the texts are taken in turn and only the trace's output lengths are kept.
func FromTrace(t *trace.Trace, prompts []openai.Prompt, vocab int, seed uint64) ([]Request, error) {
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("%s: no requests to replay", t.Source)
	}
	if t.NoArrivals {
		return nil, fmt.Errorf("%s: a length-only table has no arrivals to replay (give it arrivals with 'morphlab trace gen', or use --rate)", t.Source)
	}
	arrivals := make([]time.Duration, len(t.Requests))
	promptLens := make([]int, len(t.Requests))
	outputLens := make([]int, len(t.Requests))
	for i, r := range t.Requests {
		if !(r.Arrival >= 0) || math.IsInf(r.Arrival, 0) {
			return nil, fmt.Errorf("%s: request %d: arrival %v s, want a time from the start", t.Source, i, r.Arrival)
		}
		arrivals[i] = time.Duration(r.Arrival * float64(time.Second))
		promptLens[i], outputLens[i] = r.PromptTokens, r.OutputTokens
	}
	if len(prompts) == 0 {
		reqs, err := LengthWorkload(arrivals, promptLens, outputLens, vocab, seed)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", t.Source, err)
		}
		return reqs, nil
	}
	reqs := make([]Request, len(arrivals))
	for i, at := range arrivals {
		if outputLens[i] < 1 {
			return nil, fmt.Errorf("%s: request %d: %d output tokens, want at least 1", t.Source, i, outputLens[i])
		}
		p := prompts[i%len(prompts)]
		reqs[i] = Request{Arrival: at, Prompt: p, PromptTokens: len(p.Tokens), MaxTokens: outputLens[i]}
	}
	return reqs, nil
}

// TraceRate is a trace's mean arrival rate, (n-1) requests over the span of its arrivals (0 when it cannot be
// told), as Metrics.AskedRate measures a schedule's.
func TraceRate(t *trace.Trace) float64 {
	n := len(t.Requests)
	if n < 2 || t.Duration() <= 0 {
		return 0
	}
	return float64(n-1) / t.Duration()
}

// TraceOf is the trace of reqs, each at its arrival with its prompt's length and its max tokens: what a simulator
// replays to serve the requests a load test sends. A text prompt's length is its PromptTokens, 0 when unknown.
func TraceOf(reqs []Request, source string) *trace.Trace {
	t := &trace.Trace{Source: source, Format: "synthetic", Requests: make([]trace.Request, len(reqs))}
	for i, r := range reqs {
		t.Requests[i] = trace.Request{Arrival: r.Arrival.Seconds(), PromptTokens: r.PromptTokens, OutputTokens: r.MaxTokens}
	}
	return t
}
