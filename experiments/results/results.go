// Package results is the output of a trace replay, the same for `morphlab run` (the real engine) and `morphlab
// simulate` (the sim executor): results.json holds what was run (Meta: the model, device, policy and its
// parameters, memory, trace and its transforms, SLO, and the whole record that `morphlab rerun` runs it again
// from: the deployment or fleet after its defaults, the trace source's sha256, the replay's seed and the morphlab
// build), the aggregates with vLLM's benchmark definitions (through experiments/loadtest's
// Compute), the TTFT-SLO violation rate, preemptions, KV blocks against the full-precision pool, the share of
// output tokens generated with each count of quantized layers (and, under a policy with several quantized formats,
// with each swap position in each format), the prompt tokens the prefix cache held (in all and per request: vLLM's
// prefix cache hits over queries, at each request's first scheduling), one record per request, and the timeline;
// events.jsonl holds the engine's lifecycle and control events (swaps, KV regions, the controller's decisions)
// without the token events; table.md is the aggregates as a Markdown table. Every report and plot reads these.
//
// An Accumulator builds a run's results a request at a time, as the requests end. The pooled ITL is summarized
// from the count of each inter-token gap rather than from the list of every gap (millions in an hour's replay):
// its percentiles are loadtest.Summarize's, its mean and deviation the same two passes in ascending order with a
// plain sum, which can differ from Summarize's vectorized one in the last digits. results.json is written a
// request and a timeline point at a time.
package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/quant"
)

// Schema is the version of results.json: 2 records the whole run (Meta's Deployment or Fleet, Replay and
// Morphlab) and names the device "device"; Load reads 1 too, whose meta named it "hardware".
const Schema = 2

// Meta says what was run: first what reports read (the command, executor, clock, model, device, policy, budget and
// pool), then the whole record a run is made again from (`morphlab rerun`): the deployment after its defaults, or
// the fleet; the trace with the sha256 of its source and each transform in order; the replay's prompt seed and
// options; the SLO; and the morphlab build that ran it.
type Meta struct {
	Command      string          `json:"command"`  // run or simulate
	Executor     string          `json:"executor"` // cpu, cuda or sim
	Clock        string          `json:"clock"`    // wall, cpu (virtual, advanced by each step's CPU time) or virtual
	Model        string          `json:"model"`
	Device       string          `json:"device,omitempty"` // the sim's device, or the cuda executor's GPU
	Policy       string          `json:"policy"`
	Params       json.RawMessage `json:"params,omitempty"` // a morphing policy's parameters (morph.Params)
	Memory       int64           `json:"memory_bytes"`
	KVBlocksFull int             `json:"kv_blocks_full_precision"` // the pool at full precision
	BlockSize    int             `json:"block_size"`
	Trace        TraceInfo       `json:"trace"`
	SLO          metrics.SLO     `json:"slo"`
	// Deployment is the one deployment replayed, Fleet the fleet (one of them is set; neither in schema 1).
	Deployment *Deployment `json:"deployment,omitempty"`
	Fleet      *FleetSpec  `json:"fleet,omitempty"`
	Replay     Replay      `json:"replay"`
	Morphlab   BuildInfo   `json:"morphlab"`
}

// TraceInfo names the trace replayed, the sha256 of the bytes it was read from (its file, or a generator's length
// table; "" for a trace drawn from distributions alone, whose source is its generator and seed) and the
// transforms applied to it, in order (experiments/trace.Recipe).
type TraceInfo struct {
	Source     string   `json:"source"`
	SHA256     string   `json:"sha256,omitempty"`
	Format     string   `json:"format"`
	Transforms []string `json:"transforms"`
	Requests   int      `json:"requests"`
}

