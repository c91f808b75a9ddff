package kerneltest

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/ref"
)

// TestRepackQ8_0Q4_0 checks that ref's repacking keeps every value: the repacked codes times their binary16
// scales are the blocks' values, bit for bit, on blocks of every code.
func TestRepackQ8_0Q4_0(t *testing.T) {
	const n = 4 * ref.QBlock
	q8, q4 := qQ8_0(qRand(1), n), qQ4_0(qRand(2), n)
	w8, d8 := ref.RepackQ8_0(q8)
	w4, d4 := ref.RepackQ4_0(q4)
	for p := 0; p < n; p++ {
		b := p / ref.QBlock
		if got, want := float32(w8[p])*half.F16ToF32(d8[b]), float32(q8Code(q8[b*ref.Q8_0Bytes:], p%ref.QBlock))*float32(qScale(q8[b*ref.Q8_0Bytes:])); got != want {
			t.Fatalf("Q8_0 value %d: %v, want %v", p, got, want)
		}
		if got, want := float32(int(ref.Nibble(w4, p))-8)*half.F16ToF32(d4[b]), float32(q4Code(q4[b*ref.Q4_0Bytes:], p%ref.QBlock))*float32(qScale(q4[b*ref.Q4_0Bytes:])); got != want {
			t.Fatalf("Q4_0 value %d: %v, want %v", p, got, want)
		}
	}
}
