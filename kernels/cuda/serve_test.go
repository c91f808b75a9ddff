//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/kernels/half"
)

// toT returns x in storage type t as the bytes' slice that Upload takes.
func toT(t DType, x []float32) any {
	switch t {
	case F16:
		h := make([]uint16, len(x))
		half.F32ToF16Slice(h, x)
		return h
	case BF16:
		h := make([]uint16, len(x))
		half.F32ToBF16Slice(h, x)
		return h
	}
	return x
}

func upload(x any) (Buffer, error) {
	switch v := x.(type) {
	case []uint16:
		return Upload(v)
	case []float32:
		return Upload(v)
	case []int32:
		return Upload(v)
	}
	panic("upload: unexpected type")
}

// fromT downloads n elements of type t from b as float32.
func fromT(t DType, b Buffer, n int) ([]float32, error) {
	out := make([]float32, n)
	if t == F32 {
		return out, Download(out, b)
	}
	h := make([]uint16, n)
	if err := Download(h, b); err != nil {
		return nil, err
	}
	if t == F16 {
		half.F16ToF32Slice(out, h)
	} else {
		half.BF16ToF32Slice(out, h)
	}
	return out, nil
}

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
			var gathered, cast []float32
			q := make([]int8, rows*dim)
			s := make([]float32, rows)
			err := dev.Do(func() error {
				xb, err := upload(toT(dt, x))
				if err != nil {
					return err
				}
				defer xb.Free()
				ib, _ := Upload(idx)
				defer ib.Free()
				ob, _ := Alloc(int64(len(idx) * dim * dt.Size()))
				defer ob.Free()
				if err := dev.GatherRowsOn(dt, ob, xb, ib, len(idx), dim); err != nil {
					return err
				}
				if gathered, err = fromT(dt, ob, len(idx)*dim); err != nil {
					return err
				}
				fb, _ := Upload(x)
				defer fb.Free()
				cb, _ := Alloc(int64(len(x) * dt.Size()))
				defer cb.Free()
				if err := dev.CastOn(dt, cb, fb, len(x)); err != nil {
					return err
				}
				if cast, err = fromT(dt, cb, len(x)); err != nil {
					return err
				}
				qb, _ := Alloc(int64(len(q)))
				defer qb.Free()
				sb, _ := Alloc(int64(4 * rows))
				defer sb.Free()
				if err := dev.QuantizeRowsOn(dt, qb, sb, xb, rows, dim); err != nil {
					return err
				}
				if err := Download(q, qb); err != nil {
					return err
				}
				return Download(s, sb)
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
		lb, _ := Upload(logits)
		defer lb.Free()
		ob, _ := Alloc(4 * rows)
		defer ob.Free()
		if err := dev.ArgmaxOn(ob, lb, rows, vocab); err != nil {
			return err
		}
		return Download(got, ob)
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
