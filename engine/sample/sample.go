// Package sample picks the next token from logits: greedy (temperature 0), temperature, top-k and top-p
// (nucleus) sampling, seeded so that a run can be repeated. A draw depends only on the seed, the position of the
// token drawn and the logits: a sequence recomputed after preemption, or run in another batch, draws the same
// tokens.
package sample

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Params are the sampling settings of a request, as OpenAI-style APIs and llama.cpp name them.
type Params struct {
	Temperature float64 // 0 means greedy (argmax)
	TopK        int     // keep the K most likely tokens; 0 keeps all
	TopP        float64 // keep the smallest set whose probability reaches P; 0 or 1 keeps all
	Seed        uint64
}

// Validate names the first parameter out of range.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature):
		return fmt.Errorf("temperature=%g, want >= 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k=%d, want >= 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("top_p=%g, want in [0, 1]", p.TopP)
	}
	return nil
}

// Sampler draws tokens with fixed parameters. The random number of each draw comes from a ChaCha8 stream keyed by
// the seed and the token's position, not from a stream that advances with every draw, so that how many draws came
// before (a recompute, a retried step) changes nothing.
type Sampler struct {
	p     Params
	src   *rand.ChaCha8
	rng   *rand.Rand // reads src
	key   [32]byte
	cands []cand
}

type cand struct {
	id int
	p  float64
}

// New returns a sampler for p (which must be valid).
func New(p Params) *Sampler {
	s := &Sampler{p: p, src: rand.NewChaCha8([32]byte{})}
	s.rng = rand.New(s.src)
	binary.LittleEndian.PutUint64(s.key[:8], p.Seed)
	return s
}

// Argmax returns the index of the largest logit (the first on ties), as llama2.c's sample_argmax.
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sample returns the token at position pos of the sequence (counted from 0 over prompt and output) for its logits.
// With temperature 0 it is Argmax; otherwise the logits are divided by the temperature, turned into
// probabilities, cut to the top K and then to the top-P nucleus, renormalized, and one token is drawn with the
// random stream of (seed, pos).
func (s *Sampler) Sample(logits []float32, pos int) int {
	if s.p.Temperature == 0 {
		return Argmax(logits)
	}
	binary.LittleEndian.PutUint64(s.key[8:16], uint64(pos))
	s.src.Seed(s.key)
	s.cands = s.cands[:0]
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for i, v := range logits {
		p := math.Exp((float64(v) - mx) / s.p.Temperature)
		s.cands = append(s.cands, cand{i, p})
		sum += p
	}
	c := s.cands
	if (s.p.TopK > 0 && s.p.TopK < len(c)) || (s.p.TopP > 0 && s.p.TopP < 1) {
		sort.Slice(c, func(i, j int) bool { return c[i].p > c[j].p || (c[i].p == c[j].p && c[i].id < c[j].id) })
		if s.p.TopK > 0 && s.p.TopK < len(c) {
			c = c[:s.p.TopK]
		}
		if s.p.TopP > 0 && s.p.TopP < 1 {
			var total float64
			for _, x := range c {
				total += x.p
			}
			var acc float64
			for i, x := range c {
				acc += x.p
				if acc >= s.p.TopP*total {
					c = c[:i+1]
					break
				}
			}
		}
		sum = 0
		for _, x := range c {
			sum += x.p
		}
	}
	r := s.rng.Float64() * sum
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}
