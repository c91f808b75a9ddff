// Package kv is the paged KV-cache block manager: it hands out fixed-size blocks of token slots to sequences,
// keeps each sequence's block table, and holds the blocks in a pool made of regions that can be attached and
// detached at run time. Morphing turns the bytes a quantized layer frees into a new region of whole blocks, and
// gives a region back (last attached first) once none of its blocks is in use.
//
// A region can be marked draining: no new blocks are handed out from it, so that once the sequences holding its
// blocks finish it empties and can be detached (Holders says which sequences those are).
//
// # Prefix caching
//
// With Options.PrefixCaching the manager is vLLM's automatic prefix cache. A full block is identified by a hash of
// its tokens chained to its parent block's hash (BlockHash; so equal hashes mean equal prefixes, not only equal
// blocks), kept per sequence in a Prefix. Once a block's tokens are computed (Commit) it is entered in the cache
// under that hash; blocks are reference counted, so a cached block is shared by every sequence whose prefix
// matches (Match, then Admit) and written by none of them again. A block no sequence holds any more keeps its KV
// on its region's LRU list and still counts as free: it is evicted only when a fresh block is needed and its region
// is the earliest with one to give, after the region's never-cached blocks, least recently released first. A
// sequence releases its blocks last first, so that its tail is evicted before the prefix others are more likely
// to share.
//
// Regions and the cache: a draining region's blocks leave the cache at once (those no sequence holds are evicted,
// those held are released to the free list when their holders finish), and Detach evicts what a region still
// caches, so a region is detached only once it holds no sequence's blocks and no cached KV.
//
// The manager owns block ids only; the executor owns the memory behind them. Block ids are dense: region r holds
// ids [r.First, r.First+r.Blocks), regions follow each other, so an executor can map id b to offset b·blockBytes
// of one growing allocation.
package kv

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/morphlab/morphlab/internal/splitmix"
)

// SeqID names a sequence (a request) to the manager.
type SeqID int64

// Region is a run of blocks attached to the pool together.
type Region struct {
	First, Blocks int  // block ids [First, First+Blocks)
	Used          int  // blocks held by sequences (a block shared by several counts once)
	Cached        int  // blocks held by none that keep a cached prefix's KV (evictable, so free)
	Draining      bool // no new blocks are handed out from it, and none is cached
}

// Options configure a manager.
type Options struct {
	BlockSize int // token slots a block
	Blocks    int // blocks of the first region (0: none yet)
	// Watermark is the fraction of all blocks that CanAdmit keeps free for running sequences to grow into (vLLM's
	// watermark, 0.01 by default there); it must be in [0, 1).
	Watermark float64
	// PrefixCaching shares the full blocks of equal prefixes between sequences (see the package doc).
	PrefixCaching bool
}

// Manager is a paged block allocator with per-sequence block tables. It is not safe for concurrent use: the
// scheduler's loop owns it.
type Manager struct {
	blockSize int
	watermark float64
	caching   bool
	regions   []*Region
	free      [][]int32 // per region, a stack of free block ids that cache nothing
	freeCount int       // blocks that can be handed out: free and cached ones in regions that are not draining
	seqs      map[SeqID]*seqBlocks

	// Per block, indexed by block id.
	ref        []int32     // sequences holding it
	hash       []BlockHash // its prefix's hash, while registered
	registered []bool      // in the cache: the index finds it by its hash
	prev, next []int32     // links of the regions' LRU lists of cached blocks no sequence holds
	lru        []lruList   // per region
	index      blockIndex  // the registered blocks by hash
	// entered counts the blocks entered in the cache by the hash's low bits: a prefix whose match stopped at a
	// hash whose count has not moved since cannot match further, so matching it again asks the index nothing.
	entered [enteredBuckets]uint32
}

const enteredBuckets = 1 << 12

type seqBlocks struct {
	table  []int32
	tokens int
	// committed is the number of leading full blocks Commit has already considered.
	committed int
}

