package kv

// blockIndex finds the cached block holding a prefix by its hash: an open-addressing table with linear probing of
// block ids, each beside 32 bits of its hash (a tag, so that a probe reads the block's whole hash only when the tag
// matches), homed by the hash's low bits. A Go map would do, at more cost to the simulator, which enters, looks
// up and evicts a block hash for every block it computes. Evicting leaves the block's slot in place,
// stale: a slot counts only while its block is registered under that hash (live), and the table is rebuilt from
// the live blocks when its slots, stale ones included, fill half of it.
type blockIndex struct {
	slots []slot
	mask  uint64
	used  int // slots holding a block, live or stale
}

type slot struct {
	tag   uint32
	block int32 // -1: empty
}

// tag is the 32 bits of h a slot keeps: the top of its low half, which the home slot does not use.
func tag(h BlockHash) uint32 { return uint32(h.lo >> 32) }

// reset empties the index and sizes it for twice blocks entries.
func (x *blockIndex) reset(blocks int) {
	size := 16
	for size < 4*blocks {
		size *= 2
	}
	x.slots = make([]slot, size)
	for i := range x.slots {
		x.slots[i].block = -1
	}
	x.mask, x.used = uint64(size-1), 0
}

// find returns the registered block whose hash is h, or -1.
func (m *Manager) find(h BlockHash) int32 {
	x := &m.index
	t := tag(h)
	for i := h.lo & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s.block < 0 {
			return -1
		}
		if s.tag == t && m.registered[s.block] && m.hash[s.block] == h {
			return s.block
		}
	}
}

// enter registers block b under h unless a registered block has that hash already; it reports whether it did.
// It takes b's own stale slot if the probe run has one (so that b never looks registered in two slots), else the
// empty slot that ends the run; a probe looks past a slot whose low half differs without reading its block.
func (m *Manager) enter(b int32, h BlockHash) bool {
	x := &m.index
	own, t := int64(-1), tag(h)
	i := h.lo & x.mask
	for ; x.slots[i].block >= 0; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s.block == b {
			own = int64(i)
		} else if s.tag == t && m.registered[s.block] && m.hash[s.block] == h {
			return false
		}
	}
	m.hash[b], m.registered[b] = h, true
	if own >= 0 {
		x.slots[own].tag = t
		return true
	}
	x.slots[i] = slot{t, b}
	if x.used++; 2*x.used > len(x.slots) {
		m.rebuild()
	}
	return true
}

// rebuild refills the table with the registered blocks alone, sized for the pool.
func (m *Manager) rebuild() {
	m.index.reset(len(m.ref))
	for b := range int32(len(m.ref)) {
		if !m.registered[b] {
			continue
		}
		i := m.hash[b].lo & m.index.mask
		for m.index.slots[i].block >= 0 {
			i = (i + 1) & m.index.mask
		}
		m.index.slots[i] = slot{tag(m.hash[b]), b}
		m.index.used++
	}
}
