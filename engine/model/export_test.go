package model

import (
	"bytes"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/quant"
)

// TestConvertLayers converts chosen layers of a synthetic checkpoint and checks that exactly those matrices
// change, to the encoding of their F32 values, that the result round-trips through GGUF and that it runs.
func TestConvertLayers(t *testing.T) {
	cfg := tinyConfig(false)
	src := Synthesize(cfg, 4)
	for _, typ := range []TensorType{F16, BF16, Q8_0, Q4_0} {
		out, err := ConvertLayers(src, typ, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range src.Tensors {
			o := out.Tensors[name]
			converted := strings.HasPrefix(name, "blk.1.") && len(s.Shape) == 2
			if !converted {
				if o != s {
					t.Errorf("%v: tensor %s was replaced", typ, name)
				}
				continue
			}
			want := make([]byte, len(o.Data))
			encodeRows(typ, want, s.F32())
			if o.Type != typ || !bytes.Equal(o.Data, want) {
				t.Errorf("%v: tensor %s is %v or not the encoding of the source", typ, name, o.Type)
			}
		}
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, out); err != nil {
			t.Fatal(err)
		}
		back, err := ParseGGUFCheckpoint("mem", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, out, back)
		m, err := FromCheckpoint(back)
		if err != nil {
			t.Fatal(err)
		}
		// FromCheckpoint runs F16, Q8_0 and Q4_0 as stored and widens BF16 to F32.
		want := map[TensorType]quant.Format{F16: quant.F16, BF16: quant.F32, Q8_0: quant.Q8_0, Q4_0: quant.Q4_0}[typ]
		if m.Layers[0].Base != quant.F32 || m.Layers[1].Base != want {
			t.Errorf("%v: layer formats %v, %v; want f32, %v", typ, m.Layers[0].Base, m.Layers[1].Base, want)
		}
	}
	// Converting back from Q8_0 to F32 gives the dequantized values.
	q, err := ConvertLayers(src, Q8_0, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ConvertLayers(q, F32, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := LayerTensor(0, FFNDown)
	want, _ := tensorF32(q.Tensors[name])
	if got := f.Tensors[name].F32(); !slicesEqual(got, want) {
		t.Errorf("Q8_0 -> F32 of %s is not the dequantized Q8_0", name)
	}
}

func TestConvertLayersErrors(t *testing.T) {
	s260, _ := ShapeByName("stories260K")
	ck := Synthesize(s260, 1)
	for _, tc := range []struct {
		typ    TensorType
		layers []int
		want   string
	}{
		{Q4_0, nil, "blk.0.ffn_down.weight [64 172] to Q4_0: rows of 172"},
		{Q8Group, nil, "type Q8Group"},
		{F16, []int{5}, "layer 5 out of range [0, 5)"},
	} {
		if _, err := ConvertLayers(ck, tc.typ, tc.layers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ConvertLayers(%v, %v): error %v, want one containing %q", tc.typ, tc.layers, err, tc.want)
		}
	}
}

// TestConvertClassifier converts the classifier of a tied and an untied checkpoint to Q8_0 and checks that only
// output.weight changes, to the encoding of the classifier's values (the embedding's, when tied), that the tied
// one comes out untied and that both round-trip through GGUF and load with a Q8_0 classifier.
func TestConvertClassifier(t *testing.T) {
	for _, tied := range []bool{true, false} {
		src := Synthesize(tinyConfig(tied), 5)
		out, err := ConvertClassifier(src, Q8_0)
		if err != nil {
			t.Fatal(err)
		}
		from := src.Tensors[Output]
		if tied {
			from = src.Tensors[TokenEmbd]
		}
		want := make([]byte, len(out.Tensors[Output].Data))
		encodeRows(Q8_0, want, from.F32())
		if o := out.Tensors[Output]; o.Type != Q8_0 || !bytes.Equal(o.Data, want) || out.Config.TiedEmbeddings {
			t.Errorf("tied=%v: classifier %v, untied=%v; want the Q8_0 encoding, untied", tied, o.Type, !out.Config.TiedEmbeddings)
		}
		for name, s := range src.Tensors {
			if name != Output && out.Tensors[name] != s {
				t.Errorf("tied=%v: tensor %s was replaced", tied, name)
			}
		}
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, out); err != nil {
			t.Fatal(err)
		}
		back, err := ParseGGUFCheckpoint("mem", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		m, err := FromCheckpoint(back)
		if err != nil {
			t.Fatal(err)
		}
		if m.Output.Format != quant.Q8_0 || m.Config.TiedEmbeddings {
			t.Errorf("tied=%v: loaded classifier %v, tied=%v; want q8_0, untied", tied, m.Output.Format, m.Config.TiedEmbeddings)
		}
	}
	if _, err := ConvertClassifier(Synthesize(tinyConfig(true), 5), Q8Group); err == nil {
		t.Error("ConvertClassifier to Q8Group: no error")
	}
}
