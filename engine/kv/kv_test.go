package kv

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkInvariants runs Check and verifies that Holders agrees with the tables.
func checkInvariants(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	for i, r := range m.regions {
		holders := m.Holders(i)
		n := 0
		for id, s := range m.seqs {
			for _, b := range s.table {
				if m.regionOf(b) == i {
					n++
					if !containsSeq(holders, id) {
						t.Fatalf("sequence %d holds block %d of region %d, Holders says %v", id, b, i, holders)
					}
				}
			}
		}
		if (n == 0) != (len(holders) == 0) || (!m.caching && n != r.Used) {
			t.Fatalf("region %d: %d blocks held, Used %d, holders %v", i, n, r.Used, holders)
		}
	}
}

func containsSeq(ids []SeqID, id SeqID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// harness drives a manager as a scheduler would, with the tokens of each sequence and a model of the KV slots:
// computing a position writes into its slot what a model's KV there depends on, the position's token and every
// token before it (a hash of them), so a prefix hit can be checked against the prefix it stands for.
type harness struct {
	t       *testing.T
	m       *Manager
	seqs    [8]*hseq
	parked  [8]*hseq  // preempted: they come back with their tokens and their prefix's last match
	slots   []uint64  // what each slot holds (0: never written)
	prompts [][]int32 // shared prefixes the prompts start from
	rng     *rand.Rand
}

// kvOf is what a model's KV at position pos of tokens depends on: tokens [0, pos], as a hash (never 0).
func kvOf(tokens []int32, pos int) uint64 {
	h := uint64(1469598103934665603)
	for _, t := range tokens[:pos+1] {
		h = (h ^ uint64(uint32(t))) * 1099511628211
	}
	return h | 1
}

type hseq struct {
	tokens   []int32
	computed int
	prefix   Prefix
}

func newHarness(t *testing.T, m *Manager, seed uint64) *harness {
	h := &harness{t: t, m: m, rng: rand.New(rand.NewPCG(seed, 5))}
	for range 3 {
		p := make([]int32, 30)
		for i := range p {
			p[i] = int32(h.rng.IntN(4)) // a small alphabet: distinct prefixes with equal blocks in places
		}
		h.prompts = append(h.prompts, p)
	}
	return h
}

// slotsNow grows the slot model with the pool.
func (h *harness) slotsNow() []uint64 {
	for len(h.slots) < h.m.TotalBlocks()*h.m.blockSize {
		h.slots = append(h.slots, 0)
	}
	return h.slots
}

// admit starts sequence id on a prompt that begins with one of the shared prefixes, taking the cached blocks
// its prefix matches, and checks that every one of them holds the prompt's tokens.
func (h *harness) admit(id SeqID, arg byte) {
	t, m := h.t, h.m
	if h.seqs[id] != nil {
		return
	}
	s := h.parked[id]
	if s == nil {
		base := h.prompts[int(arg)%len(h.prompts)]
		tokens := append([]int32(nil), base[:1+int(arg)%len(base)]...)
		for range int(arg) % 9 {
			tokens = append(tokens, int32(h.rng.IntN(4)))
		}
		s = &hseq{tokens: tokens}
		m.Hash(&s.prefix, tokens)
	}
	tokens := s.tokens
	cached := m.Match(&s.prefix, len(tokens)-1)
	if cached%m.blockSize != 0 || cached > len(tokens)-1 || (!m.caching && cached != 0) {
		t.Fatalf("Match of %d tokens: %d cached", len(tokens), cached)
	}
	free := m.FreeBlocks()
	fits := m.AdmitBlocks(len(tokens), &s.prefix) <= free
	if err := m.Admit(id, len(tokens), &s.prefix); (err == nil) != fits {
		t.Fatalf("Admit(%d, %d tokens): %v, but %d blocks needed of %d free", id, len(tokens), err, m.AdmitBlocks(len(tokens), &s.prefix), free)
	} else if err != nil {
		if m.FreeBlocks() != free {
			t.Fatalf("a failed Admit changed the free blocks from %d to %d", free, m.FreeBlocks())
		}
		return
	}
	table, _ := m.Table(id)
	slots := h.slotsNow()
	for pos := range cached {
		if got := slots[int(table[pos/m.blockSize])*m.blockSize+pos%m.blockSize]; got != kvOf(tokens, pos) {
			t.Fatalf("sequence %d hit block %d for position %d holding the KV of another prefix", id, table[pos/m.blockSize], pos)
		}
	}
	for _, b := range table[cached/m.blockSize:] {
		if m.regions[m.regionOf(b)].Draining {
			t.Fatalf("Admit handed out block %d of a draining region", b)
		}
	}
	s.computed = cached
	h.seqs[id], h.parked[id] = s, nil
}

// compute runs up to arg%40 of the sequence's uncomputed tokens: their slots must be the sequence's alone.
func (h *harness) compute(id SeqID, arg byte) {
	s := h.seqs[id]
	if s == nil {
		return
	}
	m := h.m
	table, reserved := m.Table(id)
	to := min(reserved, len(s.tokens), s.computed+int(arg)%40+1)
	slots := h.slotsNow()
	for pos := s.computed; pos < to; pos++ {
		b := table[pos/m.blockSize]
		if m.ref[b] != 1 || m.registered[b] {
			h.t.Fatalf("sequence %d writes position %d into block %d, held by %d (cached %v)", id, pos, b, m.ref[b], m.registered[b])
		}
		slots[int(b)*m.blockSize+pos%m.blockSize] = kvOf(s.tokens, pos)
	}
	s.computed = max(s.computed, to)
	m.Commit(id, &s.prefix, s.computed)
}

// grow appends up to 40 output tokens to a sequence that has computed all its tokens, as decoding does.
func (h *harness) grow(id SeqID, arg byte) {
	s := h.seqs[id]
	if s == nil || s.computed < len(s.tokens) {
		return
	}
	m := h.m
	n := len(s.tokens) + int(arg)%40 + 1
	could := m.CanGrow(id, n)
	free := m.FreeBlocks()
	err := m.Grow(id, n)
	if (err == nil) != could {
		h.t.Fatalf("Grow(%d, %d) error %v but CanGrow said %v", id, n, err, could)
	}
	if err != nil {
		if m.FreeBlocks() != free {
			h.t.Fatalf("a failed Grow changed the free blocks from %d to %d", free, m.FreeBlocks())
		}
		return
	}
	for len(s.tokens) < n {
		s.tokens = append(s.tokens, int32(h.rng.IntN(4)))
	}
	m.Hash(&s.prefix, s.tokens[s.prefix.Hashed()*m.blockSize:])
}

// apply runs one operation chosen by op and arg, checking what it promises, and the invariants after.
func (h *harness) apply(op, arg byte) {
	t, m := h.t, h.m
	seq := SeqID(arg % 8)
	switch op % 8 {
	case 0:
		h.admit(seq, arg)
	case 1:
		h.compute(seq, arg)
	case 2:
		h.grow(seq, arg)
	case 3: // finish or cancel, or preempt (to come back later): the sequence releases its blocks
		m.Free(seq)
		if s := h.seqs[seq]; s != nil && arg%16 < 8 {
			s.computed = 0
			h.parked[seq] = s
		}
		h.seqs[seq] = nil
	case 4:
		m.Attach(int(arg)%7 + 1)
	case 5:
		regions := m.Regions()
		r, err := m.Detach()
		if len(regions) >= 2 && regions[len(regions)-1].Used == 0 {
			if want := regions[len(regions)-1]; err != nil || r.First != want.First || r.Blocks != want.Blocks {
				t.Fatalf("Detach of an unused last region: %v, %v", r, err)
			}
			h.slots = h.slots[:min(len(h.slots), m.TotalBlocks()*m.blockSize)]
		} else if err == nil {
			t.Fatalf("Detach succeeded with regions %+v", regions)
		}
	case 6: // drain the last region, or stop draining it
		if err := m.SetDraining(arg%2 == 0); (err == nil) != (len(m.regions) >= 2) {
			t.Fatalf("SetDraining with %d regions: %v", len(m.regions), err)
		}
	case 7:
		h.compute(seq, 255)
	}
	checkInvariants(t, m)
}

// TestRandomInterleavings: admissions with shared prefixes, prefill and decode, finishes and preemptions, region
// attach, drain and detach, mixed at random with and without prefix caching: the accounting holds after every
// operation, a prefix hit always holds the tokens it stands for, and no sequence writes a block another holds.
func TestRandomInterleavings(t *testing.T) {
	hits, seeds := 0, uint64(50)
	if testing.Short() {
		seeds = 10 // the race detector run
	}
	for _, caching := range []bool{false, true} {
		for seed := range seeds {
			rng := rand.New(rand.NewPCG(seed, 1))
			m, err := New(Options{BlockSize: 4, Blocks: 10, Watermark: 0.1, PrefixCaching: caching})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, m, seed)
			for range 500 {
				op, arg := byte(rng.IntN(256)), byte(rng.IntN(256))
				fresh := op%8 == 0 && h.seqs[arg%8] == nil
				h.apply(op, arg)
				if s := h.seqs[arg%8]; fresh && s != nil && s.computed > 0 {
					hits++
				}
			}
		}
	}
	if hits < 20 {
		t.Fatalf("%d admissions found their prefix cached: the test is meant to exercise sharing", hits)
	}
}

