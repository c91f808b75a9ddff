package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/trace"
)

func init() {
	register(&command{name: "loadtest", summary: "load-test an OpenAI-compatible server: vLLM's metrics, Latency-RPS sweeps, capacity and cost", run: runLoadtest})
}

const loadtestHelp = `
Loadtest sends streamed requests to an OpenAI-compatible server (POST /v1/completions, or /v1/chat/completions
with --chat) and reports vLLM benchmark_serving's metrics: TTFT, TPOT = (E2EL - TTFT)/(output tokens - 1) per
request, ITL pooled over all token gaps, E2EL (mean, std, median, P90, P95, P99 in ms), request, output and total
token throughput, goodput against --slo, rejections (429) and failures.

Arrivals are open-loop: round(rate x duration) requests whose gaps are drawn from a gamma distribution with shape
--burstiness and mean 1/rate (1 is Poisson), seeded, as vLLM draws them. The achieved arrival rate is measured
and a warning printed when it is more than 5% off the asked rate. Prompts come from --prompts (JSONL with
turns[0], prompt or text, or one per line), else are --prompt-tokens random token ids below --vocab. Each request
asks for --output-tokens tokens at temperature 0. --range-ratio R draws each synthetic request's prompt and output
lengths uniformly from L x (1-R) to L x (1+R), as vLLM's random dataset does; --ignore-eos asks the server to
generate all max_tokens of every request.

--trace replays a trace instead (any format experiments/trace reads, transformed by --window, --busiest,
--time-scale, ... as in 'morphlab run'): each request at its own arrival, asking for its own output tokens, with
random token ids of its prompt length (or the --prompts texts in turn).

--sweep runs each rate in turn and draws the Latency-RPS curve (P50 and P95 of TTFT and E2EL against the
request throughput achieved) to --plot.png and --plot.svg. The knee is the highest rate below the first rate
that misses the --knee target (the P95 of its latency over the limit, or a request not completed), so that a
noisy curve that meets the target again past a miss does not move it. --target-rps with
--cost-per-hour turns the knee into instances (rounded up) and cost per hour and per million output tokens.

--at-knee REPORT runs at the knee rate (under --knee) of a saved sweep instead of --rate, and --times X at X
times each rate: --at-knee continuous.json --knee ttft=1s --times 4 is an overload at four times that knee.

--compare reads the --json reports of several sweeps (LABEL=FILE,..., one per scheduler, say), draws their P95
TTFT and E2EL curves on one plot and tabulates each one's knee with its ratio to the others' (but the last's),
and the P95 of the --knee latency at every rate.

--outcomes FILE keeps every request for an accounting after the run, a JSON line a rate: its arrival, max tokens
and outcome (status, error, timings, when it ended and, with --server-header NAME, that response header: a
proxy's name for the replica that served).

A 429 counts as rejected and is not retried (the load is open-loop); its Retry-After is not honoured. Requests go
only to --url: no redirects are followed and no proxy is used. Ctrl-C ends the run; what had not finished counts
as failed.`