// Request is one request's outcome.
type Request struct {
	ID          int     `json:"id"`
	Arrival     float64 `json:"arrival_s"`
	Prompt      int     `json:"prompt_tokens"`
	MaxTokens   int     `json:"max_tokens"`
	Output      int     `json:"output_tokens"`
	TTFT        float64 `json:"ttft_ms"`
	TPOT        float64 `json:"tpot_ms"`
	E2EL        float64 `json:"e2el_ms"`
	Finish      string  `json:"finish"`
	Preemptions int     `json:"preemptions"`
	// CachedTokens is the prompt tokens whose KV the prefix cache held when the request was first scheduled, and
	// PrefixHitRate their share of the prompt (both left out at 0).
	CachedTokens  int     `json:"prefix_cached_tokens,omitempty"`
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
	// Mix[k] is the output tokens generated with k layers quantized.
	Mix []int32 `json:"tokens_by_quantized_layers"`
	// Tokens are the output token ids, kept when asked for (quality comparisons).
	Tokens []int32 `json:"tokens,omitempty"`
	// Retries, in a fleet, is how many times the proxy in front sent the request on to another replica because
	// the one it had been sent to had died (left out at 0).
	Retries int `json:"retries,omitempty"`
}

// Aggregates are the run's figures.
type Aggregates struct {
	loadtest.Metrics
	SLOViolations    int     `json:"slo_violations"`     // requests whose TTFT is over the TTFT SLO, or that did not complete
	SLOViolationRate float64 `json:"slo_violation_rate"` // of all requests
	Preemptions      int     `json:"preemptions"`        // over all requests
	PeakKVBlocks     int     `json:"peak_kv_blocks"`     // the most blocks in use at once
	PeakKVAttached   int     `json:"peak_kv_blocks_attached"`
	SwapActions      int     `json:"swap_actions"`
	MaxQuantized     int     `json:"max_quantized_layers"`
	TokensByLayers   []int   `json:"tokens_by_quantized_layers"`
	FullPrecision    float64 `json:"full_precision_share"`  // output tokens generated with no layer quantized
	QuantizedLayerTk float64 `json:"mean_quantized_layers"` // per output token
	// TokensByPosition, under a policy with several quantized formats, is for each of them the output tokens
	// generated while the layer at each position of the swap order was in it (morph.Recorder.TokensByPosition).
	TokensByPosition map[string][]int `json:"tokens_by_swap_position,omitempty"`
	// PrefixCachedTokens is the prompt tokens found in the prefix cache over all requests (each when first
	// scheduled), and PrefixHitRate their share of all prompt tokens (both left out at 0).
	PrefixCachedTokens int     `json:"prefix_cached_tokens,omitempty"`
	PrefixHitRate      float64 `json:"prefix_hit_rate,omitempty"`
}

// Fleet is what a run of a fleet of replicas adds to its results. The run's aggregates are the fleet's; its
// timeline is empty (each replica's is summed up in Replicas); ITL is not pooled over a fleet (its requests'
// TPOT are).
type Fleet struct {
	Router   string    `json:"router"`
	Replicas []Replica `json:"replicas"`
	// Assigned is each request's replica (an index into Replicas), or -1 when admission turned it away.
	Assigned []int       `json:"assigned"`
	Size     []SizePoint `json:"size"` // the fleet over time: every 10 s, at every change and autoscaler evaluation
	// ReplicaHours is the replicas' time from being asked for to being stopped, in hours; Cost is what it cost
	// at each replica's device's hourly price, CostPerHour its mean over the run and CostPerMillionTokens over
	// the output tokens.
	ReplicaHours         float64        `json:"replica_hours"`
	Cost                 float64        `json:"cost_usd"`
	CostPerHour          float64        `json:"cost_usd_per_hour"`
	CostPerMillionTokens float64        `json:"cost_usd_per_million_output_tokens"`
	Rejections           map[string]int `json:"rejections,omitempty"` // requests turned away, by reason
	// Faults are the replicas that died during the run (deploy.Fault), each with what it did.
	Faults []Fault `json:"faults,omitempty"`
}

// Fault is a replica's death in a fleet's run and what it did: when the replica died, when the proxy in front
// marked it down, when it was started again and when it served again (seconds from the start, as planned: the
// run may end before the later ones), the requests lost with it (the client saw an error) and those the proxy
// sent on to another replica (those in it whose response had not begun, and those routed to it before it was
// marked down).
type Fault struct {
	Replica   int     `json:"replica"`
	At        float64 `json:"at_s"`
	Detected  float64 `json:"detected_s"`
	Restarted float64 `json:"restarted_s"`
	Serving   float64 `json:"serving_s"`
	Lost      int     `json:"lost"`
	Resent    int     `json:"resent"`
}

