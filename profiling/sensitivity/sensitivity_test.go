package sensitivity

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/quant"
)

// tinyConfig is a small synthetic shape with grouped-query attention and a byte-level vocabulary.
var tinyConfig = model.Config{Dim: 64, HiddenDim: 128, NLayers: 4, NHeads: 4, NKVHeads: 2, VocabSize: 300,
	SeqLen: 64, RopeTheta: 10000, NormEps: 1e-5}

func tinyModel(t testing.TB, f quant.Format) (*model.Model, *tokenizer.Vocab) {
	t.Helper()
	m, err := model.FromCheckpoint(model.Synthesize(tinyConfig, 7))
	if err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		if _, err := m.AddVariant(l, f); err != nil {
			t.Fatal(err)
		}
	}
	vocab, err := model.SynthVocab(tinyConfig.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	return m, vocab
}

var tinyText = []string{
	"once upon a time there was a little dog", "the sun was warm and the sky was blue",
	"she liked to play in the park with her friends", "one day a big bird flew over the tree",
	"they ate cake and sang songs all night", "the end of the story was happy",
}

// refCosine is the reference reduction: the mean over rows of float64 cosines of dim-wide rows.
func refCosine(a, b []float32, dim int) float64 {
	var s float64
	for t := 0; t < len(a)/dim; t++ {
		var ab, aa, bb float64
		for i := t * dim; i < (t+1)*dim; i++ {
			ab += float64(a[i]) * float64(b[i])
			aa += float64(a[i]) * float64(a[i])
			bb += float64(b[i]) * float64(b[i])
		}
		s += ab / math.Sqrt(aa*bb)
	}
	return s / float64(len(a)/dim)
}

