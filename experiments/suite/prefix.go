package suite

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// The prefix-caching study: MorphServe's question asked again with vLLM's automatic prefix caching, which is on
// in every run of the suite. On each workload whose requests say which prefixes they share (the Mooncake
// conversation trace, or a user's trace with Mooncake's hash ids, made into shared prompt tokens by
// deploy.Requests), fp16 and morph:default run once more with the cache off, so that morph is compared against
// fp16 with the cache (what a vLLM user runs) as well as without it (the paper's baseline engine).

// prefixPolicies are the policies the study runs with the cache off.
var prefixPolicies = []string{"fp16", "morph:default"}

// PrefixRun is one run of the prefix-caching study.
type PrefixRun struct {
	Setup    string `json:"setup"`
	Workload string `json:"workload"`
	Policy   string `json:"policy"`
	Caching  bool   `json:"prefix_caching"`
	// Unbounded is the prompt tokens' hit rate a cache that never evicts would have with the requests served one
	// at a time, read off the trace's hash ids (deploy.UnboundedCacheHits): the bound of the run's hit rate.
	Unbounded float64 `json:"unbounded_hit_rate"`
	// Loss is the quality loss: the paper curves' token-weighted perplexity increase in the sim, the share of
	// output tokens that differ from fp16's greedy ones on the CPU engine (NaN without one).
	Loss float64      `json:"quality_loss"`
	Run  *results.Run `json:"-"`
}

// sharesPrefixes reports whether a workload's requests say which prefixes they share (hash ids).
func sharesPrefixes(w Workload) bool { return w.Trace != nil && w.Trace.HashBlock > 0 }

// runPrefix runs the study's cache-off runs on every setup and workload that shares prefixes, beside the suite's
// cells (whose cache is on), and writes them under <setup>/<workload>/<policy>_no-prefix-caching.
func (r *Report) runPrefix(ctx context.Context, wls []Workload, step func()) error {
	for _, w := range wls {
		if !sharesPrefixes(w) {
			continue
		}
		for _, s := range r.Options.Setups {
			if err := r.runPrefixSetup(ctx, s, w, step); err != nil {
				return err
			}
		}
	}
	return nil
}

// runPrefixSetup runs the study's cache-off runs of one setup and workload.
func (r *Report) runPrefixSetup(ctx context.Context, s Setup, w Workload, step func()) error {
	t, err := trace.Clip(w.Trace, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput})
	if err != nil {
		return err
	}
	unbounded, err := unboundedRate(s.Model, t, deploy.DefaultBlockSize)
	if err != nil {
		return err
	}
	for _, p := range r.prefixPolicies() {
		spec, err := morph.Parse(p)
		if err != nil {
			return err
		}
		on := r.Cell(s.Name, w.Name, spec.String())
		d := s.Deployment(spec)
		d.KV.NoPrefixCaching = true
		off, err := simulate(ctx, s, d, t)
		if err != nil {
			return fmt.Errorf("%s, %s, %s without prefix caching: %w", s.Name, w.Name, spec, err)
		}
		if err := off.Run.Write(filepath.Join(r.Options.Out, s.Name, w.Name, DirName(spec.String())+"_no-prefix-caching"), off.events); err != nil {
			return err
		}
		off.events = nil
		r.Prefix = append(r.Prefix,
			&PrefixRun{Setup: s.Name, Workload: w.Name, Policy: spec.String(), Caching: false, Unbounded: unbounded, Loss: off.Loss, Run: off.Run},
			&PrefixRun{Setup: s.Name, Workload: w.Name, Policy: spec.String(), Caching: true, Unbounded: unbounded, Loss: on.Loss, Run: on.Run})
		step()
	}
	return nil
}

// prefixPolicies are the study's policies among those the suite runs.
func (r *Report) prefixPolicies() []string {
	var out []string
	for _, p := range prefixPolicies {
		if slices.Contains(r.Options.Policies, p) {
			out = append(out, p)
		}
	}
	return out
}

// unboundedRate is the hit rate of t's prompt tokens in a cache of blocks of blockSize tokens that never evicts,
// for model (its context clips the prompts as a replay does).
func unboundedRate(model string, t *trace.Trace, blockSize int) (float64, error) {
	cfg, err := deploy.ModelConfig(model)
	if err != nil {
		return 0, err
	}
	if t, err = trace.Clip(t, trace.Limits{Context: cfg.SeqLen}); err != nil {
		return 0, err
	}
	return UnboundedRate(t, blockSize), nil
}

// UnboundedRate is the share of t's prompt tokens that deploy.UnboundedCacheHits finds cached.
func UnboundedRate(t *trace.Trace, blockSize int) float64 {
	hits, prompts := 0, 0
	for i, h := range deploy.UnboundedCacheHits(t, blockSize) {
		hits += h
		prompts += t.Requests[i].PromptTokens
	}
	if prompts == 0 {
		return 0
	}
	return float64(hits) / float64(prompts)
}

// prefixRun returns the study's run of a setup, workload, policy and cache setting, or nil.
func prefixRun(runs []*PrefixRun, setup, workload, policy string, caching bool) *PrefixRun {
	for _, p := range runs {
		if p.Setup == setup && p.Workload == workload && p.Policy == policy && p.Caching == caching {
			return p
		}
	}
	return nil
}

