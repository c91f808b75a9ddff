package eval

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/quant"
)

// WithQuantized returns a view of m in which the given layers run their f variant and every other layer its
// base variant (the precision it was loaded in: "full precision" for the profiler). The view shares m's weights
// and variant maps, so it costs no weight memory; m itself is not changed, and m and any number of views may run
// at the same time (nobody may add variants meanwhile). Every listed layer must have an f variant.
func WithQuantized(m *model.Model, f quant.Format, layers []int) (*model.Model, error) {
	v := *m
	v.Layers = make([]*model.Layer, len(m.Layers))
	for l, layer := range m.Layers {
		c := *layer
		c.Active = c.Base
		v.Layers[l] = &c
	}
	for _, l := range layers {
		if l < 0 || l >= len(m.Layers) {
			return nil, fmt.Errorf("layer %d out of range [0, %d)", l, len(m.Layers))
		}
		if _, ok := m.Layers[l].Variants[f]; !ok {
			return nil, fmt.Errorf("layer %d has no %v variant", l, f)
		}
		v.Layers[l].Active = f
	}
	return &v, nil
}

// Comparison is the quality of a configuration against the reference (full precision) on the same paragraphs:
// the configuration's perplexity and the mean over scored tokens of KL(P_ref ‖ P_config) in nats, where P is the
// next-token distribution softmax(logits).
type Comparison struct {
	Tokens int     `json:"tokens"`
	NLL    float64 `json:"nll"`
	PPL    float64 `json:"ppl"`
	KL     float64 `json:"kl"`
}

// Evaluator scores configurations of one model against its full-precision base on fixed paragraphs, scored the
// way PerParagraph scores them (BOS, teacher forcing from position 0, cut to the context). It remembers each set
// of quantized layers it has scored, so orders that share a prefix (or all quantize every layer at the end) cost
// one evaluation.
type Evaluator struct {
	m      *model.Model
	ref    *model.Model
	toks   [][]int32
	mu     sync.Mutex
	scored map[string]Comparison
}

// NewEvaluator tokenizes paragraphs once for scoring m's configurations.
func NewEvaluator(m *model.Model, vocab *tokenizer.Vocab, paragraphs []string) (*Evaluator, error) {
	ref, err := WithQuantized(m, 0, nil)
	if err != nil {
		return nil, err
	}
	e := &Evaluator{m: m, ref: ref, scored: map[string]Comparison{}}
	for _, p := range paragraphs {
		if t := encode(vocab, p, m.Config.SeqLen); len(t) >= 2 {
			e.toks = append(e.toks, t)
		}
	}
	if len(e.toks) == 0 {
		return nil, fmt.Errorf("no paragraph has a token to score")
	}
	return e, nil
}

// Paragraphs is the number of paragraphs scored (those with at least one token after BOS).
func (e *Evaluator) Paragraphs() int { return len(e.toks) }

// Quantized scores the configuration in which layers run in format f (the order of layers does not matter).
func (e *Evaluator) Quantized(f quant.Format, layers []int) (Comparison, error) {
	set := slices.Clone(layers)
	slices.Sort(set)
	key := fmt.Sprint(f, set)
	e.mu.Lock()
	c, ok := e.scored[key]
	e.mu.Unlock()
	if ok {
		return c, nil
	}
	cfg, err := WithQuantized(e.m, f, set)
	if err != nil {
		return Comparison{}, err
	}
	if c, err = Compare(e.ref, cfg, e.toks); err != nil {
		return Comparison{}, err
	}
	e.mu.Lock()
	e.scored[key] = c
	e.mu.Unlock()
	return c, nil
}

