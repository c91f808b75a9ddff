package executor

import (
	"fmt"
	"math"
	"slices"
)

// arena is the device memory plan of the CUDA executor, worked out on the host so that it is tested on any
// machine: one allocation holding the outer weights (embedding, final norm, classifier), the workspace, one
// region per decoder layer sized for its full-precision form, a KV pool, and KV blocks wherever there is room.
// Offsets are bytes from the arena's start.
//
// A layer's current variant sits at the end of its region, so the region's free head is one extent that KV blocks
// may use: a swap to a smaller variant frees it, a swap to a larger one takes it back (the blocks in the way move
// elsewhere first). A KV block is blockBytes contiguous bytes: for each layer its keys then its values, sub bytes
// each, at an offset that is a multiple of sub. Its id in the kernels' block tables is offset/sub, so that with
// layer l's key cache at the arena's start plus 2·l·sub and its value cache at (2·l+1)·sub, the paged kernels find
// every layer's rows of the block (the remapping of block ids). The arena holds slack beyond the budget, a block
// for each extent, so that the blocks the budget accounts in bytes always find whole places.
type arena struct {
	size       int64
	sub        int64 // one layer's keys (or values) of a block: the unit of block ids
	blockBytes int64
	workspace  int64 // offset of the workspace
	regions    []region
	pool       int64   // start of the KV pool, which runs to the end of the arena
	blocks     []int64 // offset of each attached block, by the engine's block id
	at         map[int64]int
}

// region is one decoder layer's place: [start, start+full), its variant in use (cur bytes) at the end and, while
// a swap is pending, room for the asked-for variant (pending bytes) too.
type region struct {
	start, full  int64
	cur, pending int64
}

// head is the region's free extent: what neither its current nor its pending variant needs.
func (r region) head() (int64, int64) { return r.start, r.start + r.full - max(r.cur, r.pending) }

// arenaAlign is the alignment of every part of the arena: the kernels' 16-byte loads, with room to spare.
const arenaAlign = 256

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// move is a KV block's copy from one place to another, when a swap needs its place.
type move struct{ from, to int64 }

// newArena lays out an arena for a budget: outer weight bytes, workspace bytes, each layer's full-precision bytes
// and starting bytes, and KV blocks of layers·2·sub bytes. It fails when block ids would not fit an int32.
func newArena(budget, outer, workspace int64, full, start []int64, sub int64) (*arena, error) {
	a := &arena{sub: sub, blockBytes: 2 * int64(len(full)) * sub, at: map[int64]int{}}
	off := alignUp(outer, arenaAlign)
	a.workspace = off
	off = alignUp(off+workspace, arenaAlign)
	var weights int64
	for l, f := range full {
		a.regions = append(a.regions, region{start: off, full: f, cur: start[l]})
		off = alignUp(off+f, arenaAlign)
		weights += f
	}
	// The pool's bytes: the budget's less what the parts take, then the slack and the alignment padding.
	extents := int64(len(full) + 1)
	a.pool = off
	a.size = off + (budget - outer - workspace - weights) + extents*(a.blockBytes+sub)
	if a.size/sub > math.MaxInt32 {
		return nil, fmt.Errorf("executor: a device arena of %d bytes has %d KV units of %d bytes, more than int32 block ids hold",
			a.size, a.size/sub, sub)
	}
	return a, nil
}

// extents lists the arena's free extents for KV blocks, the pool first.
func (a *arena) extents() [][2]int64 {
	out := [][2]int64{{a.pool, a.size}}
	for _, r := range a.regions {
		lo, hi := r.head()
		out = append(out, [2]int64{lo, hi})
	}
	return out
}

// places returns up to n free places for blocks, avoiding skip (an extent being taken back), in extent order.
func (a *arena) places(n int, skip [2]int64) []int64 {
	var out []int64
	for _, e := range a.extents() {
		for o := alignUp(e[0], a.sub); o+a.blockBytes <= e[1] && len(out) < n; o += a.blockBytes {
			if _, taken := a.at[o]; !taken && (o+a.blockBytes <= skip[0] || o >= skip[1]) {
				out = append(out, o)
			}
		}
	}
	return out
}

