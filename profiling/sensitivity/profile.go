package sensitivity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/quant"
)

// SchemaVersion is the version of the profile's JSON layout; Load rejects any other.
const SchemaVersion = 1

// Reduction says, in the profile, how the cosines were reduced (see the package documentation).
const Reduction = "mean over calibration tokens of the per-token cosine of Dim-wide vectors (float64); " +
	"MDS on the final hidden state (residual stream after the last layer, before the final norm)"

// Profile is the sensitivity profile of one model for one quantizer: the file the engine reads its swap order
// from. It holds nothing that varies between runs (no timings), so the same inputs and seeds give the same bytes.
type Profile struct {
	Schema      int         `json:"schema"`
	Model       ModelInfo   `json:"model"`
	Quantizer   Quantizer   `json:"quantizer"`
	Calibration TextInfo    `json:"calibration"`
	Evaluation  *TextInfo   `json:"evaluation,omitempty"`
	Weights     Weights     `json:"weights"`
	Reduction   string      `json:"reduction"`
	Layers      []Scores    `json:"layers"` // against the empty quantized set
	Rounds      []Round     `json:"rounds"`
	Order       []int       `json:"order"` // the LIS swap order: quantize Order[0] first
	Forwards    int         `json:"forwards"`
	Baseline    *eval.Point `json:"baseline,omitempty"` // full precision (K = 0) on the evaluation text
	Orders      []OrderEval `json:"orders,omitempty"`
	// Additivity is the near-additivity check along the LIS order: each layer's perplexity cost alone and when
	// added to the layers before it.
	Additivity []eval.Marginal `json:"additivity,omitempty"`
}

// ModelInfo identifies the model profiled.
type ModelInfo struct {
	Name   string       `json:"name"`
	SHA256 string       `json:"sha256,omitempty"` // of the checkpoint file
	Config model.Config `json:"config"`
}

// Quantizer names the quantized variant the layers were ranked in: its format, how it was made (rtn, awq,
// smoothquant), the Int4 group size of Dim-wide rows where it has one, and whether the activations were left
// unquantized (weight-only: W8A16, W4A16) rather than quantized per token as the engine runs the format.
type Quantizer struct {
	Format     string `json:"format"`
	Method     string `json:"method"`
	Group      int    `json:"group,omitempty"`
	WeightOnly bool   `json:"weight_only,omitempty"`
}

// TextInfo names a text and how much of it was used.
type TextInfo struct {
	Name       string `json:"name"`
	Offset     int    `json:"offset"` // paragraphs skipped at the start
	Paragraphs int    `json:"paragraphs"`
	Tokens     int    `json:"tokens"`
}

// OrderEval is one order's quality curve: perplexity and KL after the first K layers are quantized. Seed is set
// for random orders.
type OrderEval struct {
	Name  string       `json:"name"`
	Seed  *uint64      `json:"seed,omitempty"`
	Order []int        `json:"order"`
	Curve []eval.Point `json:"curve"`
}

// Save writes p as indented JSON to path.
func (p *Profile) Save(path string) error {
	b, err := p.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Marshal returns p as indented JSON with a final newline.
func (p *Profile) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Load reads a profile, checking its schema version and that Order is a permutation of the model's layers.
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Profile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Schema != SchemaVersion {
		return nil, fmt.Errorf("%s: profile schema %d, want %d", path, p.Schema, SchemaVersion)
	}
	n := p.Model.Config.NLayers
	if len(p.Order) != n || !slices.Equal(slices.Sorted(slices.Values(p.Order)), FrontToBack(n)) {
		return nil, fmt.Errorf("%s: order %v is not a permutation of the model's %d layers", path, p.Order, n)
	}
	return &p, nil
}

// Spec is what Build profiles: the quantizer (whose variant every layer must have), the calibration and
// evaluation texts, and the orders to evaluate.
type Spec struct {
	Model       ModelInfo
	Quantizer   Quantizer
	Calibration TextInfo // Tokens is filled in by Build
	Calib       [][]int32
	Evaluation  TextInfo // Paragraphs and Tokens are filled in by Build
	Eval        []string // evaluation paragraphs; none: no curves
	Orders      []string // of lis, front, back, random
	Seeds       int      // random orders, seeded 1..Seeds
	AllKs       bool     // curves at every k, not only 1, 2, 4, ..., L
	Options     Options
	// EvalProgress, when set, is called after each configuration is scored with the count and total of curve
	// points (some are shared between orders and cost nothing).
	EvalProgress func(done, total int)
}

// OrderNames are the orders Build knows.
var OrderNames = []string{"lis", "front", "back", "random"}

// Build ranks m's layers (Rank) and, when there is evaluation text, measures each order's curve and the
// near-additivity along the LIS order.
func Build(m *model.Model, vocab *tokenizer.Vocab, spec Spec) (*Profile, error) {
	f, err := quant.ParseFormat(spec.Quantizer.Format)
	if err != nil {
		return nil, err
	}
	for _, o := range spec.Orders {
		if !slices.Contains(OrderNames, o) {
			return nil, fmt.Errorf("order %q, want one of %v", o, OrderNames)
		}
	}
	rank, err := Rank(m, f, spec.Calib, spec.Options)
	if err != nil {
		return nil, err
	}
	w := spec.Options.Weights
	if w == (Weights{}) {
		w = DefaultWeights
	}
	p := &Profile{
		Schema: SchemaVersion, Model: spec.Model, Quantizer: spec.Quantizer, Calibration: spec.Calibration,
		Weights: w, Reduction: Reduction, Layers: rank.Layers, Rounds: rank.Rounds, Order: rank.Order,
		Forwards: rank.Forwards,
	}
	p.Model.Config = m.Config
	p.Calibration.Tokens = 0
	for _, s := range spec.Calib {
		p.Calibration.Tokens += len(s)
	}
	if len(spec.Eval) == 0 {
		return p, nil
	}
	ev, err := eval.NewEvaluator(m, vocab, spec.Eval)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	base, err := ev.Quantized(f, nil)
	if err != nil {
		return nil, err
	}
	p.Baseline = &eval.Point{K: 0, Comparison: base}
	info := spec.Evaluation
	info.Paragraphs, info.Tokens = ev.Paragraphs(), base.Tokens
	p.Evaluation = &info

	n := len(m.Layers)
	for _, name := range spec.Orders {
		switch name {
		case "lis":
			p.Orders = append(p.Orders, OrderEval{Name: name, Order: rank.Order})
		case "front":
			p.Orders = append(p.Orders, OrderEval{Name: name, Order: FrontToBack(n)})
		case "back":
			p.Orders = append(p.Orders, OrderEval{Name: name, Order: BackToFront(n)})
		case "random":
			for s := range uint64(spec.Seeds) {
				seed := s + 1
				p.Orders = append(p.Orders, OrderEval{Name: name, Seed: &seed, Order: Random(n, seed)})
			}
		}
	}
	ks := eval.Ks(n, spec.AllKs)
	total, done := len(p.Orders)*len(ks)+2*n, 0
	for i := range p.Orders {
		o := &p.Orders[i]
		for _, k := range ks {
			pt, err := ev.Curve(f, o.Order, []int{k})
			if err != nil {
				return nil, err
			}
			o.Curve = append(o.Curve, pt...)
			done++
			if spec.EvalProgress != nil {
				spec.EvalProgress(done, total)
			}
		}
	}
	if p.Additivity, err = ev.Additivity(f, rank.Order); err != nil {
		return nil, err
	}
	if spec.EvalProgress != nil {
		spec.EvalProgress(total, total)
	}
	return p, nil
}