func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 1, 0, 9, 3, 5, 4, 0, 2, 1, 4, 0}, true)
	f.Add([]byte{4, 6, 0, 200, 1, 7, 5, 4, 3, 7, 5, 4}, false)
	f.Add([]byte{4, 6, 0, 30, 7, 30, 3, 30, 0, 38, 7, 38, 6, 0, 5, 0, 0, 30}, true)
	f.Fuzz(func(t *testing.T, ops []byte, caching bool) {
		m, err := New(Options{BlockSize: 3, Blocks: 6, PrefixCaching: caching})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, m, 1)
		for i := 0; i+1 < len(ops); i += 2 {
			h.apply(ops[i], ops[i+1])
		}
	})
}

func TestSlotsFollowTables(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 8})
	m.Grow(1, 3)
	m.Grow(2, 5)
	m.Grow(1, 9)
	table, tokens := m.Table(1)
	if tokens != 9 || len(table) != 3 {
		t.Fatalf("sequence 1: table %v for %d tokens, want 3 blocks for 9", table, tokens)
	}
	for pos := range 9 {
		if got, want := m.Slot(1, pos), table[pos/4]*4+int32(pos%4); got != want {
			t.Fatalf("Slot(1, %d) = %d, want %d", pos, got, want)
		}
	}
}

