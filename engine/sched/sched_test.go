package sched

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"github.com/morphlab/morphlab/engine/kv"
)

// fakeModel stands in for a model over a paged cache: feeding a token writes it into its slot, and the next token
// is a hash of every slot the sequence's block table reaches up to its length. A scheduler that fed a wrong token,
// skipped one, or handed one block to two sequences changes the outputs.
type fakeModel struct {
	t     *testing.T
	m     *kv.Manager
	slots map[int32]int32
}

func (f *fakeModel) step(p Plan) []int32 {
	next := make([]int32, len(p.Work))
	for i, w := range p.Work {
		for j, tok := range w.Seq.Tokens(w.Start, w.Start+w.N) {
			f.slots[f.m.Slot(w.Seq.ID, w.Start+j)] = tok
		}
		h := uint64(1469598103934665603)
		for pos := range w.Start + w.N {
			h = (h ^ uint64(f.slots[f.m.Slot(w.Seq.ID, pos)])) * 1099511628211
		}
		next[i] = int32(h % 97)
		if !w.Sample {
			next[i] = -1
		}
	}
	return next
}

type arrival struct {
	iter   int
	seq    *Seq
	cancel int // the iteration before which the sequence is removed; 0: never
}

// step is one iteration as drive saw it: the plan, each work's kind when it was scheduled (a sequence changes
// after its work runs, so the kinds cannot be read back from the plan later), and the sequences that finished.
type step struct {
	plan   Plan
	works  []workKind
	starts []start
	done   []*Seq
}

// start is a sequence started, as it was when it started.
type start struct {
	len, cached, computed int
}

type workKind struct {
	decode bool // one token, the sequence's last, which is an output token: a decode step
	pad    bool
}

// drive runs a scheduler over arrivals (by iteration) until all finish, checking the token budget and that the
// fake KV slots are never shared, and returns each iteration as it happened.
func drive(t *testing.T, s Scheduler, m *kv.Manager, maxTokens int, arrivals []arrival) []step {
	t.Helper()
	f := &fakeModel{t: t, m: m, slots: map[int32]int32{}}
	var steps []step
	left := len(arrivals)
	for iter := 0; left > 0; iter++ {
		if iter > 100000 {
			t.Fatalf("no progress: %d sequences left after %d iterations", left, iter)
		}
		for _, a := range arrivals {
			if a.iter == iter {
				a.seq.Arrival = time.Duration(iter) * time.Millisecond
				s.Add(a.seq)
			}
			if a.cancel == iter && a.cancel > a.iter && !a.seq.Finished() {
				if !s.Remove(a.seq.ID) {
					t.Fatalf("iteration %d: Remove(%d) found nothing", iter, a.seq.ID)
				}
				if _, held := m.Table(a.seq.ID); held != 0 {
					t.Fatalf("iteration %d: sequence %d removed and still holds its blocks", iter, a.seq.ID)
				}
				left--
			}
		}
		p := s.Schedule(time.Duration(iter) * time.Millisecond)
		if p.Tokens() > maxTokens {
			t.Fatalf("iteration %d feeds %d tokens, budget %d", iter, p.Tokens(), maxTokens)
		}
		seen := map[kv.SeqID]bool{}
		st := step{plan: p}
		st.plan.Work = slices.Clone(p.Work) // the scheduler reuses its array
		for _, s := range p.Started {
			st.starts = append(st.starts, start{s.Len(), s.Cached, s.Computed})
		}
		for _, w := range p.Work {
			if seen[w.Seq.ID] || w.N < 1 || w.Start != w.Seq.Computed {
				t.Fatalf("iteration %d: bad work %+v (seq %d, computed %d)", iter, w, w.Seq.ID, w.Seq.Computed)
			}
			seen[w.Seq.ID] = true
			decode := w.N == 1 && w.Start == w.Seq.Len()-1 && w.Seq.Len() > len(w.Seq.Prompt)
			st.works = append(st.works, workKind{decode: decode, pad: w.Seq.Pad})
		}
		st.done = s.Update(p, f.step(p))
		left -= len(st.done)
		steps = append(steps, st)
	}
	if m.Sequences() != 0 || m.FreeBlocks() != m.TotalBlocks() {
		t.Fatalf("after the run %d sequences hold blocks, %d of %d free", m.Sequences(), m.FreeBlocks(), m.TotalBlocks())
	}
	return steps
}

