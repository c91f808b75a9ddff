package model_test

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/quant"
)

func TestInt4Group(t *testing.T) {
	for _, tc := range []struct{ k, group, want int }{
		{64, 32, 32}, {4096, 128, 128}, {172, 32, 86}, {172, 64, 86}, {172, 128, 172}, {96, 64, 96}, {11008, 128, 128}, {64, 128, 64}, {30, 32, 30},
	} {
		if got, err := model.Int4Group(tc.k, tc.group); err != nil || got != tc.want {
			t.Errorf("Int4Group(%d, %d) = %d, %v; want %d", tc.k, tc.group, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ k, group int }{{63, 32}, {64, 0}, {64, 33}} {
		if g, err := model.Int4Group(tc.k, tc.group); err == nil {
			t.Errorf("Int4Group(%d, %d) = %d, want an error", tc.k, tc.group, g)
		}
	}
}

// outlierModel is a synthetic model whose norm weights have a few channels 10x larger, the activation outliers
// that real LLMs have and that make activation-aware quantization pay.
func outlierModel(t *testing.T, kvHeads int) *model.Model {
	t.Helper()
	cfg := model.Config{Dim: 64, HiddenDim: 96, NLayers: 2, NHeads: 4, NKVHeads: kvHeads, VocabSize: 300, SeqLen: 64,
		RopeTheta: 10000, NormEps: 1e-5}
	ck := model.Synthesize(cfg, 11)
	for l := range cfg.NLayers {
		for _, part := range []string{model.AttnNorm, model.FFNNorm} {
			w := ck.Tensors[model.LayerTensor(l, part)].F32()
			for _, c := range []int{3, 17 + l, 40} {
				w[c] *= 10
			}
		}
	}
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomSequences returns n sequences of length tokens, seeded.
func randomSequences(n, length, vocab int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][]int32, n)
	for i := range out {
		out[i] = make([]int32, length)
		for j := range out[i] {
			out[i][j] = int32(r.IntN(vocab))
		}
	}
	return out
}

// allLogits runs each sequence from position 0 with format f active in every layer and returns the logits of
// every position, concatenated.
func allLogits(t *testing.T, m *model.Model, f quant.Format, seqs [][]int32) []float32 {
	t.Helper()
	for l := range m.Layers {
		if err := m.SetPrecision(l, f); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := model.NewSequence(m, m.Config.SeqLen)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, s := range seqs {
		seq.Reset()
		logits, err := seq.Feed(s, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logits...)
	}
	return out
}

// meanKL is the mean over rows of KL(softmax(ref) || softmax(got)), in nats, computed in float64.
func meanKL(ref, got []float32, vocab int) float64 {
	var sum float64
	rows := len(ref) / vocab
	for r := range rows {
		p, q := logSoftmax(ref[r*vocab:(r+1)*vocab]), logSoftmax(got[r*vocab:(r+1)*vocab])
		for i := range p {
			sum += math.Exp(p[i]) * (p[i] - q[i])
		}
	}
	return sum / float64(rows)
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var z float64
	for _, v := range x {
		z += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - mx - math.Log(z)
	}
	return out
}

// TestAWQBeatsRTN checks model-level AWQ on a synthetic model with outlier channels, with multi-head attention
// (Wo's scales folded into Wv) and with grouped-query attention (Wo clipped only): on held-out tokens the AWQ
// Int4 model's next-token distributions are closer to F32's than the RTN Int4 model's, and AddAWQVariant leaves
// the active variants as they were.
func TestAWQBeatsRTN(t *testing.T) {
	for _, kv := range []int{4, 2} {
		m := outlierModel(t, kv)
		calib := randomSequences(8, 64, m.Config.VocabSize, 1)
		held := randomSequences(4, 64, m.Config.VocabSize, 2)
		ref := allLogits(t, m, quant.F32, held)
		if err := m.AddInt4Variant(32); err != nil {
			t.Fatal(err)
		}
		rtn := meanKL(ref, allLogits(t, m, quant.Int4, held), m.Config.VocabSize)
		if err := m.AddAWQVariant(calib, 32); err != nil {
			t.Fatal(err)
		}
		for l, layer := range m.Layers {
			if layer.Active != quant.Int4 {
				t.Fatalf("kv=%d: layer %d active %v after AddAWQVariant, want int4 as before", kv, l, layer.Active)
			}
		}
		awq := meanKL(ref, allLogits(t, m, quant.Int4, held), m.Config.VocabSize)
		t.Logf("n_kv_heads=%d: KL from F32 on held-out tokens: RTN int4 %.5f, AWQ int4 %.5f", kv, rtn, awq)
		if !(awq < 0.8*rtn) || !(awq > 0) {
			t.Errorf("n_kv_heads=%d: KL(F32 || AWQ int4) = %.5f, want below 0.8 x RTN int4's %.5f", kv, awq, rtn)
		}
	}
}

// TestSmoothQuantBeatsRTN checks the Int8 (W8A8) variant the same way: per-token activation quantization suffers
// from outlier channels, and SmoothQuant moves them into the weights.
func TestSmoothQuantBeatsRTN(t *testing.T) {
	for _, kv := range []int{4, 2} {
		m := outlierModel(t, kv)
		calib := randomSequences(8, 64, m.Config.VocabSize, 1)
		held := randomSequences(4, 64, m.Config.VocabSize, 2)
		ref := allLogits(t, m, quant.F32, held)
		for l := range m.Layers {
			if _, err := m.AddVariant(l, quant.Int8); err != nil {
				t.Fatal(err)
			}
		}
		rtn := meanKL(ref, allLogits(t, m, quant.Int8, held), m.Config.VocabSize)
		if err := m.AddSmoothQuantVariant(calib, 0.5); err != nil {
			t.Fatal(err)
		}
		sq := meanKL(ref, allLogits(t, m, quant.Int8, held), m.Config.VocabSize)
		t.Logf("n_kv_heads=%d: KL from F32 on held-out tokens: RTN W8A8 %.6f, SmoothQuant W8A8 %.6f", kv, rtn, sq)
		if !(sq < 0.8*rtn) || !(sq > 0) {
			t.Errorf("n_kv_heads=%d: KL(F32 || SmoothQuant) = %.6f, want below 0.8 x RTN W8A8's %.6f", kv, sq, rtn)
		}
	}
}

func TestCalibrationErrors(t *testing.T) {
	m := outlierModel(t, 2)
	for _, calib := range [][][]int32{nil, {{}}, {{1, 2, 300}}} {
		if err := m.AddAWQVariant(calib, 32); err == nil {
			t.Errorf("AddAWQVariant(%v): no error", calib)
		}
	}
	if err := m.AddAWQVariant([][]int32{{1, 2, 3}}, 31); err == nil {
		t.Error("AddAWQVariant with odd group: no error")
	}
	if _, ok := m.Layers[0].Variants[quant.Int4]; ok {
		t.Error("a failed AddAWQVariant left an Int4 variant behind")
	}
}

// TestStories260KPerplexityByFormat reports stories260K's per-paragraph perplexity in every precision the engine
// has, on paragraphs 2000 to 2999 of tinystories_val.txt, with AWQ and SmoothQuant calibrated on the first 256
// paragraphs (disjoint). stories260K's widths (dim 64, hidden 172) are not multiples of 32, so Q8_0 and Q4_0 do
// not apply to its W2 and Int4 uses group 32 for dim-wide inputs and 86 for W2 (Int4Group). The figures are
// logged; the test asserts the ordering that must hold.
func TestStories260KPerplexityByFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: perplexity of every format takes a minute")
	}
	ckPath := datadir.ForTest(t, "models/stories260K.bin")
	vocab, err := tokenizer.LoadBin(datadir.ForTest(t, "models/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(datadir.ForTest(t, "eval/tinystories_val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	paras := eval.Paragraphs(string(text))
	const calibParas, evalFrom, evalTo = 256, 2000, 3000
	heldOut := paras[evalFrom:evalTo]
	var calib [][]int32
	for _, p := range paras[:calibParas] {
		ids := vocab.Encode(p, true, false)
		s := make([]int32, len(ids))
		for i, id := range ids {
			s[i] = int32(id)
		}
		calib = append(calib, s)
	}
	ck, err := model.LoadLlama2c(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.FromCheckpoint(ck)
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	ppl := map[string]float64{}
	measure := func(name string, f quant.Format) {
		for l := range m.Layers {
			if err := m.SetPrecision(l, f); err != nil {
				t.Fatal(err)
			}
		}
		r, err := eval.PerParagraph(m, vocab, heldOut)
		if err != nil {
			t.Fatal(err)
		}
		ppl[name] = r.PPL
		t.Logf("%-16s PPL %.4f (%d tokens, %.0f tok/s)", name, r.PPL, r.Tokens, r.TokensPerSecond())
	}
	measure("f32", quant.F32)
	for _, f := range []quant.Format{quant.F16, quant.Int8} {
		for l := range m.Layers {
			if _, err := m.AddVariant(l, f); err != nil {
				t.Fatal(err)
			}
		}
		measure(f.String(), f)
	}
	if err := m.AddSmoothQuantVariant(calib, 0.5); err != nil {
		t.Fatal(err)
	}
	measure("int8 smoothquant", quant.Int8)
	for _, g := range []int{32, 64} {
		if err := m.AddInt4Variant(g); err != nil {
			t.Fatal(err)
		}
		measure("int4 rtn g"+strconv.Itoa(g), quant.Int4)
		if err := m.AddAWQVariant(calib, g); err != nil {
			t.Fatal(err)
		}
		measure("int4 awq g"+strconv.Itoa(g), quant.Int4)
	}
	if math.Abs(ppl["f16"]-ppl["f32"]) > 0.01*ppl["f32"] || ppl["int8"] > 1.05*ppl["f32"] {
		t.Errorf("f16 %.4f or int8 %.4f too far from f32 %.4f", ppl["f16"], ppl["int8"], ppl["f32"])
	}
	for _, g := range []string{"32", "64"} {
		if !(ppl["int4 awq g"+g] < ppl["int4 rtn g"+g]) {
			t.Errorf("group %s: AWQ int4 PPL %.4f not below RTN int4's %.4f", g, ppl["int4 awq g"+g], ppl["int4 rtn g"+g])
		}
	}
}
