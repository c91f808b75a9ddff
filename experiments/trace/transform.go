package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// The transforms return a new trace and never change their input; the new trace records the transform in
// Transforms. Requests are copied; their HashIDs slices are shared, and nothing here writes to them.

// Window keeps the requests that arrive in [offset, offset+duration) and shifts them so that offset becomes 0.
func Window(t *Trace, offset, duration float64) (*Trace, error) {
	if err := needArrivals(t, "window"); err != nil {
		return nil, err
	}
	if !(offset >= 0) || !(duration > 0) || math.IsInf(offset, 0) || math.IsInf(duration, 0) {
		return nil, fmt.Errorf("window %gs+%gs: want an offset >= 0 and a duration > 0", offset, duration)
	}
	return window(t, offset, duration, "window="+seconds(offset)+"+"+seconds(duration)), nil
}

func window(t *Trace, offset, duration float64, record string) *Trace {
	var reqs []Request
	for _, r := range t.Requests {
		if r.Arrival >= offset && r.Arrival < offset+duration {
			r.Arrival -= offset
			reqs = append(reqs, r)
		}
	}
	return t.derive(record, reqs)
}

// Busiest measures to pick a busiest window.
const (
	ByRequests = "requests" // the most requests
	ByTokens   = "tokens"   // the most prompt plus output tokens
)

// Busiest returns the window of duration seconds with the most requests (by ByRequests) or the most prompt plus
// output tokens (by ByTokens), the earliest when several tie, shifted to start at 0: how a representative
// snippet is picked. The window starts at a request's arrival, which is where a busiest window can always start.
// It records "busiest=DURs/BY" and the window it chose, "window=OFFSETs+DURs".
func Busiest(t *Trace, duration float64, by string) (*Trace, error) {
	if err := needArrivals(t, "busiest"); err != nil {
		return nil, err
	}
	if !(duration > 0) || math.IsInf(duration, 0) {
		return nil, fmt.Errorf("busiest %gs: want a duration > 0", duration)
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("busiest: %s has no requests", t.Source)
	}
	arr := make([]float64, len(t.Requests))
	var tokens []float64
	switch by {
	case ByRequests:
	case ByTokens:
		tokens = make([]float64, len(t.Requests))
		for i, r := range t.Requests {
			tokens[i] = float64(r.PromptTokens + r.OutputTokens)
		}
	default:
		return nil, fmt.Errorf("busiest by %q: want %q or %q", by, ByRequests, ByTokens)
	}
	for i, r := range t.Requests {
		arr[i] = r.Arrival
	}
	_, start := busiestStart(arr, tokens, duration)
	out := window(t, start, duration, "busiest="+seconds(duration)+"/"+by)
	out.Transforms = append(out.Transforms, "window="+seconds(start)+"+"+seconds(duration))
	return out, nil
}

// TimeScale multiplies every arrival time, and so every inter-arrival time, by factor: a factor above 1
// stretches the trace and divides its rate by the factor. The paper's "arrival rate downscaled 4.75x" is
// TimeScale(t, 4.75).
func TimeScale(t *Trace, factor float64) (*Trace, error) {
	if err := needArrivals(t, "time-scale"); err != nil {
		return nil, err
	}
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("time-scale %g: want a factor > 0", factor)
	}
	reqs := make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		r.Arrival *= factor
		reqs[i] = r
	}
	return t.derive("time-scale="+ftoa(factor), reqs), nil
}

// Thin keeps each request with probability p, independently, drawn from seed: a Poisson process thinned with p
// is Poisson at p times the rate, and any trace keeps its shape over time at p times the rate.
func Thin(t *Trace, p float64, seed uint64) (*Trace, error) {
	if !(p > 0 && p <= 1) {
		return nil, fmt.Errorf("thin %g: want a probability in (0, 1]", p)
	}
	r := rand.New(rand.NewPCG(seed, 3))
	var reqs []Request
	for _, q := range t.Requests {
		if r.Float64() < p {
			reqs = append(reqs, q)
		}
	}
	return t.derive("thin="+ftoa(p)+"/seed="+strconv.FormatUint(seed, 10), reqs), nil
}

// Limits bounds request lengths for Clip; 0 leaves that bound off.
type Limits struct {
	Prompt  int // most prompt tokens
	Output  int // most output tokens
	Context int // most prompt plus output tokens
}

