package kv

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// checkInvariants verifies that every block is either free or held by exactly one sequence, that the free
// count and per-region use agree with the tables, and that every table covers its reserved tokens.
func checkInvariants(t *testing.T, m *Manager) {
	t.Helper()
	total := m.TotalBlocks()
	owner := make([]SeqID, total)
	for i := range owner {
		owner[i] = -1
	}
	used := make([]int, len(m.regions))
	for id, s := range m.seqs {
		if len(s.table) != m.blocksFor(s.tokens) {
			t.Fatalf("sequence %d holds %d blocks for %d tokens, want %d", id, len(s.table), s.tokens, m.blocksFor(s.tokens))
		}
		for _, b := range s.table {
			if b < 0 || int(b) >= total {
				t.Fatalf("sequence %d holds block %d outside [0, %d)", id, b, total)
			}
			if owner[b] != -1 {
				t.Fatalf("block %d held by sequences %d and %d", b, owner[b], id)
			}
			owner[b] = id
			used[m.regionOf(b)]++
		}
	}
	free := 0
	for r, f := range m.free {
		reg := m.regions[r]
		for _, b := range f {
			if int(b) < reg.First || int(b) >= reg.First+reg.Blocks {
				t.Fatalf("free list of region %d holds block %d outside it", r, b)
			}
			if owner[b] != -1 {
				t.Fatalf("block %d is free and held by sequence %d", b, owner[b])
			}
			owner[b] = -2
		}
		if !reg.Draining {
			free += len(f)
		}
		if used[r] != reg.Used || used[r]+len(f) != reg.Blocks {
			t.Fatalf("region %d: %d used by tables, %d recorded, %d free, %d blocks", r, used[r], reg.Used, len(f), reg.Blocks)
		}
	}
	for b, o := range owner {
		if o == -1 {
			t.Fatalf("block %d is lost: neither free nor held", b)
		}
	}
	if free != m.FreeBlocks() {
		t.Fatalf("free lists of regions not draining hold %d blocks, FreeBlocks says %d", free, m.FreeBlocks())
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
		if n != r.Used || (n == 0) != (len(holders) == 0) {
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

// apply runs one operation chosen by op and arg on m, checking what it promises, and the invariants after.
func apply(t *testing.T, m *Manager, op, arg byte) {
	seq := SeqID(arg % 8)
	switch op % 6 {
	case 0, 1: // grow a sequence by up to 40 tokens
		table, have := m.Table(seq)
		before := len(table)
		want := have + int(arg)%40 + 1
		could := m.CanGrow(seq, want)
		freeBefore := m.FreeBlocks()
		err := m.Grow(seq, want)
		if (err == nil) != could {
			t.Fatalf("Grow(%d, %d) error %v but CanGrow said %v", seq, want, err, could)
		}
		if err != nil && m.FreeBlocks() != freeBefore {
			t.Fatalf("a failed Grow changed the free blocks from %d to %d", freeBefore, m.FreeBlocks())
		}
		if err == nil {
			table, _ = m.Table(seq)
			for _, b := range table[before:] {
				if m.regions[m.regionOf(b)].Draining {
					t.Fatalf("Grow handed out block %d of a draining region", b)
				}
			}
		}
	case 5: // drain the last region, or stop draining it
		if err := m.SetDraining(arg%2 == 0); (err == nil) != (len(m.regions) >= 2) {
			t.Fatalf("SetDraining with %d regions: %v", len(m.regions), err)
		}
	case 2:
		m.Free(seq)
	case 3:
		m.Attach(int(arg)%7 + 1)
	case 4:
		regions := m.Regions()
		r, err := m.Detach()
		if len(regions) >= 2 && regions[len(regions)-1].Used == 0 {
			if err != nil || r != regions[len(regions)-1] {
				t.Fatalf("Detach of an unused last region: %v, %v", r, err)
			}
		} else if err == nil {
			t.Fatalf("Detach succeeded with regions %+v", regions)
		}
	}
	checkInvariants(t, m)
}

func TestRandomInterleavings(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m, err := New(4, 10, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		for range 500 {
			apply(t, m, byte(rng.IntN(256)), byte(rng.IntN(256)))
		}
	}
}

func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 1, 0, 9, 3, 5, 4, 0, 2, 1, 4, 0})
	f.Add([]byte{3, 6, 0, 200, 1, 7, 4, 4, 2, 7, 4, 4})
	f.Add([]byte{3, 6, 0, 30, 1, 9, 5, 0, 0, 11, 2, 1, 5, 1, 4, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m, err := New(3, 6, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(ops); i += 2 {
			apply(t, m, ops[i], ops[i+1])
		}
	})
}

func TestSlotsFollowTables(t *testing.T) {
	m, _ := New(4, 8, 0)
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
	m, _ := New(16, 4, 0)
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
	m, _ := New(4, 2, 0)
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
	m, _ := New(1, 100, 0.1)
	if !m.CanAdmit(90) || m.CanAdmit(91) {
		t.Fatalf("with 100 free blocks and a 10%% watermark: CanAdmit(90)=%v CanAdmit(91)=%v, want true, false", m.CanAdmit(90), m.CanAdmit(91))
	}
	m.Attach(100) // the watermark scales with the pool
	if !m.CanAdmit(180) || m.CanAdmit(181) {
		t.Fatalf("with 200 blocks: CanAdmit(180)=%v CanAdmit(181)=%v, want true, false", m.CanAdmit(180), m.CanAdmit(181))
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := New(0, 10, 0); err == nil {
		t.Error("block size 0 accepted")
	}
	if _, err := New(16, 10, 1); err == nil {
		t.Error("watermark 1 accepted")
	}
}
