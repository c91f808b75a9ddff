// Package kv is the paged KV-cache block manager: it hands out fixed-size blocks of token slots to sequences,
// keeps each sequence's block table, and holds the blocks in a pool made of regions that can be attached and
// detached at run time. Morphing turns the bytes a quantized layer frees into a new region of whole blocks, and
// gives a region back (last attached first) once none of its blocks is in use.
//
// A region can be marked draining: no new blocks are handed out from it, so that once the sequences holding its
// blocks finish it empties and can be detached (Holders says which sequences those are).
//
// The manager owns block ids only; the executor owns the memory behind them. Block ids are dense: region r holds
// ids [r.First, r.First+r.Blocks), regions follow each other, so an executor can map id b to offset b·blockBytes
// of one growing allocation.
package kv

import (
	"fmt"
	"sort"
)

// SeqID names a sequence (a request) to the manager.
type SeqID int64

// Region is a run of blocks attached to the pool together.
type Region struct {
	First, Blocks int  // block ids [First, First+Blocks)
	Used          int  // blocks held by sequences
	Draining      bool // no new blocks are handed out from it
}

// Manager is a paged block allocator with per-sequence block tables. It is not safe for concurrent use: the
// scheduler's loop owns it.
type Manager struct {
	blockSize int
	watermark float64 // fraction of all blocks kept free when admitting new sequences
	regions   []*Region
	free      [][]int32 // per region, a stack of free block ids
	freeCount int       // free blocks in regions that are not draining: the ones that can be handed out
	seqs      map[SeqID]*seqBlocks
}

type seqBlocks struct {
	table  []int32
	tokens int
}

// New returns a manager with one region of blocks blocks of blockSize token slots. watermark is the fraction of
// all blocks that CanAdmit keeps free for running sequences to grow into (vLLM's watermark, 0.01 by default
// there); it must be in [0, 1).
func New(blockSize, blocks int, watermark float64) (*Manager, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("kv: block size %d, want > 0", blockSize)
	}
	if watermark < 0 || watermark >= 1 {
		return nil, fmt.Errorf("kv: watermark %g, want in [0, 1)", watermark)
	}
	m := &Manager{blockSize: blockSize, watermark: watermark, seqs: map[SeqID]*seqBlocks{}}
	if blocks > 0 {
		m.Attach(blocks)
	}
	return m, nil
}

// BlockSize is the number of token slots in a block.
func (m *Manager) BlockSize() int { return m.blockSize }

// TotalBlocks is the number of blocks over all regions.
func (m *Manager) TotalBlocks() int {
	if len(m.regions) == 0 {
		return 0
	}
	last := m.regions[len(m.regions)-1]
	return last.First + last.Blocks
}

// FreeBlocks is the number of free blocks that can be handed out (those of draining regions are not).
func (m *Manager) FreeBlocks() int { return m.freeCount }

// UsedBlocks is the number of blocks sequences hold.
func (m *Manager) UsedBlocks() int {
	n := 0
	for _, r := range m.regions {
		n += r.Used
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
	m.freeCount += blocks
	return *r
}

// Detach removes the last attached region if none of its blocks is in use and returns it; otherwise it returns
// an error saying how many are in use. The first region is never detached.
func (m *Manager) Detach() (Region, error) {
	if len(m.regions) < 2 {
		return Region{}, fmt.Errorf("kv: no detachable region (the base region stays)")
	}
	last := m.regions[len(m.regions)-1]
	if last.Used > 0 {
		return Region{}, fmt.Errorf("kv: last region (blocks %d..%d) has %d blocks in use", last.First, last.First+last.Blocks-1, last.Used)
	}
	m.regions = m.regions[:len(m.regions)-1]
	m.free = m.free[:len(m.free)-1]
	if !last.Draining {
		m.freeCount -= last.Blocks
	}
	return *last, nil
}

// SetDraining marks the last attached region draining (no new blocks handed out from it) or not. The base region
// cannot drain.
func (m *Manager) SetDraining(draining bool) error {
	if len(m.regions) < 2 {
		return fmt.Errorf("kv: no region to drain (the base region stays)")
	}
	last := m.regions[len(m.regions)-1]
	if last.Draining == draining {
		return nil
	}
	free := len(m.free[len(m.free)-1])
	if draining {
		m.freeCount -= free
	} else {
		m.freeCount += free
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

// take pops a free block, from the earliest region that has one and is not draining, so that later regions drain
// and can be detached.
func (m *Manager) take() int32 {
	for i, f := range m.free {
		if n := len(f); n > 0 && !m.regions[i].Draining {
			b := f[n-1]
			m.free[i] = f[:n-1]
			m.regions[i].Used++
			m.freeCount--
			return b
		}
	}
	panic("kv: take with no free block")
}

func (m *Manager) give(b int32) {
	i := m.regionOf(b)
	m.free[i] = append(m.free[i], b)
	m.regions[i].Used--
	if !m.regions[i].Draining {
		m.freeCount++
	}
}

// blocksFor is the number of blocks that hold tokens token slots.
func (m *Manager) blocksFor(tokens int) int { return (tokens + m.blockSize - 1) / m.blockSize }

// CanAdmit reports whether a new sequence needing tokens slots fits while leaving the watermark (a fraction of
// all blocks, attached regions included) free.
func (m *Manager) CanAdmit(tokens int) bool {
	return m.freeCount-m.blocksFor(tokens) >= m.WatermarkBlocks()
}

// WatermarkBlocks is the number of blocks admission keeps free.
func (m *Manager) WatermarkBlocks() int { return int(m.watermark * float64(m.TotalBlocks())) }

// BlocksFor is the number of blocks that hold tokens token slots.
func (m *Manager) BlocksFor(tokens int) int { return m.blocksFor(tokens) }

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

// Free returns every block of seq to the pool and forgets it.
func (m *Manager) Free(seq SeqID) {
	s := m.seqs[seq]
	if s == nil {
		return
	}
	for _, b := range s.table {
		m.give(b)
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
