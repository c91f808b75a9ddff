//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/morphlab/morphlab/kernels/cpu"
)

// TestServeKernels checks the serving kernels exactly: gathered rows are the table's, a cast rounds as
// DType.Round, quantized rows are kernels/cpu's QuantizeRowsInt8 code for code and scale for scale, and argmax
// picks what sample.Argmax picks (the first on ties).
func TestServeKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const rows, dim, vocab = 7, 200, 1000
	x := make([]float32, rows*dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	clear(x[3*dim : 4*dim]) // an all-zero row: scale 0
	for _, dt := range []DType{F32, F16, BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			xr := make([]float32, len(x))
			for i, v := range x {
				xr[i] = dt.Round(v)
			}
			idx := []int32{6, 0, 6, 2}
			gathered, cast := make([]float32, len(idx)*dim), make([]float32, len(x))
			q := make([]int8, rows*dim)
			s := make([]float32, rows)
			err := dev.Do(func() error {
				a := &arena{}
				defer a.free()
				h := dev.Host(dt)
				xb, ib, ob, fb, cb := h.upT(a, x), up(a, idx), h.upT(a, gathered), up(a, x), h.upT(a, cast)
				qb, sb := up(a, q), up(a, s)
				if a.err != nil {
					return a.err
				}
				if err := dev.GatherRowsOn(dt, ob, xb, ib, len(idx), dim); err != nil {
					return err
				}
				if err := dev.CastOn(dt, cb, fb, len(x)); err != nil {
					return err
				}
				if err := dev.QuantizeRowsOn(dt, qb, sb, xb, rows, dim); err != nil {
					return err
				}
				h.downT(a, gathered, ob)
				h.downT(a, cast, cb)
				down(a, q, qb)
				down(a, s, sb)
				return a.err
			})
			if err != nil {
				t.Fatal(err)
			}
			for r, i := range idx {
				if !slices.Equal(gathered[r*dim:(r+1)*dim], xr[int(i)*dim:int(i+1)*dim]) {
					t.Fatalf("gathered row %d is not row %d of the table", r, i)
				}
			}
			if !slices.Equal(cast, xr) {
				t.Fatal("cast differs from DType.Round")
			}
			wq, ws := make([]int8, len(q)), make([]float32, rows)
			cpu.QuantizeRowsInt8(rows, dim, xr, wq, ws)
			if !slices.Equal(q, wq) || !slices.Equal(s, ws) {
				t.Fatalf("quantized rows differ from cpu.QuantizeRowsInt8: scales %v, want %v", s, ws)
			}
		})
	}
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	logits[1*vocab+10], logits[1*vocab+700] = 9, 9 // a tie: the first
	for i := range vocab {
		logits[2*vocab+i] = float32(math.Inf(-1))
	}
	got := make([]int32, rows)
	err := dev.Do(func() error {
		a := &arena{}
		defer a.free()
		lb, ob := up(a, logits), up(a, got)
		if a.err != nil {
			return a.err
		}
		if err := dev.ArgmaxOn(ob, lb, rows, vocab); err != nil {
			return err
		}
		down(a, got, ob)
		return a.err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		want := 0
		for i, v := range row {
			if v > row[want] {
				want = i
			}
		}
		if int(got[r]) != want {
			t.Errorf("argmax of row %d = %d, want %d", r, got[r], want)
		}
	}
}
