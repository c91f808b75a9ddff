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
