package model

import (
	"fmt"
	"slices"

	"github.com/morphlab/morphlab/quant"
)

// Int4Group returns the Int4 group size for rows of k weights when group is asked for: the smallest even divisor
// of k that is at least min(group, k). That is group itself when it divides k (the usual case: 128 | 4096), a
// wider group otherwise (stories260K's hidden width 172 gets 86 for 32 or 64, and 172 for 128), and the whole row
// when the row is narrower than group (dim 64 at 128 gets 64). It fails for an odd k or a group that is not a
// positive even number.
func Int4Group(k, group int) (int, error) {
	if group <= 0 || group%2 != 0 {
		return 0, fmt.Errorf("int4 group %d, want a positive even number", group)
	}
	for g := min(group, k); g <= k; g++ {
		if g%2 == 0 && k%g == 0 {
			return g, nil
		}
	}
	return 0, fmt.Errorf("int4: row of %d weights has no even group size", k)
}

// AddInt4Variant prepares every layer's Int4 variant by rounding to nearest, with the group size of Int4Group
// (group for Dim-wide inputs when it divides Dim; W2's HiddenDim-wide input may get a larger one). It replaces an
// Int4 variant that exists, as AddAWQVariant does: the two are the RTN and activation-aware versions of one slot.
func (m *Model) AddInt4Variant(group int) error {
	variants := make([]*LayerWeights, len(m.Layers))
	for l, layer := range m.Layers {
		v, err := quantizeLayer(layer.Dequantized(), quant.Int4, group)
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
		variants[l] = v
	}
	for l, v := range variants {
		m.Layers[l].Variants[quant.Int4] = v
	}
	return nil
}

// AddAWQVariant prepares every layer's Int4 variant with AWQ (quant.AWQ), calibrated on the token sequences calib
// (each cut to the context), and installs it in the Int4 slot, replacing an RTN one. Group sizes are Int4Group's.
//
// The sequences run once, as one batch, through the layers' base variants (the precision the model was loaded
// in); a Tap collects each layer's inputs and builds its variant from the base weights widened to F32, in this
// order:
//
//   - Wo reads the attention output. With as many KV heads as query heads, channel c of that output is a mix of
//     row c of Wv's outputs only, so AWQ's scales for Wo are folded into Wv's rows (row c divided by s_c) before
//     Wv is quantized. With grouped-query attention a Wv row feeds several heads' channels, which may not share
//     one scale, so Wo gets AWQ with all scales 1 (the clipping search alone).
//   - Wq, Wk, Wv read the attention norm's output: one AWQ over the three, its scales folded into the variant's
//     copy of AttnNorm (quant.FoldIntoNorm).
//   - W2 reads SwiGLU's output silu(W1·x)·(W3·x), which is linear in W3's rows: W2's scales are folded into W3's
//     rows (divided), before W1 and W3 are quantized.
//   - W1, W3 read the FFN norm's output: one AWQ over the two, scales folded into the copy of FFNNorm.
//
// The activations a layer sees are those of the full-precision layers before it (AWQ's own procedure: its scales
// change no float result). The model must not run concurrently with the call.
func (m *Model) AddAWQVariant(calib [][]int32, group int) error {
	cfg := m.Config
	fold := cfg.NKVHeads == cfg.NHeads
	variants, err := m.calibrate(calib, func(l int, src *LayerWeights, a *layerActs) (*LayerWeights, error) {
		dim, hid := cfg.Dim, cfg.HiddenDim
		gDim, err := Int4Group(dim, group)
		if err != nil {
			return nil, err
		}
		gHid, err := Int4Group(hid, group)
		if err != nil {
			return nil, err
		}
		v := &LayerWeights{AttnNorm: slices.Clone(src.AttnNorm), FFNNorm: slices.Clone(src.FFNNorm)}

		woCfg := &quant.AWQConfig{Group: gDim}
		if !fold {
			woCfg.Grid = 1 // α = 0 only: s = 1
		}
		r, err := quant.AWQ(a.attnOut, a.tokens, src.Wo.Cols, []quant.Linear{{W: src.Wo.F32, N: src.Wo.Rows}}, woCfg)
		if err != nil {
			return nil, fmt.Errorf("wo: %w", err)
		}
		v.Wo = r.Weights[0]
		wv := src.Wv.F32
		if fold {
			wv = divideRows(wv, r.Scales, dim)
		}

		r, err = quant.AWQ(a.attnIn, a.tokens, dim, []quant.Linear{
			{W: src.Wq.F32, N: src.Wq.Rows}, {W: src.Wk.F32, N: src.Wk.Rows}, {W: wv, N: src.Wv.Rows}},
			&quant.AWQConfig{Group: gDim})
		if err != nil {
			return nil, fmt.Errorf("wq, wk, wv: %w", err)
		}
		v.Wq, v.Wk, v.Wv = r.Weights[0], r.Weights[1], r.Weights[2]
		quant.FoldIntoNorm(v.AttnNorm, r.Scales)

		r, err = quant.AWQ(a.ffnHidden, a.tokens, hid, []quant.Linear{{W: src.W2.F32, N: src.W2.Rows}},
			&quant.AWQConfig{Group: gHid})
		if err != nil {
			return nil, fmt.Errorf("w2: %w", err)
		}
		v.W2 = r.Weights[0]
		w3 := divideRows(src.W3.F32, r.Scales, dim)

		r, err = quant.AWQ(a.ffnIn, a.tokens, dim, []quant.Linear{{W: src.W1.F32, N: hid}, {W: w3, N: hid}},
			&quant.AWQConfig{Group: gDim})
		if err != nil {
			return nil, fmt.Errorf("w1, w3: %w", err)
		}
		v.W1, v.W3 = r.Weights[0], r.Weights[1]
		quant.FoldIntoNorm(v.FFNNorm, r.Scales)
		return v, nil
	})
	if err != nil {
		return fmt.Errorf("awq: %w", err)
	}
	for l, v := range variants {
		m.Layers[l].Variants[quant.Int4] = v
	}
	return nil
}

