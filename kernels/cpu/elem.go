package cpu

import (
	"math"
	"sync"

	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// The fused elementwise kernels of a decoder layer. Each exported function checks sizes with the shared shape
// checks, splits its rows (or elements) across the worker pool, and runs a row primitive: an AVX-512 twin in
// elem_amd64.s when the CPU has it, else the pure-Go loop whose doc it shares (elem_generic.go).

// elemGrain is the least number of floats worth handing to another thread: below it the pool's wake-up costs
// more than the work.
const elemGrain = 1 << 15

// elemRowsGrain returns how many rows of length dim make a chunk of at least elemGrain floats.
func elemRowsGrain(dim int) int { return max(1, elemGrain/dim) }

// RMSNorm normalizes each row of length dim: out = x / sqrt(mean(x²) + eps) ⊙ weight. x, out: [rows, dim].
func RMSNorm(out, x, weight []float32, dim int, eps float32) {
	shape.Rows("RMSNorm", dim, []string{"x", "out"}, len(x), len(out))
	shape.Len("RMSNorm", "weight", len(weight), dim, "dim")
	Parallel(len(x)/dim, elemRowsGrain(dim), func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			xr := x[r : r+dim]
			elemScaleMul(out[r:r+dim], xr, weight, elemInvRMS(elemSumSquares(xr), dim, eps))
		}
	})
}

// AddRMSNorm is the fused residual step of a decoder layer, row by row: residual += x, then
// out = RMSNorm(residual) ⊙ weight. residual is updated in place. One pass adds and sums squares, a second scales,
// so each row is read from memory once.
func AddRMSNorm(out, residual, x, weight []float32, dim int, eps float32) {
	shape.Rows("AddRMSNorm", dim, []string{"residual", "x", "out"}, len(residual), len(x), len(out))
	shape.Len("AddRMSNorm", "weight", len(weight), dim, "dim")
	Parallel(len(x)/dim, elemRowsGrain(dim), func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			rr := residual[r : r+dim]
			ss := elemAddSumSquares(rr, x[r:r+dim])
			elemScaleMul(out[r:r+dim], rr, weight, elemInvRMS(ss, dim, eps))
		}
	})
}

// elemInvRMS returns 1/sqrt(ss/dim + eps), computed in float64 so that the only float32 error is the sum's.
func elemInvRMS(ss float32, dim int, eps float32) float32 {
	return float32(1 / math.Sqrt(float64(ss)/float64(dim)+float64(eps)))
}

// SwiGLU is the gated activation of Llama's MLP: out[i] = silu(gate[i])·up[i], silu(g) = g/(1+e^(-g)).
func SwiGLU(out, gate, up []float32) {
	shape.Positive("SwiGLU", "len(gate)", len(gate))
	shape.Len("SwiGLU", "up", len(up), len(gate), "len(gate)")
	shape.Len("SwiGLU", "out", len(out), len(gate), "len(gate)")
	Parallel(len(gate), elemGrain, func(lo, hi int) {
		elemSwiGLU(out[lo:hi], gate[lo:hi], up[lo:hi])
	})
}

// Softmax replaces each row of x ([rows, cols]) by exp(x - max(x)) / Σ exp(x - max(x)).
func Softmax(x []float32, rows, cols int) {
	shape.Positive("Softmax", "rows", rows, "cols", cols)
	shape.Len("Softmax", "x", len(x), rows*cols, "rows*cols")
	Parallel(rows, elemRowsGrain(cols), func(lo, hi int) {
		for r := lo * cols; r < hi*cols; r += cols {
			row := x[r : r+cols]
			sum := elemExpSum(row, elemMax(row))
			elemScale(row, 1/sum)
		}
	})
}

