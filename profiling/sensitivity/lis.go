// Package sensitivity ranks a model's decoder layers by how little quantizing them costs, with MorphServe's Layer
// Importance Score (LIS), and writes the ranking as a versioned JSON profile whose Order the engine swaps in.
//
// For a decoder layer p with input x_p (the residual stream entering it) and output h_p(x) (the stream leaving it):
//
//	LTS_p     = cos(h_p(x), x_p)                 how little the layer transforms its input (full precision)
//	LRS_p     = cos(h_p(x), h_p^Q(x))            how little quantizing the layer alone changes its output
//	MDS_p^(Q) = cos(f^(Q)(x), f^(Q∪{p})(x))      how little adding p to the quantized set Q changes the model
//	LIS_p     = 0.25·LTS_p + 0.25·LRS_p + 0.5·MDS_p^(Q)
//
// where f^(Q)(x) is the final hidden state (the residual stream leaving the last layer, before the final norm)
// with the layers in Q quantized and the rest at full precision. A cosine between two [tokens, Dim] activations is
// the mean over every calibration token (each position of each sequence) of the cosine of that token's two
// Dim-wide vectors, computed in float64. A high score means the layer is redundant or robust, so the greedy
// selection (the paper's Algorithm 1) quantizes the layer with the highest LIS next, then recomputes MDS against
// the new set; ties go to the lower layer index. That takes 1 + L(L+1)/2 forward passes over the calibration
// tokens for L layers: O(L²).
package sensitivity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/quant"
)

// Weights are the LIS weights of the three scores; the paper's are 0.25, 0.25, 0.5 (DefaultWeights).
type Weights struct {
	LTS float64 `json:"lts"`
	LRS float64 `json:"lrs"`
	MDS float64 `json:"mds"`
}

// DefaultWeights are the paper's LIS weights.
var DefaultWeights = Weights{LTS: 0.25, LRS: 0.25, MDS: 0.5}

// Scores are one layer's scores; MDS and LIS are those against a given quantized set.
type Scores struct {
	Layer int     `json:"layer"`
	LTS   float64 `json:"lts"`
	LRS   float64 `json:"lrs"`
	MDS   float64 `json:"mds"`
	LIS   float64 `json:"lis"`
}

// Round is one step of the greedy selection: the layers already quantized, every remaining layer's scores
// against that set, and the layer chosen (the highest LIS).
type Round struct {
	Quantized  []int    `json:"quantized"`
	Candidates []Scores `json:"candidates"`
	Chosen     int      `json:"chosen"`
}

// Ranking is the outcome of Rank: each layer's scores against the empty set, the greedy rounds and the order
// they give (the first layer to quantize first).
type Ranking struct {
	Layers   []Scores `json:"layers"`
	Rounds   []Round  `json:"rounds"`
	Order    []int    `json:"order"`
	Forwards int      `json:"forwards"` // forward passes over the calibration tokens
}

// Options configure Rank.
type Options struct {
	Weights Weights // zero: DefaultWeights
	// MaxBatchTokens caps the tokens of one forward pass; calibration sequences are grouped into passes of at
	// most this many tokens (a longer sequence runs alone). Zero: 2048.
	MaxBatchTokens int
	// Progress, when set, is called after each forward pass with the passes done and the total.
	Progress func(done, total int)
}

// Rank scores m's layers in format f on the calibration sequences (token ids, each at most the model's context)
// and returns the greedy LIS order. Every layer must have an f variant (model.AddVariant, AddAWQVariant, ...);
// full precision is each layer's base variant. m is run through views (eval.WithQuantized) and not changed.
func Rank(m *model.Model, f quant.Format, calib [][]int32, opt Options) (*Ranking, error) {
	if opt.Weights == (Weights{}) {
		opt.Weights = DefaultWeights
	}
	if opt.MaxBatchTokens == 0 {
		opt.MaxBatchTokens = 2048
	}
	n := len(m.Layers)
	r, err := newRunner(m.Config, calib, opt.MaxBatchTokens)
	if err != nil {
		return nil, err
	}
	total := 1 + n*(n+1)/2
	step := func() {
		if opt.Progress != nil {
			opt.Progress(r.forwards, total)
		}
	}
	dim, last := m.Config.Dim, n-1

	// Full precision: LTS from each layer's input and output; keep every layer's output for LRS and the final
	// hidden state as f^(∅).
	fp, err := eval.WithQuantized(m, f, nil)
	if err != nil {
		return nil, err
	}
	outs := make([][]float32, n)
	for l := range outs {
		outs[l] = make([]float32, r.tokens*dim)
	}
	in := make([]float32, opt.MaxBatchTokens*dim)
	lts := make([]float64, n)
	err = r.run(fp, func(l int, pt model.TapPoint, x []float32, tokens, off int) {
		switch pt {
		case model.TapLayerIn:
			in = slices.Grow(in[:0], len(x))[:len(x)]
			copy(in, x)
		case model.TapLayerOut:
			lts[l] += cosineSum(x, in, tokens, dim)
			copy(outs[l][off*dim:], x)
		}
	})
	if err != nil {
		return nil, err
	}
	step()
	ref := slices.Clone(outs[last])
	res := &Ranking{}
	for l := range n {
		res.Layers = append(res.Layers, Scores{Layer: l, LTS: lts[l] / float64(r.tokens)})
	}

	var quantized []int
	best := make([]float32, r.tokens*dim) // the final hidden state of the best candidate so far in a round
	for round := range n {
		rd := Round{Quantized: append([]int{}, quantized...), Chosen: -1}
		bestLIS := math.Inf(-1)
		for p := range n {
			if slices.Contains(quantized, p) {
				continue
			}
			cfg, err := eval.WithQuantized(m, f, append(slices.Clone(quantized), p))
			if err != nil {
				return nil, err
			}
			var lrs, mds float64
			final := make([]float32, 0, r.tokens*dim)
			err = r.run(cfg, func(l int, pt model.TapPoint, x []float32, tokens, off int) {
				if pt != model.TapLayerOut {
					return
				}
				if round == 0 && l == p {
					lrs += cosineSum(x, outs[p][off*dim:], tokens, dim)
				}
				if l == last {
					mds += cosineSum(x, ref[off*dim:], tokens, dim)
					final = append(final, x...)
				}
			})
			if err != nil {
				return nil, err
			}
			step()
			s := res.Layers[p]
			if round == 0 {
				s.LRS = lrs / float64(r.tokens)
			}
			s.MDS = mds / float64(r.tokens)
			s.LIS = opt.Weights.LTS*s.LTS + opt.Weights.LRS*s.LRS + opt.Weights.MDS*s.MDS
			if round == 0 {
				res.Layers[p] = s
			}
			rd.Candidates = append(rd.Candidates, s)
			if s.LIS > bestLIS {
				bestLIS, rd.Chosen = s.LIS, p
				copy(best, final)
			}
		}
		res.Rounds = append(res.Rounds, rd)
		quantized = append(quantized, rd.Chosen)
		ref, best = best, ref
	}
	res.Order = quantized
	res.Forwards = r.forwards
	return res, nil
}