// AddSmoothQuantVariant prepares every layer's Int8 (W8A8) variant with SmoothQuant (quant.SmoothQuant, migration
// strength alpha; 0.5 is the paper's default), calibrated on calib as AddAWQVariant is, and installs it in the
// Int8 slot, replacing an RTN one. The smoothing scales s go where AWQ's go: Wq/Wk/Wv's into AttnNorm, W1/W3's
// into FFNNorm, W2's into W3's rows, and Wo's into Wv's rows when there are as many KV heads as query heads
// (otherwise Wo is not smoothed). The smoothed weights are then rounded to nearest per output channel.
func (m *Model) AddSmoothQuantVariant(calib [][]int32, alpha float64) error {
	cfg := m.Config
	smooth := func(x []float32, k int, ws ...*quant.Matrix) ([]float32, [][]float32, error) {
		st := quant.NewStats(k)
		st.Add(x)
		lin := make([]quant.Linear, len(ws))
		for i, w := range ws {
			lin[i] = quant.Linear{W: w.F32, N: w.Rows}
		}
		return quant.SmoothQuant(st.MaxAbs(), lin, alpha)
	}
	toInt8 := func(w []float32, rows, cols int) *quant.Matrix {
		q, _ := quant.Quantize(quant.Int8, w, rows, cols, nil) // Int8 takes any positive shape
		return q
	}
	variants, err := m.calibrate(calib, func(l int, src *LayerWeights, a *layerActs) (*LayerWeights, error) {
		dim, hid := cfg.Dim, cfg.HiddenDim
		v := &LayerWeights{AttnNorm: slices.Clone(src.AttnNorm), FFNNorm: slices.Clone(src.FFNNorm)}
		wv, wo := src.Wv.F32, src.Wo.F32
		if cfg.NKVHeads == cfg.NHeads {
			s, sm, err := smooth(a.attnOut, src.Wo.Cols, src.Wo)
			if err != nil {
				return nil, fmt.Errorf("wo: %w", err)
			}
			wo, wv = sm[0], divideRows(wv, s, dim)
		}
		v.Wo = toInt8(wo, src.Wo.Rows, src.Wo.Cols)
		wvm := &quant.Matrix{Format: quant.F32, Rows: src.Wv.Rows, Cols: dim, F32: wv}
		s, sm, err := smooth(a.attnIn, dim, src.Wq, src.Wk, wvm)
		if err != nil {
			return nil, fmt.Errorf("wq, wk, wv: %w", err)
		}
		v.Wq, v.Wk, v.Wv = toInt8(sm[0], src.Wq.Rows, dim), toInt8(sm[1], src.Wk.Rows, dim), toInt8(sm[2], src.Wv.Rows, dim)
		quant.FoldIntoNorm(v.AttnNorm, s)

		s, sm, err = smooth(a.ffnHidden, hid, src.W2)
		if err != nil {
			return nil, fmt.Errorf("w2: %w", err)
		}
		v.W2 = toInt8(sm[0], dim, hid)
		w3 := &quant.Matrix{Format: quant.F32, Rows: hid, Cols: dim, F32: divideRows(src.W3.F32, s, dim)}
		s, sm, err = smooth(a.ffnIn, dim, src.W1, w3)
		if err != nil {
			return nil, fmt.Errorf("w1, w3: %w", err)
		}
		v.W1, v.W3 = toInt8(sm[0], hid, dim), toInt8(sm[1], hid, dim)
		quant.FoldIntoNorm(v.FFNNorm, s)
		return v, nil
	})
	if err != nil {
		return fmt.Errorf("smoothquant: %w", err)
	}
	for l, v := range variants {
		m.Layers[l].Variants[quant.Int8] = v
	}
	return nil
}