func TestDetachOnlyWhenFree(t *testing.T) {
	m, _ := New(Options{BlockSize: 16, Blocks: 4})
	r := m.Attach(3)
	if r.First != 4 || r.Blocks != 3 {
		t.Fatalf("Attach(3) = %+v, want blocks 4..6", r)
	}
	// Lower regions fill first, so the new region is touched only when the base region is full.
	if err := m.Grow(1, 4*16); err != nil {
		t.Fatal(err)
	}
	if got := m.Regions()[1].Used; got != 0 {
		t.Fatalf("region 1 has %d used blocks while the base region had room", got)
	}
	if err := m.Grow(2, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Detach(); err == nil || !strings.Contains(err.Error(), "1 blocks in use") {
		t.Fatalf("Detach with a block in use: %v, want an error", err)
	}
	m.Free(2)
	if _, err := m.Detach(); err != nil {
		t.Fatalf("Detach of a free region: %v", err)
	}
	if m.TotalBlocks() != 4 || m.FreeBlocks() != 0 {
		t.Fatalf("after detach: %d blocks, %d free; want 4, 0", m.TotalBlocks(), m.FreeBlocks())
	}
	if _, err := m.Detach(); err == nil {
		t.Fatal("the base region was detached")
	}
}

// TestDraining: a draining region hands out no new block, its holders are reported, and once they free their
// blocks it detaches; draining counts its free blocks out of FreeBlocks and Capacity.
func TestDraining(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 2})
	m.Attach(4)
	for id := SeqID(1); id <= 3; id++ {
		if err := m.Grow(id, 6); err != nil { // two blocks each: 1 fills the base, 2 and 3 reach region 1
			t.Fatal(err)
		}
	}
	if err := m.Grow(4, 1); err == nil || m.FreeBlocks() != 0 {
		t.Fatalf("Grow with no free block: %v, %d free", err, m.FreeBlocks())
	}
	if got := m.Holders(1); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Holders(1) = %v, want [2 3]", got)
	}
	m.Free(2)
	if err := m.SetDraining(true); err != nil {
		t.Fatal(err)
	}
	if m.FreeBlocks() != 0 || m.Capacity() != 2 {
		t.Fatalf("draining: %d free, capacity %d; want 0 and 2", m.FreeBlocks(), m.Capacity())
	}
	if err := m.Grow(4, 1); err == nil {
		t.Fatal("Grow took a block of a draining region")
	}
	if _, err := m.Detach(); err == nil {
		t.Fatal("Detach of a draining region still held by sequence 3")
	}
	m.Free(3)
	if _, err := m.Detach(); err != nil {
		t.Fatalf("Detach of a drained region: %v", err)
	}
	if m.TotalBlocks() != 2 || m.FreeBlocks() != 0 || m.Capacity() != 2 {
		t.Fatalf("after detach: %d blocks, %d free, capacity %d", m.TotalBlocks(), m.FreeBlocks(), m.Capacity())
	}
	if err := m.SetDraining(true); err == nil {
		t.Fatal("the base region was set draining")
	}
}