// Replica is one replica of a fleet: what it was, when it served, and its own aggregates.
type Replica struct {
	Model    string  `json:"model"`
	Device   string  `json:"device"`
	Policy   string  `json:"policy"`
	Price    float64 `json:"usd_per_hour"`
	Asked    float64 `json:"asked_s"`   // when it was asked for
	Ready    float64 `json:"ready_s"`   // when it started serving
	Stopped  float64 `json:"stopped_s"` // when it stopped (or the run ended)
	Requests int     `json:"requests"`
	// Aggregates are over the requests it served, with its own KV and swap figures.
	Aggregates Aggregates `json:"aggregates"`
}

// SizePoint is the fleet at a time: its replicas by state, and the requests waiting and running over all.
type SizePoint struct {
	T            float64 `json:"t"`
	Serving      int     `json:"serving"`
	Provisioning int     `json:"provisioning"`
	Draining     int     `json:"draining"`
	Failed       int     `json:"failed,omitempty"` // dead and marked down by the proxy, not yet restarted
	Waiting      int     `json:"waiting"`
	Running      int     `json:"running"`
}

// Quality compares a run's greedy outputs with a reference run of the same requests (Agreement).
type Quality struct {
	Reference      string  `json:"reference"`
	ExactMatch     float64 `json:"exact_match"`     // share of requests with identical outputs
	TokenAgreement float64 `json:"token_agreement"` // share of output positions with the same token
}

// Run is a replay's results.
type Run struct {
	Schema     int           `json:"schema"`
	Meta       Meta          `json:"meta"`
	Aggregates Aggregates    `json:"aggregates"`
	Quality    *Quality      `json:"quality,omitempty"`
	Requests   []Request     `json:"requests"`
	Timeline   []morph.Point `json:"timeline"`
	// Fleet is set for a fleet's run: its replicas, its size over time, its cost.
	Fleet *Fleet `json:"fleet,omitempty"`
	// Steps, when the replay kept them, are every step's work, layer formats and time; Write puts them in
	// steps.jsonl (costmodel.WriteSteps), the input of 'morphlab calibrate --steps'.
	Steps []costmodel.Sample `json:"-"`
}

// Build assembles the results of a replay under meta from the requests added to a (in any order: the rows are
// put in the order of their ids), under the controller c.
func Build(meta Meta, a *Accumulator, c *morph.Controller) *Run {
	a.meta = meta
	slices.SortFunc(a.added, byID)
	r := a.Run(c.Recorder.Timeline, c.Recorder.Peak(), c.Swaps())
	r.Aggregates.AddPositions(c.Recorder.TokensByPosition())
	return r
}

// AddPositions adds output tokens by format and swap position (morph.Recorder.TokensByPosition) to g's: a fleet
// sums its replicas'.
func (g *Aggregates) AddPositions(pos map[quant.Format][]int) {
	for f, n := range pos {
		if g.TokensByPosition == nil {
			g.TokensByPosition = map[string][]int{}
		}
		sum := g.TokensByPosition[f.String()]
		if sum == nil {
			sum = make([]int, len(n))
			g.TokensByPosition[f.String()] = sum
		}
		for i := range min(len(n), len(sum)) {
			sum[i] += n[i]
		}
	}
}

// Accumulator assembles a run's results a request at a time, so that a driver of many requests lets their engine
// results go as they end. It keeps what each request's row and outcome are made of (rows and outcomes are made when
// the results are), and the inter-token gaps it pools for the ITL as a count of each gap: the summary needs every
// gap, but a replay's steps give many tokens the same one.
type Accumulator struct {
	meta   Meta
	layers int
	added  []added
	gaps   map[time.Duration]int // the pooled inter-token gaps: how many of each
	ngaps  int
}