// Compare runs every token sequence through ref and m (two views of one model, or two models with one
// vocabulary) and returns m's perplexity on seqs[i][1:] and the mean KL(P_ref ‖ P_m) over the same positions.
// Sequences run in parallel; the sums are added in sequence order, so the result does not depend on scheduling.
func Compare(ref, m *model.Model, seqs [][]int32) (Comparison, error) {
	if ref.Config.VocabSize != m.Config.VocabSize {
		return Comparison{}, fmt.Errorf("compare: vocabularies of %d and %d tokens", ref.Config.VocabSize, m.Config.VocabSize)
	}
	type part struct {
		nll, kl float64
		tokens  int
		err     error
	}
	parts := make([]part, len(seqs))
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(seqs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err1 := model.NewSequence(ref, ref.Config.SeqLen)
			ms, err2 := model.NewSequence(m, m.Config.SeqLen)
			lp, lq := make([]float64, m.Config.VocabSize), make([]float64, m.Config.VocabSize)
			for {
				mu.Lock()
				j := next
				next++
				mu.Unlock()
				if j >= len(seqs) {
					return
				}
				if p := &parts[j]; err1 != nil || err2 != nil {
					p.err = fmt.Errorf("sequence: %w", cmpErr(err1, err2))
				} else {
					p.nll, p.kl, p.tokens, p.err = compareSequence(rs, ms, seqs[j], lp, lq)
				}
			}
		}()
	}
	wg.Wait()
	var c Comparison
	var nll, kl float64
	for j, p := range parts {
		if p.err != nil {
			return Comparison{}, fmt.Errorf("sequence %d: %w", j, p.err)
		}
		nll += p.nll
		kl += p.kl
		c.Tokens += p.tokens
	}
	if c.Tokens == 0 {
		return Comparison{}, fmt.Errorf("no tokens to score")
	}
	c.NLL = nll / float64(c.Tokens)
	c.PPL = math.Exp(c.NLL)
	c.KL = kl / float64(c.Tokens)
	return c, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// compareSequence feeds toks[:n-1] through both sequences and returns, summed over the n-1 positions, m's NLL of
// the next token and KL(P_ref ‖ P_m); lp and lq are [vocab] scratch for the log-probabilities.
func compareSequence(rs, ms *model.Sequence, toks []int32, lp, lq []float64) (nll, kl float64, n int, err error) {
	if len(toks) < 2 {
		return 0, 0, 0, nil
	}
	in := toks[:len(toks)-1]
	rs.Reset()
	ms.Reset()
	rl, err := rs.Feed(in, true)
	if err != nil {
		return 0, 0, 0, err
	}
	ml, err := ms.Feed(in, true)
	if err != nil {
		return 0, 0, 0, err
	}
	v := len(lp)
	for t := range in {
		logSoftmax(lp, rl[t*v:(t+1)*v])
		logSoftmax(lq, ml[t*v:(t+1)*v])
		nll -= lq[toks[t+1]]
		kl += KL(lp, lq)
	}
	return nll, kl, len(in), nil
}

// logSoftmax writes log softmax(logits) into dst, in float64.
func logSoftmax(dst []float64, logits []float32) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	for i, v := range logits {
		dst[i] = float64(v) - lse
	}
}

// KL is the Kullback–Leibler divergence Σ_i p_i (log p_i − log q_i) of two distributions given as
// log-probabilities, in nats.
func KL(logP, logQ []float64) float64 {
	var s float64
	for i, lp := range logP {
		s += math.Exp(lp) * (lp - logQ[i])
	}
	return s
}

// Ks returns the numbers of quantized layers a curve is measured at for a model of n layers: 1, 2, 4, ... and n,
// or every number 1..n when all is set.
func Ks(n int, all bool) []int {
	var ks []int
	for k := 1; k <= n; k++ {
		if all || k&(k-1) == 0 || k == n {
			ks = append(ks, k)
		}
	}
	return ks
}

// Point is a configuration's quality after the first K layers of an order are quantized.
type Point struct {
	K int `json:"k"`
	Comparison
}

// Curve scores the configurations that quantize the first k layers of order in format f, for each k in ks.
func (e *Evaluator) Curve(f quant.Format, order []int, ks []int) ([]Point, error) {
	var pts []Point
	for _, k := range ks {
		if k < 0 || k > len(order) {
			return nil, fmt.Errorf("curve: k=%d, want 0..%d", k, len(order))
		}
		c, err := e.Quantized(f, order[:k])
		if err != nil {
			return nil, err
		}
		pts = append(pts, Point{K: k, Comparison: c})
	}
	return pts, nil
}

// Marginal is the near-additivity check for one layer: how much its quantization raises perplexity on its own
// (Alone = PPL({p}) − PPL(∅)) and when added to the layers before it in an order (Added = PPL(Q ∪ {p}) − PPL(Q)).
// When layers' costs are nearly additive the two agree, which is what lets a greedy order stand for all sets.
type Marginal struct {
	Layer int     `json:"layer"`
	Alone float64 `json:"alone"`
	Added float64 `json:"added"`
}

// Additivity returns each layer's Marginal along order (in the order's sequence).
func (e *Evaluator) Additivity(f quant.Format, order []int) ([]Marginal, error) {
	base, err := e.Quantized(f, nil)
	if err != nil {
		return nil, err
	}
	prev := base
	var out []Marginal
	for i, p := range order {
		alone, err := e.Quantized(f, []int{p})
		if err != nil {
			return nil, err
		}
		with, err := e.Quantized(f, order[:i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, Marginal{Layer: p, Alone: alone.PPL - base.PPL, Added: with.PPL - prev.PPL})
		prev = with
	}
	return out, nil
}
