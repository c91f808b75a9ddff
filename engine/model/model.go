package model

import (
	"fmt"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/quant"
)

// Model is a Llama-architecture decoder ready to run: its config, the token embedding, the decoder layers (each
// holding one or more precision variants, one of them active), the final norm and the classifier.
type Model struct {
	Config Config
	// Embedding is the token embedding table [VocabSize, Dim], kept in its stored format (a row is widened to
	// float32 when its token is looked up), so that a quantized file's table costs its own bytes.
	Embedding *quant.Matrix
	Layers    []*Layer
	FinalNorm []float32     // [Dim]
	Output    *quant.Matrix // [VocabSize, Dim]; Embedding itself when the embeddings are tied
	// SequenceKV is the cache type of the Sequences that NewSequence makes (KVF32 unless set).
	SequenceKV KVType
}

// Layer is one decoder layer (attention, MLP and their norms, the unit that morphing swaps). Variants holds the
// weights of every precision prepared for it; Active names the one the forward pass uses.
type Layer struct {
	Variants map[quant.Format]*LayerWeights
	Active   quant.Format
	Base     quant.Format // the precision the layer was loaded in
}

// LayerWeights is one precision variant of a decoder layer. The norm weights belong to the variant because
// activation-aware quantizers (AWQ, SmoothQuant) fold their per-channel scales into them.
type LayerWeights struct {
	AttnNorm, FFNNorm          []float32 // [Dim]
	Wq, Wk, Wv, Wo, W1, W2, W3 *quant.Matrix
}

// Matrices lists the variant's weight matrices in llama2.c order.
func (w *LayerWeights) Matrices() []*quant.Matrix {
	return []*quant.Matrix{w.Wq, w.Wk, w.Wv, w.Wo, w.W1, w.W2, w.W3}
}

// Bytes is the memory the variant's weights take, norms included.
func (w *LayerWeights) Bytes() int {
	n := 4 * (len(w.AttnNorm) + len(w.FFNNorm))
	for _, m := range w.Matrices() {
		n += m.Bytes()
	}
	return n
}

// Weights returns the active variant of the layer.
func (l *Layer) Weights() *LayerWeights { return l.Variants[l.Active] }

// FromCheckpoint builds a runnable model from a checkpoint. Each matrix, the embedding table included, keeps the
// checkpoint's storage when a kernel runs on it directly (F32, F16, and Q8_0 and Q4_0, whose blocks are repacked
// once into the layout of their kernels, byte for byte as large) and is widened to F32 otherwise (BF16, llama2.c
// Q8Group); norms are F32. The model copies what it keeps, so the checkpoint may be closed after, and holds no
// float32 copy of a quantized matrix.
func FromCheckpoint(ck *Checkpoint) (*Model, error) {
	cfg := ck.Config
	if err := ck.Check("checkpoint"); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	var err error
	if m.Embedding, err = tensorMatrix(ck.Tensors[TokenEmbd]); err != nil {
		return nil, err
	}
	if m.FinalNorm, err = tensorF32(ck.Tensors[OutputNorm]); err != nil {
		return nil, err
	}
	if cfg.TiedEmbeddings {
		m.Output = m.Embedding
	} else if m.Output, err = tensorMatrix(ck.Tensors[Output]); err != nil {
		return nil, err
	}
	for l := 0; l < cfg.NLayers; l++ {
		w := &LayerWeights{}
		if w.AttnNorm, err = tensorF32(ck.Tensors[LayerTensor(l, AttnNorm)]); err != nil {
			return nil, err
		}
		if w.FFNNorm, err = tensorF32(ck.Tensors[LayerTensor(l, FFNNorm)]); err != nil {
			return nil, err
		}
		for _, p := range []struct {
			dst  **quant.Matrix
			part string
		}{{&w.Wq, AttnQ}, {&w.Wk, AttnK}, {&w.Wv, AttnV}, {&w.Wo, AttnOutput}, {&w.W1, FFNGate}, {&w.W2, FFNDown}, {&w.W3, FFNUp}} {
			if *p.dst, err = tensorMatrix(ck.Tensors[LayerTensor(l, p.part)]); err != nil {
				return nil, err
			}
		}
		base := w.Wq.Format
		for _, mat := range w.Matrices() {
			if mat.Format != base {
				return nil, fmt.Errorf("layer %d mixes %v and %v weights; a layer's matrices must share one format", l, base, mat.Format)
			}
		}
		m.Layers = append(m.Layers, &Layer{Variants: map[quant.Format]*LayerWeights{base: w}, Active: base, Base: base})
	}
	return m, nil
}

