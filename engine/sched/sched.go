// Package sched decides what each iteration runs. Continuous is vLLM's iteration-level scheduler: requests join and
// leave the running batch at every iteration, decodes go first, prompts are prefilled in chunks within a token
// budget, and when KV blocks run out the newest running request is preempted and later recomputed. Static and
// Dynamic are the request-level baselines: a batch is formed (when it is full, or for Dynamic also when the oldest
// request has waited long enough), padded to its longest member, and run to completion before the next one.
package sched

import (
	"fmt"
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine/kv"
)

// Seq is a request as the scheduler sees it. Its tokens are Prompt followed by Output; Computed of them are in the
// KV cache. A preempted sequence keeps its output and restarts with Computed = 0, so recomputing feeds the prompt
// and the generated tokens together and rebuilds the same state.
type Seq struct {
	ID kv.SeqID
	// Prompt is the prompt's tokens: nil while a sequence with Reload waits once its prefix is hashed.
	Prompt []int32
	// Reload, when set, gives the prompt's tokens again: Continuous drops the prompt of a sequence waiting behind
	// the queue's first KeepPrompts once it has its prefix hashes, and reloads it when the sequence runs, so that
	// a replay's long queue holds few prompts.
	Reload    func() []int32
	promptLen int // len(Prompt) while it is dropped
	Output    []int32
	MaxTokens int     // output tokens to generate at most
	MaxLen    int     // prompt plus output at most (the model's context)
	Stop      []int32 // tokens that end the output (kept as its last token)
	Arrival   time.Duration
	Computed  int
	// Preemptions counts how often the sequence was preempted.
	Preemptions int
	// Pad marks the padding work of a baseline batch: its tokens are computed and its outputs dropped.
	Pad bool
	// Cancelled marks a sequence removed before it finished (Scheduler.Remove); it counts as finished.
	Cancelled bool
	// StopWhen, when set, is called once with each token appended to Output; true ends the sequence at that token
	// (Stopped), for a stop the tokens alone do not show, such as a stop string in the decoded text.
	StopWhen func(tok int32) bool
	Stopped  bool
	// Prefix is the sequence's identity to the KV manager's prefix cache: its full blocks' hashes.
	Prefix kv.Prefix
	// Cached is the tokens whose KV its last admission found in the prefix cache: their prefill was skipped.
	Cached int
}

// Len is the number of tokens (prompt and output).
func (s *Seq) Len() int { return s.PromptLen() + len(s.Output) }

// PromptLen is the number of prompt tokens, also while the prompt is dropped.
func (s *Seq) PromptLen() int {
	if s.Prompt == nil {
		return s.promptLen
	}
	return len(s.Prompt)
}

// dropPrompt lets a sequence with Reload go of its prompt's tokens.
func (s *Seq) dropPrompt() {
	if s.Reload != nil && s.Prompt != nil {
		s.promptLen, s.Prompt = len(s.Prompt), nil
	}
}

// loadPrompt reloads a dropped prompt.
func (s *Seq) loadPrompt() {
	if s.Prompt == nil && s.Reload != nil {
		s.Prompt = s.Reload()
		if len(s.Prompt) != s.promptLen {
			panic(fmt.Sprintf("sched: sequence %d reloaded a prompt of %d tokens, it had %d", s.ID, len(s.Prompt), s.promptLen))
		}
	}
}

// Tokens returns tokens [from, to) of Prompt followed by Output. A span within one of the two is that slice
// itself (capacity-limited, so that an append copies); one across both is a copy.
func (s *Seq) Tokens(from, to int) []int32 {
	s.loadPrompt()
	p := len(s.Prompt)
	switch {
	case to <= p:
		return s.Prompt[from:to:to]
	case from >= p:
		return s.Output[from-p : to-p : to-p]
	}
	return s.appendTokens(make([]int32, 0, to-from), from, to)
}