// New returns a manager with one region of o.Blocks blocks (none with 0).
func New(o Options) (*Manager, error) {
	if o.BlockSize <= 0 {
		return nil, fmt.Errorf("kv: block size %d, want > 0", o.BlockSize)
	}
	if o.Watermark < 0 || o.Watermark >= 1 {
		return nil, fmt.Errorf("kv: watermark %g, want in [0, 1)", o.Watermark)
	}
	if o.Blocks < 0 {
		return nil, fmt.Errorf("kv: %d blocks, want >= 0", o.Blocks)
	}
	m := &Manager{blockSize: o.BlockSize, watermark: o.Watermark, caching: o.PrefixCaching, seqs: map[SeqID]*seqBlocks{}}
	m.rebuild()
	if o.Blocks > 0 {
		m.Attach(o.Blocks)
	}
	return m, nil
}

// BlockSize is the number of token slots in a block.
func (m *Manager) BlockSize() int { return m.blockSize }

// PrefixCaching reports whether the manager shares the blocks of equal prefixes.
func (m *Manager) PrefixCaching() bool { return m.caching }

// TotalBlocks is the number of blocks over all regions.
func (m *Manager) TotalBlocks() int { return len(m.ref) }

// FreeBlocks is the number of blocks that can be handed out: free ones and cached ones no sequence holds, in
// regions that are not draining.
func (m *Manager) FreeBlocks() int { return m.freeCount }

// UsedBlocks is the number of blocks sequences hold.
func (m *Manager) UsedBlocks() int {
	n := 0
	for _, r := range m.regions {
		n += r.Used
	}
	return n
}

// CachedBlocks is the number of blocks no sequence holds that keep a cached prefix's KV.
func (m *Manager) CachedBlocks() int {
	n := 0
	for _, r := range m.regions {
		n += r.Cached
	}
	return n
}

// Usage is the fraction of blocks in use (0 with no blocks).
func (m *Manager) Usage() float64 {
	if t := m.TotalBlocks(); t > 0 {
		return float64(m.UsedBlocks()) / float64(t)
	}
	return 0
}

// Capacity is the number of blocks that can ever be handed out to one sequence: all blocks but those of draining
// regions.
func (m *Manager) Capacity() int {
	n := 0
	for _, r := range m.regions {
		if !r.Draining {
			n += r.Blocks
		}
	}
	return n
}

// Regions returns a copy of the regions, in attach order.
func (m *Manager) Regions() []Region {
	out := make([]Region, len(m.regions))
	for i, r := range m.regions {
		out[i] = *r
	}
	return out
}

// Attach adds a region of blocks free blocks (ids following the last region's) and returns it.
func (m *Manager) Attach(blocks int) Region {
	if blocks <= 0 {
		panic(fmt.Sprintf("kv: Attach(%d), want > 0 blocks", blocks))
	}
	r := &Region{First: m.TotalBlocks(), Blocks: blocks}
	ids := make([]int32, blocks)
	for i := range ids {
		ids[i] = int32(r.First + blocks - 1 - i) // popped lowest id first
	}
	m.regions = append(m.regions, r)
	m.free = append(m.free, ids)
	m.lru = append(m.lru, lruList{-1, -1})
	m.freeCount += blocks
	n := r.First + blocks
	m.ref = append(m.ref, make([]int32, blocks)...)
	m.hash = append(m.hash, make([]BlockHash, blocks)...)
	m.registered = append(m.registered, make([]bool, blocks)...)
	m.prev = append(m.prev, make([]int32, blocks)...)
	m.next = append(m.next, make([]int32, blocks)...)
	for b := r.First; b < n; b++ {
		m.prev[b], m.next[b] = -1, -1
	}
	if 4*n > len(m.index.slots) {
		m.rebuild()
	}
	return *r
}