func TestWatermark(t *testing.T) {
	m, _ := New(Options{BlockSize: 1, Blocks: 100, Watermark: 0.1})
	if !m.CanAdmit(90, nil) || m.CanAdmit(91, nil) {
		t.Fatalf("with 100 free blocks and a 10%% watermark: CanAdmit(90)=%v CanAdmit(91)=%v, want true, false", m.CanAdmit(90, nil), m.CanAdmit(91, nil))
	}
	m.Attach(100) // the watermark scales with the pool
	if !m.CanAdmit(180, nil) || m.CanAdmit(181, nil) {
		t.Fatalf("with 200 blocks: CanAdmit(180)=%v CanAdmit(181)=%v, want true, false", m.CanAdmit(180, nil), m.CanAdmit(181, nil))
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := New(Options{BlockSize: 0, Blocks: 10}); err == nil {
		t.Error("block size 0 accepted")
	}
	if _, err := New(Options{BlockSize: 16, Blocks: 10, Watermark: 1}); err == nil {
		t.Error("watermark 1 accepted")
	}
	if _, err := New(Options{BlockSize: 16, Blocks: -1}); err == nil {
		t.Error("-1 blocks accepted")
	}
}

// seqTokens is n tokens counting up from first.
func seqTokens(first, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(first + i)
	}
	return out
}

// admitComputed admits seq on tokens with its cached prefix and commits all of them as computed; it returns the
// tokens found cached.
func admitComputed(t *testing.T, m *Manager, seq SeqID, tokens []int32) int {
	t.Helper()
	var p Prefix
	m.Hash(&p, tokens)
	cached := m.Match(&p, len(tokens)-1)
	if err := m.Admit(seq, len(tokens), &p); err != nil {
		t.Fatal(err)
	}
	m.Commit(seq, &p, len(tokens))
	checkInvariants(t, m)
	return cached
}

