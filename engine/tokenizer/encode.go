package tokenizer

import "container/heap"

// Encode turns text into token ids as run.c's encode does: BOS if bos; a space before non-empty text when
// AddDummyPrefix; each UTF-8 character (a lead byte and up to three continuation bytes) becomes its piece, or
// one byte token per byte when the vocabulary has no such piece; then, repeatedly, the adjacent pair whose
// concatenated piece exists with the highest score (the leftmost such pair on ties) is merged, until no pair
// merges; EOS if eos. Encode is a pure function of its arguments.
//
// run.c rescans all pairs after each merge (quadratic in the text length); this does the same merges in the
// same order with a priority queue of candidate pairs, so long texts encode in n log n.
func (v *Vocab) Encode(text string, bos, eos bool) []int {
	var out []int
	if bos && v.BOS >= 0 {
		out = append(out, v.BOS)
	}
	if text != "" && v.AddDummyPrefix {
		text = " " + text
	}
	syms := v.initialSymbols(text)
	v.merge(syms)
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		out = append(out, syms[i].id)
	}
	if eos && v.EOS >= 0 {
		out = append(out, v.EOS)
	}
	return out
}

// symbol is one token of the text being merged, in a doubly linked list (prev/next are indices, -1 at the ends).
type symbol struct {
	id         int
	prev, next int
}

func (v *Vocab) initialSymbols(text string) []symbol {
	syms := make([]symbol, 0, len(text))
	add := func(id int) {
		if id < 0 {
			return
		}
		n := len(syms)
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	for i := 0; i < len(text); {
		j := i + 1
		for j < len(text) && j-i < 4 && text[j]&0xC0 == 0x80 {
			j++
		}
		if id, ok := v.lookup[text[i:j]]; ok {
			add(id)
		} else {
			for k := i; k < j; k++ {
				add(v.byteID[text[k]])
			}
		}
		i = j
	}
	if n := len(syms); n > 0 {
		syms[n-1].next = -1
	}
	return syms
}

// candidate is a mergeable adjacent pair: symbols left and right (whose ids were leftID and rightID when the
// candidate was made) would become token id with the given score.
type candidate struct {
	left, right     int
	leftID, rightID int
	id              int
	score           float32
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].score != c[j].score {
		return c[i].score > c[j].score
	}
	return c[i].left < c[j].left // symbol indices increase left to right, so this is run.c's leftmost-first
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// merge performs the greedy merges in place; merged-away symbols get id -1 and are unlinked.
func (v *Vocab) merge(syms []symbol) {
	var q candidates
	var buf []byte
	try := func(l int) {
		r := syms[l].next
		if r < 0 || v.Types[syms[l].id] == Byte || v.Types[syms[r].id] == Byte {
			return
		}
		buf = append(append(buf[:0], v.Pieces[syms[l].id]...), v.Pieces[syms[r].id]...)
		if id, ok := v.lookup[string(buf)]; ok {
			heap.Push(&q, candidate{l, r, syms[l].id, syms[r].id, id, v.Scores[id]})
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		try(i)
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		l, r := &syms[c.left], &syms[c.right]
		if l.id != c.leftID || r.id != c.rightID || l.next != c.right {
			continue // stale: one side was merged into something else since
		}
		l.id = c.id
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		r.id = -1
		if l.prev >= 0 {
			try(l.prev)
		}
		try(c.left)
	}
}
