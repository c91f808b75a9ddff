package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// Process is a seeded arrival process.
type Process interface {
	// Arrivals returns the arrival times, in seconds from 0 and in order, that r draws: n of them, or all
	// before until when n is 0, or whichever ends first when both are set.
	Arrivals(r *rand.Rand, n int, until float64) []float64
	// Rate is the analytic mean rate in requests per second.
	Rate() float64
	// String is the process as ParseProcess reads it, e.g. "gamma:5:0.5".
	String() string
}

// Poisson is a Poisson process: exponential inter-arrival times with mean 1/Rate (coefficient of variation 1).
type Poisson struct{ PerSecond float64 }

func (p Poisson) Rate() float64  { return p.PerSecond }
func (p Poisson) String() string { return "poisson:" + ftoa(p.PerSecond) }
func (p Poisson) Arrivals(r *rand.Rand, n int, until float64) []float64 {
	d := distuv.Exponential{Rate: p.PerSecond, Src: r}
	return renewal(d.Rand, n, until)
}

// Gamma is a renewal process with gamma inter-arrival times as vLLM's benchmark_serving draws them: shape =
// Burstiness, scale = 1/(rate x Burstiness), so the mean gap is 1/rate and the coefficient of variation is
// 1/sqrt(Burstiness). Burstiness 1 is Poisson; below 1 is burstier, above 1 more regular.
type Gamma struct{ PerSecond, Burstiness float64 }

func (g Gamma) Rate() float64  { return g.PerSecond }
func (g Gamma) String() string { return "gamma:" + ftoa(g.PerSecond) + ":" + ftoa(g.Burstiness) }
func (g Gamma) Arrivals(r *rand.Rand, n int, until float64) []float64 {
	// gonum's Beta is the rate parameter, the inverse of the scale.
	d := distuv.Gamma{Alpha: g.Burstiness, Beta: g.PerSecond * g.Burstiness, Src: r}
	return renewal(d.Rand, n, until)
}

// renewal sums the gaps that gap draws: the first arrival is one gap after 0.
func renewal(gap func() float64, n int, until float64) []float64 {
	var out []float64
	t := 0.0
	for n == 0 || len(out) < n {
		t += gap()
		if until > 0 && t >= until {
			break
		}
		out = append(out, t)
	}
	return out
}

// OnOff alternates between an on state (Poisson at OnRate) and an off state (Poisson at OffRate, 0 for
// silence), each lasting an exponential time with mean OnMean or OffMean seconds (a Markov-modulated Poisson
// process). It starts in the on state with probability OnMean/(OnMean+OffMean), the long-run share of time on.
type OnOff struct{ OnRate, OffRate, OnMean, OffMean float64 }

func (o OnOff) Rate() float64 {
	return (o.OnRate*o.OnMean + o.OffRate*o.OffMean) / (o.OnMean + o.OffMean)
}
func (o OnOff) String() string {
	return "onoff:" + ftoa(o.OnRate) + ":" + ftoa(o.OffRate) + ":" + ftoa(o.OnMean) + ":" + ftoa(o.OffMean)
}
func (o OnOff) Arrivals(r *rand.Rand, n int, until float64) []float64 {
	on := r.Float64() < o.OnMean/(o.OnMean+o.OffMean)
	// Each dwell time is drawn when the previous one ends, until there are n arrivals or until is reached.
	next := func() (Segment, bool) {
		s := Segment{Duration: r.ExpFloat64() * o.OffMean, PerSecond: o.OffRate}
		if on {
			s = Segment{Duration: r.ExpFloat64() * o.OnMean, PerSecond: o.OnRate}
		}
		on = !on
		return s, true
	}
	return piecewise(r, next, n, until)
}

// Schedule is a piecewise-constant rate: Poisson at each segment's rate for its duration, segment after segment,
// and nothing after the last (e.g. 60 s at 2/s, 20 s at 20/s, 60 s at 2/s: a 10x spike for 20 s).
type Schedule []Segment

// Segment is one stretch of a Schedule: PerSecond requests per second for Duration seconds.
type Segment struct{ Duration, PerSecond float64 }

func (s Schedule) Rate() float64 {
	var n, d float64
	for _, seg := range s {
		n += seg.Duration * seg.PerSecond
		d += seg.Duration
	}
	return n / d
}
func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, seg := range s {
		parts[i] = ftoa(seg.Duration) + "s@" + ftoa(seg.PerSecond)
	}
	return "schedule:" + strings.Join(parts, ",")
}
func (s Schedule) Arrivals(r *rand.Rand, n int, until float64) []float64 {
	i := 0
	next := func() (Segment, bool) {
		if i == len(s) {
			return Segment{}, false
		}
		i++
		return s[i-1], true
	}
	return piecewise(r, next, n, until)
}