// divideRows returns w [len(s), k] with row r divided by s[r].
func divideRows(w, s []float32, k int) []float32 {
	out := make([]float32, len(w))
	for r, sr := range s {
		for c := range k {
			out[r*k+c] = w[r*k+c] / sr
		}
	}
	return out
}

// layerActs holds one decoder layer's inputs over the calibration tokens, each [tokens, width].
type layerActs struct {
	tokens                            int
	attnIn, attnOut, ffnIn, ffnHidden []float32
}

// calibrate runs the sequences calib (each cut to the context) as one batch through every layer's base variant
// and calls build for each layer once its inputs are known, with the base weights widened to F32. It returns the
// variants build made, one a layer; the model's active variants are restored before it returns.
func (m *Model) calibrate(calib [][]int32, build func(l int, src *LayerWeights, a *layerActs) (*LayerWeights, error)) ([]*LayerWeights, error) {
	cfg := m.Config
	if len(calib) == 0 {
		return nil, fmt.Errorf("no calibration sequences")
	}
	b := &Batch{QStart: []int32{0}}
	var blocks []int
	for i, s := range calib {
		n := min(len(s), cfg.SeqLen)
		if n == 0 {
			return nil, fmt.Errorf("calibration sequence %d is empty", i)
		}
		b.Tokens = append(b.Tokens, s[:n]...)
		b.QStart = append(b.QStart, int32(len(b.Tokens)))
		b.SeqLens = append(b.SeqLens, int32(n))
		blocks = append(blocks, (n+sequenceBlock-1)/sequenceBlock)
		b.MaxBlocksPerSeq = max(b.MaxBlocksPerSeq, blocks[i])
	}
	b.BlockTables = make([]int32, len(calib)*b.MaxBlocksPerSeq)
	next := int32(0)
	for i, nb := range blocks {
		for j := range nb {
			b.BlockTables[i*b.MaxBlocksPerSeq+j] = next
			next++
		}
	}
	cache := NewKVCache(cfg, int(next), sequenceBlock)

	active := make([]quant.Format, len(m.Layers))
	for l, layer := range m.Layers {
		active[l], layer.Active = layer.Active, layer.Base
	}
	defer func() {
		for l, layer := range m.Layers {
			layer.Active = active[l]
		}
	}()

	variants := make([]*LayerWeights, len(m.Layers))
	var acts layerActs
	var buildErr error
	tap := func(l int, p TapPoint, x []float32, tokens int) {
		if buildErr != nil {
			return
		}
		acts.tokens = tokens
		switch p {
		case TapAttnIn:
			acts.attnIn = append(acts.attnIn[:0], x...)
		case TapAttnOut:
			acts.attnOut = append(acts.attnOut[:0], x...)
		case TapFFNIn:
			acts.ffnIn = append(acts.ffnIn[:0], x...)
		case TapFFNHidden:
			acts.ffnHidden = append(acts.ffnHidden[:0], x...)
		case TapLayerOut:
			if variants[l], buildErr = build(l, m.Layers[l].Dequantized(), &acts); buildErr != nil {
				buildErr = fmt.Errorf("layer %d: %w", l, buildErr)
			}
		}
	}
	logits := make([]float32, b.LogitRows()*cfg.VocabSize)
	if err := m.Forward(b, cache, &Workspace{}, logits, tap); err != nil {
		return nil, err
	}
	if buildErr != nil {
		return nil, buildErr
	}
	return variants, nil
}