// Clip cuts each request's lengths to the limits: prompt and output to their own bounds first, then, if the two
// together exceed the context, the prompt to context-1 at most and the output to what the context has left, so
// every request still fits a model with that context and asks for at least one token. A clip right after another
// is recorded as the one clip that does both, where one does (the first without a context, or the second with
// only one): a replay's clip to its model's context joins the clip to the experiment's limits before it.
func Clip(t *Trace, l Limits) (*Trace, error) {
	if l.Prompt < 0 || l.Output < 0 || l.Context < 0 || l.Context == 1 {
		return nil, fmt.Errorf("clip prompt=%d output=%d context=%d: want limits >= 0 (0 for none) and a context of at least 2", l.Prompt, l.Output, l.Context)
	}
	reqs := make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		if l.Prompt > 0 {
			r.PromptTokens = min(r.PromptTokens, l.Prompt)
		}
		if l.Output > 0 {
			r.OutputTokens = min(r.OutputTokens, l.Output)
		}
		if l.Context > 0 && r.PromptTokens+r.OutputTokens > l.Context {
			r.PromptTokens = min(r.PromptTokens, l.Context-1)
			r.OutputTokens = min(r.OutputTokens, l.Context-r.PromptTokens)
		}
		reqs[i] = r
	}
	if n := len(t.Transforms); n > 0 {
		if before, ok := parseClip(t.Transforms[n-1]); ok {
			if both, ok := joinClips(before, l); ok {
				out := t.derive(clipRecord(both), reqs)
				out.Transforms = slices.Delete(out.Transforms, n-1, n)
				return out, nil
			}
		}
	}
	return t.derive(clipRecord(l), reqs), nil
}

func clipRecord(l Limits) string {
	return fmt.Sprintf("clip=prompt:%d,output:%d,context:%d", l.Prompt, l.Output, l.Context)
}

// parseClip reads a clip's record.
func parseClip(record string) (Limits, bool) {
	var l Limits
	_, err := fmt.Sscanf(record, "clip=prompt:%d,output:%d,context:%d", &l.Prompt, &l.Output, &l.Context)
	return l, err == nil && record == clipRecord(l)
}

// joinClips is the one clip that cuts as a then b do, where there is one: when a has no context (the bounds
// combine, then b's context cuts), or when b has only a context (the smaller context cuts what a's bounds left).
func joinClips(a, b Limits) (Limits, bool) {
	bound := func(x, y int) int { // the tighter of two bounds, 0 being none
		if x == 0 || y == 0 {
			return max(x, y)
		}
		return min(x, y)
	}
	switch {
	case a.Context == 0:
		return Limits{Prompt: bound(a.Prompt, b.Prompt), Output: bound(a.Output, b.Output), Context: b.Context}, true
	case b.Prompt == 0 && b.Output == 0:
		return Limits{Prompt: a.Prompt, Output: a.Output, Context: bound(a.Context, b.Context)}, true
	}
	return Limits{}, false
}

// LengthScale multiplies each prompt length by prompt and each output length by output, rounding to the nearest
// whole token and keeping at least one: how a trace made for a 4K-context model is fitted to a small one. The
// tokens each hash id stands for (HashBlock) scale with the prompts, so that the prefixes requests share keep
// their share of each prompt.
func LengthScale(t *Trace, prompt, output float64) (*Trace, error) {
	if !(prompt > 0) || !(output > 0) || math.IsInf(prompt, 0) || math.IsInf(output, 0) {
		return nil, fmt.Errorf("length-scale %g,%g: want factors > 0", prompt, output)
	}
	scale := func(n int, f float64) int { return max(1, int(min(math.Round(float64(n)*f), maxTokens))) }
	reqs := make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		r.PromptTokens = scale(r.PromptTokens, prompt)
		r.OutputTokens = scale(r.OutputTokens, output)
		reqs[i] = r
	}
	record := "length-scale=" + ftoa(prompt)
	if output != prompt {
		record += "," + ftoa(output)
	}
	out := t.derive(record, reqs)
	if t.HashBlock > 0 {
		out.HashBlock = scale(t.HashBlock, prompt)
	}
	return out, nil
}

func needArrivals(t *Trace, transform string) error {
	if t.NoArrivals {
		return fmt.Errorf("%s: %s is a length-only table without arrivals; give it an arrival process first", transform, t.Source)
	}
	return nil
}

// seconds formats a time for a transform record: "72s", "1073.5s".
func seconds(s float64) string { return ftoa(s) + "s" }

// Spread undoes a coarse clock: it takes each arrival as recorded at a resolution of res seconds, rounds it to
// the nearest multiple of res, and spreads the n requests that share one evenly over the interval that follows,
// res/n apart, in file order. Mooncake's timestamps are whole seconds (a few a millisecond early), so tens of
// requests can share one; Spread(t, 1) gives them the one-second interval they were recorded in instead of a
// single instant. Arrival order is kept.
func Spread(t *Trace, res float64) (*Trace, error) {
	if err := needArrivals(t, "spread"); err != nil {
		return nil, err
	}
	if !(res > 0) || math.IsInf(res, 0) {
		return nil, fmt.Errorf("spread %gs: want a resolution > 0", res)
	}
	reqs := slices.Clone(t.Requests)
	for i := 0; i < len(reqs); {
		tick := math.Round(reqs[i].Arrival / res)
		j := i + 1
		for j < len(reqs) && math.Round(reqs[j].Arrival/res) == tick {
			j++
		}
		for k := i; k < j; k++ {
			reqs[k].Arrival = (tick + float64(k-i)/float64(j-i)) * res
		}
		i = j
	}
	return t.derive("spread="+seconds(res), reqs), nil
}
