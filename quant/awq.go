package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// AWQConfig tunes AWQ. The zero value means the defaults.
type AWQConfig struct {
	Group      int     // Int4 group size (DefaultGroup when 0)
	Grid       int     // α grid points, α = i/Grid for i in [0, Grid) (20 when 0)
	ClipGrid   int     // clipping grid: shrink ratios 1 - i/ClipGrid (20 when 0)
	MaxShrink  float64 // smallest ratio tried is 1 - MaxShrink (0.5 when 0)
	ClipTokens int     // calibration tokens the clipping search uses, evenly strided (512 when 0)
	// Stats, when set, gives the per-channel mean |x| that the scales are made from (a running accumulator over
	// more tokens than x holds); otherwise x's own mean |x| is used. x is always what the errors are measured on.
	Stats *Stats
}

// AWQResult is the outcome of AWQ for layers that share an input.
type AWQResult struct {
	// Scales are the per-input-channel scales s [K]. Weights holds Int4(W·diag(s)); the layer's input must be
	// divided by s (FoldIntoNorm on the preceding RMSNorm weight) for the layer to compute X·Wᵀ.
	Scales []float32
	Alpha  float64 // the α of the chosen s = mean|x|^α
	// Err is Σ over layers of ||X·Wᵀ - (X/s)·Q(W·diag(s))ᵀ||² on the calibration tokens, before (ErrScaled) and
	// after the clipping search (Err); at α = 0 the scales are 1, so ErrScaled <= the RTN error on these tokens.
	ErrScaled, Err float64
	Weights        []*Matrix // one Int4 matrix per layer, in order
}

// AWQ quantizes layers (all reading the same input, K = k) to Int4 the activation-aware way (Lin et al., AWQ):
//
//  1. Scale search: s = mean|X_c|^α, normalized to sqrt(max(s)·min(s)) = 1, for α on a grid over [0, 1). Channels
//     with large activations get their weights scaled up before rounding, so those weights lose less relative
//     precision. Each candidate is scored by the layer output error Σ ||X·Wᵀ - X·(Q(W·diag(s))·diag(1/s))ᵀ||²:
//     the 1/s is folded back into the dequantized weights for scoring, which equals feeding X/s to Q(W·diag(s)).
//  2. Clipping search: for each output row and group of W·diag(s), the range is clipped to ±ratio·max|w| for
//     shrink ratios 1 - i/ClipGrid, keeping the ratio that minimises that group's own output error over the
//     (strided) calibration tokens (X/s restricted to the group's channels).
//
// x is [tokens, k] calibration activations; cfg may be nil.
func AWQ(x []float32, tokens, k int, layers []Linear, cfg *AWQConfig) (*AWQResult, error) {
	var c AWQConfig
	if cfg != nil {
		c = *cfg
	}
	c.Group = cmp0(c.Group, DefaultGroup)
	c.Grid = cmp0(c.Grid, 20)
	c.ClipGrid = cmp0(c.ClipGrid, 20)
	c.ClipTokens = cmp0(c.ClipTokens, 512)
	if c.MaxShrink == 0 {
		c.MaxShrink = 0.5
	}
	if tokens <= 0 || len(x) != tokens*k {
		return nil, fmt.Errorf("quant: AWQ: len(x)=%d with tokens=%d, want tokens*k=%d, tokens > 0", len(x), tokens, tokens*k)
	}
	if err := checkShape(Int4, 1, k, c.Group); err != nil {
		return nil, err
	}
	if err := checkLinears("AWQ", k, layers); err != nil {
		return nil, err
	}
	stats := c.Stats
	if stats == nil {
		stats = NewStats(k)
		stats.Add(x)
	} else if stats.K != k {
		return nil, fmt.Errorf("quant: AWQ: Stats.K=%d, want k=%d", stats.K, k)
	}
	meanAbs := stats.MeanAbs()

	ref := make([][]float32, len(layers))
	for i, l := range layers {
		ref[i] = matmulT(x, l.W, tokens, l.N, k)
	}
	res := &AWQResult{ErrScaled: math.Inf(1)}
	for gi := range c.Grid {
		alpha := float64(gi) / float64(c.Grid)
		s := awqScales(meanAbs, alpha)
		var e float64
		for i, l := range layers {
			m := &Matrix{Format: Int4, Rows: l.N, Cols: k, Group: c.Group, Packed: make([]byte, l.N*k/2),
				Scales: make([]float32, l.N*k/c.Group), Zeros: make([]uint8, l.N*k/c.Group)}
			quantizeInt4(m, scaleColumns(l.W, s, false), nil)
			wq := scaleColumns(m.Dequantize(), s, true)
			e += sqErr(ref[i], matmulT(x, wq, tokens, l.N, k))
		}
		if e < res.ErrScaled {
			res.ErrScaled, res.Alpha, res.Scales = e, alpha, s
		}
	}

	xs := sampleTokens(scaleColumns(x, res.Scales, true), tokens, k, c.ClipTokens)
	for i, l := range layers {
		ws := scaleColumns(l.W, res.Scales, false)
		m := &Matrix{Format: Int4, Rows: l.N, Cols: k, Group: c.Group, Packed: make([]byte, l.N*k/2),
			Scales: make([]float32, l.N*k/c.Group), Zeros: make([]uint8, l.N*k/c.Group)}
		quantizeInt4(m, ws, clipBounds(ws, l.N, k, xs, c))
		res.Weights = append(res.Weights, m)
		wq := scaleColumns(m.Dequantize(), res.Scales, true)
		res.Err += sqErr(ref[i], matmulT(x, wq, tokens, l.N, k))
	}
	return res, nil
}

