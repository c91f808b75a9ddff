package executor

import (
	"math/rand/v2"
	"testing"
)

// TestArenaPlaces drives the arena with random swaps, attaches and detaches that the byte accounting of Memory
// allows, and checks after each that every block has a place (unless swaps both ways are pending), that nothing
// overlaps, and that the blocks a swap moves leave the room its variant needs.
func TestArenaPlaces(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const layers, sub = 5, 64
		bb := int64(2 * layers * sub)
		sizes := make([][3]int64, layers) // each layer's bytes in its full, 8-bit and 4-bit variants
		full := make([]int64, layers)
		var weights int64
		for l := range sizes {
			f := 4*bb + rng.Int64N(8*bb)
			sizes[l] = [3]int64{f, f/2 + rng.Int64N(100), f/4 + rng.Int64N(100)}
			full[l] = f
			weights += f
		}
		outer, ws := int64(777), int64(555)
		budget := outer + ws + weights + 10*bb + bb/2
		a, err := newArena(budget, outer, ws, full, full, sub)
		if err != nil {
			t.Fatal(err)
		}
		cur := make([]int, layers)
		pending := map[int]int{}
		blocks := 0
		bytes := func(pend bool) int64 {
			n := outer
			for l := range layers {
				f := cur[l]
				if p, ok := pending[l]; ok && pend {
					f = p
				}
				n += sizes[l][f]
			}
			return n
		}
		// mixed: swaps to larger and to smaller variants are both pending. The accounting counts what the smaller
		// ones free against what the larger ones need; the device has those bytes only once the smaller ones apply.
		mixed := func() bool {
			var grow, shrink bool
			for l, f := range pending {
				grow = grow || f < cur[l]
				shrink = shrink || f > cur[l]
			}
			return grow && shrink
		}
		attachable := func() int {
			return int((budget - max(bytes(false), bytes(true)) - int64(blocks)*bb - ws) / bb)
		}
		if err := a.attach(attachable()); err != nil {
			t.Fatal(err)
		}
		blocks = len(a.blocks)
		for step := range 400 {
			switch op := rng.IntN(4); {
			case op == 0 && attachable() > 0:
				n := 1 + rng.IntN(attachable())
				if err := a.attach(n); err != nil {
					if mixed() {
						continue
					}
					t.Fatalf("seed %d step %d: attach %d (accounting allows %d): %v", seed, step, n, attachable(), err)
				}
				blocks += n
			case op == 1 && blocks > 0:
				n := 1 + rng.IntN(blocks)
				a.detach(n)
				blocks -= n
			case op == 2:
				l, f := rng.IntN(layers), rng.IntN(3)
				old, had := pending[l]
				pending[l] = f
				if bytes(true) > budget-int64(blocks)*bb-ws {
					if had {
						pending[l] = old
					} else {
						delete(pending, l)
					}
					continue
				}
				before := append([]int64(nil), a.blocks...)
				moves, err := a.ask(l, sizes[l][f])
				if err != nil && mixed() {
					pending[l] = old
					if !had {
						delete(pending, l)
					}
					continue
				}
				if err != nil {
					t.Fatalf("seed %d step %d: layer %d to %d bytes (accounting allows it): %v", seed, step, l, sizes[l][f], err)
				}
				for _, m := range moves {
					if m.to < a.regions[l].start+full[l] && m.to+bb > a.variantAt(l, sizes[l][f]) {
						t.Fatalf("seed %d step %d: a block moved into layer %d's new variant", seed, step, l)
					}
				}
				if moved := diff(before, a.blocks); moved != len(moves) {
					t.Fatalf("seed %d step %d: %d blocks changed place, %d moves", seed, step, moved, len(moves))
				}
			case op == 3:
				for l, f := range pending {
					a.apply(l)
					cur[l] = f
				}
				clear(pending)
			}
			if err := a.check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if len(a.blocks) != blocks {
				t.Fatalf("seed %d step %d: %d blocks placed, %d attached", seed, step, len(a.blocks), blocks)
			}
		}
	}
}

func diff(a, b []int64) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestArenaIDs: a block's id is its offset in units of one layer's keys, so that each layer's caches, at
// 2·l·sub and (2·l+1)·sub, find its rows.
func TestArenaIDs(t *testing.T) {
	a, err := newArena(10_000_000, 1000, 3000, []int64{50_000, 60_000}, []int64{50_000, 60_000}, 96)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.attach(3); err != nil {
		t.Fatal(err)
	}
	out := make([]int32, 3)
	a.ids(out, []int32{2, 0, 1})
	for i, id := range []int32{2, 0, 1} {
		if int64(out[i])*a.sub != a.blocks[id] || a.blocks[id] < a.pool {
			t.Fatalf("block %d at %d: id %d", id, a.blocks[id], out[i])
		}
	}
	if _, err := newArena(1<<40, 0, 0, []int64{64}, []int64{64}, 16); err == nil {
		t.Fatal("an arena of 2^36 units was accepted")
	}
}