// activations runs each sequence alone through m (its own Sequence-free Forward) and returns every layer's input
// and output and the final hidden state, concatenated over sequences.
func activations(t *testing.T, m *model.Model, calib [][]int32) (ins, outs [][]float32) {
	t.Helper()
	n := len(m.Layers)
	ins, outs = make([][]float32, n), make([][]float32, n)
	for _, s := range calib {
		cache := model.NewKVCache(m.Config, 4, 16)
		b := &model.Batch{Tokens: s, QStart: []int32{0, int32(len(s))}, SeqLens: []int32{int32(len(s))},
			BlockTables: []int32{0, 1, 2, 3}, MaxBlocksPerSeq: 4}
		var ws model.Workspace
		err := m.Forward(b, cache, &ws, make([]float32, m.Config.VocabSize), func(l int, pt model.TapPoint, x []float32, _ int) {
			switch pt {
			case model.TapLayerIn:
				ins[l] = append(ins[l], x...)
			case model.TapLayerOut:
				outs[l] = append(outs[l], x...)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ins, outs
}

func TestRankAgainstReference(t *testing.T) {
	m, vocab := tinyModel(t, quant.Int4)
	text := tinyText
	if testing.Short() {
		text = text[:3]
	}
	calib, _ := CalibrationTokens(vocab, text, 0, tinyConfig.SeqLen)
	r, err := Rank(m, quant.Int4, calib, Options{MaxBatchTokens: 60})
	if err != nil {
		t.Fatal(err)
	}
	n, dim := len(m.Layers), m.Config.Dim
	if r.Forwards != 1+n*(n+1)/2 {
		t.Errorf("forwards = %d, want 1+L(L+1)/2 = %d", r.Forwards, 1+n*(n+1)/2)
	}
	fpIn, fpOut := activations(t, m, calib)
	final := func(q []int) []float32 {
		v, err := eval.WithQuantized(m, quant.Int4, q)
		if err != nil {
			t.Fatal(err)
		}
		_, outs := activations(t, v, calib)
		return outs[n-1]
	}
	var q []int
	for round, rd := range r.Rounds {
		if !slices.Equal(rd.Quantized, q) || rd.Quantized == nil {
			t.Fatalf("round %d: quantized %v, want %v", round, rd.Quantized, q)
		}
		ref := final(q)
		bestLIS, best := math.Inf(-1), -1
		for _, c := range rd.Candidates {
			p := c.Layer
			v, err := eval.WithQuantized(m, quant.Int4, []int{p})
			if err != nil {
				t.Fatal(err)
			}
			_, qOut := activations(t, v, calib)
			want := Scores{Layer: p, LTS: refCosine(fpOut[p], fpIn[p], dim), LRS: refCosine(fpOut[p], qOut[p], dim),
				MDS: refCosine(ref, final(append(slices.Clone(q), p)), dim)}
			want.LIS = 0.25*want.LTS + 0.25*want.LRS + 0.5*want.MDS
			for _, pair := range [][2]float64{{c.LTS, want.LTS}, {c.LRS, want.LRS}, {c.MDS, want.MDS}, {c.LIS, want.LIS}} {
				if math.Abs(pair[0]-pair[1]) > 1e-5 {
					t.Errorf("round %d layer %d: scores %+v, want %+v", round, p, c, want)
					break
				}
			}
			if c.LIS > bestLIS {
				bestLIS, best = c.LIS, p
			}
		}
		if rd.Chosen != best {
			t.Errorf("round %d: chose %d, want the highest LIS %d", round, rd.Chosen, best)
		}
		q = append(q, rd.Chosen)
	}
	if !slices.Equal(r.Order, q) {
		t.Errorf("order %v, want %v", r.Order, q)
	}
	if len(r.Rounds[n-1].Candidates) != 1 || r.Layers[r.Order[0]].LIS != r.Rounds[0].Candidates[slices.IndexFunc(r.Rounds[0].Candidates, func(s Scores) bool { return s.Layer == r.Order[0] })].LIS {
		t.Errorf("rounds do not narrow to one candidate or layer scores differ from round 0")
	}
}

// TestRankIdentityVariant ranks in the model's own precision: quantizing changes nothing, so LRS and MDS are 1 and
// LIS = 0.25·LTS + 0.75.
func TestRankIdentityVariant(t *testing.T) {
	m, vocab := tinyModel(t, quant.F32)
	calib, _ := CalibrationTokens(vocab, tinyText[:3], 0, tinyConfig.SeqLen)
	r, err := Rank(m, quant.F32, calib, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Layers {
		if math.Abs(s.LRS-1) > 1e-12 || math.Abs(s.MDS-1) > 1e-12 || math.Abs(s.LIS-(0.25*s.LTS+0.75)) > 1e-12 {
			t.Errorf("layer %d: %+v, want LRS = MDS = 1", s.Layer, s)
		}
		if s.LTS <= -1 || s.LTS >= 1 {
			t.Errorf("layer %d: LTS %v outside (-1, 1)", s.Layer, s.LTS)
		}
	}
}

func TestOrders(t *testing.T) {
	if got := FrontToBack(4); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("front = %v", got)
	}
	if got := BackToFront(4); !slices.Equal(got, []int{3, 2, 1, 0}) {
		t.Errorf("back = %v", got)
	}
	a, b, c := Random(12, 1), Random(12, 1), Random(12, 2)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("random orders: seed 1 %v, %v; seed 2 %v", a, b, c)
	}
	if !slices.Equal(slices.Sorted(slices.Values(a)), FrontToBack(12)) {
		t.Errorf("random order %v is not a permutation", a)
	}
}

func buildTiny(t *testing.T) *Profile {
	m, vocab := tinyModel(t, quant.Int8)
	calib, used := CalibrationTokens(vocab, tinyText, 40, tinyConfig.SeqLen)
	p, err := Build(m, vocab, Spec{
		Model:       ModelInfo{Name: "synthetic"},
		Quantizer:   Quantizer{Format: "int8", Method: "rtn"},
		Calibration: TextInfo{Name: "tinyText", Paragraphs: used},
		Calib:       calib,
		Evaluation:  TextInfo{Name: "tinyText", Offset: used},
		Eval:        tinyText[used:],
		Orders:      OrderNames,
		Seeds:       2,
		AllKs:       true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBuildTwin runs the whole profiler on a synthetic model: scores, order, curves and additivity, twice, and
// checks that the JSON is the same and survives Save and Load.
func TestBuildTwin(t *testing.T) {
	p := buildTiny(t)
	n := tinyConfig.NLayers
	if p.Calibration.Tokens != 40 {
		t.Errorf("calibration tokens %d, want 40", p.Calibration.Tokens)
	}
	if len(p.Orders) != 5 {
		t.Fatalf("%d orders, want lis, front, back and 2 random", len(p.Orders))
	}
	for _, o := range p.Orders {
		if len(o.Curve) != n {
			t.Fatalf("%s: %d points, want %d", o.Name, len(o.Curve), n)
		}
		if last := o.Curve[n-1]; last.Comparison != p.Orders[0].Curve[n-1].Comparison {
			t.Errorf("%s: all layers quantized gives %+v, lis gives %+v", o.Name, last, p.Orders[0].Curve[n-1])
		}
		if o.Curve[0].KL <= 0 {
			t.Errorf("%s: KL after one Int8 layer %v, want > 0", o.Name, o.Curve[0].KL)
		}
	}
	if !slices.Equal(p.Orders[0].Order, p.Order) {
		t.Errorf("lis curve order %v, profile order %v", p.Orders[0].Order, p.Order)
	}
	var sum float64
	for _, a := range p.Additivity {
		sum += a.Added
	}
	if all := p.Orders[0].Curve[n-1].PPL - p.Baseline.PPL; math.Abs(sum-all) > 1e-9*p.Baseline.PPL {
		t.Errorf("marginal costs sum to %v, want PPL(all) - PPL(none) = %v", sum, all)
	}
	if a := p.Additivity[0]; a.Alone != a.Added {
		t.Errorf("first layer's cost alone %v and added to nothing %v differ", a.Alone, a.Added)
	}

	j1, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	j2, err := buildTiny(t).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j1, j2) {
		t.Errorf("two runs give different profiles")
	}
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if j3, _ := q.Marshal(); !bytes.Equal(j1, j3) {
		t.Errorf("profile changed through Save and Load")
	}
}

func TestLoadRejects(t *testing.T) {
	p := &Profile{Schema: SchemaVersion, Model: ModelInfo{Config: tinyConfig}, Order: []int{0, 1, 2, 3}}
	dir := t.TempDir()
	for name, c := range map[string]struct {
		edit func(p Profile) Profile
		want string
	}{
		"schema": {func(p Profile) Profile { p.Schema = 99; return p }, "schema 99"},
		"order":  {func(p Profile) Profile { p.Order = []int{0, 1, 1, 3}; return p }, "not a permutation"},
		"short":  {func(p Profile) Profile { p.Order = []int{0, 1}; return p }, "not a permutation"},
	} {
		q := c.edit(*p)
		path := filepath.Join(dir, name+".json")
		if err := q.Save(path); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load error %v, want one containing %q", name, err, c.want)
		}
	}
	path := filepath.Join(dir, "unknown.json")
	if err := os.WriteFile(path, []byte(`{"schema":1,"extra":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("unknown field: Load error %v", err)
	}
}

// TestStories260K profiles the real stories260K in Int4 RTN on the first paragraphs of the TinyStories
// validation text and evaluates on later ones.
func TestStories260K(t *testing.T) {
	m, vocab := modeltest.Stories260K(t)
	text, err := os.ReadFile(datadir.ForTest(t, "eval/tinystories_val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	paras := eval.Paragraphs(string(text))
	calibTokens, evalParas, orders, allKs := 4000, 100, []string{"lis", "front"}, true
	if testing.Short() {
		calibTokens, evalParas, orders, allKs = 128, 3, []string{"lis"}, false
	}
	for l := range m.Layers {
		if _, err := m.AddVariant(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	calib, used := CalibrationTokens(vocab, paras, calibTokens, m.Config.SeqLen)
	p, err := Build(m, vocab, Spec{
		Quantizer: Quantizer{Format: "int4", Method: "rtn"},
		Calib:     calib, Eval: paras[used : used+evalParas], Orders: orders, AllKs: allKs,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The full-precision perplexity of these paragraphs is a few units (SOURCES.md: about 8 over the whole
	// file); Int4 on every layer raises it.
	if p.Baseline.PPL < 2 || p.Baseline.PPL > 20 {
		t.Errorf("full-precision PPL %v, want a stories260K-like 2..20", p.Baseline.PPL)
	}
	lis := p.Orders[0].Curve
	if all := lis[len(lis)-1]; all.PPL <= p.Baseline.PPL || all.KL <= 0 {
		t.Errorf("all layers Int4: %+v, want PPL above %v and KL > 0", all, p.Baseline.PPL)
	}
	t.Logf("order %v; curves %+v", p.Order, p.Orders)
}

// TestWidenVariants: the weight-only variant holds the quantized variant's values in float32, shares its norms and
// leaves the other variants alone; a layer in it gives other outputs than in the quantized kernels (the activations
// are no longer rounded) and other than full precision.
func TestWidenVariants(t *testing.T) {
	m, vocab := tinyModel(t, quant.Int8)
	int8 := make([]*model.LayerWeights, len(m.Layers))
	for l, layer := range m.Layers {
		int8[l] = layer.Variants[quant.Int8]
	}
	ev, err := eval.NewEvaluator(m, vocab, tinyText[3:])
	if err != nil {
		t.Fatal(err)
	}
	w8a8, err := ev.Quantized(quant.Int8, []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	WidenVariants(m, quant.Int8)
	for l, layer := range m.Layers {
		v := layer.Variants[quant.Int8]
		if &v.AttnNorm[0] != &int8[l].AttnNorm[0] || &v.FFNNorm[0] != &int8[l].FFNNorm[0] || layer.Variants[layer.Base] == v {
			t.Fatalf("layer %d: norms or base variant changed", l)
		}
		for i, q := range v.Matrices() {
			src := int8[l].Matrices()[i]
			if q.Format != quant.F32 || q.Rows != src.Rows || q.Cols != src.Cols || !slices.Equal(q.F32, src.Dequantize()) {
				t.Fatalf("layer %d matrix %d: %v [%d, %d], want the int8 values in f32", l, i, q.Format, q.Rows, q.Cols)
			}
		}
	}
	if ev, err = eval.NewEvaluator(m, vocab, tinyText[3:]); err != nil {
		t.Fatal(err)
	}
	w8a16, err := ev.Quantized(quant.Int8, []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if w8a16.KL <= 0 || w8a16.KL == w8a8.KL {
		t.Errorf("KL weight-only %v, W8A8 %v: want above 0 and another figure", w8a16.KL, w8a8.KL)
	}
	t.Logf("all layers: W8A8 PPL %.4f KL %.6f; W8A16 PPL %.4f KL %.6f", w8a8.PPL, w8a8.KL, w8a16.PPL, w8a16.KL)
}
