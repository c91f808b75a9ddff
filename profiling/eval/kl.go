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
	refLP  [][]float32 // the reference's log-probabilities per sequence, once computed (refCacheBytes)
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
	if err := e.cacheReference(); err != nil {
		return Comparison{}, err
	}
	if c, err = compare(e.ref, e.refLP, cfg, e.toks); err != nil {
		return Comparison{}, err
	}
	e.mu.Lock()
	e.scored[key] = c
	e.mu.Unlock()
	return c, nil
}

// refCacheBytes bounds the reference log-probabilities an Evaluator keeps (float32, tokens × vocabulary); above
// it the reference runs again beside every configuration.
const refCacheBytes = 512 << 20

// cacheReference computes the reference's log-probabilities once, when they fit in refCacheBytes.
func (e *Evaluator) cacheReference() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refLP != nil {
		return nil
	}
	n := 0
	for _, t := range e.toks {
		n += len(t) - 1
	}
	v := e.m.Config.VocabSize
	if 4*n*v > refCacheBytes {
		return nil
	}
	lp := make([][]float32, len(e.toks))
	err := parallel(e.ref, len(e.toks), func(_ int, s *model.Sequence, j int) error {
		toks := e.toks[j]
		s.Reset()
		logits, err := s.Feed(toks[:len(toks)-1], true)
		if err != nil {
			return err
		}
		out := make([]float32, len(logits))
		row := make([]float64, v)
		for t := range len(toks) - 1 {
			logSoftmax(row, logits[t*v:(t+1)*v])
			for i, x := range row {
				out[t*v+i] = float32(x)
			}
		}
		lp[j] = out
		return nil
	})
	if err != nil {
		return err
	}
	e.refLP = lp
	return nil
}

// parallel runs fn for j = 0..n-1 on min(GOMAXPROCS, n) workers w = 0, 1, ..., each with its own sequence on m,
// and returns the error of the lowest j that failed.
func parallel(m *model.Model, n int, fn func(w int, s *model.Sequence, j int) error) error {
	errs := make([]error, n)
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for w := range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := model.NewSequence(m, m.Config.SeqLen)
			for {
				mu.Lock()
				j := next
				next++
				mu.Unlock()
				if j >= n {
					return
				}
				if err != nil {
					errs[j] = err
				} else {
					errs[j] = fn(w, s, j)
				}
			}
		}()
	}
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			return fmt.Errorf("sequence %d: %w", j, err)
		}
	}
	return nil
}

// Compare runs every token sequence through ref and m (two views of one model, or two models with one
// vocabulary) and returns m's perplexity on seqs[i][1:] and the mean KL(P_ref ‖ P_m) over the same positions.
// Sequences run in parallel; the sums are added in sequence order, so the result does not depend on scheduling.
func Compare(ref, m *model.Model, seqs [][]int32) (Comparison, error) {
	return compare(ref, nil, m, seqs)
}

// compare is Compare with, when refLP is not nil, the reference's log-probabilities given for every sequence
// instead of computed.
func compare(ref *model.Model, refLP [][]float32, m *model.Model, seqs [][]int32) (Comparison, error) {
	if ref.Config.VocabSize != m.Config.VocabSize {
		return Comparison{}, fmt.Errorf("compare: vocabularies of %d and %d tokens", ref.Config.VocabSize, m.Config.VocabSize)
	}
	v := m.Config.VocabSize
	type part struct {
		nll, kl float64
		tokens  int
	}
	parts := make([]part, len(seqs))
	// Each worker owns a reference sequence (when the reference runs) and scratch.
	type scratch struct {
		rs     *model.Sequence
		lp, lq []float64
	}
	own := make([]*scratch, runtime.GOMAXPROCS(0))
	err := parallel(m, len(seqs), func(w int, ms *model.Sequence, j int) error {
		sc := own[w]
		if sc == nil {
			sc = &scratch{lp: make([]float64, v), lq: make([]float64, v)}
			if refLP == nil {
				rs, err := model.NewSequence(ref, ref.Config.SeqLen)
				if err != nil {
					return err
				}
				sc.rs = rs
			}
			own[w] = sc
		}
		toks := seqs[j]
		if len(toks) < 2 {
			return nil
		}
		in := toks[:len(toks)-1]
		var rl []float32
		if refLP == nil {
			sc.rs.Reset()
			var err error
			if rl, err = sc.rs.Feed(in, true); err != nil {
				return err
			}
		}
		ms.Reset()
		ml, err := ms.Feed(in, true)
		if err != nil {
			return err
		}
		p := &parts[j]
		for t := range in {
			if refLP == nil {
				logSoftmax(sc.lp, rl[t*v:(t+1)*v])
			} else {
				for i, x := range refLP[j][t*v : (t+1)*v] {
					sc.lp[i] = float64(x)
				}
			}
			logSoftmax(sc.lq, ml[t*v:(t+1)*v])
			p.nll -= sc.lq[toks[t+1]]
			p.kl += KL(sc.lp, sc.lq)
		}
		p.tokens = len(in)
		return nil
	})
	if err != nil {
		return Comparison{}, err
	}
	var c Comparison
	var nll, kl float64
	for _, p := range parts {
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
