package suite

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/quant"
)

// Curve is a model's WikiText-2 perplexity after its first K layers in the swap order are quantized, at the K
// where it is known (the last point is every layer).
type Curve struct {
	Layers []int
	PPL    []float64
}

// PaperCurves are Table 8's LIS rows (MorphServe, MLSys 2026; ../shared/PAPER.md section 2), by catalog name:
// INT4 (AWQ, W4A16).
var PaperCurves = map[string]Curve{
	"vicuna-7b-v1.5": {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{6.78, 6.78, 6.78, 6.79, 6.79, 6.84, 6.98}},
	"llama-2-7b":     {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{5.47, 5.47, 5.47, 5.48, 5.49, 5.52, 5.60}},
	"llama-3-8b":     {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{6.14, 6.15, 6.15, 6.18, 6.22, 6.32, 6.53}},
	"codellama-34b":  {[]int{0, 1, 2, 4, 8, 16, 48}, []float64{5.47, 5.47, 5.47, 5.47, 5.48, 5.49, 5.53}},
}

// Published is a published WikiText-2 perplexity of a model at full precision and with every decoder layer
// quantized, and where it was published.
type Published struct {
	Full, Quantized float64
	Source          string
}

// Increase is the relative perplexity increase with every layer quantized, Quantized/Full − 1, and never below 0: a
// quantized model is not taken to be better than its full precision (a published gain is the evaluation's noise).
func (p Published) Increase() float64 { return max(0, p.Quantized/p.Full-1) }

// W8A8Published are the SmoothQuant W8A8 figures of the paper's models (weights int8 per output channel,
// activations int8 per token, as the engine's Int8 layers run): SmoothQuant's evaluation, 40 windows of 2,048
// tokens of the WikiText-2 test set, whose full-precision figures are Table 8's. Vicuna-7B v1.5 and CodeLlama-34B
// have none (Share of them stands in).
var W8A8Published = map[string]Published{
	"llama-2-7b": {5.474, 5.515, "SmoothQuant (Xiao et al., ICML 2023), repository README (github.com/mit-han-lab/smoothquant), " +
		"table \"Perplexity Results on Llama-1/2/3, Falcon, Mistral, and Mixtral with W8A8 Quantization\", Llama-2-7B: FP16 5.474, SQ W8A8 (alpha 0.85) 5.515"},
	"llama-3-8b": {6.138, 6.258, "SmoothQuant (Xiao et al., ICML 2023), repository README (github.com/mit-han-lab/smoothquant), " +
		"table \"Perplexity Results on Llama-1/2/3, Falcon, Mistral, and Mixtral with W8A8 Quantization\", Llama-3-8B: FP16 6.138, SQ W8A8 (alpha 0.85) 6.258"},
}

// W8A16Published are the W8A16 figures of the paper's models (weights int8 per output channel, activations in
// 16-bit floating point). The only one found is of Llama-2-7B's chat variant, with lm-evaluation-harness's word
// perplexity on WikiText-2, lower quantized than at full precision; none for the others (Share of it stands in).
var W8A16Published = map[string]Published{
	"llama-2-7b": {12.212, 12.204, "torchao (github.com/pytorch/ao), torchao/quantization/README.md, Benchmarks table, Llama-2-7b-chat-hf: " +
		"bfloat16 12.212, int8wo (int8 weights per channel, bfloat16 activations) 12.204, lm_eval wikitext word perplexity"},
}

// Share is the assumption for a model without a published figure: its all-layer relative perplexity increase in
// a format is the share of its INT4 one (Table 8's all-layer point) that the models with a published figure have,
// on average (stat.Mean of Increase over the INT4 increase).
func Share(published map[string]Published) float64 {
	var shares []float64
	for _, m := range slices.Sorted(maps.Keys(published)) {
		c := PaperCurves[m]
		shares = append(shares, published[m].Increase()/c.Increase())
	}
	return stat.Mean(shares, nil)
}

// Increase is the curve's all-layer relative perplexity increase.
func (c Curve) Increase() float64 { return c.PPL[len(c.PPL)-1]/c.PPL[0] - 1 }

// Scaled is the curve with the INT4 curve's shape and an all-layer relative increase of increase: the near-additivity
// the paper measures (Table 2: a layer's cost hardly depends on the layers quantized before it) with each layer's
// cost in the other format in the same proportion to its INT4 cost, ppl(k) = ppl(0) + (ppl4(k) − ppl(0))·r,
// r = increase / INT4's all-layer increase.
func (c Curve) Scaled(increase float64) Curve {
	full, last := c.PPL[0], c.PPL[len(c.PPL)-1]
	r := 0.0
	if last > full {
		r = increase * full / (last - full)
	}
	out := Curve{Layers: slices.Clone(c.Layers), PPL: make([]float64, len(c.PPL))}
	for i, p := range c.PPL {
		out.PPL[i] = full + (p-full)*r
	}
	return out
}

// Quality is one model's perplexity curve in one quantized format and where its all-layer figure comes from.
type Quality struct {
	Curve
	Increase float64 // all-layer relative perplexity increase
	Source   string
}