// tensorF32 returns a copy of t's values as float32, whatever its storage type.
func tensorF32(t *Tensor) ([]float32, error) {
	switch t.Type {
	case F32:
		return append([]float32(nil), t.F32()...), nil
	case F16, BF16:
		h := make([]uint16, t.Elements())
		for i := range h {
			h[i] = uint16(t.Data[2*i]) | uint16(t.Data[2*i+1])<<8
		}
		out := make([]float32, len(h))
		if t.Type == F16 {
			half.F16ToF32Slice(out, h)
		} else {
			half.BF16ToF32Slice(out, h)
		}
		return out, nil
	case Q8_0:
		return quant.DecodeQ8_0(t.Data)
	case Q4_0:
		return quant.DecodeQ4_0(t.Data)
	case Q8Group:
		q, s := t.Q8Group()
		out := make([]float32, len(q))
		for i, v := range q {
			out[i] = float32(v) * s[i/t.GroupSize]
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %s: unsupported type %v", t.Name, t.Type)
}

// tensorMatrix turns a 2-D weight tensor [out, in] into a matrix the kernels run on (see FromCheckpoint).
func tensorMatrix(t *Tensor) (*quant.Matrix, error) {
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s: shape %v, want a matrix [out, in]", t.Name, t.Shape)
	}
	m := &quant.Matrix{Rows: t.Shape[0], Cols: t.Shape[1]}
	switch t.Type {
	case F16:
		m.Format = quant.F16
		m.Half = make([]uint16, t.Elements())
		for i := range m.Half {
			m.Half[i] = uint16(t.Data[2*i]) | uint16(t.Data[2*i+1])<<8
		}
	case Q8_0:
		return quant.RepackQ8_0(t.Data, m.Rows, m.Cols)
	case Q4_0:
		return quant.RepackQ4_0(t.Data, m.Rows, m.Cols)
	default:
		f, err := tensorF32(t)
		if err != nil {
			return nil, err
		}
		m.Format, m.F32 = quant.F32, f
	}
	return m, nil
}

// Dequantized returns the layer's base variant with every matrix widened to F32: the source that quantized
// variants are made from.
func (l *Layer) Dequantized() *LayerWeights {
	b := l.Variants[l.Base]
	out := &LayerWeights{AttnNorm: b.AttnNorm, FFNNorm: b.FFNNorm}
	dst := []**quant.Matrix{&out.Wq, &out.Wk, &out.Wv, &out.Wo, &out.W1, &out.W2, &out.W3}
	for i, m := range b.Matrices() {
		if m.Format == quant.F32 {
			*dst[i] = m
		} else {
			*dst[i] = &quant.Matrix{Format: quant.F32, Rows: m.Rows, Cols: m.Cols, F32: m.Dequantize()}
		}
	}
	return out
}

// AddVariant prepares layer l in format f by rounding its base weights to nearest (quant.Quantize), and returns
// the new variant. A variant that exists already is returned as it is. Int4 groups are Int4Group's for
// quant.DefaultGroup. Activation-aware variants are made by AddAWQVariant and AddSmoothQuantVariant.
func (m *Model) AddVariant(l int, f quant.Format) (*LayerWeights, error) {
	layer, err := m.layer(l)
	if err != nil {
		return nil, err
	}
	if v, ok := layer.Variants[f]; ok {
		return v, nil
	}
	v, err := quantizeLayer(layer.Dequantized(), f, quant.DefaultGroup)
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", l, err)
	}
	layer.Variants[f] = v
	return v, nil
}

