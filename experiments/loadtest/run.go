package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/openai"
)

// Options is a load test: where the requests go, what they are at each rate, and what to make of the results.
type Options struct {
	Config   Config      // the server and how requests are sent to it
	Workload Workload    // the requests of each rate
	SLO      metrics.SLO // goodput's limits; zero for none
	// Knee, when set, is the target of the Latency-RPS curve's knee (Knee).
	Knee *KneeTarget
	// TargetRPS above 0 plans the capacity for that rate at CostPerHour an instance from the knee (PlanCapacity).
	TargetRPS, CostPerHour float64
	// Records, when set, is given each rate's run as it ends, a Record a JSON line (WriteRecord): every request's
	// arrival, max tokens and outcome, for an accounting after the run.
	Records io.Writer
	// Plot, when not "", is where the curve is drawn: Plot.png and Plot.svg (PlotCurve).
	Plot string
	// Done, when set, is called after each rate with its point, for progress.
	Done func(Point)
	// Serve, when set, serves each rate's requests in place of the server at Config.URL (a simulated deployment
	// replaying them, say) and returns their metrics.
	Serve func(ctx context.Context, rate float64, reqs []Request) (Metrics, error)
}

// Workload is the requests of a load test at each of its rates. Synthetic requests arrive at each rate of Rates
// in turn, round(rate x Duration) of them, with gamma gaps of shape Burstiness (Arrivals), each asking for
// OutputTokens; their prompts are Prompts taken in turn (PromptWorkload), or else random token ids of
// PromptTokens (SyntheticPrompts), or, with RangeRatio above 0, of lengths drawn with the output's within
// RangeRatio of PromptTokens and OutputTokens (RandomLengths, LengthWorkload). A Trace replays instead, once, each
// request at its own arrival with its own lengths (FromTrace): Rates, Duration, Burstiness, PromptTokens,
// OutputTokens and RangeRatio do not apply.
type Workload struct {
	Rates        []float64
	Duration     time.Duration
	Burstiness   float64
	Prompts      []openai.Prompt
	PromptTokens int
	OutputTokens int
	RangeRatio   float64
	Vocab        int    // synthetic token ids are below it (at most the served model's vocabulary)
	Seed         uint64 // of arrivals, lengths and synthetic prompts
	Trace        *trace.Trace
}

// synthetic prompts drawn for a workload without Prompts, taken in turn by its requests.
const syntheticPrompts = 64

// Check says what is wrong with the workload, naming the field, or returns nil.
func (w Workload) Check() error {
	if w.Prompts == nil && w.Vocab < 4 {
		return fmt.Errorf("vocabulary of %d, want at least 4 for random token ids (ids 0-2 are special)", w.Vocab)
	}
	if w.Trace != nil {
		return nil
	}
	switch {
	case len(w.Rates) == 0:
		return errors.New("no rates to run")
	case w.Duration <= 0:
		return fmt.Errorf("duration %v, want a span of arrivals above 0 such as 60s", w.Duration)
	case !(w.Burstiness > 0) || math.IsInf(w.Burstiness, 0):
		return fmt.Errorf("burstiness %v, want a number above 0 (1 is Poisson)", w.Burstiness)
	case w.OutputTokens < 1:
		return fmt.Errorf("output tokens %d, want at least 1", w.OutputTokens)
	case w.Prompts == nil && w.PromptTokens < 1:
		return fmt.Errorf("prompt tokens %d, want at least 1", w.PromptTokens)
	case !(w.RangeRatio >= 0 && w.RangeRatio < 1):
		return fmt.Errorf("range ratio %v, want 0 or more and below 1", w.RangeRatio)
	case w.RangeRatio > 0 && w.Prompts != nil:
		return errors.New("a range ratio draws the lengths of synthetic prompts, not of given ones")
	}
	for _, r := range w.Rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("rate %v, want requests per second above 0", r)
		}
	}
	return nil
}

// rates is the rates the workload runs: its Rates, or its trace's mean arrival rate.
func (w Workload) rates() []float64 {
	if w.Trace != nil {
		return []float64{TraceRate(w.Trace)}
	}
	return w.Rates
}