// awqScales is mean|x|^α, kept away from 0 and normalized so that sqrt(max·min) = 1 (AWQ's normalization).
func awqScales(meanAbs []float32, alpha float64) []float32 {
	s := powScales(meanAbs, alpha)
	lo, hi := float32(math.Inf(1)), float32(0)
	for c := range s {
		s[c] = max(s[c], 1e-4)
		lo, hi = min(lo, s[c]), max(hi, s[c])
	}
	norm := float32(math.Sqrt(float64(lo) * float64(hi)))
	for c := range s {
		s[c] /= norm
	}
	return s
}

// sampleTokens returns at most limit rows of x [tokens, k], evenly strided.
func sampleTokens(x []float32, tokens, k, limit int) []float32 {
	if tokens <= limit {
		return x
	}
	out := make([]float32, 0, limit*k)
	for i := range limit {
		t := i * tokens / limit
		out = append(out, x[t*k:(t+1)*k]...)
	}
	return out
}

// clipBounds runs the clipping search on w [n, k] with inputs xs [t, k] and returns one bound per group.
func clipBounds(w []float32, n, k int, xs []float32, c AWQConfig) []float64 {
	g, groups, t := c.Group, k/c.Group, len(xs)/k
	bounds := make([]float64, n*groups)
	steps := int(c.MaxShrink * float64(c.ClipGrid))
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			q := make([]uint8, g)
			deq := make([]float32, g)
			org := make([]float64, t)
			for j := lo; j < hi; j++ {
				for gi := range groups {
					grp := w[j*k+gi*g:][:g]
					var amax float64
					for _, v := range grp {
						amax = math.Max(amax, math.Abs(float64(v)))
					}
					for ti := range t {
						org[ti] = dot(xs[ti*k+gi*g:][:g], grp)
					}
					best, bestErr := math.Inf(1), math.Inf(1)
					for i := range steps {
						bound := amax * (1 - float64(i)/float64(c.ClipGrid))
						s, z := int4Group(grp, bound, q)
						for p := range deq {
							deq[p] = float32(int(q[p])-int(z)) * s
						}
						var e float64
						for ti := range t {
							d := dot(xs[ti*k+gi*g:][:g], deq) - org[ti]
							e += d * d
						}
						if e < bestErr {
							best, bestErr = bound, e
						}
					}
					bounds[j*groups+gi] = best
				}
			}
		}(wk*n/workers, (wk+1)*n/workers)
	}
	wg.Wait()
	return bounds
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