// decodesFirst returns an error naming the first iteration that feeds a decode after a prefill chunk.
func decodesFirst(steps []step) error {
	for i, st := range steps {
		prefill := false
		for _, w := range st.works {
			if w.decode && prefill {
				return fmt.Errorf("iteration %d: a decode after a prefill chunk", i)
			}
			prefill = prefill || !w.decode
		}
	}
	return nil
}

// runToCompletion returns an error naming the first iteration that starts a sequence while an earlier batch
// still has an unfinished member.
func runToCompletion(steps []step) error {
	running := 0
	for i, st := range steps {
		if len(st.plan.Started) > 0 && running > 0 {
			return fmt.Errorf("iteration %d: %d sequences started while %d ran", i, len(st.plan.Started), running)
		}
		running += len(st.plan.Started) - len(st.done)
	}
	return nil
}

// prefillFirst is a deliberately wrong continuous scheduler: it puts its prefill chunks before its decodes.
type prefillFirst struct{ *Continuous }

func (p prefillFirst) Schedule(now time.Duration) Plan {
	plan := p.Continuous.Schedule(now)
	var dec, pre []Work
	for _, w := range plan.Work {
		if w.N == 1 && w.Start == w.Seq.Len()-1 && w.Seq.Len() > len(w.Seq.Prompt) {
			dec = append(dec, w)
		} else {
			pre = append(pre, w)
		}
	}
	plan.Work = append(pre, dec...)
	return plan
}

// TestRemove: sequences removed while waiting, prefilling and decoding, under every scheduler, free their blocks
// (drive checks the pool is whole at the end), are never scheduled again, and leave the others' outputs as they
// are served alone.
func TestRemove(t *testing.T) {
	for _, name := range []string{"continuous", "static", "dynamic"} {
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 3))
			as := randomSeqs(rng, 16, 30, 20, 60)
			want := alone(t, as)
			for i := range as {
				if i%3 == 0 {
					as[i].cancel = as[i].iter + 1 + rng.IntN(20)
				}
			}
			m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 60})
			var s Scheduler
			switch name {
			case "continuous":
				s = &Continuous{KV: m, MaxBatchedTokens: 16, MaxNumSeqs: 8}
			case "static":
				s = NewStatic(m, 32, 4)
			default:
				s = NewDynamic(m, 32, 4, 3*time.Millisecond)
			}
			steps := drive(t, s, m, 32, as)
			removed := map[*Seq]int{}
			for _, a := range as {
				if a.seq.Cancelled {
					removed[a.seq] = a.cancel
				}
			}
			if seed == 0 && len(removed) == 0 {
				t.Fatalf("%s: no sequence was removed before it finished", name)
			}
			for i, st := range steps {
				for _, w := range st.plan.Work {
					if at, ok := removed[w.Seq]; ok && i >= at {
						t.Fatalf("%s seed %d: sequence %d scheduled at iteration %d after its removal at %d", name, seed, w.Seq.ID, i, at)
					}
				}
			}
			for i, a := range as {
				if !a.seq.Cancelled && !slices.Equal(a.seq.Output, want[i]) {
					t.Errorf("%s seed %d: sequence %d output %v, want %v", name, seed, i, a.seq.Output, want[i])
				}
			}
		}
	}
}