// attach places n more blocks; it fails, changing nothing, when the free extents do not hold them.
func (a *arena) attach(n int) error {
	p := a.places(n, [2]int64{})
	if len(p) < n {
		return fmt.Errorf("executor: the device arena has places for %d more KV blocks, want %d", len(p), n)
	}
	for _, o := range p {
		a.at[o] = len(a.blocks)
		a.blocks = append(a.blocks, o)
	}
	return nil
}

// detach frees the last n blocks.
func (a *arena) detach(n int) {
	for _, o := range a.blocks[len(a.blocks)-n:] {
		delete(a.at, o)
	}
	a.blocks = a.blocks[:len(a.blocks)-n]
}

// ask records a pending swap of layer l to a variant of bytes bytes (replacing one pending already) and moves
// the blocks in the way of the room it needs elsewhere; the caller copies them, in order, before the next step
// reads them. It fails, changing nothing, when there is no place for them.
func (a *arena) ask(l int, bytes int64) ([]move, error) {
	r := &a.regions[l]
	old := r.pending
	r.pending = bytes
	_, hi := r.head()
	var in []int
	for i, o := range a.blocks {
		if o < r.start+r.full && o+a.blockBytes > hi {
			in = append(in, i)
		}
	}
	p := a.places(len(in), [2]int64{hi, r.start + r.full})
	if len(p) < len(in) {
		r.pending = old
		return nil, fmt.Errorf("executor: layer %d's %d-byte variant needs %d KV blocks moved, the device arena has places for %d",
			l, bytes, len(in), len(p))
	}
	moves := make([]move, len(in))
	for j, i := range in {
		from := a.blocks[i]
		delete(a.at, from)
		a.blocks[i], a.at[p[j]] = p[j], i
		moves[j] = move{from, p[j]}
	}
	return moves, nil
}

// apply makes layer l's pending variant current; the caller has written it at variantAt(l).
func (a *arena) apply(l int) {
	r := &a.regions[l]
	r.cur, r.pending = r.pending, 0
}

// variantAt is where layer l's variant of bytes bytes sits: at the end of its region.
func (a *arena) variantAt(l int, bytes int64) int64 {
	r := a.regions[l]
	return r.start + r.full - bytes
}

// ids writes the kernels' block ids of table (the engine's ids) into out.
func (a *arena) ids(out, table []int32) {
	for i, id := range table {
		out[i] = int32(a.blocks[id] / a.sub)
	}
}

// check verifies that no two blocks overlap, that none overlaps a part that is not free, and that the map and
// the list agree; tests call it after every change.
func (a *arena) check() error {
	type span struct {
		lo, hi int64
		what   string
	}
	spans := []span{{0, a.regions[0].start, "outer weights and workspace"}}
	for l, r := range a.regions {
		_, hi := r.head()
		spans = append(spans, span{hi, r.start + r.full, fmt.Sprintf("layer %d's variants", l)})
	}
	for i, o := range a.blocks {
		if a.at[o] != i || o%a.sub != 0 || o < 0 || o+a.blockBytes > a.size {
			return fmt.Errorf("block %d at %d: map says %d, sub %d, arena %d", i, o, a.at[o], a.sub, a.size)
		}
		spans = append(spans, span{o, o + a.blockBytes, fmt.Sprintf("block %d", i)})
	}
	if len(a.at) != len(a.blocks) {
		return fmt.Errorf("%d blocks mapped, %d listed", len(a.at), len(a.blocks))
	}
	slices.SortFunc(spans, func(x, y span) int { return int(x.lo - y.lo) })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return fmt.Errorf("%s [%d, %d) overlaps %s [%d, %d)", spans[i].what, spans[i].lo, spans[i].hi,
				spans[i-1].what, spans[i-1].lo, spans[i-1].hi)
		}
	}
	return nil
}
