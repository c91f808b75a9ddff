package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Stats accumulates per-input-channel statistics of a layer's input activations over calibration tokens: the
// engine or the profiler feeds it [tokens, K] batches as they run, and AWQ (mean |x|) and SmoothQuant (max |x|)
// read it. It is not safe for concurrent use.
type Stats struct {
	K      int // channels (the layer's input size)
	Tokens int // tokens seen so far

	sumAbs []float64
	maxAbs []float32
}

// NewStats returns an empty accumulator for k channels.
func NewStats(k int) *Stats {
	if k <= 0 {
		panic(fmt.Sprintf("quant: NewStats: k=%d, want > 0", k))
	}
	return &Stats{K: k, sumAbs: make([]float64, k), maxAbs: make([]float32, k)}
}

// Add accumulates x, [tokens, K] row-major. It panics unless len(x) is a multiple of K.
func (s *Stats) Add(x []float32) {
	if len(x)%s.K != 0 {
		panic(fmt.Sprintf("quant: Stats.Add: len(x)=%d, want a multiple of K=%d", len(x), s.K))
	}
	for t := 0; t < len(x); t += s.K {
		for c, v := range x[t : t+s.K] {
			a := abs32(v)
			s.sumAbs[c] += float64(a)
			s.maxAbs[c] = max(s.maxAbs[c], a)
		}
	}
	s.Tokens += len(x) / s.K
}

// MeanAbs returns mean |x_c| per channel (zeros before any Add).
func (s *Stats) MeanAbs() []float32 {
	out := make([]float32, s.K)
	if s.Tokens == 0 {
		return out
	}
	for c, v := range s.sumAbs {
		out[c] = float32(v / float64(s.Tokens))
	}
	return out
}

// MaxAbs returns max |x_c| per channel.
func (s *Stats) MaxAbs() []float32 {
	return append([]float32(nil), s.maxAbs...)
}

// Linear is one weight W [N, K] (out, in) of a layer; the AWQ and SmoothQuant calls take every linear that reads
// the same input (for example q, k and v after one RMSNorm), since they must share one per-channel scale.
type Linear struct {
	W []float32
	N int
}

func checkLinears(op string, k int, layers []Linear) error {
	if len(layers) == 0 {
		return fmt.Errorf("quant: %s: no layers", op)
	}
	for i, l := range layers {
		if l.N <= 0 || len(l.W) != l.N*k {
			return fmt.Errorf("quant: %s: layer %d: len(W)=%d with N=%d, want N*k=%d, N > 0", op, i, len(l.W), l.N, l.N*k)
		}
	}
	return nil
}

// scaleColumns returns W·diag(s) (inverse false) or W·diag(1/s) (inverse true) for w [n, len(s)].
func scaleColumns(w, s []float32, inverse bool) []float32 {
	out := make([]float32, len(w))
	k := len(s)
	for i, v := range w {
		if inverse {
			out[i] = v / s[i%k]
		} else {
			out[i] = v * s[i%k]
		}
	}
	return out
}

// FoldIntoNorm divides the weight of the RMSNorm that feeds a smoothed or AWQ-scaled layer by s: norm[c] /= s[c].
// After it the norm's output is X/s, which is what the layer's W·diag(s) weights expect, so the layer computes
// (X/s)·(W·diag(s))ᵀ = X·Wᵀ up to quantization.
func FoldIntoNorm(norm, s []float32) {
	if len(norm) != len(s) {
		panic(fmt.Sprintf("quant: FoldIntoNorm: len(norm)=%d, want len(s)=%d", len(norm), len(s)))
	}
	for c := range norm {
		norm[c] /= s[c]
	}
}

// matmulT returns X·Wᵀ for x [t, k] and w [n, k], [t, n]: the calibration-sized products of the AWQ search, split
// over rows of w across GOMAXPROCS goroutines, each dot accumulated in float64.
func matmulT(x, w []float32, t, n, k int) []float32 {
	out := make([]float32, t*n)
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for j := lo; j < hi; j++ {
				wr := w[j*k : (j+1)*k]
				for i := range t {
					out[i*n+j] = float32(dot(x[i*k:(i+1)*k], wr))
				}
			}
		}(wk*n/workers, (wk+1)*n/workers)
	}
	wg.Wait()
	return out
}

// dot is Σ a[i]·b[i] in float64, four partial sums.
func dot(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return s0 + s1 + s2 + s3
}

// sqErr is Σ (a-b)².
func sqErr(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return s
}

func powScales(base []float32, alpha float64) []float32 {
	s := make([]float32, len(base))
	for c, v := range base {
		s[c] = float32(math.Pow(float64(v), alpha))
	}
	return s
}
