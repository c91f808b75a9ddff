package suite

import (
	"fmt"
	"sort"
)

// Curve is a model's WikiText-2 perplexity after its first K layers in the swap order are quantized to INT4,
// at the K the paper publishes (Table 8, the LIS order; the last point is every layer).
type Curve struct {
	Layers []int
	PPL    []float64
}

// PaperCurves are Table 8's LIS rows (MorphServe, MLSys 2026; ../shared/PAPER.md section 2), by catalog name.
var PaperCurves = map[string]Curve{
	"vicuna-7b-v1.5": {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{6.78, 6.78, 6.78, 6.79, 6.79, 6.84, 6.98}},
	"llama-2-7b":     {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{5.47, 5.47, 5.47, 5.48, 5.49, 5.52, 5.60}},
	"llama-3-8b":     {[]int{0, 1, 2, 4, 8, 16, 32}, []float64{6.14, 6.15, 6.15, 6.18, 6.22, 6.32, 6.53}},
	"codellama-34b":  {[]int{0, 1, 2, 4, 8, 16, 48}, []float64{5.47, 5.47, 5.47, 5.47, 5.48, 5.49, 5.53}},
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