// appendTokens appends tokens [from, to) of Prompt followed by Output to dst.
func (s *Seq) appendTokens(dst []int32, from, to int) []int32 {
	s.loadPrompt()
	if from < len(s.Prompt) {
		dst = append(dst, s.Prompt[from:min(to, len(s.Prompt))]...)
		from = len(s.Prompt)
	}
	if from < to {
		dst = append(dst, s.Output[from-len(s.Prompt):to-len(s.Prompt)]...)
	}
	return dst
}

// Finished reports whether the sequence has all its output: MaxTokens tokens, a stop token, StopWhen, or a full
// context.
func (s *Seq) Finished() bool {
	if s.Cancelled || s.Stopped {
		return true
	}
	if len(s.Output) >= s.MaxTokens || s.Len() >= s.MaxLen {
		return true
	}
	n := len(s.Output)
	return n > 0 && slices.Contains(s.Stop, s.Output[n-1])
}

// Limit is the most tokens the sequence can ever hold.
func (s *Seq) Limit() int { return min(s.MaxLen, s.PromptLen()+s.MaxTokens) }

// Work is a sequence's share of an iteration: tokens [Start, Start+N) of it are fed.
type Work struct {
	Seq      *Seq
	Start, N int
	// Sample: the work ends at the sequence's last token, so it yields the next one (padding never samples).
	Sample bool
}

// work returns s's next n tokens as work.
func work(s *Seq, n int) Work {
	return Work{Seq: s, Start: s.Computed, N: n, Sample: s.Computed+n == s.Len() && !s.Pad}
}

// Plan is one iteration's decision.
type Plan struct {
	// Work is the iteration's work. The scheduler reuses its array: it is valid until the next Schedule.
	Work      []Work
	Preempted []*Seq // running sequences sent back to the waiting queue, newest first
	Started   []*Seq // sequences scheduled for the first time (or again after a preemption)
	// PrefixQueries is the tokens of the sequences started with the prefix cache on, PrefixHits those of them
	// found in the cache (vLLM's prefix cache queries and hits).
	PrefixQueries, PrefixHits int
}

// Tokens is the number of tokens the plan feeds.
func (p *Plan) Tokens() int {
	n := 0
	for _, w := range p.Work {
		n += w.N
	}
	return n
}

// Scheduler is an iteration policy over a kv.Manager it owns.
type Scheduler interface {
	// Add queues a new sequence.
	Add(s *Seq)
	// Schedule picks the next iteration's work at time now; an empty plan means nothing can run now.
	Schedule(now time.Duration) Plan
	// Update records a run plan's sampled tokens (next[i] for p.Work[i], -1 where none) and returns the
	// sequences that finished (their blocks freed).
	Update(p Plan, next []int32) []*Seq
	// Remove takes the sequence out wherever it is (waiting or running), marks it Cancelled, frees its blocks and
	// reports whether the scheduler held it. It is called between iterations.
	Remove(id kv.SeqID) bool
	// Waiting and Running count the sequences queued and in the batch.
	Waiting() int
	Running() int
	// Queue returns the waiting sequences in the order they will be admitted; the caller must not modify it.
	Queue() []*Seq
	// Demand is what admitting the waiting sequences would take now: the free KV blocks that admitting the head of
	// the queue takes, the free blocks and the tokens to prefill of all of them (with prefix caching, cached
	// blocks that other sequences hold cost no free block, and cached tokens need no prefill).
	Demand() (head, blocks, tokens int)
	// NextWake is the earliest time at which a plan with no work could change without a new arrival (Dynamic's
	// queueing delay); ok is false when only an arrival can.
	NextWake() (t time.Duration, ok bool)
}

// apply advances each work's sequence by its tokens and appends sampled tokens; it returns the finished
// sequences, whose blocks it frees.
func apply(m *kv.Manager, p Plan, next []int32) []*Seq {
	var done []*Seq
	for i, w := range p.Work {
		s := w.Seq
		s.Computed = w.Start + w.N
		if w.Sample && next[i] >= 0 && !s.Finished() {
			s.Output = append(s.Output, next[i])
			s.Stopped = s.StopWhen != nil && s.StopWhen(next[i])
			if s.Finished() {
				m.Free(s.ID)
				done = append(done, s)
			}
		}
	}
	return done
}