// cosineSum returns the sum over tokens of the cosine between a's and b's Dim-wide rows (float64; a pair with a
// zero row counts 0).
func cosineSum(a, b []float32, tokens, dim int) float64 {
	var s float64
	for t := range tokens {
		s += quant.Cosine(a[t*dim:(t+1)*dim], b[t*dim:(t+1)*dim])
	}
	return s
}

// FrontToBack is the order 0, 1, ..., n-1.
func FrontToBack(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

// BackToFront is the order n-1, ..., 1, 0.
func BackToFront(n int) []int {
	o := FrontToBack(n)
	slices.Reverse(o)
	return o
}

// Random is a uniformly random order of n layers, the same for the same seed (PCG seeded with (seed, 0)).
func Random(n int, seed uint64) []int {
	o := FrontToBack(n)
	rand.New(rand.NewPCG(seed, 0)).Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// runner runs the calibration sequences through a model in batches of whole sequences, each sequence from
// position 0 with its own block table in one shared cache.
type runner struct {
	cfg      model.Config
	batches  []*model.Batch
	offsets  []int // first token of each batch among all calibration tokens
	tokens   int
	cache    *model.KVCache
	ws       model.Workspace
	logits   []float32
	forwards int
}

const runnerBlock = 16

func newRunner(cfg model.Config, calib [][]int32, maxTokens int) (*runner, error) {
	r := &runner{cfg: cfg}
	var groups [][][]int32
	used := 0
	for i, s := range calib {
		if len(s) == 0 || len(s) > cfg.SeqLen {
			return nil, fmt.Errorf("calibration sequence %d has %d tokens, want 1..%d (the context)", i, len(s), cfg.SeqLen)
		}
		if len(groups) == 0 || used+len(s) > maxTokens {
			groups = append(groups, nil)
			used = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], s)
		used += len(s)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("no calibration tokens")
	}
	blocks := 0
	for _, g := range groups {
		b := &model.Batch{QStart: []int32{0}}
		for _, s := range g {
			b.MaxBlocksPerSeq = max(b.MaxBlocksPerSeq, (len(s)+runnerBlock-1)/runnerBlock)
		}
		next := int32(0)
		for _, s := range g {
			b.Tokens = append(b.Tokens, s...)
			b.QStart = append(b.QStart, int32(len(b.Tokens)))
			b.SeqLens = append(b.SeqLens, int32(len(s)))
			need := (len(s) + runnerBlock - 1) / runnerBlock
			for j := range b.MaxBlocksPerSeq {
				if j < need {
					b.BlockTables = append(b.BlockTables, next)
					next++
				} else {
					b.BlockTables = append(b.BlockTables, 0)
				}
			}
		}
		blocks = max(blocks, int(next))
		r.batches = append(r.batches, b)
		r.offsets = append(r.offsets, r.tokens)
		r.tokens += len(b.Tokens)
	}
	r.cache = model.NewKVCache(cfg, blocks, runnerBlock)
	return r, nil
}

// run feeds every batch through m; tap gets each activation with its batch's token count and the offset of its
// first token among all calibration tokens.
func (r *runner) run(m *model.Model, tap func(l int, pt model.TapPoint, x []float32, tokens, off int)) error {
	for i, b := range r.batches {
		need := b.LogitRows() * r.cfg.VocabSize
		if len(r.logits) < need {
			r.logits = make([]float32, need)
		}
		off := r.offsets[i]
		err := m.Forward(b, r.cache, &r.ws, r.logits[:need], func(l int, pt model.TapPoint, x []float32, tokens int) {
			tap(l, pt, x, tokens, off)
		})
		if err != nil {
			return err
		}
	}
	r.forwards++
	return nil
}