// RoPE rotates queries or keys in place by their positions, with Llama's consecutive pairing: within each head,
// (x[2i], x[2i+1]) is rotated by the angle pos[t]·theta^(-2i/headDim). x is [len(pos), nHeads*headDim].
//
// The angles, their cosines and sines are computed in float64 and rounded to float32, so the rotation's error is
// that of float32 arithmetic on exact coefficients. They are computed once per position and (headDim, theta) and
// kept, as vLLM keeps its cos/sin cache: a decode step rotates the same positions twice a layer, and at batch 32
// computing them took 0.5 ms of a 22 ms step of stories110M (BenchmarkDecode, batch 32).
func RoPE(x []float32, pos []int32, nHeads, headDim int, theta float32) {
	shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
	tab := ropeTable(headDim, theta, pos)
	row := nHeads * headDim
	Parallel(len(pos), elemRowsGrain(row), func(lo, hi int) {
		var buf [2 * ropeStackDim]float32
		cs, sn := buf[:headDim:headDim], buf[headDim:2*headDim]
		if headDim > ropeStackDim {
			cs, sn = make([]float32, headDim), make([]float32, headDim)
		}
		for t := lo; t < hi; t++ {
			c, s := tab.at(int(pos[t]), cs, sn)
			elemRotate(x[t*row:(t+1)*row], c, s)
		}
	})
}

// ropeStackDim is the largest head dimension whose rotation rows RoPE keeps on the stack.
const ropeStackDim = 256

// ropeMaxPos bounds the positions whose rows the tables keep (64 MiB for a head dimension of 128); a position
// past it has its row computed on every call.
const ropeMaxPos = 1 << 16

// ropeRows is the rotation of a (headDim, theta) for positions [0, n): for the pair (2i, 2i+1) of position p,
// cs holds cos in both slots and sn -sin, +sin, so that the rotation is x·cs + swap(x)·sn, swap exchanging the
// members of each pair. A published ropeRows is never written again.
type ropeRows struct {
	freq   []float64 // theta^(-2i/headDim)
	n      int
	cs, sn []float32 // [n, headDim]
}

// at returns the rows of position p, from the table or, past it, computed into cs and sn.
func (r *ropeRows) at(p int, cs, sn []float32) ([]float32, []float32) {
	hd := 2 * len(r.freq)
	if p < r.n {
		return r.cs[p*hd : (p+1)*hd], r.sn[p*hd : (p+1)*hd]
	}
	r.fill(p, cs, sn)
	return cs, sn
}

// fill computes the rows of position p into cs and sn.
func (r *ropeRows) fill(p int, cs, sn []float32) {
	for i, f := range r.freq {
		s, c := math.Sincos(float64(p) * f)
		cs[2*i], cs[2*i+1] = float32(c), float32(c)
		sn[2*i], sn[2*i+1] = float32(-s), float32(s)
	}
}

// ropeTable returns the rows of (headDim, theta), grown first to hold every position of pos up to ropeMaxPos.
func ropeTable(headDim int, theta float32, pos []int32) *ropeRows {
	key := ropeKey{headDim, theta}
	v, ok := ropeTables.Load(key)
	if !ok {
		freq := make([]float64, headDim/2)
		for i := range freq {
			freq[i] = math.Pow(float64(theta), -float64(2*i)/float64(headDim))
		}
		v, _ = ropeTables.LoadOrStore(key, &ropeRows{freq: freq})
	}
	r := v.(*ropeRows)
	need := 0
	for _, p := range pos {
		if int(p) < ropeMaxPos {
			need = max(need, int(p)+1)
		}
	}
	if need <= r.n {
		return r
	}
	ropeGrow.Lock()
	defer ropeGrow.Unlock()
	v, _ = ropeTables.Load(key)
	if r = v.(*ropeRows); need <= r.n {
		return r
	}
	// Grow by doubling, into new arrays: calls running on the old rows keep them.
	n := min(ropeMaxPos, max(need, 2*r.n, 64))
	g := &ropeRows{freq: r.freq, n: n, cs: make([]float32, n*headDim), sn: make([]float32, n*headDim)}
	copy(g.cs, r.cs)
	copy(g.sn, r.sn)
	for p := r.n; p < n; p++ {
		g.fill(p, g.cs[p*headDim:(p+1)*headDim], g.sn[p*headDim:(p+1)*headDim])
	}
	ropeTables.Store(key, g)
	return g
}

type ropeKey struct {
	headDim int
	theta   float32
}

var (
	ropeTables sync.Map   // ropeKey -> *ropeRows
	ropeGrow   sync.Mutex // serializes the growth of the tables
)