// piecewise draws a Poisson process whose rate is constant within each segment that next hands out. Because
// exponential gaps are memoryless, a gap that would cross a segment's end is dropped and drawing restarts at the
// end with the next segment's rate; this is exact.
func piecewise(r *rand.Rand, next func() (Segment, bool), n int, until float64) []float64 {
	var out []float64
	start := 0.0
	for n == 0 || len(out) < n {
		seg, ok := next()
		if !ok {
			break
		}
		end := start + seg.Duration
		t := start
		for seg.PerSecond > 0 && (n == 0 || len(out) < n) {
			t += r.ExpFloat64() / seg.PerSecond
			if t >= end || (until > 0 && t >= until) {
				break
			}
			out = append(out, t)
		}
		start = end
		if until > 0 && start >= until {
			break
		}
	}
	return out
}

// ParseProcess reads an arrival process: "poisson:RATE", "gamma:RATE:BURSTINESS",
// "onoff:ONRATE:OFFRATE:ONMEAN:OFFMEAN" or "schedule:DURs@RATE,DURs@RATE,..." (rates per second, times in
// seconds; "s" is optional).
func ParseProcess(spec string) (Process, error) {
	kind, args, _ := strings.Cut(spec, ":")
	bad := func(want string) error {
		return fmt.Errorf("arrival process %q: want %s", spec, want)
	}
	switch kind {
	case "poisson":
		v, err := positives(args, 1)
		if err != nil {
			return nil, bad("poisson:RATE with RATE > 0")
		}
		return Poisson{v[0]}, nil
	case "gamma":
		v, err := positives(args, 2)
		if err != nil {
			return nil, bad("gamma:RATE:BURSTINESS with both > 0")
		}
		return Gamma{v[0], v[1]}, nil
	case "onoff":
		v, err := numbers(args, 4)
		if err != nil || v[0] <= 0 || v[1] < 0 || v[2] <= 0 || v[3] <= 0 {
			return nil, bad("onoff:ONRATE:OFFRATE:ONMEAN:OFFMEAN with ONRATE, ONMEAN, OFFMEAN > 0 and OFFRATE >= 0")
		}
		return OnOff{v[0], v[1], v[2], v[3]}, nil
	case "schedule":
		var s Schedule
		for part := range strings.SplitSeq(args, ",") {
			d, rate, ok := strings.Cut(part, "@")
			dur, err1 := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(d), "s"), 64)
			r, err2 := strconv.ParseFloat(strings.TrimSpace(rate), 64)
			if !ok || err1 != nil || err2 != nil || !(dur > 0) || !(r >= 0) || math.IsInf(dur, 0) || math.IsInf(r, 0) {
				return nil, bad("schedule:DURs@RATE,... with each DUR > 0 and RATE >= 0")
			}
			s = append(s, Segment{dur, r})
		}
		if s.Rate() == 0 {
			return nil, bad("a schedule with some rate above 0")
		}
		return s, nil
	}
	return nil, bad("poisson:RATE, gamma:RATE:BURSTINESS, onoff:ONRATE:OFFRATE:ONMEAN:OFFMEAN or schedule:DURs@RATE,...")
}

// numbers parses exactly n colon-separated finite numbers.
func numbers(s string, n int) ([]float64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != n {
		return nil, fmt.Errorf("want %d numbers", n)
	}
	v := make([]float64, n)
	for i, p := range parts {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("bad number %q", p)
		}
		v[i] = f
	}
	return v, nil
}

// positives parses exactly n colon-separated numbers above 0.
func positives(s string, n int) ([]float64, error) {
	v, err := numbers(s, n)
	if err != nil {
		return nil, err
	}
	for _, f := range v {
		if f <= 0 {
			return nil, fmt.Errorf("%v is not above 0", f)
		}
	}
	return v, nil
}

// Dist is a seeded distribution of one length, in tokens (at least 1).
type Dist interface {
	Draw(r *rand.Rand) int
	String() string // as ParseDist reads it
}

// Fixed is always N tokens.
type Fixed struct{ N int }

func (f Fixed) Draw(*rand.Rand) int { return f.N }
func (f Fixed) String() string      { return "fixed:" + strconv.Itoa(f.N) }

// Uniform is uniform over the whole numbers Min..Max, both included.
type Uniform struct{ Min, Max int }

func (u Uniform) Draw(r *rand.Rand) int { return u.Min + r.IntN(u.Max-u.Min+1) }
func (u Uniform) String() string        { return "uniform:" + strconv.Itoa(u.Min) + ":" + strconv.Itoa(u.Max) }

// LogNormal is exp(N(ln Median, Sigma^2)) rounded to the nearest whole number and at least 1: Median is the
// median length and Sigma the spread (the standard deviation of the log).
type LogNormal struct{ Median, Sigma float64 }

func (l LogNormal) Draw(r *rand.Rand) int {
	d := distuv.LogNormal{Mu: math.Log(l.Median), Sigma: l.Sigma, Src: r}
	return max(1, int(math.Round(min(d.Rand(), maxTokens))))
}
func (l LogNormal) String() string { return "lognormal:" + ftoa(l.Median) + ":" + ftoa(l.Sigma) }

