package sched

import (
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/kv"
)

// Continuous is the iteration-level scheduler (Orca, vLLM). Each iteration it
//
//  1. gives every running sequence in decode one token, in admission order; when the KV pool cannot hold the
//     token, it preempts the newest running sequence (freeing its blocks, putting it back at the head of the
//     waiting queue for recompute) until it can, or preempts the sequence itself when it is the newest;
//  2. continues the prefill of running sequences whose prompt is not all in the cache, in chunks;
//  3. admits waiting sequences first come first served, while the token budget, the sequence limit and the KV pool
//     (kv.Manager.CanAdmit, which keeps the watermark free) allow; a sequence that does not fit stops admission, so
//     that later arrivals never overtake it.
//
// An admitted sequence gets blocks for all its current tokens at once, so its prefill chunks never fail; only
// decodes grow. No iteration feeds more than MaxBatchedTokens tokens or runs more than MaxNumSeqs sequences.
//
// When the KV manager caches prefixes (kv.Options.PrefixCaching), a sequence being admitted (a new one, or a
// preempted one coming back for recompute) first looks its full blocks up in the cache, up to all its tokens but
// the last (whose logits it needs): the blocks found are shared, count as free in admission, and their tokens are
// not prefilled again — its first chunk starts after them. Every full block a step computes is entered in the
// cache as it completes, prompt and output alike.
type Continuous struct {
	KV               *kv.Manager
	MaxBatchedTokens int // token budget of an iteration
	MaxNumSeqs       int // running sequences at most

	waiting []*Seq  // FCFS; preempted sequences return to the front
	running []*Seq  // in admission order; the last is the newest
	work    []Work  // the plans' array, reused
	tokens  []int32 // scratch: the tokens of blocks being hashed
}

// Add queues s at the back of the waiting queue.
func (c *Continuous) Add(s *Seq) { c.waiting = append(c.waiting, s) }

// Waiting is the number of queued sequences.
func (c *Continuous) Waiting() int { return len(c.waiting) }

// Queue returns the waiting sequences in order.
func (c *Continuous) Queue() []*Seq { return c.waiting }

// Remove takes id out of the waiting queue or the running batch and frees its blocks.
func (c *Continuous) Remove(id kv.SeqID) bool {
	for _, q := range []*[]*Seq{&c.waiting, &c.running} {
		for i, s := range *q {
			if s.ID == id {
				*q = append((*q)[:i:i], (*q)[i+1:]...)
				s.Cancelled = true
				c.KV.Free(id)
				return true
			}
		}
	}
	return false
}

// Running is the number of sequences in the running batch.
func (c *Continuous) Running() int { return len(c.running) }

// NextWake: the continuous scheduler only waits for arrivals or finishing sequences.
func (c *Continuous) NextWake() (time.Duration, bool) { return 0, false }

// preemptNewest sends the newest running sequence back to the head of the waiting queue for recompute.
func (c *Continuous) preemptNewest(p *Plan) *Seq {
	n := len(c.running) - 1
	v := c.running[n]
	c.running = slices.Delete(c.running, n, n+1)
	c.KV.Free(v.ID)
	v.Computed = 0
	v.Preemptions++
	c.waiting = append([]*Seq{v}, c.waiting...)
	p.Preempted = append(p.Preempted, v)
	return v
}