// added is a request as the accumulator keeps it.
type added struct {
	id                                             int
	arrival                                        time.Duration // as asked
	sent, ttft, tpot, e2e, end                     time.Duration // from its timeline
	prompt, maxTokens, output, preemptions, cached int
	finish                                         engine.FinishReason
	err                                            string // a request that did not finish: its error
	mix, tokens                                    []int32
}

// NewAccumulator starts the results of a run of a model of layers decoder layers.
func NewAccumulator(meta Meta, layers int) *Accumulator {
	return &Accumulator{meta: meta, layers: layers}
}

// Grow makes room for n more requests, so that adding them does not copy what was added.
func (a *Accumulator) Grow(n int) { a.added = slices.Grow(a.added, n) }

// Add adds a request, its result and its output tokens by the number of quantized layers they were made with
// (mix); tokens keeps its output token ids, itl pools its inter-token gaps into the run's ITL (Run: a Part has
// none).
func (a *Accumulator) Add(req engine.TimedRequest, res engine.Result, mix []int32, tokens, itl bool) {
	a.AddRequest(loadtest.Request{Arrival: req.Arrival, PromptTokens: len(req.Prompt), MaxTokens: req.MaxTokens}, res, mix, tokens, itl)
}

// AddRequest is Add for a request given by its arrival and lengths, so that a driver need not keep its prompt
// after handing it to the engine.
func (a *Accumulator) AddRequest(req loadtest.Request, res engine.Result, mix []int32, tokens, itl bool) {
	tl := res.Timeline
	r := added{id: int(res.ID), arrival: req.Arrival, sent: tl.Arrival, ttft: tl.TTFT(), tpot: tl.TPOT(), e2e: tl.E2E(), end: tl.Finish,
		prompt: req.PromptTokens, maxTokens: req.MaxTokens, output: len(res.Output), preemptions: res.Preemptions,
		cached: res.CachedTokens, finish: res.Finish, mix: mix}
	if tokens {
		r.tokens = res.Output
	}
	switch res.Finish {
	case engine.FinishStop, engine.FinishLength:
		for j := 1; itl && j < len(tl.Tokens); j++ {
			if a.gaps == nil {
				a.gaps = map[time.Duration]int{}
			}
			a.gaps[tl.Tokens[j]-tl.Tokens[j-1]]++
			a.ngaps++
		}
	default:
		r.err = fmt.Sprint(res.Err)
	}
	a.added = append(a.added, r)
}

// row is the request's row in the results.
func (r *added) row() Request {
	rec := Request{ID: r.id, Arrival: r.arrival.Seconds(), Prompt: r.prompt, MaxTokens: r.maxTokens, Output: r.output,
		TTFT: ms(r.ttft), TPOT: ms(r.tpot), E2EL: ms(r.e2e), Finish: r.finish.String(), Preemptions: r.preemptions,
		CachedTokens: r.cached, Mix: r.mix, Tokens: r.tokens}
	if rec.Prompt > 0 {
		rec.PrefixHitRate = float64(rec.CachedTokens) / float64(rec.Prompt)
	}
	return rec
}

// outcome is the request as loadtest.Compute counts it.
func (r *added) outcome() loadtest.Outcome {
	o := loadtest.Outcome{Sent: r.sent, PromptTokens: r.prompt, OutputTokens: r.output}
	switch r.finish {
	case engine.FinishStop, engine.FinishLength:
		o.Status, o.TTFT, o.Latency = loadtest.Completed, r.ttft, r.e2e
	case engine.FinishRejected:
		o.Status, o.Error = loadtest.Rejected, r.err
	default:
		o.Status, o.Error = loadtest.Failed, r.err
	}
	return o
}

// Requests is the number of requests added.
func (a *Accumulator) Requests() int { return len(a.added) }

// Run returns the results: every request's row and the aggregates over them, with the run's timeline, its peaks
// (morph.Recorder.Peak) and its swap actions.
func (a *Accumulator) Run(timeline []morph.Point, peak morph.Point, swaps int) *Run {
	r := &Run{Schema: Schema, Meta: a.meta, Aggregates: a.aggregate(nil, peak, swaps), Timeline: timeline}
	if a.ngaps > 0 {
		r.Aggregates.ITL = a.itl()
	}
	// The rows are made after the aggregates, whose outcomes are garbage by then.
	r.Requests = make([]Request, len(a.added))
	for i := range a.added {
		r.Requests[i] = a.added[i].row()
	}
	return r
}

