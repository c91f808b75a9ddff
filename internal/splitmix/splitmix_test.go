package splitmix

import "testing"

// TestHash: the first outputs of splitmix64 seeded with 0 are the published reference values (Vigna's
// splitmix64.c), state advancing by Gamma a call.
func TestHash(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	var state uint64
	for i, w := range want {
		if got := Hash(state); got != w {
			t.Errorf("output %d = %#x, want %#x", i, got, w)
		}
		state += Gamma
	}
}