// Schedule picks the next iteration; see Continuous.
func (c *Continuous) Schedule(time.Duration) Plan {
	clear(c.work) // the last plan's sequences: this one is shorter or overwrites them
	p := Plan{Work: c.work[:0]}
	defer func() { c.work = p.Work }()
	budget := c.MaxBatchedTokens
	// 1. Decodes, oldest first; make room by preempting the newest.
	var prefilling []*Seq
	for i := 0; i < len(c.running) && budget > 0; i++ {
		s := c.running[i]
		if s.Len()-s.Computed > 1 {
			prefilling = append(prefilling, s)
			continue
		}
		for !c.KV.CanGrow(s.ID, s.Len()) && c.preemptNewest(&p) != s {
		}
		if i >= len(c.running) || c.running[i] != s {
			break // s itself was the newest and is preempted
		}
		if err := c.KV.Grow(s.ID, s.Len()); err != nil {
			panic(err) // CanGrow said it fits
		}
		p.Work = append(p.Work, work(s, 1))
		budget--
	}
	// 2. Running prefills (their blocks are allocated): the next chunk each.
	for _, s := range prefilling {
		if budget == 0 || !c.isRunning(s) {
			continue
		}
		n := min(s.Len()-s.Computed, budget)
		p.Work = append(p.Work, work(s, n))
		budget -= n
	}
	// 3. Admit waiting sequences in order.
	for len(c.waiting) > 0 && budget > 0 && len(c.running) < c.MaxNumSeqs {
		s := c.waiting[0]
		cached := c.match(s)
		if !c.KV.CanAdmit(s.Len(), &s.Prefix) {
			break
		}
		if err := c.KV.Admit(s.ID, s.Len(), &s.Prefix); err != nil {
			panic(err) // CanAdmit said it fits
		}
		c.waiting[0] = nil // the array keeps its head until it grows: let it not keep the sequence
		c.waiting = c.waiting[1:]
		c.running = append(c.running, s)
		p.Started = append(p.Started, s)
		s.Computed, s.Cached = cached, cached
		if c.KV.PrefixCaching() {
			p.PrefixQueries += s.Len()
			p.PrefixHits += cached
		}
		n := min(s.Len()-s.Computed, budget)
		p.Work = append(p.Work, work(s, n))
		budget -= n
	}
	return p
}

// match looks s's prefix up in the KV manager's cache, hashing its full blocks first (once each), and returns the
// tokens found: 0 without prefix caching.
func (c *Continuous) match(s *Seq) int {
	if !c.KV.PrefixCaching() {
		return 0
	}
	c.hash(s, s.Len()-1)
	return c.KV.Match(&s.Prefix, s.Len()-1)
}

// hash extends s's prefix hashes over its full blocks among its first n tokens.
func (c *Continuous) hash(s *Seq, n int) {
	bs := c.KV.BlockSize()
	if from, to := s.Prefix.Hashed()*bs, n/bs*bs; from < to {
		s.loadPrompt()
		if to <= len(s.Prompt) {
			c.KV.Hash(&s.Prefix, s.Prompt[from:to])
		} else {
			c.tokens = s.appendTokens(c.tokens[:0], from, to)
			c.KV.Hash(&s.Prefix, c.tokens)
		}
	}
}

// KeepPrompts is how many sequences at the head of the waiting queue keep their prompts (Seq.Reload): they run
// soon, and a reload draws the tokens again.
const KeepPrompts = 64

// Demand counts what admitting each waiting sequence takes now, its cached prefix counted as Admit will. A
// sequence whose prefix missed the cache when last matched, with nothing entered under the hash it missed since,
// is counted without asking the cache: the queue can be hundreds long, and this runs after every step.
func (c *Continuous) Demand() (head, blocks, tokens int) {
	caching := c.KV.PrefixCaching()
	for i, s := range c.waiting {
		n, cached := c.KV.BlocksFor(s.Len()), 0
		if caching && !c.KV.Unmatched(&s.Prefix) {
			cached = c.match(s)
			n = c.KV.AdmitBlocks(s.Len(), &s.Prefix)
		}
		if i == 0 {
			head = n
		}
		blocks += n
		tokens += s.Len() - max(s.Computed, cached)
		if i >= KeepPrompts {
			s.dropPrompt() // its prefix is hashed: its tokens are needed again only once it runs
		}
	}
	return head, blocks, tokens
}

func (c *Continuous) isRunning(s *Seq) bool {
	for _, r := range c.running {
		if r == s {
			return true
		}
	}
	return false
}

// Update enters the blocks the iteration completed in the prefix cache, records its tokens and drops finished
// sequences from the running batch.
func (c *Continuous) Update(p Plan, next []int32) []*Seq {
	if c.KV.PrefixCaching() {
		bs := c.KV.BlockSize()
		for _, w := range p.Work {
			if end := w.Start + w.N; end/bs > w.Start/bs {
				c.hash(w.Seq, end)
				c.KV.Commit(w.Seq.ID, &w.Seq.Prefix, end)
			}
		}
	}
	done := apply(c.KV, p, next)
	if len(done) > 0 {
		c.running = slices.DeleteFunc(c.running, (*Seq).Finished) // its array's tail cleared
	}
	return done
}
