package executor

import (
	"bytes"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/quant"
)

// packLayer is variant w's layout and image.
func packLayer(w *model.LayerWeights, t kcuda.DType) (devLayer, []byte, error) {
	d, l, err := layoutLayer(w, t)
	if err != nil {
		return devLayer{}, nil, err
	}
	return d, l.image(), nil
}

// TestPackLayer: every part of a variant's image holds the variant's bytes at an aligned offset, the parts do not
// overlap, and formats without a CUDA kernel are refused with a one-line error.
func TestPackLayer(t *testing.T) {
	m := modeltest.Synthetic(t, "stories260K", 1, quant.Int8, quant.Int4)
	for _, f := range []quant.Format{quant.F32, quant.Int8, quant.Int4} {
		w := m.Layers[1].Variants[f]
		d, img, err := packLayer(w, kcuda.F32)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(img)) != d.Bytes || d.Bytes%arenaAlign != 0 || d.Bytes < int64(w.Bytes()) {
			t.Fatalf("%v: image of %d bytes, layout says %d, the variant has %d", f, len(img), d.Bytes, w.Bytes())
		}
		type part struct {
			off int64
			b   []byte
		}
		parts := []part{{d.AttnNorm, bytesOf(w.AttnNorm)}, {d.FFNNorm, bytesOf(w.FFNNorm)}}
		for i, q := range w.Matrices() {
			dm := d.Mats[i]
			if dm.Format != f || dm.Rows != q.Rows || dm.Cols != q.Cols {
				t.Fatalf("%v matrix %d: %+v", f, i, dm)
			}
			switch f {
			case quant.F32:
				parts = append(parts, part{dm.Data, bytesOf(q.F32)})
			case quant.Int8:
				parts = append(parts, part{dm.Data, bytesOf(q.Q)}, part{dm.Scales, bytesOf(q.Scales)})
			case quant.Int4:
				parts = append(parts, part{dm.Data, q.Packed}, part{dm.Scales, bytesOf(q.Scales)}, part{dm.Zeros, q.Zeros})
			}
		}
		end := int64(0)
		for i, p := range parts {
			if p.off%arenaAlign != 0 || p.off < end || !bytes.Equal(img[p.off:p.off+int64(len(p.b))], p.b) {
				t.Fatalf("%v part %d at %d (previous ends at %d): misplaced or not the variant's bytes", f, i, p.off, end)
			}
			end = p.off + int64(len(p.b))
		}
	}
	w4 := m.Layers[1].Variants[quant.Int4]
	d16, img, err := packLayer(w4, kcuda.F16)
	if err != nil {
		t.Fatal(err)
	}
	if n := storage(kcuda.F16, w4.FFNNorm); !bytes.Equal(img[d16.FFNNorm:d16.FFNNorm+int64(len(n))], n) {
		t.Error("an f16 model's int4 image does not hold its norms in f16")
	}
	bf := *m.Layers[1].Variants[quant.F32]
	q := bf.Wq
	if bf.Wq, err = quant.Quantize(quant.BF16, q.F32, q.Rows, q.Cols, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		w *model.LayerWeights
		t kcuda.DType
	}{{&bf, kcuda.F32}, {m.Layers[1].Variants[quant.F32], kcuda.F16}} {
		if _, _, err := packLayer(c.w, c.t); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("a %v model: %v, want a one-line error", c.t, err)
		}
	}
}
