// Package results is the output of a trace replay, the same for `morphlab run` (the real engine) and `morphlab
// simulate` (the sim executor): results.json holds what was run (model, policy and its parameters, memory, trace
// and its transforms, SLO), the aggregates with vLLM's benchmark definitions (through experiments/loadtest's
// Compute), the TTFT-SLO violation rate, preemptions, KV blocks against the full-precision pool, the share of
// output tokens generated with each count of quantized layers, the prompt tokens the prefix cache held (in all and
// per request: vLLM's prefix cache hits over queries, at each request's first scheduling), one record per request,
// and the timeline; events.jsonl holds the engine's lifecycle and control events (swaps, KV regions, the
// controller's decisions) without the token events; table.md is the aggregates as a Markdown table. Every report
// and plot reads these.
package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/loadtest"
)

// Schema is the version of results.json.
const Schema = 1

// Meta says what was run.
type Meta struct {
	Command      string          `json:"command"`  // run or simulate
	Executor     string          `json:"executor"` // cpu or sim
	Clock        string          `json:"clock"`    // wall, cpu (virtual, advanced by each step's CPU time) or virtual
	Model        string          `json:"model"`
	Hardware     string          `json:"hardware,omitempty"` // simulate: the GPU
	Policy       string          `json:"policy"`
	Params       json.RawMessage `json:"params,omitempty"` // a morphing policy's parameters (morph.Params)
	Memory       int64           `json:"memory_bytes"`
	KVBlocksFull int             `json:"kv_blocks_full_precision"` // the pool at full precision
	BlockSize    int             `json:"block_size"`
	Trace        TraceInfo       `json:"trace"`
	SLO          loadtest.SLO    `json:"slo"`
}

// TraceInfo names the trace replayed and the transforms applied to it.
type TraceInfo struct {
	Source     string   `json:"source"`
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
	Mix []int `json:"tokens_by_quantized_layers"`
	// Tokens are the output token ids, kept when asked for (quality comparisons).
	Tokens []int32 `json:"tokens,omitempty"`
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
	// PrefixCachedTokens is the prompt tokens found in the prefix cache over all requests (each when first
	// scheduled), and PrefixHitRate their share of all prompt tokens (both left out at 0).
	PrefixCachedTokens int     `json:"prefix_cached_tokens,omitempty"`
	PrefixHitRate      float64 `json:"prefix_hit_rate,omitempty"`
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
	// Steps, when the replay kept them, are every step's work, layer formats and time; Write puts them in
	// steps.jsonl (costmodel.WriteSteps), the input of 'morphlab calibrate --steps'.
	Steps []costmodel.Sample `json:"-"`
}

