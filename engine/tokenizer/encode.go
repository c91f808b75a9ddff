package tokenizer

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

// before orders candidates: higher score first, then leftmost (symbol indices increase left to right), which is
// run.c's choice of the first pair with the strictly highest score.
func (c candidate) before(d candidate) bool {
	if c.score != d.score {
		return c.score > d.score
	}
	return c.left < d.left
}

// candidateHeap is a binary heap of candidates, best first (a typed heap: container/heap would box every push).
type candidateHeap []candidate

func (h *candidateHeap) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candidateHeap) pop() candidate {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < n && q[l].before(q[best]) {
			best = l
		}
		if l+1 < n && q[l+1].before(q[best]) {
			best = l + 1
		}
		if best == i {
			break
		}
		q[i], q[best] = q[best], q[i]
		i = best
	}
	*h = q
	return top
}

// merge performs the greedy merges in place; merged-away symbols get id -1 and are unlinked.
func (v *Vocab) merge(syms []symbol) {
	var q candidateHeap
	var buf []byte
	try := func(l int) {
		r := syms[l].next
		if r < 0 || v.Types[syms[l].id] == Byte || v.Types[syms[r].id] == Byte {
			return
		}
		buf = append(append(buf[:0], v.Pieces[syms[l].id]...), v.Pieces[syms[r].id]...)
		if id, ok := v.lookup[string(buf)]; ok {
			q.push(candidate{l, r, syms[l].id, syms[r].id, id, v.Scores[id]})
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		try(i)
	}
	for len(q) > 0 {
		c := q.pop()
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