// itl summarizes the pooled gaps in milliseconds as loadtest.Summarize summarizes the list of them, from their
// counts, without the list (a run's gaps can be millions): the percentiles are the same, and the mean and
// deviation take the same two passes over the gaps in ascending order, one addition a gap. Summarize's first sum
// is gonum's, vectorized on amd64, which can round the mean and deviation differently in their last digits.
func (a *Accumulator) itl() loadtest.Summary {
	gaps := slices.Sorted(maps.Keys(a.gaps))
	n := float64(a.ngaps)
	sum := 0.0
	for _, g := range gaps {
		v := ms(g)
		for range a.gaps[g] {
			sum += v
		}
	}
	mean := sum / n
	var ss, compensation float64
	for _, g := range gaps {
		d := ms(g) - mean
		for range a.gaps[g] {
			ss += d * d
			compensation += d
		}
	}
	// at is the gap at rank r of the sorted list.
	at := func(r int) float64 {
		for _, g := range gaps {
			if r < a.gaps[g] {
				return ms(g)
			}
			r -= a.gaps[g]
		}
		return ms(gaps[len(gaps)-1])
	}
	// percentile is loadtest.Percentile over the sorted list.
	percentile := func(p float64) float64 {
		h := float64(a.ngaps-1) * p / 100
		lo := math.Floor(h)
		i := int(lo)
		if i+1 >= a.ngaps {
			return at(a.ngaps - 1)
		}
		return at(i) + (h-lo)*(at(i+1)-at(i))
	}
	return loadtest.Summary{N: a.ngaps, Mean: mean, Std: math.Sqrt((ss - compensation*compensation/n) / n), Median: percentile(50),
		P90: percentile(90), P95: percentile(95), P99: percentile(99)}
}

// byID orders an accumulator's requests by id.
func byID(a, b added) int { return a.id - b.id }

// Part is the aggregates over the requests added at the given indices (in the order added), with that part's
// peaks (morph.Recorder.Peak) and swap actions: a fleet's replica's figures over the fleet's rows. No indices
// (nil too) is a part of no requests.
func (a *Accumulator) Part(indices []int, peak morph.Point, swaps int) Aggregates {
	if indices == nil {
		indices = []int{}
	}
	return a.aggregate(indices, peak, swaps)
}

