package executor

import (
	"fmt"
	"unsafe"

	"github.com/morphlab/morphlab/engine/model"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/quant"
)

// This file packs a model's tensors into the byte images the CUDA executor keeps on the device and, for every
// layer variant, in pinned host memory: a swap copies one image. It runs no device code, so its tests run
// anywhere.

// devMatrix is where a weight matrix's parts sit in an image: Data holds F32 or 16-bit values, Int8 codes or
// Int4 packed pairs; Scales (float32) are Int8's and Int4's, Zeros (uint8) Int4's.
type devMatrix struct {
	Format              quant.Format
	Rows, Cols, Group   int
	Data, Scales, Zeros int64
}

// devLayer is the image of one layer variant: its bytes, the offsets of its norms (in the storage type) and of
// its matrices, in the order of model.LayerWeights.Matrices.
type devLayer struct {
	Bytes             int64
	AttnNorm, FFNNorm int64
	Mats              [7]devMatrix
}

// devOuter is the image of the weights outside the layers: the embedding table and the classifier in the
// storage type (one table when they are tied) and the final norm.
type devOuter struct {
	Bytes                     int64
	Embedding, Output, FinalN int64
}

// layout places the parts of an image one after another, each aligned for the kernels' 16-byte loads.
type layout struct {
	end   int64
	parts []placed
}

// placed is one part of an image: its bytes and where they go.
type placed struct {
	off int64
	b   []byte
}

// take reserves n bytes and returns their offset.
func (l *layout) take(n int64) int64 {
	at := alignUp(l.end, arenaAlign)
	l.end = at + n
	return at
}

// put places b and returns its offset.
func (l *layout) put(b []byte) int64 {
	at := l.take(int64(len(b)))
	l.parts = append(l.parts, placed{at, b})
	return at
}

// size is the image's bytes.
func (l *layout) size() int64 { return alignUp(l.end, arenaAlign) }

// fill writes the parts into an image dst of size() bytes, zeroing the padding between them.
func (l *layout) fill(dst []byte) {
	var end int64
	for _, p := range l.parts {
		clear(dst[end:p.off])
		end = p.off + int64(copy(dst[p.off:], p.b))
	}
	clear(dst[end:])
}

