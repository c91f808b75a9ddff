package model

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/quant"
)

func TestShapes(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Shapes {
		if err := s.Config.Validate(); err != nil {
			t.Errorf("shape %s: %v", s.Name, err)
		}
		if seen[s.Name] {
			t.Errorf("shape %s listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	cfg, err := ShapeByName("llama3-8b")
	want := Config{Dim: 4096, HiddenDim: 14336, NLayers: 32, NHeads: 32, NKVHeads: 8, VocabSize: 128256, SeqLen: 8192,
		RopeTheta: 500000, NormEps: 1e-5}
	if err != nil || cfg != want {
		t.Errorf("ShapeByName(llama3-8b) = %+v, %v; want %+v", cfg, err, want)
	}
	// Parameter counts published for the models: 6.74B (Llama 2 7B), 8.03B (Llama 3 8B), 15.2M (stories15M).
	for name, params := range map[string]int{"llama2-7b": 6738415616, "llama3-8b": 8030261248, "stories15M": 15191712} {
		if cfg, _ := ShapeByName(name); cfg.Params() != params {
			t.Errorf("%s: %d parameters, want %d", name, cfg.Params(), params)
		}
	}
	_, err = ShapeByName("gpt2")
	if err == nil || !strings.Contains(err.Error(), `"gpt2"`) || !strings.Contains(err.Error(), "stories110M, llama2-7b") {
		t.Errorf("ShapeByName(gpt2) error %v, want one naming it and listing the shapes", err)
	}
}

// TestSynthesizeDeterministic checks that the bytes depend on the seed alone and that a quantized synthesis is
// exactly the quantization of the F32 one (so no F32 model is needed to make a quantized one).
func TestSynthesizeDeterministic(t *testing.T) {
	cfg := tinyConfig(false)
	a, b := Synthesize(cfg, 1), Synthesize(cfg, 1)
	sameTensors(t, a, b)
	c := Synthesize(cfg, 2)
	for name, ta := range a.Tensors {
		if bytes.Equal(ta.Data, c.Tensors[name].Data) {
			t.Errorf("tensor %s: seeds 1 and 2 give the same bytes", name)
		}
	}
	for _, typ := range []TensorType{F16, BF16, Q8_0, Q4_0} {
		q, err := SynthesizeAs(cfg, 1, typ)
		if err != nil {
			t.Fatal(err)
		}
		for name, tq := range q.Tensors {
			src := a.Tensors[name]
			if len(tq.Shape) == 1 {
				if tq.Type != F32 || !bytes.Equal(tq.Data, src.Data) {
					t.Errorf("%v: norm %s is %v or differs from the F32 synthesis", typ, name, tq.Type)
				}
				continue
			}
			want := make([]byte, len(tq.Data))
			encodeRows(typ, want, src.F32())
			if tq.Type != typ || !bytes.Equal(tq.Data, want) {
				t.Errorf("%v: tensor %s (%v) is not the %v encoding of the F32 synthesis", typ, name, tq.Type, typ)
			}
		}
	}
}

// TestSynthesizeStatistics checks the scale of the weights: mean 0 and σ = 1/sqrt(in) for matrices, mean 1 and
// σ = 0.05 for norms, and the bound of the four-uniform sum.
func TestSynthesizeStatistics(t *testing.T) {
	cfg := Config{Dim: 256, HiddenDim: 1024, NLayers: 1, NHeads: 4, NKVHeads: 4, VocabSize: 300, SeqLen: 64,
		RopeTheta: 10000, NormEps: 1e-5}
	ck := Synthesize(cfg, 3)
	for _, tc := range []struct {
		name     string
		mean, sd float64
	}{
		{LayerTensor(0, FFNUp), 0, 1 / 16.0},
		{LayerTensor(0, FFNDown), 0, 1 / 32.0},
		{TokenEmbd, 0, 1 / 16.0},
		{LayerTensor(0, AttnNorm), 1, 0.05},
	} {
		x := ck.Tensors[tc.name].F32()
		var s, s2, zmax float64
		for _, v := range x {
			s += float64(v)
			s2 += float64(v) * float64(v)
		}
		n := float64(len(x))
		mean := s / n
		sd := math.Sqrt(s2/n - mean*mean)
		for _, v := range x {
			zmax = math.Max(zmax, math.Abs(float64(v)-tc.mean)/tc.sd)
		}
		// The standard error of the mean is sd/sqrt(n); of the sd, about sd/sqrt(2n).
		if math.Abs(mean-tc.mean) > 5*tc.sd/math.Sqrt(n) || math.Abs(sd-tc.sd) > 5*tc.sd/math.Sqrt(2*n) ||
			zmax > math.Sqrt(12) || (n > 1e5 && zmax < 3) {
			t.Errorf("%s: mean %.5f sd %.5f max|z| %.2f over %d values; want mean %g sd %g, max|z| <= 3.46 (> 3 in large tensors)",
				tc.name, mean, sd, zmax, len(x), tc.mean, tc.sd)
		}
	}
}

func TestSynthesizeErrors(t *testing.T) {
	cfg, _ := ShapeByName("stories260K")
	_, err := SynthesizeAs(cfg, 1, Q4_0)
	if err == nil || !strings.Contains(err.Error(), "blk.0.ffn_down.weight") || !strings.Contains(err.Error(), "172") {
		t.Errorf("Q4_0 at stories260K (hidden 172): error %v, want one naming blk.0.ffn_down.weight and 172", err)
	}
	if _, err := SynthesizeAs(cfg, 1, Q8Group); err == nil {
		t.Error("Q8Group synthesis: no error")
	}
	bad := cfg
	bad.NKVHeads = 3
	if _, err := SynthesizeAs(bad, 1, F32); err == nil || !strings.Contains(err.Error(), "n_kv_heads") {
		t.Errorf("invalid config: error %v, want one naming n_kv_heads", err)
	}
	if _, err := SynthVocab(258); err == nil {
		t.Error("SynthVocab(258): no error")
	}
}

func TestSynthVocab(t *testing.T) {
	for _, n := range []int{259, 512, 32000} {
		v, err := SynthVocab(n)
		if err != nil {
			t.Fatal(err)
		}
		if v.Len() != n || v.BOS != 1 || v.EOS != 2 || v.UNK != 0 {
			t.Fatalf("SynthVocab(%d): %d tokens, BOS %d EOS %d UNK %d", n, v.Len(), v.BOS, v.EOS, v.UNK)
		}
		seen := map[string]bool{}
		for _, p := range v.Pieces {
			if seen[p] {
				t.Fatalf("SynthVocab(%d): piece %q twice", n, p)
			}
			seen[p] = true
		}
		text := "Once upon a time, a tiny robot said: \"héllo\" — 42!"
		ids := v.Encode(text, true, false)
		// Decode drops the dummy-prefix space of a piece that follows BOS, as run.c does; a byte token keeps it.
		if got := v.DecodeAll(ids); strings.TrimPrefix(got, " ") != text {
			t.Errorf("SynthVocab(%d): decode(encode(%q)) = %q, want it back", n, text, got)
		}
		lower := "once upon a time there was a little girl who liked to play outside"
		if ids := v.Encode(lower, false, false); n >= 32000 && len(ids) > len(lower)/2 {
			t.Errorf("SynthVocab(%d): %d tokens for %d bytes of lower-case words; the filler pieces should merge letters",
				n, len(ids), len(lower))
		}
	}
}

// synthRoundTrip writes ck with write, parses it back with parse and returns the loaded checkpoint.
func synthRoundTrip(t *testing.T, ck *Checkpoint, write func(*bytes.Buffer) error, parse func(string, []byte) (*Checkpoint, error)) *Checkpoint {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := parse("mem", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSynthRoundTrips writes synthetic checkpoints (stories260K's shape and a small GQA shape) to GGUF in every
// type that fits, and to llama2.c v0 and v2, and checks that loading gives back the same bytes.
func TestSynthRoundTrips(t *testing.T) {
	s260, _ := ShapeByName("stories260K")
	for _, tc := range []struct {
		name  string
		cfg   Config
		types []TensorType
	}{
		{"stories260K", s260, []TensorType{F32, F16, BF16}},
		{"tinyGQA", tinyConfig(false), []TensorType{F32, F16, BF16, Q8_0, Q4_0}},
	} {
		for _, typ := range tc.types {
			ck, err := SynthesizeAs(tc.cfg, 5, typ)
			if err != nil {
				t.Fatal(err)
			}
			got := synthRoundTrip(t, ck, func(b *bytes.Buffer) error { return WriteGGUF(b, ck) }, ParseGGUFCheckpoint)
			sameTensors(t, ck, got)
			if (ck.Vocab == nil) != (got.Vocab == nil) {
				t.Fatalf("%s %v: vocabulary lost or invented by GGUF", tc.name, typ)
			}
			if ck.Vocab != nil {
				sameVocab(t, ck.Vocab, got.Vocab)
			}
		}
		ck := Synthesize(tc.cfg, 6)
		ck.Vocab = nil // llama2.c files keep the vocabulary in tokenizer.bin
		got := synthRoundTrip(t, ck, func(b *bytes.Buffer) error { return WriteLlama2c(b, ck, 0, 0) }, ParseLlama2c)
		sameTensors(t, ck, got)

		const group = 32
		got = synthRoundTrip(t, ck, func(b *bytes.Buffer) error { return WriteLlama2c(b, ck, 2, group) }, ParseLlama2c)
		for name, src := range ck.Tensors {
			g := got.Tensors[name]
			if len(src.Shape) == 1 {
				if g.Type != F32 || !bytes.Equal(g.Data, src.Data) {
					t.Errorf("%s v2: norm %s not kept as F32 bytes", tc.name, name)
				}
				continue
			}
			if want := QuantizeQ8Group(src.F32(), group); g.Type != Q8Group || g.GroupSize != group || !bytes.Equal(g.Data, want.Data) {
				t.Errorf("%s v2: tensor %s is %v/%d or not export.py's Q8 of the synthesis", tc.name, name, g.Type, g.GroupSize)
			}
		}
		again := synthRoundTrip(t, got, func(b *bytes.Buffer) error { return WriteLlama2c(b, got, 2, group) }, ParseLlama2c)
		sameTensors(t, got, again)
	}
}

// TestSynthForward runs synthetic models through the forward pass: the logits must be finite, spread (not all
// equal, no token certain) and differ between positions, in every storage type.
func TestSynthForward(t *testing.T) {
	s260, _ := ShapeByName("stories260K")
	for _, tc := range []struct {
		cfg Config
		typ TensorType
	}{{s260, F32}, {s260, F16}, {tinyConfig(false), Q8_0}, {tinyConfig(true), Q4_0}} {
		ck, err := SynthesizeAs(tc.cfg, 7, tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		m, err := FromCheckpoint(ck)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := NewSequence(m, tc.cfg.SeqLen)
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int32, 24)
		for i := range toks {
			toks[i] = int32((i*37 + 1) % tc.cfg.VocabSize)
		}
		logits, err := seq.Feed(toks, true)
		if err != nil {
			t.Fatal(err)
		}
		V := tc.cfg.VocabSize
		for p := range len(toks) {
			row := logits[p*V : (p+1)*V]
			var s, s2, mx float64
			mx = math.Inf(-1)
			for _, v := range row {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%v %v: position %d: logit %v", tc.cfg, tc.typ, p, v)
				}
				s += float64(v)
				s2 += float64(v) * float64(v)
				mx = math.Max(mx, float64(v))
			}
			sd := math.Sqrt(s2/float64(V) - (s/float64(V))*(s/float64(V)))
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			if sd < 0.3 || sd > 10 || 1/z > 0.9 {
				t.Errorf("%+v %v: position %d: logit sd %.3f, top probability %.3f; want 0.3 <= sd <= 10, top < 0.9",
					tc.cfg, tc.typ, p, sd, 1/z)
			}
			if p > 0 && quant.RMSE(row, logits[(p-1)*V:p*V]) < 0.1 {
				t.Errorf("%v: positions %d and %d give nearly the same logits", tc.typ, p-1, p)
			}
		}
	}
}

func BenchmarkSynthesize(b *testing.B) {
	cfg, _ := ShapeByName("stories15M")
	for _, typ := range []TensorType{F32, Q4_0} {
		b.Run("shape=stories15M/type="+typ.String(), func(b *testing.B) {
			b.SetBytes(int64(cfg.Params()) * 4)
			for b.Loop() {
				if _, err := SynthesizeAs(cfg, 1, typ); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