// ParseDist reads a length distribution: "fixed:N", "uniform:MIN:MAX" or "lognormal:MEDIAN:SIGMA".
func ParseDist(spec string) (Dist, error) {
	kind, args, _ := strings.Cut(spec, ":")
	bad := func(want string) error { return fmt.Errorf("length distribution %q: want %s", spec, want) }
	switch kind {
	case "fixed":
		n, err := strconv.Atoi(args)
		if err != nil || n < 1 || n > maxTokens {
			return nil, bad("fixed:N with N >= 1")
		}
		return Fixed{n}, nil
	case "uniform":
		lo, hi, _ := strings.Cut(args, ":")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 1 || b < a || b > maxTokens {
			return nil, bad("uniform:MIN:MAX with 1 <= MIN <= MAX")
		}
		return Uniform{a, b}, nil
	case "lognormal":
		v, err := numbers(args, 2)
		if err != nil || v[0] < 1 || v[1] < 0 || v[0] > maxTokens {
			return nil, bad("lognormal:MEDIAN:SIGMA with MEDIAN >= 1 and SIGMA >= 0")
		}
		return LogNormal{v[0], v[1]}, nil
	}
	return nil, bad("fixed:N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA")
}

// LengthSource gives each generated request its prompt and output lengths.
type LengthSource interface {
	Draw(r *rand.Rand) (prompt, output int)
	String() string
}

// Independent draws the prompt and output lengths from their own distributions.
type Independent struct{ Prompt, Output Dist }

func (l Independent) Draw(r *rand.Rand) (int, int) { return l.Prompt.Draw(r), l.Output.Draw(r) }
func (l Independent) String() string {
	return "prompt=" + l.Prompt.String() + " output=" + l.Output.String()
}

// Table samples (prompt, output) pairs from a trace's requests, uniformly with replacement, so that the two
// lengths keep their joint distribution.
type Table struct{ From *Trace }

func (l Table) Draw(r *rand.Rand) (int, int) {
	q := l.From.Requests[r.IntN(len(l.From.Requests))]
	return q.PromptTokens, q.OutputTokens
}
func (l Table) String() string { return "lengths=" + l.From.Source }

// Spec says what Generate draws: arrivals from Process and lengths from Lengths, N requests or all those that
// arrive before Duration seconds (whichever ends first when both are set).
type Spec struct {
	Process  Process
	Lengths  LengthSource
	N        int
	Duration float64
}

// Generate draws a synthetic trace. The arrivals and the lengths come from two random streams derived from seed,
// so changing the lengths leaves the arrivals as they were; the same spec and seed give the same trace, bit for
// bit, on every machine (math/rand/v2's PCG).
func Generate(spec Spec, seed uint64) (*Trace, error) {
	if spec.Process == nil || spec.Lengths == nil {
		return nil, fmt.Errorf("generate: want an arrival process and a length source")
	}
	if spec.N < 0 || spec.Duration < 0 || (spec.N == 0 && spec.Duration == 0) {
		return nil, fmt.Errorf("generate: want a request count or a duration above 0 (have n=%d, duration=%g)", spec.N, spec.Duration)
	}
	if tab, ok := spec.Lengths.(Table); ok && len(tab.From.Requests) == 0 {
		return nil, fmt.Errorf("generate: length table %s has no rows", tab.From.Source)
	}
	arr := spec.Process.Arrivals(rand.New(rand.NewPCG(seed, 1)), spec.N, spec.Duration)
	lr := rand.New(rand.NewPCG(seed, 2))
	reqs := make([]Request, len(arr))
	for i, a := range arr {
		p, o := spec.Lengths.Draw(lr)
		reqs[i] = Request{Arrival: a, PromptTokens: p, OutputTokens: o}
	}
	src := fmt.Sprintf("%s %s seed=%d", spec.Process, spec.Lengths, seed)
	if spec.N > 0 {
		src += " n=" + strconv.Itoa(spec.N)
	}
	if spec.Duration > 0 {
		src += " duration=" + ftoa(spec.Duration) + "s"
	}
	t := &Trace{Source: src, Format: Synthetic, Requests: reqs}
	if tab, ok := spec.Lengths.(Table); ok {
		t.SHA256 = tab.From.SHA256
	}
	return t, nil
}

// WithArrivals gives t's requests, in order, the arrival times that p draws with seed: the way a length-only
// table combines with a synthetic arrival process. It fails if p ends (a Schedule) before every request has
// arrived.
func WithArrivals(t *Trace, p Process, seed uint64) (*Trace, error) {
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("%s: no requests to give arrivals to", t.Source)
	}
	arr := p.Arrivals(rand.New(rand.NewPCG(seed, 1)), len(t.Requests), 0)
	if len(arr) < len(t.Requests) {
		return nil, fmt.Errorf("%s: arrival process %s gave %d arrivals for %d requests", t.Source, p, len(arr), len(t.Requests))
	}
	reqs := make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		r.Arrival = arr[i]
		reqs[i] = r
	}
	out := t.derive(fmt.Sprintf("arrivals=%s/seed=%d", p, seed), reqs)
	out.NoArrivals = false
	return out, nil
}

// ftoa formats a number in its shortest exact form.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