func runLoadtest(e *env, args []string) error {
	fs := e.flags("--url URL --model NAME (--trace F | --rate R --duration D | --sweep R1,R2,... --duration D) [flags]\n"+
		"       morphlab loadtest --compare LABEL=FILE,... --knee METRIC=LIMIT [--plot BASE] [--json]", loadtestHelp)
	url := fs.String("url", "", "server `root`, such as http://127.0.0.1:8000")
	modelName := fs.String("model", "", "model `name` sent with every request")
	chat := fs.Bool("chat", false, "use /v1/chat/completions, the prompt as one user message")
	rate := fs.Float64("rate", 0, "arrival `rate` in requests per second")
	sweep := fs.String("sweep", "", "comma-separated arrival `rates` to run one after another")
	atKnee := fs.String("at-knee", "", "instead of --rate, run at the knee rate (under --knee) of a saved --json sweep `report`")
	times := fs.Float64("times", 1, "run at `X` times each rate, such as 4 for an overload at 4x the knee")
	burstiness := fs.Float64("burstiness", 1, "gamma shape of the gaps: 1 is Poisson, below 1 burstier")
	duration := fs.Duration("duration", 0, "span of each run's arrivals (`duration`); requests = round(rate x duration)")
	tracePath := fs.String("trace", "", "replay the arrivals and lengths of a trace `file` (any format experiments/trace reads)")
	var tf trace.Flags
	tf.Register(fs) // also --seed, the seed of arrivals and synthetic prompts as well
	promptsFile := fs.String("prompts", "", "prompts `file` (JSONL turns[0]/prompt/text, or one per line); default synthetic")
	promptTokens := fs.Int("prompt-tokens", 128, "synthetic prompt length in `tokens`")
	vocab := fs.Int("vocab", 256, "synthetic token ids are below `N` (at most the model's vocabulary)")
	outputTokens := fs.Int("output-tokens", 128, "max_tokens of each request (`N`)")
	rangeRatio := fs.Float64("range-ratio", 0, "draw each synthetic request's prompt and output lengths uniformly within `R` (0 <= R < 1) of --prompt-tokens and --output-tokens, as vLLM's --random-range-ratio")
	ignoreEOS := fs.Bool("ignore-eos", false, "send ignore_eos (vLLM's extension) so that every request generates its max_tokens")
	apiKey := fs.String("api-key", "", "send `key` as Authorization: Bearer KEY with every request (default $OPENAI_API_KEY, as vLLM's benchmark)")
	maxConc := fs.Int("max-concurrency", 0, "requests in flight at most (`N`); 0 for no limit")
	timeout := fs.Duration("timeout", loadtest.DefaultTimeout, "limit per request, and the drain after the last arrival (`duration`)")
	sloFlag := fs.String("slo", "", "goodput `limits`, such as ttft=500ms,tpot=50ms,e2el=2s (bare numbers are ms)")
	kneeFlag := fs.String("knee", "", "knee `target`: the P95 of ttft, tpot, itl or e2el within a limit, such as e2el=2s")
	targetRPS := fs.Float64("target-rps", 0, "plan capacity for this `rate` (needs --knee and --cost-per-hour)")
	costPerHour := fs.Float64("cost-per-hour", 0, "hourly `cost` of one instance")
	plotBase := fs.String("plot", "results/loadtest/latency-rps", "with --sweep or --compare, write the curves to `base`.png and base.svg")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	outcomes := fs.String("outcomes", "", "write every request's arrival, max tokens and outcome to `file`, a JSON line a rate (experiments/loadtest.Record)")
	serverHeader := fs.String("server-header", "", "record the response header `name` with each outcome (a proxy's name for the replica that served)")
	compare := fs.String("compare", "", "instead of a run, compare saved --json reports: `LABEL=FILE,...` (needs --knee)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	var given []string // in lexical order
	fs.Visit(func(f *flag.Flag) { given = append(given, f.Name) })
	set := map[string]bool{}
	for _, name := range given {
		set[name] = true
	}
	if *compare != "" {
		for _, name := range given {
			if name != "compare" && name != "knee" && name != "plot" && name != "json" {
				return usagef("--%s does not apply to --compare, which takes only --knee, --plot and --json", name)
			}
		}
		return runCompare(e, *compare, *kneeFlag, *plotBase, *asJSON)
	}

	if *url == "" || *modelName == "" {
		return usagef("--url and --model are required")
	}
	if _, err := loadtest.CheckURL(*url); err != nil {
		return usageError{"--" + err.Error()}
	}
	var knee *loadtest.KneeTarget
	if *kneeFlag != "" {
		k, err := loadtest.ParseKneeTarget(*kneeFlag)
		if err != nil {
			return usageError{"--knee: " + err.Error()}
		}
		knee = &k
	}
	var err error
	w := loadtest.Workload{Duration: *duration, Burstiness: *burstiness, PromptTokens: *promptTokens, OutputTokens: *outputTokens,
		RangeRatio: *rangeRatio, Vocab: *vocab, Seed: tf.Seed}
	if *tracePath != "" {
		for _, name := range []string{"rate", "sweep", "at-knee", "times", "duration", "burstiness", "prompt-tokens", "output-tokens", "range-ratio"} {
			if set[name] {
				return usagef("--%s does not apply to --trace, whose requests have their own arrivals and lengths", name)
			}
		}
	} else {
		for _, name := range traceOnlyFlags {
			if set[name] {
				return usagef("--%s needs --trace", name)
			}
		}
		if *atKnee != "" {
			if set["rate"] || set["sweep"] || knee == nil {
				return usagef("--at-knee takes --knee and neither --rate nor --sweep")
			}
			r, err := loadtest.LoadReport(*atKnee)
			if err != nil {
				return err
			}
			k, ok := loadtest.Knee(r.Runs, *knee)
			if !ok {
				return fmt.Errorf("--at-knee %s: no rate meets %v", *atKnee, knee)
			}
			w.Rates = []float64{k.Rate}
		} else if w.Rates, err = parseRates(*rate, *sweep); err != nil {
			return err
		}
		if !(*times > 0) || math.IsInf(*times, 0) {
			return usagef("--times=%v, want a number above 0", *times)
		}
		for i := range w.Rates {
			w.Rates[i] *= *times
		}
	}
	if *maxConc < 0 {
		return usagef("--max-concurrency=%d, want 0 (no limit) or more", *maxConc)
	}
	if *timeout <= 0 {
		return usagef("--timeout=%v, want more than 0", *timeout)
	}
	o := loadtest.Options{Workload: w, Knee: knee, TargetRPS: *targetRPS, CostPerHour: *costPerHour}
	if *sloFlag != "" {
		if o.SLO, err = metrics.ParseSLO(*sloFlag); err != nil {
			return usageError{"--slo: " + err.Error()}
		}
	}
	if *targetRPS != 0 || *costPerHour != 0 {
		if o.Knee == nil || !(*targetRPS > 0) || !(*costPerHour >= 0) {
			return usagef("--target-rps R --cost-per-hour C need --knee, R above 0 and C of 0 or more")
		}
	}
	if *promptsFile != "" {
		if o.Workload.Prompts, err = loadtest.LoadPrompts(*promptsFile); err != nil {
			return err
		}
	} else if *chat {
		return usagef("--chat needs --prompts: synthetic prompts are token ids, which chat messages cannot carry")
	}
	if *tracePath != "" {
		if o.Workload.Trace, err = tf.Load(*tracePath); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "loadtest: %s, model %s, replaying %s\n", *url, *modelName, o.Workload.Trace)
	} else {
		fmt.Fprintf(e.stderr, "loadtest: %s, model %s, %d rate(s) for %v each\n", *url, *modelName, len(w.Rates), *duration)
	}
	if err := o.Workload.Check(); err != nil {
		return usageError{err.Error()}
	}
	if *sweep != "" {
		o.Plot = *plotBase
	}
	bar := newProgress(e.stderr, "loadtest: requests")
	defer bar.clear()
	o.Config = loadtest.Config{URL: *url, Model: *modelName, Chat: *chat, MaxConcurrency: *maxConc, Timeout: *timeout, IgnoreEOS: *ignoreEOS,
		APIKey: cmp.Or(*apiKey, os.Getenv("OPENAI_API_KEY")), Progress: bar.set, ServerHeader: *serverHeader}
	if *outcomes != "" {
		f, err := os.Create(*outcomes)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Records = f
	}
	o.Done = func(p loadtest.Point) {
		bar.clear()
		m := p.Metrics
		fmt.Fprintf(e.stderr, "rate %v: %d requests, %d completed, %d rejected, %d failed, %.3g req/s\n",
			p.Rate, m.Requests, m.Completed, m.Rejected, m.Failed, m.RequestThroughput)
		if warn := m.RateWarning(); warn != "" {
			fmt.Fprintf(e.stderr, "rate %v: %s\n", p.Rate, warn)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	report, err := loadtest.Run(ctx, o)
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	if err != nil {
		return err
	}
	if len(report.Plots) > 0 {
		fmt.Fprintf(e.stderr, "curve in %s.png and %s.svg\n", *plotBase, *plotBase)
	}
	if *asJSON {
		err = writeJSON(e.stdout, report)
	} else {
		err = report.Write(e.stdout)
	}
	if err != nil {
		return err
	}
	if o.Knee != nil && *targetRPS > 0 && report.Knee == nil {
		return fmt.Errorf("no rate meets the knee target %v: no capacity to plan", o.Knee)
	}
	for _, p := range report.Runs {
		if p.Metrics.Completed == 0 {
			return fmt.Errorf("rate %v: no request completed (the first: %s)", p.Rate, p.Metrics.FirstError)
		}
	}
	return nil
}

// runCompare reads the --json reports of several sweeps (LABEL=FILE,..., one per label, such as one per
// scheduler), draws their curves on one plot and tabulates their knees and the target's P95 at every rate.
func runCompare(e *env, spec, kneeFlag, plotBase string, asJSON bool) error {
	if kneeFlag == "" {
		return usagef("--compare needs --knee")
	}
	target, err := loadtest.ParseKneeTarget(kneeFlag)
	if err != nil {
		return usageError{"--knee: " + err.Error()}
	}
	var labels, files []string
	for part := range strings.SplitSeq(spec, ",") {
		label, file, ok := strings.Cut(part, "=")
		if !ok || label == "" || file == "" {
			return usagef("--compare=%q: want LABEL=FILE,... such as static=static.json,continuous=cont.json", spec)
		}
		labels, files = append(labels, label), append(files, file)
	}
	c, err := loadtest.Compare(labels, files, target, plotBase)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "curves in %s.png and %s.svg\n", plotBase, plotBase)
	if asJSON {
		return writeJSON(e.stdout, c)
	}
	return loadtest.WriteTables(e.stdout, c.Tables()...)
}

// traceOnlyFlags are trace.Flags' flags other than --seed: they choose how a trace is read and transformed.
var traceOnlyFlags = []string{"trace-format", "sort-arrivals", "keep-failed", "window", "busiest", "busiest-by", "thin",
	"time-scale", "length-scale", "clip", "max-prompt", "max-output"}

// parseRates returns the rates of --rate or --sweep, exactly one of which must be given.
func parseRates(rate float64, sweep string) ([]float64, error) {
	if (rate != 0) == (sweep != "") {
		return nil, usagef("give one of --rate R and --sweep R1,R2,...")
	}
	if sweep == "" {
		if !(rate > 0) || math.IsInf(rate, 0) {
			return nil, usagef("--rate=%v, want requests per second above 0", rate)
		}
		return []float64{rate}, nil
	}
	var rates []float64
	for f := range strings.SplitSeq(sweep, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, usagef("--sweep=%q: %q is not a rate above 0", sweep, f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}