// Kernel names the quantized matmul a format's layers run as in the simulator (the cost model's: W8A8 at the
// INT8 peak, W4A16 at the FP16 one) and whose published quality they take.
var Kernel = map[quant.Format]string{quant.Int4: "W4A16", quant.Int8: "W8A8"}

// Qualities are the paper's models' curves by kernel: W4A16 from Table 8, W8A8 and W8A16 scaled from it (Scaled)
// to the published all-layer figure, or where there is none to Share of the INT4 increase.
var Qualities = qualities()

func qualities() map[string]map[string]Quality {
	out := map[string]map[string]Quality{}
	shares := map[string]float64{"W8A8": Share(W8A8Published), "W8A16": Share(W8A16Published)}
	for m, c := range PaperCurves {
		int4 := c.Increase()
		out[m] = map[string]Quality{"W4A16": {c, int4, "MorphServe Table 8, LIS order (AWQ INT4)"}}
		for kernel, pub := range map[string]map[string]Published{"W8A8": W8A8Published, "W8A16": W8A16Published} {
			q := Quality{}
			if p, ok := pub[m]; ok {
				q.Increase, q.Source = p.Increase(), p.Source
			} else {
				q.Increase = shares[kernel] * int4
				q.Source = fmt.Sprintf("no published figure: assumed %.1f%% of the model's INT4 all-layer increase, the mean share of the models with one (%s)",
					100*shares[kernel], strings.Join(slices.Sorted(maps.Keys(pub)), ", "))
			}
			q.Curve = c.Scaled(q.Increase)
			out[m][kernel] = q
		}
	}
	return out
}

// At is the perplexity with k layers quantized, interpolated linearly between the published points.
func (c Curve) At(k int) float64 {
	i := sort.SearchInts(c.Layers, k)
	switch {
	case i < len(c.Layers) && c.Layers[i] == k:
		return c.PPL[i]
	case i == 0:
		return c.PPL[0]
	case i == len(c.Layers):
		return c.PPL[len(c.PPL)-1]
	}
	f := float64(k-c.Layers[i-1]) / float64(c.Layers[i]-c.Layers[i-1])
	return c.PPL[i-1] + f*(c.PPL[i]-c.PPL[i-1])
}

// Loss is the token-weighted relative perplexity increase of output generated with mix[k] tokens at k quantized
// layers: Σ mix[k]·(ppl(k)/ppl(0) − 1) / Σ mix[k].
func (c Curve) Loss(mix []int) (float64, error) {
	if last := c.Layers[len(c.Layers)-1]; len(mix)-1 != last {
		return 0, fmt.Errorf("suite: a mix over %d layers for a curve over %d", len(mix)-1, last)
	}
	total, sum := 0, 0.0
	for k, n := range mix {
		total += n
		sum += float64(n) * (c.At(k)/c.PPL[0] - 1)
	}
	if total == 0 {
		return 0, nil
	}
	return sum / float64(total), nil
}

// PositionLoss is the token-weighted relative perplexity increase of output generated with several formats at
// once: byPosition[f][p] tokens were made while the layer at swap position p was in format f, and by
// near-additivity each such token costs that layer's step of f's curve, ppl_f(p+1) − ppl_f(p), over ppl(0); total
// is every output token. With one format and its layers a prefix of the order, it is Loss.
func PositionLoss(curves map[quant.Format]Curve, byPosition map[quant.Format][]int, total int) (float64, error) {
	if total == 0 {
		return 0, nil
	}
	sum := 0.0
	for _, f := range slices.Sorted(maps.Keys(byPosition)) {
		c, ok := curves[f]
		if !ok {
			return 0, fmt.Errorf("suite: no quality curve for %v layers", f)
		}
		n := byPosition[f]
		if last := c.Layers[len(c.Layers)-1]; len(n) != last {
			return 0, fmt.Errorf("suite: %v tokens over %d positions for a curve over %d layers", f, len(n), last)
		}
		for p, tokens := range n {
			sum += float64(tokens) * (c.At(p+1) - c.At(p)) / c.PPL[0]
		}
	}
	return sum / float64(total), nil
}

// quality is a run's token-weighted quality loss on a paper model under a policy (NaN for a model without
// curves): its format's curve over the count of quantized layers each token was made with, or, for a policy with
// several formats, PositionLoss over the tokens by swap position.
func quality(model string, spec morph.Policy, run *results.Run) (float64, error) {
	qs, ok := Qualities[model]
	if !ok {
		return math.NaN(), nil
	}
	needs := spec.Needs()
	if len(needs) <= 1 {
		f := quant.Int4 // fp16: no layer is quantized, any curve gives 0
		if len(needs) == 1 {
			f = needs[0]
		}
		q, ok := qs[Kernel[f]]
		if !ok {
			return math.NaN(), nil
		}
		return q.Loss(run.Aggregates.TokensByLayers)
	}
	curves, byPos := map[quant.Format]Curve{}, map[quant.Format][]int{}
	for _, f := range needs {
		q, ok := qs[Kernel[f]]
		if !ok {
			return math.NaN(), nil
		}
		curves[f], byPos[f] = q.Curve, run.Aggregates.TokensByPosition[f.String()]
	}
	total := 0
	for _, n := range run.Aggregates.TokensByLayers {
		total += n
	}
	return PositionLoss(curves, byPos, total)
}