// TestPrefixSharing: a second sequence with the same 40-token prompt finds 9 of its 10 blocks cached (the last
// block is computed again, for the last token's logits), shares them, and takes one fresh block; released, the
// blocks stay cached and free, and are evicted tail first, only once no never-cached block is left.
func TestPrefixSharing(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 24, PrefixCaching: true})
	prompt := seqTokens(100, 40)
	if got := admitComputed(t, m, 1, prompt); got != 0 {
		t.Fatalf("the first sequence found %d tokens cached in an empty cache", got)
	}
	if got := admitComputed(t, m, 2, prompt); got != 36 || m.UsedBlocks() != 11 || m.FreeBlocks() != 13 {
		t.Fatalf("the same prompt again: %d tokens cached, %d blocks used, %d free; want 36, 11, 13", got, m.UsedBlocks(), m.FreeBlocks())
	}
	t1, _ := m.Table(1)
	t2, _ := m.Table(2)
	if !slices.Equal(t1[:9], t2[:9]) || t1[9] == t2[9] {
		t.Fatalf("tables %v and %v: want the first 9 blocks shared and the last private", t1, t2)
	}
	// A prompt that differs in its 6th token shares only the first block.
	other := slices.Clone(prompt)
	other[5] = 7
	if got := admitComputed(t, m, 3, other); got != 4 {
		t.Fatalf("a prompt differing at token 5: %d tokens cached, want 4", got)
	}
	m.Free(3)
	m.Free(1)
	m.Free(2)
	// Cached: sequence 1's 10 blocks and sequence 3's 9 of its own; sequence 2's last block duplicated one
	// cached already and went back to the free list.
	if m.UsedBlocks() != 0 || m.CachedBlocks() != 19 || m.FreeBlocks() != 24 {
		t.Fatalf("all released: %d used, %d cached, %d free; want 0, 19, 24", m.UsedBlocks(), m.CachedBlocks(), m.FreeBlocks())
	}
	// Take the 5 never-cached blocks, then 12 more: the evictions start with the blocks released first
	// (sequence 3's, tail first), then sequence 1's tail.
	if err := m.Grow(4, 4*17); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, m)
	var p Prefix
	m.Hash(&p, prompt)
	if got := m.Match(&p, 39); got != 4*7 || m.CachedBlocks() != 7 {
		t.Fatalf("after 12 evictions: %d tokens of the prompt cached, %d blocks; want 28 and 7", got, m.CachedBlocks())
	}
	var q Prefix
	m.Hash(&q, other)
	if got := m.Match(&q, 39); got != 4 {
		t.Fatalf("the other prompt: %d tokens cached, want its first block (shared with the prompt), 4", got)
	}
	// A match taken later is checked again: evicting the prompt's head leaves nothing.
	if err := m.Grow(4, 4*24); err != nil {
		t.Fatal(err)
	}
	if got := m.Match(&p, 39); got != 0 || p.evictable != 0 || len(p.match) != 0 {
		t.Fatalf("every block evicted: %d tokens cached (%v)", got, p.match)
	}
	checkInvariants(t, m)
}

// TestMatchAgain: a prefix matched again sees what changed since: blocks entered after it missed, and blocks
// evicted after it matched them.
func TestMatchAgain(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 10, PrefixCaching: true})
	var p Prefix
	m.Hash(&p, seqTokens(0, 20))
	if got := m.Match(&p, 19); got != 0 {
		t.Fatalf("an empty cache matched %d tokens", got)
	}
	admitComputed(t, m, 1, seqTokens(0, 12))
	if got := m.Match(&p, 19); got != 12 {
		t.Fatalf("after its first 12 tokens were entered: %d matched, want 12", got)
	}
	if got := m.Match(&p, 19); got != 12 || p.evictable != 0 {
		t.Fatalf("matched again: %d, %d evictable; want 12 and 0", got, p.evictable)
	}
	m.Free(1)
	if got := m.Match(&p, 19); got != 12 || p.evictable != 3 {
		t.Fatalf("released: %d matched, %d evictable; want 12 and 3", got, p.evictable)
	}
	if err := m.Grow(2, 4*8); err != nil { // the 7 free blocks, then the last one released (block 2)
		t.Fatal(err)
	}
	if got := m.Match(&p, 19); got != 8 || p.evictable != 2 {
		t.Fatalf("one evicted: %d matched, %d evictable; want 8 and 2", got, p.evictable)
	}
}