// TestAssertionsCatchWrongSchedulers: the ordering checks fail on schedulers that break them, so the tests that
// use them can fail.
func TestAssertionsCatchWrongSchedulers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	as := randomSeqs(rng, 30, 60, 20, 100)
	m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 40})
	if err := decodesFirst(drive(t, prefillFirst{&Continuous{KV: m, MaxBatchedTokens: 24, MaxNumSeqs: 6}}, m, 24, as)); err == nil {
		t.Error("decodesFirst passed a scheduler that prefills before decoding")
	}
	as = randomSeqs(rng, 20, 30, 20, 60)
	m, _ = kv.New(kv.Options{BlockSize: 4, Blocks: 200})
	if err := runToCompletion(drive(t, &Continuous{KV: m, MaxBatchedTokens: 64, MaxNumSeqs: 4}, m, 64, as)); err == nil {
		t.Error("runToCompletion passed continuous batching, which starts sequences while others run")
	}
}

func randomSeqs(rng *rand.Rand, n, maxPrompt, maxOut, ctx int) []arrival {
	var out []arrival
	for i := range n {
		p := make([]int32, 1+rng.IntN(maxPrompt))
		for j := range p {
			p[j] = int32(rng.IntN(97))
		}
		out = append(out, arrival{iter: rng.IntN(3 * n), seq: &Seq{ID: kv.SeqID(i), Prompt: p, MaxTokens: 1 + rng.IntN(maxOut), MaxLen: ctx}})
	}
	return out
}

func clone(as []arrival) []arrival {
	out := make([]arrival, len(as))
	for i, a := range as {
		s := *a.seq
		s.Prompt = append([]int32(nil), s.Prompt...)
		out[i] = arrival{iter: a.iter, seq: &s, cancel: a.cancel}
	}
	return out
}

// alone returns each sequence's output served by itself with a pool that never preempts.
func alone(t *testing.T, as []arrival) [][]int32 {
	var out [][]int32
	for _, a := range clone(as) {
		m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 1000})
		drive(t, &Continuous{KV: m, MaxBatchedTokens: 1000, MaxNumSeqs: 1}, m, 1000, []arrival{{iter: 0, seq: a.seq}})
		out = append(out, a.seq.Output)
	}
	return out
}

func checkOutputs(t *testing.T, name string, as []arrival, want [][]int32) {
	t.Helper()
	for i, a := range as {
		if string(rune32(a.seq.Output)) != string(rune32(want[i])) {
			t.Errorf("%s: sequence %d output %v, want %v (served alone)", name, i, a.seq.Output, want[i])
		}
	}
}

func rune32(x []int32) []rune {
	r := make([]rune, len(x))
	for i, v := range x {
		r[i] = rune(v)
	}
	return r
}

// TestContinuousPreemptionKeepsOutputs: under a KV pool small enough to force preemptions, every iteration stays in
// the token budget and every sequence ends with exactly the output it has when served alone.
func TestContinuousPreemptionKeepsOutputs(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		as := randomSeqs(rng, 16, 40, 30, 80)
		want := alone(t, as)
		m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 24, Watermark: 0.05})
		c := &Continuous{KV: m, MaxBatchedTokens: 16, MaxNumSeqs: 8}
		steps := drive(t, c, m, 16, as)
		checkOutputs(t, "continuous", as, want)
		pre := 0
		for _, st := range steps {
			p := st.plan
			pre += len(p.Preempted)
			for j := 1; j < len(p.Preempted); j++ {
				if p.Preempted[j].Arrival > p.Preempted[j-1].Arrival {
					t.Errorf("seed %d: preempted %d before the newer %d", seed, p.Preempted[j-1].ID, p.Preempted[j].ID)
				}
			}
		}
		if seed == 0 && pre == 0 {
			t.Errorf("seed %d: no preemption; the test pool is meant to force some", seed)
		}
	}
}