// quantizeLayer rounds every matrix of src (F32) to format f, Int4 with Int4Group(k, group); the norms are shared.
func quantizeLayer(src *LayerWeights, f quant.Format, group int) (*LayerWeights, error) {
	v := &LayerWeights{AttnNorm: src.AttnNorm, FFNNorm: src.FFNNorm}
	dst := []**quant.Matrix{&v.Wq, &v.Wk, &v.Wv, &v.Wo, &v.W1, &v.W2, &v.W3}
	for i, s := range src.Matrices() {
		var err error
		if *dst[i], err = quantizeMatrix(s.F32, s.Rows, s.Cols, f, group); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// quantizeMatrix rounds w [rows, cols] to format f, Int4 with Int4Group(cols, group).
func quantizeMatrix(w []float32, rows, cols int, f quant.Format, group int) (*quant.Matrix, error) {
	if f == quant.BF16 {
		return nil, fmt.Errorf("no CPU kernel runs bf16 weights; use f16")
	}
	opts := &quant.Options{}
	if f == quant.Int4 {
		g, err := Int4Group(cols, group)
		if err != nil {
			return nil, err
		}
		opts.Group = g
	}
	return quant.Quantize(f, w, rows, cols, opts)
}

// SetVariant installs v as layer l's variant for its format (replacing one that exists).
func (m *Model) SetVariant(l int, v *LayerWeights) error {
	layer, err := m.layer(l)
	if err != nil {
		return err
	}
	layer.Variants[v.Wq.Format] = v
	return nil
}

// SetPrecision makes format f layer l's active variant; the variant must have been prepared.
func (m *Model) SetPrecision(l int, f quant.Format) error {
	layer, err := m.layer(l)
	if err != nil {
		return err
	}
	if _, ok := layer.Variants[f]; !ok {
		return fmt.Errorf("layer %d has no %v variant; prepare it with AddVariant first", l, f)
	}
	layer.Active = f
	return nil
}

func (m *Model) layer(l int) (*Layer, error) {
	if l < 0 || l >= len(m.Layers) {
		return nil, fmt.Errorf("layer %d out of range [0, %d)", l, len(m.Layers))
	}
	return m.Layers[l], nil
}

// SetOutputFormat stores the classifier in format f, rounded to nearest from its current values (Int4 groups
// as Int4Group gives for quant.DefaultGroup). The embedding table stays as it is: a tied model gets a classifier
// of its own, and the table's own format on a tied model makes the classifier the embedding table again. Decoder layers are not
// touched; morphing swaps those, while the classifier's format is a load-time choice (llama.cpp and llama2.c's
// runq quantize it too).
func (m *Model) SetOutputFormat(f quant.Format) error {
	if f == m.Embedding.Format && m.Config.TiedEmbeddings {
		m.Output = m.Embedding
		return nil
	}
	src := m.Output
	if f == src.Format {
		return nil
	}
	out, err := quantizeMatrix(src.Dequantize(), src.Rows, src.Cols, f, quant.DefaultGroup)
	if err != nil {
		return fmt.Errorf("classifier: %w", err)
	}
	m.Output = out
	return nil
}

// outputIsEmbedding reports whether the classifier is the embedding table itself (tied).
func (m *Model) outputIsEmbedding() bool { return m.Output == m.Embedding }

// WeightBytes is the memory the active weights take: embedding, classifier (unless it is the embedding table),
// final norm and each layer's active variant.
func (m *Model) WeightBytes() int {
	n := m.Embedding.Bytes() + 4*len(m.FinalNorm)
	if !m.outputIsEmbedding() {
		n += m.Output.Bytes()
	}
	for _, l := range m.Layers {
		n += l.Weights().Bytes()
	}
	return n
}