// Requests returns the requests of one rate.
func (w Workload) Requests(rate float64) ([]Request, error) {
	if w.Trace != nil {
		return FromTrace(w.Trace, w.Prompts, w.Vocab, w.Seed)
	}
	n := max(1, int(math.Round(rate*w.Duration.Seconds())))
	at, err := Arrivals(rate, w.Burstiness, n, w.Seed)
	if err != nil {
		return nil, err
	}
	if w.RangeRatio > 0 {
		pl, ol, err := RandomLengths(n, w.PromptTokens, w.OutputTokens, w.RangeRatio, w.Seed)
		if err != nil {
			return nil, err
		}
		return LengthWorkload(at, pl, ol, w.Vocab, w.Seed)
	}
	prompts := w.Prompts
	if prompts == nil {
		if prompts, err = SyntheticPrompts(syntheticPrompts, w.PromptTokens, w.Vocab, w.Seed); err != nil {
			return nil, err
		}
	}
	return PromptWorkload(at, prompts, w.OutputTokens), nil
}

// Report is a load test's outcome: what ran (enough to make the same requests again) and each rate's metrics,
// with the knee, the capacity plan and the plots when asked for. 'morphlab loadtest --json' prints it.
type Report struct {
	URL        string  `json:"url"`
	Model      string  `json:"model"`
	Burstiness float64 `json:"burstiness"`
	DurationS  float64 `json:"duration_s"`
	Seed       uint64  `json:"seed"`
	RangeRatio float64 `json:"range_ratio,omitempty"`
	IgnoreEOS  bool    `json:"ignore_eos,omitempty"`
	// PromptTokens, OutputTokens and Vocab are the synthetic requests' lengths and token ids (Workload); TextPrompts
	// is set when the prompts were given texts instead, and Trace names the trace a replay sent.
	PromptTokens int         `json:"prompt_tokens,omitempty"`
	OutputTokens int         `json:"output_tokens,omitempty"`
	Vocab        int         `json:"vocab,omitempty"`
	TextPrompts  bool        `json:"text_prompts,omitempty"`
	Trace        string      `json:"trace,omitempty"`
	Runs         []Point     `json:"runs"`
	KneeTarget   *KneeTarget `json:"knee_target,omitempty"`
	Knee         *Point      `json:"knee,omitempty"`
	Capacity     *Capacity   `json:"capacity,omitempty"`
	Plots        []string    `json:"plots,omitempty"`
	Warnings     []string    `json:"warnings,omitempty"`
}

// Run runs the load test: every rate of the workload in turn, then the knee, the capacity and the plot that the
// options ask for. It returns an error for bad options (before any request is sent), for a rate whose requests
// could not be made or served, and when ctx ends; what happens to each request is in the metrics.
func Run(ctx context.Context, o Options) (*Report, error) {
	w := o.Workload
	if err := w.Check(); err != nil {
		return nil, err
	}
	if o.Serve == nil {
		if _, err := CheckURL(o.Config.URL); err != nil {
			return nil, err
		}
	}
	if o.TargetRPS != 0 && o.Knee == nil {
		return nil, errors.New("a capacity target needs a knee target")
	}
	rates := w.rates()
	reqs := make([][]Request, len(rates))
	for i, r := range rates {
		var err error
		if reqs[i], err = w.Requests(r); err != nil {
			return nil, fmt.Errorf("rate %v: %v", r, err)
		}
	}
	rep := &Report{URL: o.Config.URL, Model: o.Config.Model, Burstiness: w.Burstiness, DurationS: w.Duration.Seconds(), Seed: w.Seed,
		RangeRatio: w.RangeRatio, IgnoreEOS: o.Config.IgnoreEOS, KneeTarget: o.Knee}
	switch {
	case w.Trace != nil:
		rep.Trace, rep.DurationS = w.Trace.Source, w.Trace.Duration()
		rep.TextPrompts = w.Prompts != nil
	case w.Prompts != nil:
		rep.TextPrompts, rep.OutputTokens = true, w.OutputTokens
	default:
		rep.PromptTokens, rep.OutputTokens, rep.Vocab = w.PromptTokens, w.OutputTokens, w.Vocab
	}
	for i, rate := range rates {
		m, err := o.serve(ctx, rate, reqs[i])
		if err != nil {
			return rep, fmt.Errorf("rate %v: %w", rate, err)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		p := Point{Rate: rate, Metrics: m}
		rep.Runs = append(rep.Runs, p)
		if warn := m.RateWarning(); warn != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("rate %v: %s", rate, warn))
		}
		if o.Done != nil {
			o.Done(p)
		}
	}
	if o.Knee != nil {
		if k, ok := Knee(rep.Runs, *o.Knee); ok {
			rep.Knee = &k
		}
	}
	if rep.Knee != nil && o.TargetRPS != 0 {
		c, err := PlanCapacity(rep.Knee.Metrics, o.TargetRPS, o.CostPerHour)
		if err != nil {
			return rep, err
		}
		rep.Capacity = &c
	}
	if o.Plot != "" {
		title := fmt.Sprintf("%s (burstiness %g)", rep.Model, rep.Burstiness)
		if rep.URL != "" {
			title = fmt.Sprintf("%s at %s (burstiness %g)", rep.Model, rep.URL, rep.Burstiness)
		}
		if err := PlotCurve(rep.Runs, title, o.Plot); err != nil {
			return rep, err
		}
		rep.Plots = []string{o.Plot + ".png", o.Plot + ".svg"}
	}
	return rep, nil
}