// TestContinuousFCFS: sequences are first admitted in arrival order (no overtaking, so none starves), a long
// prompt waiting at the head is not bypassed by short ones behind it, and decodes come before prefill chunks.
func TestContinuousFCFS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	as := randomSeqs(rng, 30, 60, 20, 100)
	as[3].seq.Prompt = make([]int32, 90) // a long prompt among short ones
	m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 40})
	steps := drive(t, &Continuous{KV: m, MaxBatchedTokens: 24, MaxNumSeqs: 6}, m, 24, as)
	order := map[*Seq]int{}
	mixed := 0
	for _, st := range steps {
		for _, s := range st.plan.Started {
			if _, ok := order[s]; !ok {
				order[s] = len(order)
			}
		}
		kinds := map[bool]bool{}
		for _, w := range st.works {
			kinds[w.decode] = true
		}
		if len(kinds) == 2 {
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatal("no iteration mixes decodes and prefill chunks: the ordering check would be vacuous")
	}
	if err := decodesFirst(steps); err != nil {
		t.Error(err)
	}
	for _, a := range as {
		for _, b := range as {
			if (a.seq.Arrival < b.seq.Arrival || (a.seq.Arrival == b.seq.Arrival && a.seq.ID < b.seq.ID)) && order[a.seq] > order[b.seq] {
				t.Errorf("sequence %d (arrived %v) admitted after %d (arrived %v)", a.seq.ID, a.seq.Arrival, b.seq.ID, b.seq.Arrival)
			}
		}
	}
}

// TestBatchedBaselines: static and dynamic batching give the same outputs, keep the token budget, run each batch
// to completion (no sequence starts while a batch runs), and dynamic batching holds a partial batch until the
// oldest has waited MaxDelay.
func TestBatchedBaselines(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	as := randomSeqs(rng, 20, 30, 20, 60)
	want := alone(t, as)
	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		run := clone(as)
		m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 200})
		b := &Batched{KV: m, MaxBatchedTokens: 64, BatchSize: 4, MaxDelay: delay}
		steps := drive(t, b, m, 64, run)
		checkOutputs(t, "batched", run, want)
		if err := runToCompletion(steps); err != nil {
			t.Errorf("delay %v: %v", delay, err)
		}
		for i, st := range steps {
			p := st.plan
			if delay > 0 && len(p.Started) > 0 && len(p.Started) < 4 {
				if now := time.Duration(i) * time.Millisecond; now-p.Started[0].Arrival < delay {
					t.Errorf("partial batch of %d started at %v, oldest arrived %v", len(p.Started), now, p.Started[0].Arrival)
				}
			}
		}
	}
}

// sharedPrefixSeqs is randomSeqs whose prompts start with one of three 40-token prefixes, cut at random lengths.
func sharedPrefixSeqs(rng *rand.Rand, n, maxTail, maxOut, ctx int) []arrival {
	var bases [][]int32
	for range 3 {
		b := make([]int32, 40)
		for j := range b {
			b[j] = int32(rng.IntN(97))
		}
		bases = append(bases, b)
	}
	out := randomSeqs(rng, n, maxTail, maxOut, ctx)
	for _, a := range out {
		base := bases[rng.IntN(len(bases))]
		a.seq.Prompt = append(slices.Clone(base[:1+rng.IntN(len(base))]), a.seq.Prompt...)
	}
	return out
}

// TestContinuousPrefixCaching: with prefix caching, prompts sharing prefixes skip the prefill of their cached
// blocks (a sequence's first work starts where its hit ends, on a block boundary, before its last token), and
// under a pool that preempts and evicts every sequence still ends with exactly the output it has served alone
// without a cache: no hit ever stands for KV other than its own prefix's.
func TestContinuousPrefixCaching(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		as := sharedPrefixSeqs(rng, 16, 30, 30, 120)
		want := alone(t, as)
		for _, blocks := range []int{200, 30} {
			run := clone(as)
			m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: blocks, Watermark: 0.05, PrefixCaching: true})
			steps := drive(t, &Continuous{KV: m, MaxBatchedTokens: 16, MaxNumSeqs: 8}, m, 16, run)
			checkOutputs(t, fmt.Sprintf("seed %d, %d blocks", seed, blocks), run, want)
			queries, hits, preempted := 0, 0, 0
			for _, st := range steps {
				p := st.plan
				queries, hits, preempted = queries+p.PrefixQueries, hits+p.PrefixHits, preempted+len(p.Preempted)
				started := 0
				for _, s := range st.starts {
					started += s.len
					if s.cached%4 != 0 || s.cached >= s.len || s.computed != s.cached {
						t.Fatalf("seed %d: a sequence of %d tokens admitted with %d cached, computed %d", seed, s.len, s.cached, s.computed)
					}
				}
				if started != p.PrefixQueries {
					t.Fatalf("seed %d: %d prefix-cache queries for sequences of %d tokens started", seed, p.PrefixQueries, started)
				}
			}
			if err := m.Check(); err != nil {
				t.Fatal(err)
			}
			if seed == 0 {
				t.Logf("%d blocks: %d of %d tokens cached, %d preemptions", blocks, hits, queries, preempted)
				if hits == 0 || (blocks == 30 && preempted == 0) {
					t.Errorf("%d blocks: %d hits, %d preemptions: the test is meant to share prefixes (and preempt in the small pool)", blocks, hits, preempted)
				}
			}
		}
	}
}

