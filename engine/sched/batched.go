package sched

import (
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/kv"
)

// Batched is the request-level batching baseline: a batch of at most BatchSize waiting sequences is formed only
// when no batch runs, padded to its longest member, and run to completion.
//
//   - Static (MaxDelay 0): the batch is whatever is waiting (up to BatchSize) when the previous one ends.
//   - Dynamic (MaxDelay > 0, as Triton's and TF Serving's dynamic batchers): the batch starts once BatchSize
//     sequences wait or the oldest has waited MaxDelay.
//
// The baselines model batchers without a prefix cache: they never share blocks, whatever the KV manager does.
//
// Padding is computed, not skipped, so that its cost shows as it does on a dense [batch, length] tensor: each
// member has a padding sequence (Pad, outputs dropped) that feeds the prompt tokens the member lacks against the
// longest prompt, and, once the member has finished, one token an iteration until the whole batch has. A member and
// its padding together hold the blocks of the padded rectangle (longest prompt plus decode iterations), which the
// batch reserves by admission. Prompts are prefilled within MaxBatchedTokens an iteration; decoding starts when every
// prompt is in.
type Batched struct {
	KV               *kv.Manager
	MaxBatchedTokens int
	BatchSize        int
	MaxDelay         time.Duration

	waiting []*Seq
	members []*Seq
	pads    []*Seq
	now     time.Duration
	work    []Work // the plans' array, reused
}

// NewStatic returns the static batching baseline.
func NewStatic(m *kv.Manager, maxTokens, batchSize int) *Batched {
	return &Batched{KV: m, MaxBatchedTokens: maxTokens, BatchSize: batchSize}
}

// NewDynamic returns the dynamic batching baseline.
func NewDynamic(m *kv.Manager, maxTokens, batchSize int, maxDelay time.Duration) *Batched {
	return &Batched{KV: m, MaxBatchedTokens: maxTokens, BatchSize: batchSize, MaxDelay: maxDelay}
}

// Add queues s.
func (b *Batched) Add(s *Seq) { b.waiting = append(b.waiting, s) }

// Waiting is the number of queued sequences.
func (b *Batched) Waiting() int { return len(b.waiting) }

// Queue returns the waiting sequences in order.
func (b *Batched) Queue() []*Seq { return b.waiting }

// Remove takes id out of the queue, or out of the running batch: a member that is removed frees its blocks and
// becomes padding, as a finished member does, and a batch left with no unfinished member ends.
func (b *Batched) Remove(id kv.SeqID) bool {
	for i, s := range b.waiting {
		if s.ID == id {
			b.waiting = append(b.waiting[:i:i], b.waiting[i+1:]...)
			s.Cancelled = true
			return true
		}
	}
	for _, s := range b.members {
		if s.ID == id && !s.Finished() {
			s.Cancelled = true
			b.KV.Free(s.ID)
			if b.Running() == 0 {
				b.end()
			}
			return true
		}
	}
	return false
}

// Demand counts the blocks and tokens of each waiting sequence's whole length: the baselines share no prefix.
func (b *Batched) Demand() (head, blocks, tokens int) {
	for i, s := range b.waiting {
		n := b.KV.BlocksFor(s.Len())
		if i == 0 {
			head = n
		}
		blocks += n
		tokens += s.Len() - s.Computed
	}
	return head, blocks, tokens
}

// Running is the number of unfinished members of the running batch.
func (b *Batched) Running() int {
	n := 0
	for _, s := range b.members {
		if !s.Finished() {
			n++
		}
	}
	return n
}

// NextWake is when the oldest waiting sequence will have waited MaxDelay.
func (b *Batched) NextWake() (time.Duration, bool) {
	if len(b.members) > 0 || len(b.waiting) == 0 || b.MaxDelay == 0 {
		return 0, false
	}
	return b.waiting[0].Arrival + b.MaxDelay, true
}

// rect is the padded length of a batch: its longest prompt plus its longest output, within the context.
func rect(batch []*Seq) int {
	lp, lo, ctx := 0, 0, 0
	for _, s := range batch {
		lp = max(lp, s.Len())
		lo = max(lo, s.Limit()-s.Len())
		ctx = max(ctx, s.MaxLen)
	}
	return min(lp+lo, ctx)
}

// form starts a batch from the head of the queue, as many as the KV pool holds padded.
func (b *Batched) form(now time.Duration) []*Seq {
	n := min(len(b.waiting), b.BatchSize)
	if n == 0 || (b.MaxDelay > 0 && n < b.BatchSize && now-b.waiting[0].Arrival < b.MaxDelay) {
		return nil
	}
	for ; n > 0; n-- {
		r := rect(b.waiting[:n]) + b.KV.BlockSize() // a member and its padding may each round up a block
		if b.KV.CanAdmit(n*r, nil) {
			break
		}
	}
	if n == 0 {
		return nil // not even one fits now; the engine rejects sequences the pool can never hold
	}
	batch := slices.Clone(b.waiting[:n])
	clear(b.waiting[:n]) // the array keeps its head until it grows: let it not keep the batch once it ends
	b.waiting = b.waiting[n:]
	lp := 0
	for _, s := range batch {
		lp = max(lp, s.Len())
	}
	for _, s := range batch {
		if err := b.KV.Grow(s.ID, s.Len()); err != nil {
			panic(err) // CanAdmit reserved the rectangle
		}
		pad := &Seq{ID: -s.ID - 1, Pad: true, Prompt: make([]int32, lp-s.Len()), MaxLen: s.MaxLen, MaxTokens: s.MaxLen}
		b.pads = append(b.pads, pad)
	}
	b.members = batch
	return batch
}

// Schedule runs the batch's prefill chunks, or its decode iteration, or forms a new batch.
func (b *Batched) Schedule(now time.Duration) Plan {
	p := Plan{Work: b.work[:0]}
	defer func() { b.work = p.Work }()
	if b.members == nil {
		p.Started = b.form(now)
	}
	budget := b.MaxBatchedTokens
	prefill := false
	for i, s := range b.members {
		for _, q := range []*Seq{s, b.pads[i]} {
			if q.Cancelled {
				continue // removed mid-prefill: its padding still fills the row
			}
			if q.Computed < q.PromptLen() || (q == s && q.Computed < q.Len()-1) {
				prefill = true
				if n := min(q.Len()-q.Computed, budget); n > 0 {
					b.grow(q, q.Computed+n)
					p.Work = append(p.Work, work(q, n))
					budget -= n
				}
			}
		}
	}
	if prefill {
		return p
	}
	for i, s := range b.members {
		q := s
		if s.Finished() {
			q = b.pads[i]
			if q.Len() >= q.MaxLen {
				continue
			}
			q.Prompt = append(q.Prompt, 0) // one more padding token
		}
		b.grow(q, q.Len())
		p.Work = append(p.Work, work(q, 1))
	}
	return p
}

func (b *Batched) grow(q *Seq, tokens int) {
	if err := b.KV.Grow(q.ID, tokens); err != nil {
		panic(err) // the batch reserved its padded rectangle
	}
}

// Update records the iteration and ends the batch (freeing its padding) when every member has finished.
func (b *Batched) Update(p Plan, next []int32) []*Seq {
	done := apply(b.KV, p, next)
	if b.Running() == 0 && b.members != nil {
		b.end()
	}
	return done
}

// end frees the batch's padding and forgets the batch.
func (b *Batched) end() {
	for _, q := range b.pads {
		b.KV.Free(q.ID)
	}
	b.members, b.pads = nil, nil
}