// image is the image the parts make.
func (l *layout) image() []byte {
	img := make([]byte, l.size())
	l.fill(img)
	return img
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// storage converts float32 values to storage type t.
func storage(t kcuda.DType, x []float32) []byte {
	switch t {
	case kcuda.F16:
		h := make([]uint16, len(x))
		half.F32ToF16Slice(h, x)
		return bytesOf(h)
	case kcuda.BF16:
		h := make([]uint16, len(x))
		half.F32ToBF16Slice(h, x)
		return bytesOf(h)
	}
	return bytesOf(x)
}

// fullFormats are the storage types' weight formats: the format whose matrices run in each.
var fullFormats = [...]quant.Format{kcuda.F32: quant.F32, kcuda.F16: quant.F16, kcuda.BF16: quant.BF16}

// fullFormat is the weight format whose matrices run in storage type t.
func fullFormat(t kcuda.DType) quant.Format { return fullFormats[t] }

// storageType is the storage type of a model whose layers are in format f: f itself for F32, F16 and BF16.
func storageType(f quant.Format) (kcuda.DType, error) {
	for t, g := range fullFormats {
		if g == f {
			return kcuda.DType(t), nil
		}
	}
	return 0, fmt.Errorf("executor: layers in %v: the CUDA executor runs models whose layers are f32, f16 or bf16", f)
}

// layoutLayer lays out the image of variant w for a model of storage type t, its parts the variant's own slices
// (the norms converted to t): its full-precision matrices must be in t's format, its quantized ones Int8 (run as
// W8A8) or Int4 (W4A16); other formats are refused.
func layoutLayer(w *model.LayerWeights, t kcuda.DType) (devLayer, *layout, error) {
	var l layout
	var d devLayer
	d.AttnNorm = l.put(storage(t, w.AttnNorm))
	d.FFNNorm = l.put(storage(t, w.FFNNorm))
	for i, m := range w.Matrices() {
		dm := devMatrix{Format: m.Format, Rows: m.Rows, Cols: m.Cols, Group: m.Group}
		switch m.Format {
		case fullFormat(t):
			dm.Data = l.put(fullBytes(t, m))
		case quant.Int8:
			dm.Data = l.put(bytesOf(m.Q))
			dm.Scales = l.put(bytesOf(m.Scales))
		case quant.Int4:
			dm.Data = l.put(bytesOf(m.Packed))
			dm.Scales = l.put(bytesOf(m.Scales))
			dm.Zeros = l.put(m.Zeros)
		default:
			return devLayer{}, nil, fmt.Errorf("executor: a %v matrix in a %v model: the CUDA executor runs %v, int8 (W8A8) and int4 (W4A16) weights",
				m.Format, t, fullFormat(t))
		}
		d.Mats[i] = dm
	}
	d.Bytes = l.size()
	return d, &l, nil
}

// fullBytes is the values of a matrix in t's full format, as stored.
func fullBytes(t kcuda.DType, m *quant.Matrix) []byte {
	if t == kcuda.F32 {
		return bytesOf(m.F32)
	}
	return bytesOf(m.Half)
}

// packOuter returns the image of m's outer weights in storage type t.
func packOuter(m *model.Model, t kcuda.DType) (devOuter, []byte) {
	var l layout
	var d devOuter
	table := func(q *quant.Matrix) int64 {
		if q.Format == fullFormat(t) {
			return l.put(fullBytes(t, q))
		}
		return l.put(storage(t, q.Dequantize()))
	}
	d.Embedding = table(m.Embedding)
	d.Output = d.Embedding
	if m.Output != m.Embedding {
		d.Output = table(m.Output)
	}
	d.FinalN = l.put(storage(t, m.FinalNorm))
	d.Bytes = l.size()
	return d, l.image()
}

// devWorkspace is the layout of the CUDA executor's workspace for steps of up to Tokens tokens: the activations
// (storage type unless said), the step's int32 inputs, the paged attention's split partials, and the staging
// slots that swaps copy into before the step boundary that applies them. Offsets are from its start.
type devWorkspace struct {
	Tokens, TableLen                  int
	X, XB, Q, Att, D, K, V, H1, H3    int64 // [Tokens, Dim] residual, normed, query, attention out, layer delta; [Tokens, KVDim]; [Tokens, HiddenDim]
	Rows                              int64 // [Tokens, Dim] each sequence's last row, normed
	Out                               int64 // [Tokens, max(Dim, HiddenDim)] float32: a GEMM's output
	Logits                            int64 // [Tokens, Vocab] float32
	QA, SA                            int64 // int8 activations [Tokens, max(Dim, HiddenDim)] and their float32 scales [Tokens]
	Tok, Pos, Slots, Last, Next, Lens int64 // int32 [Tokens]
	QStart                            int64 // int32 [Tokens+1]
	Tables                            int64 // int32 [TableLen]: the step's block tables, as kernel ids
	Paged                             int64 // the paged attention's partials, PagedBytes
	Staging                           int64 // slots of StageBytes each
	StageBytes                        int64
	StagingSlots                      int
	Bytes                             int64
}

// newDevWorkspace lays out the workspace of a model of config cfg in storage type t for steps of tokens tokens
// over block tables of up to tableLen ids, with pagedBytes for the paged attention's partials and slots staging
// slots of stageBytes.
func newDevWorkspace(cfg model.Config, t kcuda.DType, tokens, tableLen int, pagedBytes int64, slots int, stageBytes int64) devWorkspace {
	w := devWorkspace{Tokens: tokens, TableLen: tableLen, StageBytes: stageBytes, StagingSlots: slots}
	var l layout
	take := l.take
	n, el := int64(tokens), int64(t.Size())
	dim, kv, hid := int64(cfg.Dim), int64(cfg.KVDim()), int64(cfg.HiddenDim)
	for _, p := range []*int64{&w.X, &w.XB, &w.Q, &w.Att, &w.D, &w.Rows} {
		*p = take(n * dim * el)
	}
	w.K, w.V = take(n*kv*el), take(n*kv*el)
	w.H1, w.H3 = take(n*hid*el), take(n*hid*el)
	w.Out = take(4 * n * max(dim, hid))
	w.Logits = take(4 * n * int64(cfg.VocabSize))
	w.QA, w.SA = take(n*max(dim, hid)), take(4*n)
	for _, p := range []*int64{&w.Tok, &w.Pos, &w.Slots, &w.Last, &w.Next, &w.Lens} {
		*p = take(4 * n)
	}
	w.QStart = take(4 * (n + 1))
	w.Tables = take(4 * int64(tableLen))
	w.Paged = take(pagedBytes)
	w.Staging = take(int64(slots) * stageBytes)
	w.Bytes = l.size()
	return w
}
