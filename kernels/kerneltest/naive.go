package kerneltest

import (
	"fmt"
	"math"
)

// The attention tolerance follows FlashAttention's rule: an implementation may be at most twice as far from the
// exact result as a naive implementation at the same precision is, measured on the same inputs. The naive
// implementation materializes each query's scores in float32, takes a max-subtracted softmax in float32 and sums
// p·v in float32, rounding each stored intermediate with the Options' BaselineRounding when one is set.

// compareAttention checks out against the float64 reference want with the bound RMS error <= 2x the naive
// baseline's RMS error (nMSE <= 4x the baseline's nMSE naive), floored at attentionFloor.
func compareAttention(out []float32, want []float64, naive float64) error {
	bound := 4 * max(naive, attentionFloor)
	if err := compare("out", out, want, bound); err != nil {
		return fmt.Errorf("%w (naive float32 baseline: %.3g; bound: RMS error <= 2x baseline)", err, naive)
	}
	return nil
}

// naiveNMSE is the nMSE of the naive baseline's output; the baseline is the suite's own, so a NaN in it is a bug
// of the suite.
func naiveNMSE(baseline []float32, want []float64) float64 {
	e, err := nmse("naive baseline", baseline, want)
	if err != nil {
		panic("kerneltest: " + err.Error())
	}
	return e
}

func roundWith(r func(float32) float32, x float32) float32 {
	if r == nil {
		return x
	}
	return r(x)
}

// naiveAttend writes into o the attention of query qv over the first n tokens, whose key and value rows are
// keyAt(s) and valueAt(s), computed as a plain float32 program would.
func naiveAttend(o, qv []float32, n int, keyAt, valueAt func(s int) []float32, scale float32, r func(float32) float32) {
	scores := make([]float32, n)
	mx := float32(math.Inf(-1))
	for s := range scores {
		var dot float32
		for d, kv := range keyAt(s) {
			dot += qv[d] * kv
		}
		scores[s] = roundWith(r, scale*dot)
		mx = max(mx, scores[s])
	}
	var sum float32
	for s, x := range scores {
		scores[s] = roundWith(r, float32(math.Exp(float64(x-mx))))
		sum += scores[s]
	}
	for s := range scores {
		scores[s] = roundWith(r, scores[s]/sum)
	}
	acc := make([]float32, len(o))
	for s, p := range scores {
		for d, vv := range valueAt(s) {
			acc[d] += p * vv
		}
	}
	for d, a := range acc {
		o[d] = roundWith(r, a)
	}
}

// naiveCausalAttention is ref.CausalAttention as a naive float32 program.
func naiveCausalAttention(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32,
	r func(float32) float32) {
	kvRow := nKVHeads * headDim
	for t := 0; t < nq; t++ {
		for h := 0; h < nHeads; h++ {
			g := h / (nHeads / nKVHeads)
			keyAt := func(s int) []float32 { return k[s*kvRow+g*headDim:][:headDim] }
			valueAt := func(s int) []float32 { return v[s*kvRow+g*headDim:][:headDim] }
			i := (t*nHeads + h) * headDim
			naiveAttend(out[i:i+headDim], q[i:i+headDim], kvLen-nq+t+1, keyAt, valueAt, scale, r)
		}
	}
}

// naivePagedAttention is ref.PagedAttention of case c as a naive float32 program.
func naivePagedAttention(out []float32, c *pagedCase, r func(float32) float32) {
	kvRow, hd, bs := c.NKVHeads*c.HeadDim, c.HeadDim, c.BlockSize
	for i, L := range c.SeqLens {
		table := c.BlockTables[i*c.MaxBlocksPerSeq:][:c.MaxBlocksPerSeq]
		slot := func(s int) int { return int(table[s/bs])*bs + s%bs }
		n := int(c.QStart[i+1] - c.QStart[i])
		for j := 0; j < n; j++ {
			t := int(c.QStart[i]) + j
			for h := 0; h < c.NHeads; h++ {
				g := h / (c.NHeads / c.NKVHeads)
				keyAt := func(s int) []float32 { return c.KCache[slot(s)*kvRow+g*hd:][:hd] }
				valueAt := func(s int) []float32 { return c.VCache[slot(s)*kvRow+g*hd:][:hd] }
				o := (t*c.NHeads + h) * hd
				naiveAttend(out[o:o+hd], c.Q[o:o+hd], int(L)-n+j+1, keyAt, valueAt, c.Scale, r)
			}
		}
	}
}