// Detach removes the last attached region if none of its blocks is held by a sequence and returns it, evicting
// the prefixes it still caches; otherwise it returns an error saying how many are in use. The first region is
// never detached.
func (m *Manager) Detach() (Region, error) {
	if len(m.regions) < 2 {
		return Region{}, fmt.Errorf("kv: no detachable region (the base region stays)")
	}
	last := m.regions[len(m.regions)-1]
	if last.Used > 0 {
		return Region{}, fmt.Errorf("kv: last region (blocks %d..%d) has %d blocks in use", last.First, last.First+last.Blocks-1, last.Used)
	}
	for b := int32(last.First); b < int32(last.First+last.Blocks); b++ {
		if m.registered[b] {
			m.unregister(b)
		}
	}
	last.Cached = 0
	m.regions = m.regions[:len(m.regions)-1]
	m.free = m.free[:len(m.free)-1]
	m.lru = m.lru[:len(m.lru)-1]
	if !last.Draining {
		m.freeCount -= last.Blocks
	}
	m.ref, m.hash, m.registered = m.ref[:last.First], m.hash[:last.First], m.registered[:last.First]
	m.prev, m.next = m.prev[:last.First], m.next[:last.First]
	m.rebuild() // no slot may name a detached block
	return *last, nil
}

// SetDraining marks the last attached region draining (no new blocks handed out from it, and its blocks leave the
// prefix cache: see the package doc) or not. The base region cannot drain.
func (m *Manager) SetDraining(draining bool) error {
	if len(m.regions) < 2 {
		return fmt.Errorf("kv: no region to drain (the base region stays)")
	}
	i := len(m.regions) - 1
	last := m.regions[i]
	if last.Draining == draining {
		return nil
	}
	if draining {
		for b := int32(last.First); b < int32(last.First+last.Blocks); b++ {
			if !m.registered[b] {
				continue
			}
			if m.ref[b] == 0 {
				m.lruRemove(i, b)
				last.Cached--
				m.free[i] = append(m.free[i], b)
			}
			m.unregister(b)
		}
		m.freeCount -= len(m.free[i])
	} else {
		m.freeCount += len(m.free[i])
	}
	last.Draining = draining
	return nil
}

