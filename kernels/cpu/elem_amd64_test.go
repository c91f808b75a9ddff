//go:build !noasm

package cpu

import (
	"math"
	"testing"
)

// elemAsmPaths lists the primitive sets the tests run: the Go loops, and AVX-512 where the CPU has it.
func elemAsmPaths() []bool {
	if elemAVX512 {
		return []bool{false, true}
	}
	return []bool{false}
}

// elemUseAsm switches the AVX-512 primitives on or off and returns the function that restores the setting.
func elemUseAsm(on bool) (restore func()) {
	prev := elemAVX512
	elemAVX512 = on
	return func() { elemAVX512 = prev }
}

// TestElemExpULP measures the vectorized e^x against math.Exp over the range where e^x is a normal float32:
// the range reduction and polynomial promise 2 ulp.
func TestElemExpULP(t *testing.T) {
	if !elemAVX512 {
		t.Skip("no AVX-512 exp on this CPU or build")
	}
	const n = 1 << 16
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(-87 + 175*float64(i)/n)
	}
	want := make([]float64, n)
	for i, v := range x {
		want[i] = math.Exp(float64(v))
	}
	elemExpSumAVX512(x, 0)
	worst := 0.0
	for i, w := range want {
		ulp := float64(math.Nextafter32(float32(w), float32(math.Inf(1))) - float32(w))
		worst = max(worst, math.Abs(float64(x[i])-w)/ulp)
	}
	if worst > 2 {
		t.Errorf("worst error %.2f ulp, want <= 2", worst)
	}
	t.Logf("worst error %.2f ulp", worst)
}