// TestDemandCountsCachedPrefix: the queue's demand counts a waiting sequence's cached prefix as admission will:
// cached blocks another sequence holds take no free block and need no prefill; without prefix caching every
// block and token counts.
func TestDemandCountsCachedPrefix(t *testing.T) {
	for _, caching := range []bool{false, true} {
		m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 100, PrefixCaching: caching})
		c := &Continuous{KV: m, MaxBatchedTokens: 64, MaxNumSeqs: 1}
		prompt := make([]int32, 40)
		for i := range prompt {
			prompt[i] = int32(i + 1)
		}
		c.Add(&Seq{ID: 1, Prompt: prompt, MaxTokens: 5, MaxLen: 100})
		c.Update(c.Schedule(0), []int32{7}) // the whole prompt computed, one token sampled
		c.Add(&Seq{ID: 2, Prompt: slices.Clone(prompt), MaxTokens: 5, MaxLen: 100})
		c.Add(&Seq{ID: 3, Prompt: slices.Clone(prompt[:20]), MaxTokens: 5, MaxLen: 100})
		head, blocks, tokens := c.Demand()
		want := [3]int{10, 15, 60}
		if caching {
			want = [3]int{1, 2, 4 + 4} // 36 of 40 and 16 of 20 tokens cached, held by sequence 1
		}
		if [3]int{head, blocks, tokens} != want {
			t.Errorf("caching %v: demand %d head blocks, %d blocks, %d tokens; want %v", caching, head, blocks, tokens, want)
		}
	}
}

// TestContinuousLetsFinishedGo: a sequence the scheduler admitted and finished is garbage by its next plan; the
// arrays it reuses (the queue's, the running batch's, the plans') do not hold it.
func TestContinuousLetsFinishedGo(t *testing.T) {
	m, _ := kv.New(kv.Options{BlockSize: 4, Blocks: 100})
	c := &Continuous{KV: m, MaxBatchedTokens: 64, MaxNumSeqs: 4}
	short := &Seq{ID: 2, Prompt: make([]int32, 8), MaxTokens: 1, MaxLen: 1000}
	gone := weak.Make(short)
	c.Add(&Seq{ID: 1, Prompt: make([]int32, 8), MaxTokens: 10, MaxLen: 1000})
	c.Add(&Seq{ID: 3, Prompt: make([]int32, 8), MaxTokens: 10, MaxLen: 1000})
	c.Add(short)
	c.Add(&Seq{ID: 4, Prompt: make([]int32, 396), MaxTokens: 1, MaxLen: 1000}) // waits: it needs the whole pool
	short = nil
	if done := c.Update(c.Schedule(0), []int32{7, 7, 7}); len(done) != 1 || done[0].ID != 2 || c.Waiting() != 1 {
		t.Fatalf("the first step finished %v and left %d waiting, want sequence 2 and one waiting", done, c.Waiting())
	}
	if p := c.Schedule(0); len(p.Work) != 2 {
		t.Fatalf("the second step has %d works, want the two decodes", len(p.Work))
	}
	runtime.GC()
	if gone.Value() != nil {
		t.Error("the finished sequence 2 is still reachable from the scheduler")
	}
	runtime.KeepAlive(c)
}