// PrefixComparison is morph:default against fp16 with the prefix cache (the baseline) and without it, pooled over
// the study's setups.
type PrefixComparison struct {
	// ViolationCut is 1 - morph:default's TTFT-SLO violations with the cache / fp16's with the cache; CutNoCache
	// is the same with neither caching, and CacheCut fp16's with the cache against fp16's without.
	ViolationCut, CutNoCache, CacheCut float64
	// P95Ratio is fp16's P95 TTFT with the cache over morph:default's, the geometric mean over the setups.
	P95Ratio float64
}

// ComparePrefix pools the study's runs.
func ComparePrefix(runs []*PrefixRun) PrefixComparison {
	viol := map[[2]any]float64{}
	var logs []float64
	for _, p := range runs {
		viol[[2]any{p.Policy, p.Caching}] += float64(p.Run.Aggregates.SLOViolations)
		if p.Policy == "morph:default" && p.Caching {
			if f := prefixRun(runs, p.Setup, p.Workload, "fp16", true); f != nil && p.Run.Aggregates.TTFT.P95 > 0 {
				logs = append(logs, math.Log(f.Run.Aggregates.TTFT.P95/p.Run.Aggregates.TTFT.P95))
			}
		}
	}
	cut := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return 1 - a/b
	}
	c := PrefixComparison{ViolationCut: cut(viol[[2]any{"morph:default", true}], viol[[2]any{"fp16", true}]),
		CutNoCache: cut(viol[[2]any{"morph:default", false}], viol[[2]any{"fp16", false}]),
		CacheCut:   cut(viol[[2]any{"fp16", true}], viol[[2]any{"fp16", false}]), P95Ratio: math.NaN()}
	if len(logs) > 0 {
		c.P95Ratio = math.Exp(stat.Mean(logs, nil))
	}
	return c
}

// WritePrefixTable writes the study's runs, each setup's fp16 with the cache marked as the baseline.
func WritePrefixTable(w io.Writer, runs []*PrefixRun) error {
	t := newTable(w, "setup", "policy", "prefix cache", "SLO viol.", "P95 TTFT ms", "prefix hit rate (unbounded)", "full-prec. tokens", "quality loss")
	for _, p := range runs {
		cache := "off"
		if p.Caching {
			cache = "on"
			if p.Policy == "fp16" {
				cache = "on (baseline)"
			}
		}
		a := p.Run.Aggregates
		if err := t.Append(p.Setup, p.Policy, cache, pct(a.SLOViolationRate), f1(a.TTFT.P95),
			fmt.Sprintf("%s (%s)", pct(a.PrefixHitRate), pct(p.Unbounded)), pct(a.FullPrecision), pct3(p.Loss)); err != nil {
			return err
		}
	}
	return t.Render()
}

// writePrefix writes the study's section of summary.md, a table per workload.
func (r *Report) writePrefix(b io.Writer, h Headline) error {
	if len(r.Prefix) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\n## Prefix caching on and off\n\n")
	fmt.Fprintf(b, "Every run of the suite caches prefixes, as vLLM does by default, and the prompts share the tokens the "+
		"trace's hash ids say they share. Here fp16 and morph:default run once more without the cache. The hit rate is "+
		"the prompt tokens found cached; in brackets, what a cache that never evicts would find with the requests served "+
		"one at a time (read off the hash ids). Files: `<setup>/<workload>/<policy>_no-prefix-caching/`.\n")
	var workloads []string
	for _, p := range r.Prefix {
		if !slices.Contains(workloads, p.Workload) {
			workloads = append(workloads, p.Workload)
		}
	}
	for _, w := range workloads {
		var runs []*PrefixRun
		for _, p := range r.Prefix {
			if p.Workload == w {
				runs = append(runs, p)
			}
		}
		fmt.Fprintf(b, "\n### %s\n\n", w)
		if err := WritePrefixTable(b, runs); err != nil {
			return err
		}
		fmt.Fprintf(b, "\nPooled over the setups: %s\n", ComparePrefix(runs))
	}
	fmt.Fprintf(b, "\nThe headline counts these workloads with the cache on. With it off there (the runs above), its pooled "+
		"violation cut would be %s instead of %s.\n", pct(r.cutWithPrefixOff()), pct(h.ViolationCut))
	return nil
}

// String says what the comparison found, in a sentence or two.
func (c PrefixComparison) String() string {
	var s string
	if math.IsNaN(c.ViolationCut) {
		s = "fp16 with the cache (the baseline) misses the SLO for no request: morph:default has no violation to cut"
	} else {
		s = fmt.Sprintf("morph:default cuts the TTFT-SLO violations of fp16 with the cache (the baseline) by %s", pct(c.ViolationCut))
	}
	return s + fmt.Sprintf("; those of fp16 without the cache by %s, and the cache alone cuts fp16's by %s. "+
		"P95 TTFT fp16 with the cache / morph:default with it: %s.", pct(c.CutNoCache), pct(c.CacheCut), FormatRatio(c.P95Ratio))
}

// cutWithPrefixOff is the headline's pooled violation cut with the study's cells run without the cache.
func (r *Report) cutWithPrefixOff() float64 {
	cut, _ := r.pooledCut(func(c *Cell) int {
		if off := prefixRun(r.Prefix, c.Setup.Name, c.Workload, c.Policy, false); off != nil {
			return off.Run.Aggregates.SLOViolations
		}
		return c.Run.Aggregates.SLOViolations
	})
	return cut
}
