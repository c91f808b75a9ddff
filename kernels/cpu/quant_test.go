package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// The quantized kernels through the shared conformance suite (kernels/kerneltest/quant.go). On amd64 without
// noasm, quant_amd64_test.go runs the suite again with the assembly switched off.

func testQuant(t *testing.T) {
	t.Run("GEMMW8A16", func(t *testing.T) { kerneltest.TestGEMMW8A16(t, GEMMW8A16) })
	t.Run("GEMMInt8", func(t *testing.T) { kerneltest.TestGEMMInt8(t, GEMMInt8) })
	t.Run("GEMMW8A8", func(t *testing.T) { kerneltest.TestGEMMW8A8(t, GEMMW8A8) })
	t.Run("QuantizeRowsInt8", func(t *testing.T) { kerneltest.TestQuantizeRowsInt8(t, QuantizeRowsInt8) })
	t.Run("GEMMW4A16", func(t *testing.T) { kerneltest.TestGEMMW4A16(t, GEMMW4A16) })
	t.Run("GEMMW4A8", func(t *testing.T) { kerneltest.TestGEMMW4A8(t, GEMMW4A8) })
	t.Run("QuantizeRowQ8_0", func(t *testing.T) { kerneltest.TestQuantizeRowQ8_0(t, QuantizeRowQ8_0) })
	t.Run("DotQ8_0", func(t *testing.T) { kerneltest.TestDotQ8_0(t, DotQ8_0) })
	t.Run("DotQ4_0Q8_0", func(t *testing.T) { kerneltest.TestDotQ4_0Q8_0(t, DotQ4_0Q8_0) })
	t.Run("GEMVQ8_0", func(t *testing.T) { kerneltest.TestGEMVQ8_0(t, GEMVQ8_0) })
	t.Run("GEMVQ4_0", func(t *testing.T) { kerneltest.TestGEMVQ4_0(t, GEMVQ4_0) })
	t.Run("GEMMQ8_0A8", func(t *testing.T) { kerneltest.TestGEMMQ8_0A8(t, GEMMQ8_0A8) })
	t.Run("GEMMQ4_0A8", func(t *testing.T) { kerneltest.TestGEMMQ4_0A8(t, GEMMQ4_0A8) })
}

func TestQuant(t *testing.T) { testQuant(t) }

// TestGEMMW4A8s checks that one call over several matrices gives bit for bit what a GEMMW4A8 call a matrix gives:
// matrices of whole and partial tiles (and one smaller than a tile) one after another, for token counts below
// the tile path, at its threshold, with a partial panel and over two panels, and groups the tile does not take.
func TestGEMMW4A8s(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, tc := range []struct{ m, k, group int }{{3, 256, 64}, {12, 256, 64}, {17, 384, 128}, {45, 256, 64}, {20, 256, 32}} {
		ns := []int{48, 29, 4, 13}
		gpr := tc.k / tc.group
		qa, sa := make([]int8, tc.m*tc.k), make([]float32, tc.m)
		for i := range qa {
			qa[i] = int8(r.IntN(255) - 127)
		}
		for i := range sa {
			sa[i] = float32(r.Float64()) / 127
		}
		ws, cs, want := make([]W4A8Weights, len(ns)), make([][]float32, len(ns)), make([][]float32, len(ns))
		for i, n := range ns {
			w := W4A8Weights{n, make([]uint8, n*tc.k/2), make([]float32, n*gpr), make([]uint8, n*gpr)}
			for j := range w.Packed {
				w.Packed[j] = uint8(r.IntN(256))
			}
			for j := range w.Scales {
				w.Scales[j], w.Zeros[j] = float32(r.Float64())/15, uint8(r.IntN(16))
			}
			ws[i], cs[i], want[i] = w, make([]float32, tc.m*n), make([]float32, tc.m*n)
			GEMMW4A8(tc.m, n, tc.k, tc.group, qa, sa, w.Packed, w.Scales, w.Zeros, want[i])
		}
		GEMMW4A8s(tc.m, tc.k, tc.group, qa, sa, ws, cs)
		for i := range ns {
			for j := range cs[i] {
				if math.Float32bits(cs[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("m=%d k=%d group=%d: matrix %d: c[%d] = %v, want %v (GEMMW4A8)", tc.m, tc.k, tc.group, i, j,
						cs[i][j], want[i][j])
				}
			}
		}
	}
}

// TestGEMMW8A8s checks that one call over several matrices gives bit for bit what a GEMMW8A8 call a matrix gives,
// for matrices of whole and partial tiles, below the tile path, on it (one and two panels) and above it.
func TestGEMMW8A8s(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, tc := range []struct{ m, k int }{{3, 256}, {12, 256}, {17, 388}, {45, 256}, {60, 128}} {
		ns := []int{48, 29, 4, 13}
		qa, sa := make([]int8, tc.m*tc.k), make([]float32, tc.m)
		for i := range qa {
			qa[i] = int8(r.IntN(255) - 127)
		}
		for i := range sa {
			sa[i] = float32(r.Float64()) / 127
		}
		ws, cs, want := make([]W8A8Weights, len(ns)), make([][]float32, len(ns)), make([][]float32, len(ns))
		for i, n := range ns {
			w := W8A8Weights{n, make([]int8, n*tc.k), make([]float32, n)}
			for j := range w.Q {
				w.Q[j] = int8(r.IntN(255) - 127)
			}
			for j := range w.Scales {
				w.Scales[j] = float32(r.Float64()) / 127
			}
			ws[i], cs[i], want[i] = w, make([]float32, tc.m*n), make([]float32, tc.m*n)
			GEMMW8A8(tc.m, n, tc.k, qa, sa, w.Q, w.Scales, want[i])
		}
		GEMMW8A8s(tc.m, tc.k, qa, sa, ws, cs)
		for i := range ns {
			for j := range cs[i] {
				if math.Float32bits(cs[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("m=%d k=%d: matrix %d: c[%d] = %v, want %v (GEMMW8A8)", tc.m, tc.k, i, j, cs[i][j], want[i][j])
				}
			}
		}
	}
}