// TestWholePromptCached: when a prompt's every block is cached, the last one is not taken, so the last token is
// computed; a prompt of one block finds nothing; admission counts held hits as free and unheld ones as taken.
func TestWholePromptCached(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 8, PrefixCaching: true})
	admitComputed(t, m, 1, seqTokens(0, 16))
	var p Prefix
	m.Hash(&p, seqTokens(0, 16))
	if got := m.Match(&p, 15); got != 12 || m.AdmitBlocks(16, &p) != 1 {
		t.Fatalf("16 cached tokens: %d matched, admission takes %d blocks; want 12 and 1", got, m.AdmitBlocks(16, &p))
	}
	if got := m.Match(&p, 3); got != 0 {
		t.Fatalf("a limit within the first block matched %d tokens", got)
	}
	m.Free(1)
	if got := m.Match(&p, 15); got != 12 || m.AdmitBlocks(16, &p) != 4 || !m.CanAdmit(16, &p) {
		t.Fatalf("released: %d matched, admission takes %d blocks (3 cached and 1 fresh); want 12 and 4", got, m.AdmitBlocks(16, &p))
	}
	// Admission with a watermark counts the same way: 8 blocks, 4 held, 2 kept free.
	w, _ := New(Options{BlockSize: 4, Blocks: 8, Watermark: 0.25, PrefixCaching: true})
	admitComputed(t, w, 1, seqTokens(0, 16))
	var q Prefix
	w.Hash(&q, seqTokens(0, 16))
	w.Match(&q, 15)
	if !w.CanAdmit(16, &q) || w.CanAdmit(24, &q) || w.CanAdmit(16, nil) {
		t.Fatalf("4 free, watermark 2: CanAdmit(16 sharing 12) = %v, CanAdmit(24 sharing 12) = %v, CanAdmit(16) = %v; want true, false, false",
			w.CanAdmit(16, &q), w.CanAdmit(24, &q), w.CanAdmit(16, nil))
	}
}

// TestCachingOff: without prefix caching nothing is shared or kept: equal prompts match nothing and released
// blocks are plainly free.
func TestCachingOff(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 24})
	admitComputed(t, m, 1, seqTokens(0, 20))
	if got := admitComputed(t, m, 2, seqTokens(0, 20)); got != 0 || m.UsedBlocks() != 10 {
		t.Fatalf("caching off: %d tokens matched, %d blocks used; want 0 and 10", got, m.UsedBlocks())
	}
	m.Free(1)
	if m.CachedBlocks() != 0 || m.index.used != 0 {
		t.Fatalf("caching off: %d blocks cached, %d in the index", m.CachedBlocks(), m.index.used)
	}
}

// TestDrainEvictsCache: draining a region evicts the cached blocks no sequence holds and takes the held ones out
// of the cache, so no hit lands in it and it detaches as soon as its holders finish; detaching a region that is not
// draining evicts what it caches.
func TestDrainEvictsCache(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 2, PrefixCaching: true})
	m.Attach(6)
	admitComputed(t, m, 1, seqTokens(0, 16)) // blocks 0, 1 in the base region, 2, 3 in region 1
	admitComputed(t, m, 2, seqTokens(50, 8)) // blocks 4, 5
	m.Free(2)
	if got := m.Regions()[1]; got.Used != 2 || got.Cached != 2 {
		t.Fatalf("region 1: %+v, want 2 used and 2 cached", got)
	}
	if err := m.SetDraining(true); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, m)
	if got := m.Regions()[1]; got.Cached != 0 || m.FreeBlocks() != 0 {
		t.Fatalf("draining region 1: %+v, %d free; want nothing cached or free", got, m.FreeBlocks())
	}
	var p Prefix
	m.Hash(&p, seqTokens(0, 16))
	if got := m.Match(&p, 15); got != 8 {
		t.Fatalf("the prompt whose blocks 2 and 3 are in the draining region: %d tokens matched, want the base region's 8", got)
	}
	m.Free(1)
	checkInvariants(t, m)
	if _, err := m.Detach(); err != nil {
		t.Fatalf("Detach once the holders finished: %v", err)
	}
	if m.CachedBlocks() != 2 || m.FreeBlocks() != 2 {
		t.Fatalf("after the detach: %d cached, %d free; want the base region's 2 cached, free", m.CachedBlocks(), m.FreeBlocks())
	}
	m.Attach(4)
	admitComputed(t, m, 3, seqTokens(200, 24)) // base region's 2 evicted, then region 1's 4 blocks
	m.Free(3)
	if _, err := m.Detach(); err != nil || m.CachedBlocks() != 2 || m.FreeBlocks() != 2 {
		t.Fatalf("Detach of a region caching 4 blocks: %v; %d cached, %d free after; want 2 and 2", err, m.CachedBlocks(), m.FreeBlocks())
	}
	checkInvariants(t, m)
}