// aggregate computes the aggregates over the requests at indices (nil: all of them).
func (a *Accumulator) aggregate(indices []int, peak morph.Point, swaps int) Aggregates {
	n := len(indices)
	if indices == nil {
		n = len(a.added)
	}
	lt := &loadtest.Result{Requests: make([]loadtest.Request, 0, n), Outcomes: make([]loadtest.Outcome, 0, n)}
	g := Aggregates{TokensByLayers: make([]int, a.layers+1)}
	var first, last time.Duration = -1, 0
	prompts := 0
	for j := range n {
		i := j
		if indices != nil {
			i = indices[j]
		}
		r := &a.added[i]
		o := r.outcome()
		for k, n := range r.mix {
			g.TokensByLayers[k] += int(n)
		}
		g.Preemptions += r.preemptions
		g.PrefixCachedTokens += r.cached
		prompts += r.prompt
		if o.Status != loadtest.Completed || a.meta.SLO.TTFT > 0 && o.TTFT > a.meta.SLO.TTFT {
			g.SLOViolations++
		}
		lt.Requests = append(lt.Requests, loadtest.Request{Arrival: r.arrival, PromptTokens: r.prompt, MaxTokens: r.maxTokens})
		lt.Outcomes = append(lt.Outcomes, o)
		if first < 0 || o.Sent < first {
			first = o.Sent
		}
		last = max(last, r.end)
	}
	if prompts > 0 {
		g.PrefixHitRate = float64(g.PrefixCachedTokens) / float64(prompts)
	}
	if n > 0 {
		lt.Duration = last - first
		g.SLOViolationRate = float64(g.SLOViolations) / float64(n)
	}
	g.Metrics = loadtest.Compute(lt, a.meta.SLO)
	g.PeakKVBlocks, g.PeakKVAttached, g.MaxQuantized = int(peak.KVUsed), int(peak.KVTotal), int(peak.Quantized)
	g.SwapActions = swaps
	total, weighted := 0, 0
	for k, n := range g.TokensByLayers {
		total += n
		weighted += k * n
	}
	if total > 0 {
		g.FullPrecision = float64(g.TokensByLayers[0]) / float64(total)
		g.QuantizedLayerTk = float64(weighted) / float64(total)
	}
	return g
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Write writes results.json, events.jsonl (the engine events and request lifecycle events, without tokens) and
// table.md into dir, creating it.
func (r *Run) Write(dir string, events []engine.Event) error {
	l, err := CreateEventLog(dir)
	if err != nil {
		return err
	}
	for _, ev := range events {
		l.Add(ev)
	}
	if err := l.Close(); err != nil {
		return err
	}
	return r.WriteResults(dir)
}

// WriteResults is Write without events.jsonl: the files of a run whose events an EventLog wrote as they came.
func (r *Run) WriteResults(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeResults(filepath.Join(dir, "results.json"), r); err != nil {
		return err
	}
	if len(r.Steps) > 0 {
		var b bytes.Buffer
		if err := costmodel.WriteSteps(&b, r.Steps); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "steps.jsonl"), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(dir, "table.md"))
	if err != nil {
		return err
	}
	if err := WriteTable(f, []*Run{r}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeResults writes r to path as json.MarshalIndent(r, "", " ") and a newline, its requests and timeline an
// element at a time: a long run's would otherwise be built whole in memory, twice over.
func writeResults(path string, r *Run) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := writeJSON(w, r); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeJSON writes r as json.MarshalIndent(r, "", " ") and a newline: r without its requests and timeline,
// whose nulls (top-level fields, alone on their lines) are replaced by the arrays written an element at a time.
func writeJSON(w io.Writer, r *Run) error {
	head := *r
	head.Requests, head.Timeline = nil, nil
	b, err := json.MarshalIndent(&head, "", " ")
	if err != nil {
		return err
	}
	for _, a := range []struct {
		field string
		write func() error
	}{
		{`"requests": `, func() error { return writeArray(w, r.Requests) }},
		{`"timeline": `, func() error { return writeArray(w, r.Timeline) }},
	} {
		at := bytes.Index(b, []byte("\n "+a.field+"null"))
		if at < 0 {
			return fmt.Errorf("results: no %snull in the results' JSON", a.field)
		}
		at += len("\n " + a.field)
		if _, err := w.Write(b[:at]); err != nil {
			return err
		}
		if err := a.write(); err != nil {
			return err
		}
		b = b[at+len("null"):]
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// writeArray writes xs as the value of a top-level field of json.MarshalIndent(v, "", " ").
func writeArray[T any](w io.Writer, xs []T) error {
	switch {
	case xs == nil:
		_, err := io.WriteString(w, "null")
		return err
	case len(xs) == 0:
		_, err := io.WriteString(w, "[]")
		return err
	}
	sep := "[\n  "
	for _, x := range xs {
		b, err := json.MarshalIndent(x, "  ", " ")
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, sep); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		sep = ",\n  "
	}
	_, err := io.WriteString(w, "\n ]")
	return err
}

// event is an engine event as events.jsonl holds it.
type event struct {
	T      float64 `json:"t"`
	Iter   int     `json:"iter"`
	Kind   string  `json:"kind"`
	Req    int64   `json:"req"`
	Detail string  `json:"detail,omitempty"`
}

// EventLog is an events.jsonl written as the run logs its events, so that a long run need not hold them.
type EventLog struct {
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
	err error // the first write's error
}

// CreateEventLog creates dir and an empty events.jsonl in it.
func CreateEventLog(dir string) (*EventLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	return &EventLog{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// Add appends ev, unless it is a token's event; Close returns the first write's error.
func (l *EventLog) Add(ev engine.Event) {
	if ev.Kind == engine.Token || l.err != nil {
		return
	}
	l.err = l.enc.Encode(event{T: ev.Time.Seconds(), Iter: ev.Iter, Kind: ev.Kind.String(), Req: int64(ev.Req), Detail: ev.Detail})
}

// Close flushes and closes the file, and returns the first error writing it; closing again does nothing.
func (l *EventLog) Close() error {
	if l.f == nil {
		return nil
	}
	err := l.err
	if err == nil {
		err = l.w.Flush()
	}
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}

// Load reads a results.json, of this schema or the one before.
func Load(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if r.Schema != Schema && r.Schema != 1 {
		return nil, fmt.Errorf("%s: results schema %d, want 1 or %d", path, r.Schema, Schema)
	}
	return &r, nil
}

// WriteTable writes runs side by side as a Markdown table: one row per run with the headline figures.
func WriteTable(w io.Writer, runs []*Run) error {
	t := tablewriter.NewTable(w, tablewriter.WithRenderer(renderer.NewMarkdown()),
		tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithHeaderAlignment(tw.AlignLeft))
	t.Header("policy", "requests", "TTFT P50 ms", "TTFT P95 ms", "TTFT P99 ms", "SLO viol.", "TPOT P95 ms",
		"out tok/s", "goodput req/s", "preempt.", "peak KV", "full-prec. tokens", "swaps")
	for _, r := range runs {
		a := r.Aggregates
		peak := fmt.Sprint(a.PeakKVBlocks)
		if r.Meta.KVBlocksFull > 0 {
			peak = fmt.Sprintf("%d (%.0f%%)", a.PeakKVBlocks, 100*float64(a.PeakKVBlocks)/float64(r.Meta.KVBlocksFull))
		}
		if err := t.Append(r.Meta.Policy, fmt.Sprint(a.Requests), f1(a.TTFT.Median), f1(a.TTFT.P95), f1(a.TTFT.P99),
			fmt.Sprintf("%.1f%%", 100*a.SLOViolationRate), f1(a.TPOT.P95), f1(a.OutputThroughput), fmt.Sprintf("%.2f", a.RequestGoodput),
			fmt.Sprint(a.Preemptions), peak, fmt.Sprintf("%.0f%%", 100*a.FullPrecision), fmt.Sprint(a.SwapActions)); err != nil {
			return err
		}
	}
	return t.Render()
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// Against is r's quality against the results.json at reference, a run of the same requests that kept its tokens
// (Agreement). Its errors name the file.
func Against(r *Run, reference string) (*Quality, error) {
	ref, err := Load(reference)
	if err != nil {
		return nil, err
	}
	q := Quality{Reference: reference}
	if q.ExactMatch, q.TokenAgreement, err = Agreement(r, ref); err != nil {
		return nil, fmt.Errorf("%s: %w", reference, err)
	}
	return &q, nil
}

// Agreement compares the greedy outputs of two runs of the same requests (both kept their tokens): the share of
// requests whose outputs are identical, and the share of output positions (up to the shorter output, over the
// longer one's length) where the tokens agree.
func Agreement(a, b *Run) (exact, tokens float64, err error) {
	if len(a.Requests) != len(b.Requests) {
		return 0, 0, fmt.Errorf("results: %d requests against %d", len(a.Requests), len(b.Requests))
	}
	same, agree, positions := 0, 0, 0
	for i := range a.Requests {
		x, y := a.Requests[i].Tokens, b.Requests[i].Tokens
		if a.Requests[i].Output > 0 && x == nil || b.Requests[i].Output > 0 && y == nil {
			return 0, 0, fmt.Errorf("results: request %d has no tokens kept", i)
		}
		n := min(len(x), len(y))
		eq := len(x) == len(y)
		for j := range n {
			if x[j] == y[j] {
				agree++
			} else {
				eq = false
			}
		}
		if eq {
			same++
		}
		positions += max(len(x), len(y))
	}
	if len(a.Requests) == 0 || positions == 0 {
		return 0, 0, fmt.Errorf("results: no output to compare")
	}
	return float64(same) / float64(len(a.Requests)), float64(agree) / float64(positions), nil
}
