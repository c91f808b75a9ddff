package model

import "fmt"

// sequenceBlock is the block size of a Sequence's private cache.
const sequenceBlock = 16

// Sequence runs one token sequence through a model with a private cache, the way llama2.c's run.c does: feed a
// prompt, then one token at a time. It is the simple path for generation and perplexity; the serving engine
// drives Forward with a shared paged cache instead.
type Sequence struct {
	m      *Model
	cache  *KVCache
	ws     Workspace
	table  []int32
	n      int
	logits []float32
}

// NewSequence prepares a sequence of at most maxLen tokens (at most the model's context).
func NewSequence(m *Model, maxLen int) (*Sequence, error) {
	if maxLen <= 0 || maxLen > m.Config.SeqLen {
		return nil, fmt.Errorf("sequence length %d, want 1..%d (the model's context)", maxLen, m.Config.SeqLen)
	}
	blocks := (maxLen + sequenceBlock - 1) / sequenceBlock
	s := &Sequence{m: m, cache: NewKVCacheType(m.Config, blocks, sequenceBlock, m.SequenceKV),
		table: make([]int32, blocks)}
	for i := range s.table {
		s.table[i] = int32(i)
	}
	s.cache.commit()
	return s, nil
}

// Len is the number of tokens fed so far.
func (s *Sequence) Len() int { return s.n }

// Capacity is the most tokens the sequence can hold.
func (s *Sequence) Capacity() int { return len(s.table) * sequenceBlock }

// Reset empties the sequence so that it can be fed from position 0 again.
func (s *Sequence) Reset() { s.n = 0 }

// Feed appends tokens at the next positions and returns the logits of the last one ([VocabSize]) or, with all,
// of every one ([len(tokens), VocabSize]). The returned slice is reused by the next call.
func (s *Sequence) Feed(tokens []int32, all bool) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("feed: no tokens")
	}
	if s.n+len(tokens) > s.Capacity() {
		return nil, fmt.Errorf("feed: %d tokens after %d exceed the sequence's capacity of %d", len(tokens), s.n, s.Capacity())
	}
	b := &Batch{
		Tokens:          tokens,
		QStart:          []int32{0, int32(len(tokens))},
		SeqLens:         []int32{int32(s.n + len(tokens))},
		BlockTables:     s.table,
		MaxBlocksPerSeq: len(s.table),
		AllLogits:       all,
	}
	need := b.LogitRows() * s.m.Config.VocabSize
	if cap(s.logits) < need {
		s.logits = make([]float32, need)
	}
	s.logits = s.logits[:need]
	if err := s.m.Forward(b, s.cache, &s.ws, s.logits, nil); err != nil {
		return nil, err
	}
	s.n += len(tokens)
	return s.logits, nil
}