// Holders returns the sequences holding blocks of region i (in Regions order), in increasing id order.
func (m *Manager) Holders(i int) []SeqID {
	if i < 0 || i >= len(m.regions) {
		return nil
	}
	r := m.regions[i]
	var out []SeqID
	for id, s := range m.seqs {
		for _, b := range s.table {
			if int(b) >= r.First && int(b) < r.First+r.Blocks {
				out = append(out, id)
				break
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// regionOf returns the index of the region holding block id b.
func (m *Manager) regionOf(b int32) int {
	return sort.Search(len(m.regions), func(i int) bool { return int(b) < m.regions[i].First+m.regions[i].Blocks })
}

// take hands out a fresh block from the earliest region that has a free or a cached one and is not draining (so
// that later regions drain and can be detached): a free one, or else the region's least recently released cached
// one, evicted.
func (m *Manager) take() int32 {
	for i, f := range m.free {
		r := m.regions[i]
		if r.Draining {
			continue
		}
		if n := len(f); n > 0 {
			b := f[n-1]
			m.free[i] = f[:n-1]
			r.Used++
			m.freeCount--
			m.ref[b] = 1
			return b
		}
		if b := m.lru[i].head; b >= 0 {
			m.lruRemove(i, b)
			m.unregister(b)
			r.Cached--
			r.Used++
			m.freeCount--
			m.ref[b] = 1
			return b
		}
	}
	panic("kv: take with no free block")
}

// hold adds a holder to a cached block (Admit's prefix hits).
func (m *Manager) hold(b int32) {
	if m.ref[b] == 0 {
		i := m.regionOf(b)
		r := m.regions[i]
		m.lruRemove(i, b)
		r.Cached--
		r.Used++
		m.freeCount--
	}
	m.ref[b]++
}

// release drops a holder of b; a block no sequence holds any more stays cached if it is registered, and is free
// otherwise.
func (m *Manager) release(b int32) {
	m.ref[b]--
	if m.ref[b] > 0 {
		return
	}
	i := m.regionOf(b)
	r := m.regions[i]
	r.Used--
	if m.registered[b] {
		m.lruPush(i, b)
		r.Cached++
	} else {
		m.free[i] = append(m.free[i], b)
	}
	if !r.Draining {
		m.freeCount++
	}
}

// unregister takes b out of the cache (its index slot goes stale).
func (m *Manager) unregister(b int32) {
	m.registered[b] = false
	m.hash[b] = BlockHash{}
}

// lruList is a region's cached blocks no sequence holds, least recently released first: a doubly linked list
// through Manager.prev and next.
type lruList struct{ head, tail int32 } // -1: none

// lruPush appends b to region i's list.
func (m *Manager) lruPush(i int, b int32) {
	l := &m.lru[i]
	m.prev[b], m.next[b] = l.tail, -1
	if l.tail >= 0 {
		m.next[l.tail] = b
	} else {
		l.head = b
	}
	l.tail = b
}

// lruRemove takes b out of region i's list.
func (m *Manager) lruRemove(i int, b int32) {
	l := &m.lru[i]
	p, n := m.prev[b], m.next[b]
	if p >= 0 {
		m.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		m.prev[n] = p
	} else {
		l.tail = p
	}
	m.prev[b], m.next[b] = -1, -1
}

// blocksFor is the number of blocks that hold tokens token slots.
func (m *Manager) blocksFor(tokens int) int { return (tokens + m.blockSize - 1) / m.blockSize }

// CanAdmit reports whether a new sequence needing tokens slots, whose prefix (nil for none) matched cached blocks
// at its last Match, fits while leaving the watermark (a fraction of all blocks, attached regions included) free.
func (m *Manager) CanAdmit(tokens int, p *Prefix) bool {
	return m.freeCount-m.AdmitBlocks(tokens, p) >= m.WatermarkBlocks()
}

// AdmitBlocks is the number of free blocks that admitting a sequence of tokens slots with prefix p (nil for none)
// takes: the blocks its cached prefix does not cover, and the cached ones no sequence holds (they stop counting
// as free once held). Cached blocks other sequences hold cost nothing.
func (m *Manager) AdmitBlocks(tokens int, p *Prefix) int {
	n := m.blocksFor(tokens)
	if p != nil {
		n += p.evictable - len(p.match)
	}
	return n
}

// WatermarkBlocks is the number of blocks admission keeps free.
func (m *Manager) WatermarkBlocks() int { return int(m.watermark * float64(m.TotalBlocks())) }

// BlocksFor is the number of blocks that hold tokens token slots.
func (m *Manager) BlocksFor(tokens int) int { return m.blocksFor(tokens) }

// Admit gives a new sequence a table for tokens slots: the cached blocks its prefix p matched at the last Match
// (nil for none), shared, then fresh blocks for the rest. It fails, changing nothing, when seq holds blocks
// already or there are not enough free blocks.
func (m *Manager) Admit(seq SeqID, tokens int, p *Prefix) error {
	if m.seqs[seq] != nil {
		return fmt.Errorf("kv: sequence %d admitted while it holds blocks", seq)
	}
	if p != nil && len(p.match) > m.blocksFor(tokens) {
		return fmt.Errorf("kv: sequence %d of %d tokens matched %d cached blocks", seq, tokens, len(p.match))
	}
	if need := m.AdmitBlocks(tokens, p); need > m.freeCount {
		return fmt.Errorf("kv: sequence %d needs %d blocks, %d free", seq, need, m.freeCount)
	}
	s := &seqBlocks{}
	if p != nil {
		for _, b := range p.match {
			m.hold(b)
			s.table = append(s.table, b)
		}
		s.committed = len(p.match)
		p.evictable = 0
	}
	for len(s.table) < m.blocksFor(tokens) {
		s.table = append(s.table, m.take())
	}
	s.tokens = tokens
	m.seqs[seq] = s
	return nil
}

// Grow makes room for seq to hold tokens slots in all, allocating the blocks it lacks (a new sequence starts with
// none). It fails, changing nothing, when there are not enough free blocks.
func (m *Manager) Grow(seq SeqID, tokens int) error {
	s := m.seqs[seq]
	if s == nil {
		s = &seqBlocks{}
	}
	need := m.blocksFor(tokens) - len(s.table)
	if need > m.freeCount {
		return fmt.Errorf("kv: sequence %d needs %d more blocks, %d free", seq, need, m.freeCount)
	}
	for range need {
		s.table = append(s.table, m.take())
	}
	s.tokens = max(s.tokens, tokens)
	m.seqs[seq] = s
	return nil
}

// CanGrow reports whether seq could grow to tokens slots now.
func (m *Manager) CanGrow(seq SeqID, tokens int) bool {
	have := 0
	if s := m.seqs[seq]; s != nil {
		have = len(s.table)
	}
	return m.blocksFor(tokens)-have <= m.freeCount
}

// Free releases every block of seq and forgets it. Its blocks are released last first: those in the cache stay
// there, the tail evicted before the head.
func (m *Manager) Free(seq SeqID) {
	s := m.seqs[seq]
	if s == nil {
		return
	}
	for i := len(s.table) - 1; i >= 0; i-- {
		m.release(s.table[i])
	}
	delete(m.seqs, seq)
}

// Table returns seq's block table (aliased: valid until the next Grow or Free of seq) and the slots it reserved.
func (m *Manager) Table(seq SeqID) (table []int32, tokens int) {
	if s := m.seqs[seq]; s != nil {
		return s.table, s.tokens
	}
	return nil, 0
}

// Slot is the cache slot of token position pos of seq: block·blockSize + offset. pos must be reserved.
func (m *Manager) Slot(seq SeqID, pos int) int32 {
	s := m.seqs[seq]
	return s.table[pos/m.blockSize]*int32(m.blockSize) + int32(pos%m.blockSize)
}

// Sequences is the number of sequences holding blocks.
func (m *Manager) Sequences() int { return len(m.seqs) }

// BlockHash identifies a full block by its tokens and, through its parent's hash, every token before them: two
// blocks with equal hashes hold the same tokens at the same positions after the same prefix. It is 128 bits, so
// that distinct prefixes colliding is not a concern at any scale a pool reaches.
type BlockHash struct{ lo, hi uint64 }

// Prefix is a sequence's identity to the prefix cache: the chained hashes of its full blocks so far, and the cached
// blocks its leading blocks matched at the last Match. The scheduler keeps one per sequence; the zero value has
// nothing hashed.
type Prefix struct {
	// missed: the last match stopped at a block the cache did not hold, when the count of blocks entered under
	// that block's hash bucket (missedIn) was missedAt.
	missed    bool
	missedIn  uint32
	missedAt  uint32
	hashes    []BlockHash
	match     []int32
	evictable int // blocks of match no sequence holds
}

// Hashed is the number of leading full blocks hashed.
func (p *Prefix) Hashed() int { return len(p.hashes) }

// Hash extends p over the full blocks of tokens, which are the tokens that follow the p.Hashed() blocks hashed so
// far; a trailing partial block is left out (hash it with the tokens that complete it).
func (m *Manager) Hash(p *Prefix, tokens []int32) {
	bs := m.blockSize
	parent := BlockHash{}
	if n := len(p.hashes); n > 0 {
		parent = p.hashes[n-1]
	}
	p.hashes = slices.Grow(p.hashes, len(tokens)/bs)
	for i := 0; i+bs <= len(tokens); i += bs {
		parent = chain(parent, tokens[i:i+bs])
		p.hashes = append(p.hashes, parent)
	}
}

// Prime factors of xxHash64's rounds and a final mix (splitmix64's), in two lanes seeded differently.
const (
	prime1 = 0x9e3779b185ebca87
	prime2 = 0xc2b2ae3d27d4eb4f
	prime3 = 0x165667b19e3779f9
	prime4 = 0x85ebca77c2b2ae63
)

// chain is the hash of a block of tokens after the prefix whose hash is parent. Tokens go in two at a time, as
// one 64-bit word (and an odd last one alone).
func chain(parent BlockHash, tokens []int32) BlockHash {
	lo, hi := parent.lo+prime1, parent.hi^prime3
	for i := 0; i < len(tokens); i += 2 {
		w := uint64(uint32(tokens[i])) | 1<<63 // an odd last token alone
		if i+1 < len(tokens) {
			w = uint64(uint32(tokens[i])) | uint64(uint32(tokens[i+1]))<<32
		}
		lo = bits.RotateLeft64(lo+w*prime2, 31) * prime1
		hi = bits.RotateLeft64(hi^(w*prime4), 27)*prime3 + prime2
	}
	return BlockHash{splitmix.Mix(lo ^ bits.RotateLeft64(hi, 17)), splitmix.Mix(hi + lo)}
}

// Unmatched reports, at little cost, that Match would find nothing of p now: its last match found nothing, and
// no block has been entered since under the hash it missed.
func (m *Manager) Unmatched(p *Prefix) bool {
	return p.missed && len(p.match) == 0 && m.entered[p.missedIn] == p.missedAt
}

// Match finds the cached blocks holding p's leading full blocks, as many as lie within the first limit tokens,
// and returns the tokens they hold; Admit then takes them. vLLM's limit is the sequence's length less one, so
// that its last token is still computed for its logits. It stops at the first block not cached (and without
// prefix caching matches nothing). The last match is checked block by block before the index is asked again, so
// matching a waiting sequence at every iteration costs little.
func (m *Manager) Match(p *Prefix, limit int) int {
	p.evictable = 0
	if !m.caching {
		p.match = p.match[:0]
		return 0
	}
	n := min(len(p.hashes), limit/m.blockSize)
	k := 0
	for k < len(p.match) && k < n {
		b := p.match[k]
		if int(b) >= len(m.ref) || !m.registered[b] || m.hash[b] != p.hashes[k] {
			break
		}
		k++
	}
	// Unless a block was entered since under the hash it missed, it misses again.
	p.missed = k == len(p.match) && p.missed && k < n && m.entered[p.missedIn] == p.missedAt
	if p.missed {
		n = k
	}
	p.match = p.match[:k]
	for ; k < n; k++ {
		h := p.hashes[k]
		b := m.find(h)
		if b < 0 {
			p.missedIn = uint32(h.lo % enteredBuckets)
			p.missed, p.missedAt = true, m.entered[p.missedIn]
			break
		}
		p.match = append(p.match, b)
	}
	for _, b := range p.match {
		if m.ref[b] == 0 {
			p.evictable++
		}
	}
	return len(p.match) * m.blockSize
}

// Commit enters seq's full blocks among its first computed tokens in the cache under p's hashes (p must hash
// them), so that later sequences with the same prefix share them. A block whose prefix another block caches
// already (the same prefix computed twice at once) stays private, as do blocks of a draining region.
func (m *Manager) Commit(seq SeqID, p *Prefix, computed int) {
	s := m.seqs[seq]
	if !m.caching || s == nil {
		return
	}
	n := min(computed/m.blockSize, len(s.table), len(p.hashes))
	for i := s.committed; i < n; i++ {
		b := s.table[i]
		if m.registered[b] || m.regions[m.regionOf(b)].Draining {
			continue
		}
		h := p.hashes[i]
		if m.enter(b, h) {
			m.entered[h.lo%enteredBuckets]++
		}
	}
	s.committed = max(s.committed, n)
}

// Check verifies the manager's accounting and returns the first inconsistency: every block is free, cached (on
// the LRU list, held by none) or held, and only one of them; reference counts equal the tables that hold each
// block and are never negative; the cache's index and the blocks agree, and no draining region caches; the
// regions' counts and FreeBlocks agree with the blocks; every table covers its reserved tokens. Tests call it.
func (m *Manager) Check() error {
	total := m.TotalBlocks()
	holders := make([]int32, total)
	for id, s := range m.seqs {
		if len(s.table) != m.blocksFor(s.tokens) {
			return fmt.Errorf("sequence %d holds %d blocks for %d tokens, want %d", id, len(s.table), s.tokens, m.blocksFor(s.tokens))
		}
		if s.committed > len(s.table) {
			return fmt.Errorf("sequence %d committed %d blocks of %d", id, s.committed, len(s.table))
		}
		for _, b := range s.table {
			if b < 0 || int(b) >= total {
				return fmt.Errorf("sequence %d holds block %d outside [0, %d)", id, b, total)
			}
			holders[b]++
		}
	}
	const (
		unseen = iota
		isFree
		cached
	)
	state := make([]int, total)
	for r, f := range m.free {
		reg := m.regions[r]
		for _, b := range f {
			if int(b) < reg.First || int(b) >= reg.First+reg.Blocks {
				return fmt.Errorf("free list of region %d holds block %d outside it", r, b)
			}
			if state[b] != unseen || holders[b] > 0 || m.registered[b] {
				return fmt.Errorf("block %d is free twice, or free and held by %d sequences, or free and cached (%v)", b, holders[b], m.registered[b])
			}
			state[b] = isFree
		}
	}
	if len(m.lru) != len(m.regions) {
		return fmt.Errorf("%d LRU lists for %d regions", len(m.lru), len(m.regions))
	}
	for r, l := range m.lru {
		reg := m.regions[r]
		prev := int32(-1)
		for b, n := l.head, 0; b >= 0; b, n = m.next[b], n+1 {
			if n > total || int(b) < reg.First || int(b) >= reg.First+reg.Blocks || state[b] != unseen || m.prev[b] != prev {
				return fmt.Errorf("region %d's LRU list is broken at block %d (state %d, prev %d, want %d)", r, b, state[b], m.prev[b], prev)
			}
			if !m.registered[b] || holders[b] > 0 {
				return fmt.Errorf("block %d is on an LRU list but registered %v, held by %d", b, m.registered[b], holders[b])
			}
			state[b] = cached
			prev = b
		}
		if l.tail != prev {
			return fmt.Errorf("region %d's LRU list ends at %d, its tail is %d", r, prev, l.tail)
		}
	}
	used := make([]int, len(m.regions))
	cachedIn := make([]int, len(m.regions))
	for b := range total {
		switch {
		case m.ref[b] < 0 || m.ref[b] != holders[b]:
			return fmt.Errorf("block %d: reference count %d, held by %d tables", b, m.ref[b], holders[b])
		case holders[b] > 0 && state[b] != unseen:
			return fmt.Errorf("block %d is held and free or cached", b)
		case holders[b] == 0 && state[b] == unseen:
			return fmt.Errorf("block %d is lost: neither free, cached nor held", b)
		case m.registered[b] && m.find(m.hash[b]) != int32(b):
			return fmt.Errorf("block %d is registered but the index finds %d for its hash", b, m.find(m.hash[b]))
		case m.registered[b] && !m.caching:
			return fmt.Errorf("block %d is cached without prefix caching", b)
		}
		r := m.regionOf(int32(b))
		if holders[b] > 0 {
			used[r]++
		}
		if state[b] == cached {
			cachedIn[r]++
		}
		if m.registered[b] && m.regions[r].Draining {
			return fmt.Errorf("block %d of draining region %d is cached", b, r)
		}
	}
	slotsUsed := 0
	for _, s := range m.index.slots {
		if s.block >= int32(total) {
			return fmt.Errorf("the index names block %d of %d", s.block, total)
		}
		if s.block >= 0 {
			slotsUsed++
		}
	}
	if slotsUsed != m.index.used || 2*slotsUsed > len(m.index.slots) || 4*total > len(m.index.slots) {
		return fmt.Errorf("%d index slots used (%d counted) of %d, for %d blocks", slotsUsed, m.index.used, len(m.index.slots), total)
	}
	free := 0
	for r, reg := range m.regions {
		if used[r] != reg.Used || cachedIn[r] != reg.Cached || used[r]+cachedIn[r]+len(m.free[r]) != reg.Blocks {
			return fmt.Errorf("region %d: %d used by tables, %d recorded; %d cached, %d recorded; %d free; %d blocks",
				r, used[r], reg.Used, cachedIn[r], reg.Cached, len(m.free[r]), reg.Blocks)
		}
		if r > 0 && reg.First != m.regions[r-1].First+m.regions[r-1].Blocks {
			return fmt.Errorf("region %d starts at %d, after a region ending at %d", r, reg.First, m.regions[r-1].First+m.regions[r-1].Blocks)
		}
		if !reg.Draining {
			free += len(m.free[r]) + reg.Cached
		}
	}
	if free != m.freeCount {
		return fmt.Errorf("free and cached blocks of regions not draining: %d, FreeBlocks says %d", free, m.freeCount)
	}
	return nil
}