// Build assembles the results of replaying reqs, whose results are res, under the controller c; tokens keeps the
// output token ids.
func Build(meta Meta, reqs []engine.TimedRequest, res []engine.Result, c *morph.Controller, tokens bool) *Run {
	r := &Run{Schema: Schema, Meta: meta, Timeline: c.Recorder.Timeline}
	lt := &loadtest.Result{}
	var first, last time.Duration = -1, 0
	prompts := 0
	r.Aggregates.TokensByLayers = make([]int, c.Recorder.Layers()+1)
	for i, res := range res {
		tl := res.Timeline
		rec := Request{ID: int(res.ID), Arrival: reqs[i].Arrival.Seconds(), Prompt: len(reqs[i].Prompt),
			MaxTokens: reqs[i].MaxTokens, Output: len(res.Output), TTFT: ms(tl.TTFT()), TPOT: ms(tl.TPOT()),
			E2EL: ms(tl.E2E()), Finish: res.Finish.String(), Preemptions: res.Preemptions, Mix: c.Recorder.Mix(res.ID)}
		if tokens {
			rec.Tokens = res.Output
		}
		if rec.CachedTokens = res.CachedTokens; rec.Prompt > 0 {
			rec.PrefixHitRate = float64(rec.CachedTokens) / float64(rec.Prompt)
		}
		prompts += rec.Prompt
		r.Aggregates.PrefixCachedTokens += rec.CachedTokens
		r.Requests = append(r.Requests, rec)
		for k, n := range rec.Mix {
			r.Aggregates.TokensByLayers[k] += n
		}
		r.Aggregates.Preemptions += res.Preemptions
		o := loadtest.Outcome{Sent: tl.Arrival, PromptTokens: len(reqs[i].Prompt), OutputTokens: len(res.Output)}
		switch res.Finish {
		case engine.FinishStop, engine.FinishLength:
			o.Status = loadtest.Completed
			o.TTFT, o.Latency = tl.TTFT(), tl.E2E()
			for j := 1; j < len(tl.Tokens); j++ {
				o.ITL = append(o.ITL, tl.Tokens[j]-tl.Tokens[j-1])
			}
			if meta.SLO.TTFT > 0 && tl.TTFT() > meta.SLO.TTFT {
				r.Aggregates.SLOViolations++
			}
		case engine.FinishRejected:
			o.Status, o.Error = loadtest.Rejected, fmt.Sprint(res.Err)
			r.Aggregates.SLOViolations++
		default:
			o.Status, o.Error = loadtest.Failed, fmt.Sprint(res.Err)
			r.Aggregates.SLOViolations++
		}
		lt.Requests = append(lt.Requests, loadtest.Request{Arrival: reqs[i].Arrival, PromptTokens: len(reqs[i].Prompt), MaxTokens: reqs[i].MaxTokens})
		lt.Outcomes = append(lt.Outcomes, o)
		if first < 0 || tl.Arrival < first {
			first = tl.Arrival
		}
		last = max(last, tl.Finish)
	}
	if prompts > 0 {
		r.Aggregates.PrefixHitRate = float64(r.Aggregates.PrefixCachedTokens) / float64(prompts)
	}
	if len(res) > 0 {
		lt.Duration = last - first
		r.Aggregates.SLOViolationRate = float64(r.Aggregates.SLOViolations) / float64(len(res))
	}
	r.Aggregates.Metrics = loadtest.Compute(lt, meta.SLO)
	for _, p := range r.Timeline {
		r.Aggregates.PeakKVBlocks = max(r.Aggregates.PeakKVBlocks, p.KVUsed)
		r.Aggregates.PeakKVAttached = max(r.Aggregates.PeakKVAttached, p.KVTotal)
		r.Aggregates.MaxQuantized = max(r.Aggregates.MaxQuantized, p.Quantized)
	}
	r.Aggregates.SwapActions = c.Swaps()
	total, weighted := 0, 0
	for k, n := range r.Aggregates.TokensByLayers {
		total += n
		weighted += k * n
	}
	if total > 0 {
		r.Aggregates.FullPrecision = float64(r.Aggregates.TokensByLayers[0]) / float64(total)
		r.Aggregates.QuantizedLayerTk = float64(weighted) / float64(total)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Write writes results.json, events.jsonl (the engine events and request lifecycle events, without tokens) and
// table.md into dir, creating it.
func (r *Run) Write(dir string, events []engine.Event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeEvents(filepath.Join(dir, "events.jsonl"), events); err != nil {
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

// event is an engine event as events.jsonl holds it.
type event struct {
	T      float64 `json:"t"`
	Iter   int     `json:"iter"`
	Kind   string  `json:"kind"`
	Req    int64   `json:"req"`
	Detail string  `json:"detail,omitempty"`
}

func writeEvents(path string, events []engine.Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, ev := range events {
		if ev.Kind == engine.Token {
			continue
		}
		if err := enc.Encode(event{T: ev.Time.Seconds(), Iter: ev.Iter, Kind: ev.Kind.String(), Req: int64(ev.Req), Detail: ev.Detail}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Load reads a results.json.
func Load(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%s: results schema %d, want %d", path, r.Schema, Schema)
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