// serve serves one rate's requests, through Serve or over HTTP.
func (o Options) serve(ctx context.Context, rate float64, reqs []Request) (Metrics, error) {
	if o.Serve != nil {
		return o.Serve(ctx, rate, reqs)
	}
	res, err := Send(ctx, o.Config, reqs)
	if err != nil {
		return Metrics{}, err
	}
	if o.Records != nil {
		if err := WriteRecord(o.Records, rate, o.Config.Timeout, res); err != nil {
			return Metrics{}, fmt.Errorf("writing the run's record: %w", err)
		}
	}
	return Compute(res, o.SLO), nil
}

// LoadReport reads a Report that 'morphlab loadtest --json' wrote.
func LoadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a 'morphlab loadtest --json' report: %v", path, err)
	}
	if len(r.Runs) == 0 {
		return nil, fmt.Errorf("%s: the report has no runs", path)
	}
	return &r, nil
}

// Workload returns the synthetic workload that made the report's runs, so that the same requests (arrivals and
// lengths; the token ids are drawn anew) can be served again, by a simulator say. A report of a trace replay, of
// given text prompts (whose token counts the client never knew), or written before reports recorded their
// lengths has none.
func (r *Report) Workload() (Workload, error) {
	switch {
	case r.Trace != "":
		return Workload{}, fmt.Errorf("the load test replayed the trace %s: replay that trace instead", r.Trace)
	case r.TextPrompts:
		return Workload{}, errors.New("the load test sent text prompts, whose lengths in tokens it does not know")
	case r.PromptTokens == 0 || r.OutputTokens == 0 || r.Vocab == 0:
		return Workload{}, errors.New("the report does not say its requests' lengths (prompt_tokens, output_tokens and vocab)")
	}
	w := Workload{Duration: time.Duration(r.DurationS * float64(time.Second)), Burstiness: r.Burstiness, PromptTokens: r.PromptTokens,
		OutputTokens: r.OutputTokens, RangeRatio: r.RangeRatio, Vocab: r.Vocab, Seed: r.Seed}
	for _, p := range r.Runs {
		w.Rates = append(w.Rates, p.Rate)
	}
	return w, w.Check()
}

// Comparison is the knees of several sweeps under one target ('morphlab loadtest --compare --json').
type Comparison struct {
	KneeTarget KneeTarget      `json:"knee_target"`
	Curves     []ComparedCurve `json:"curves"`
	Plots      []string        `json:"plots"`
	curves     []Curve
}

// ComparedCurve is one sweep of a comparison and its knee.
type ComparedCurve struct {
	Label string `json:"label"`
	File  string `json:"file"`
	Knee  *Point `json:"knee"` // null when no rate meets the target
}

// Compare reads the reports in files (saved sweeps, one per label, such as one per scheduler), finds each one's
// knee under target, and draws their curves on one plot, plot.png and plot.svg.
func Compare(labels, files []string, target KneeTarget, plot string) (*Comparison, error) {
	if len(labels) != len(files) || len(files) == 0 {
		return nil, fmt.Errorf("%d labels for %d files, want one for each of at least one", len(labels), len(files))
	}
	c := &Comparison{KneeTarget: target}
	for i, f := range files {
		r, err := LoadReport(f)
		if err != nil {
			return nil, err
		}
		c.curves = append(c.curves, Curve{Label: labels[i], Points: r.Runs})
		cc := ComparedCurve{Label: labels[i], File: f}
		if k, ok := Knee(r.Runs, target); ok {
			cc.Knee = &k
		}
		c.Curves = append(c.Curves, cc)
	}
	if err := PlotCompare(c.curves, "Latency-RPS", plot); err != nil {
		return nil, err
	}
	c.Plots = []string{plot + ".png", plot + ".svg"}
	return c, nil
}

// Tables lays the comparison out: each curve's knee (CompareTable), then the target's P95 at every rate
// (RatesTable).
func (c *Comparison) Tables() []Table {
	return []Table{CompareTable(c.curves, c.KneeTarget), RatesTable(c.curves, c.KneeTarget)}
}