// FuzzBlockIndex: entering, finding and evicting hashes in any order agrees with a map, whatever the hashes' low
// bits collide on (the fuzzer picks them from a few values, so probe runs grow long, wrap around the table, and
// leave stale slots that later entries reuse and rebuilds clear).
func FuzzBlockIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 17, 2, 2})
	f.Add([]byte{0, 15, 0, 31, 0, 47, 1, 15, 0, 63, 2, 31, 2, 47, 0, 15})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const blocks = 8
		m, _ := New(Options{BlockSize: 1, Blocks: blocks, PrefixCaching: true})
		in := map[BlockHash]int32{}
		for i := 0; i+1 < len(ops); i += 2 {
			b := int32(ops[i+1] % blocks)
			h := BlockHash{uint64(ops[i+1]/blocks%4*31+1) | uint64(ops[i+1]%3)<<32, uint64(ops[i+1] / 32)}
			switch ops[i] % 3 {
			case 0:
				if m.registered[b] {
					continue
				}
				_, dup := in[h]
				if m.enter(b, h) == dup {
					t.Fatalf("op %d: enter(block %d) = %v with the hash entered already %v", i/2, b, !dup, dup)
				}
				if !dup {
					in[h] = b
				}
			case 1:
				if m.registered[b] {
					delete(in, m.hash[b])
					m.unregister(b)
				}
			}
			n := 0
			for o := range int32(blocks) {
				if m.registered[o] {
					n++
					if got := m.find(m.hash[o]); got != o || in[m.hash[o]] != o {
						t.Fatalf("after op %d: block %d's hash finds %d", i/2, o, got)
					}
				}
			}
			want, ok := in[h]
			if got := m.find(h); (ok && got != want) || (!ok && got != -1) {
				t.Fatalf("after op %d: find(%v) = %d, entered %v", i/2, h, got, in)
			}
			if n != len(in) || 2*m.index.used > len(m.index.slots) {
				t.Fatalf("after op %d: %d registered, %d entered, %d slots used of %d", i/2, n, len(in), m.index.used, len(m.index.slots))
			}
		}
	})
}

// TestLaterRegionsUsedLast: a fresh block comes from the earliest region with one to give, evicting a cached
// block there before a later region's free block is touched, so that regions attached later stay empty and can
// drain; within a region never-cached blocks go first.
func TestLaterRegionsUsedLast(t *testing.T) {
	m, _ := New(Options{BlockSize: 4, Blocks: 3, PrefixCaching: true})
	m.Attach(4)
	admitComputed(t, m, 1, seqTokens(0, 8)) // blocks 0 and 1, cached once released
	m.Free(1)
	if err := m.Grow(2, 4); err != nil { // block 2: never cached
		t.Fatal(err)
	}
	if err := m.Grow(3, 8); err != nil { // blocks 1 and 0, evicted tail first
		t.Fatal(err)
	}
	checkInvariants(t, m)
	t2, _ := m.Table(2)
	t3, _ := m.Table(3)
	if !slices.Equal(t2, []int32{2}) || !slices.Equal(t3, []int32{1, 0}) || m.Regions()[1].Used != 0 || m.CachedBlocks() != 0 {
		t.Fatalf("tables %v and %v, regions %+v: want block 2, then blocks 1 and 0 evicted, region 1 untouched", t2, t3, m.Regions())
	}
}
