package eval

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/quant"
)

func TestKL(t *testing.T) {
	p, q := []float64{0.5, 0.25, 0.25}, []float64{0.25, 0.5, 0.25}
	lp, lq := make([]float64, 3), make([]float64, 3)
	for i := range p {
		lp[i], lq[i] = math.Log(p[i]), math.Log(q[i])
	}
	// 0.5·log 2 + 0.25·log(1/2) = 0.25·log 2
	if got, want := KL(lp, lq), 0.25*math.Ln2; math.Abs(got-want) > 1e-15 {
		t.Errorf("KL = %v, want %v", got, want)
	}
	if got := KL(lp, lp); got != 0 {
		t.Errorf("KL(p, p) = %v, want 0", got)
	}
	logits := []float32{1, 2, 3}
	ls := make([]float64, 3)
	logSoftmax(ls, logits)
	for i := range logits {
		if math.Abs(ls[i]-logSoftmaxAt(logits, i)) > 1e-15 {
			t.Errorf("logSoftmax[%d] = %v, want %v", i, ls[i], logSoftmaxAt(logits, i))
		}
	}
}

func TestKs(t *testing.T) {
	for _, c := range []struct {
		n    int
		all  bool
		want []int
	}{{5, false, []int{1, 2, 4, 5}}, {8, false, []int{1, 2, 4, 8}}, {12, false, []int{1, 2, 4, 8, 12}}, {3, true, []int{1, 2, 3}}} {
		if got := Ks(c.n, c.all); !slices.Equal(got, c.want) {
			t.Errorf("Ks(%d, %v) = %v, want %v", c.n, c.all, got, c.want)
		}
	}
}

func klModel(t *testing.T) (*model.Model, *tokenizer.Vocab) {
	t.Helper()
	cfg := model.Config{Dim: 32, HiddenDim: 64, NLayers: 3, NHeads: 4, NKVHeads: 4, VocabSize: 280, SeqLen: 48,
		RopeTheta: 10000, NormEps: 1e-5}
	m, err := model.FromCheckpoint(model.Synthesize(cfg, 3))
	if err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		if _, err := m.AddVariant(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	vocab, err := model.SynthVocab(cfg.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	return m, vocab
}

var klText = []string{"the cat sat on the mat", "a bird sang in the tree all morning long", "",
	"they walked home when the sun went down and the moon came up over the hills"}

// TestEvaluator checks a configuration's perplexity against PerParagraph on a model switched to it, its KL
// against the uncached Compare, and that full precision has KL 0 and PerParagraph's perplexity.
func TestEvaluator(t *testing.T) {
	m, vocab := klModel(t)
	e, err := NewEvaluator(m, vocab, klText)
	if err != nil {
		t.Fatal(err)
	}
	if e.Paragraphs() != 3 {
		t.Errorf("%d paragraphs scored, want 3 (the empty one has no token after BOS)", e.Paragraphs())
	}
	fp, err := e.Quantized(quant.Int4, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := PerParagraph(m, vocab, klText)
	if err != nil {
		t.Fatal(err)
	}
	if fp.Tokens != want.Tokens || math.Abs(fp.PPL-want.PPL) > 1e-9*want.PPL || math.Abs(fp.KL) > 1e-6 {
		t.Errorf("full precision %+v, want PPL %v on %d tokens and KL 0", fp, want.PPL, want.Tokens)
	}
	got, err := e.Quantized(quant.Int4, []int{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := WithQuantized(m, quant.Int4, []int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := Compare(e.ref, cfg, e.toks)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.KL-direct.KL) > 1e-6*direct.KL || got.NLL != direct.NLL || got.KL <= 0 {
		t.Errorf("cached reference %+v, uncached %+v", got, direct)
	}
	if same, err := Compare(cfg, cfg, e.toks); err != nil || same.KL != 0 || same.NLL != direct.NLL {
		t.Errorf("a configuration against itself: %+v, %v; want KL 0 and NLL %v", same, err, direct.NLL)
	}
	for _, l := range []int{0, 2} {
		if err := m.SetPrecision(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	switched, err := PerParagraph(m, vocab, klText)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.PPL-switched.PPL) > 1e-9*switched.PPL {
		t.Errorf("PPL with layers 0, 2 in Int4 %v, PerParagraph on the switched model %v", got.PPL, switched.PPL)
	}
}

func TestWithQuantized(t *testing.T) {
	m, _ := klModel(t)
	v, err := WithQuantized(m, quant.Int4, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if v.Layers[1].Active != quant.Int4 || v.Layers[0].Active != quant.F32 || m.Layers[1].Active != quant.F32 {
		t.Errorf("view layers %v %v, model layer 1 %v", v.Layers[0].Active, v.Layers[1].Active, m.Layers[1].Active)
	}
	for _, c := range []struct {
		f      quant.Format
		layers []int
		want   string
	}{{quant.Int4, []int{3}, "out of range"}, {quant.Int8, []int{0}, "no int8 variant"}} {
		if _, err := WithQuantized(m, c.f, c.layers); err == nil || !strings.Contains(strings.ToLower(err.Error()), c.want) {
			t.Errorf("WithQuantized(%v, %v): %v, want %q", c.f, c.layers, err, c.want)
		}
	}
}

// TestCurveAndAdditivity checks that curve points are the prefixes' scores and that the marginal costs along an
// order telescope to the cost of quantizing every layer.
func TestCurveAndAdditivity(t *testing.T) {
	m, vocab := klModel(t)
	e, err := NewEvaluator(m, vocab, klText)
	if err != nil {
		t.Fatal(err)
	}
	order := []int{1, 2, 0}
	pts, err := e.Curve(quant.Int4, order, Ks(3, true))
	if err != nil {
		t.Fatal(err)
	}
	for i, pt := range pts {
		want, err := e.Quantized(quant.Int4, order[:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if pt.K != i+1 || pt.Comparison != want {
			t.Errorf("point %d = %+v, want k=%d %+v", i, pt, i+1, want)
		}
	}
	marg, err := e.Additivity(quant.Int4, order)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := e.Quantized(quant.Int4, nil)
	var sum float64
	for _, mg := range marg {
		sum += mg.Added
	}
	if math.Abs(sum-(pts[2].PPL-base.PPL)) > 1e-9 || marg[0].Alone != marg[0].Added {
		t.Errorf("marginals %+v sum to %v, want %v", marg, sum, pts[2].PPL-base.PPL)
	}
	if _, err := e.Curve(quant.Int4, order, []int{4}); err == nil {
		t.Error("curve past the order's length: no error")
	}
}
