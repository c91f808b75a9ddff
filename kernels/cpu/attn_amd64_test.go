//go:build !noasm

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
)

// attnAsmPaths lists the micro-kernel sets the attention tests run: the Go loops, and the assembly (AVX-512, or
// AVX2 without it) where available.
func attnAsmPaths() []bool {
	if attnAVX512 || attnAVX2 {
		return []bool{false, true}
	}
	return []bool{false}
}

// attnUseAsm switches the attention micro-kernels' assembly on (as the machine has it) or off and returns the
// function that restores it.
func attnUseAsm(on bool) (restore func()) {
	prev, prev2 := attnAVX512, attnAVX2
	attnAVX512, attnAVX2 = on && prev, on && prev2
	return func() { attnAVX512, attnAVX2 = prev, prev2 }
}

// TestAttnDecode checks the fused decode kernel against attnDecodeGo, tile after tile (the online softmax's state
// carried between calls), over float32, binary16 and int8 caches, for every tile size, head dims of 1 to 8 chunks
// and one or four query heads a KV head: every output within 1e-5 relative of the Go loop's (they sum in
// different orders and exponentiate differently), the binary16 cache's results bit for bit the float32 cache's
// over the same values, and the int8 cache's within 1e-5 relative of the float32 cache's over code·scale (the
// kernel scales each row's score and probability, not its values).
func TestAttnDecode(t *testing.T) {
	if !attnAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, hd := range []int{16, 48, 64, 128} {
		for _, hs := range [][2]int{{1, 1}, {3, 1}, {2, 4}} {
			heads, group := hs[0], hs[1]
			const tokens = 40
			kvRow := (heads + 1) * hd // one more KV head in the cache than the call reads
			kc := make([]float32, tokens*kvRow)
			vc := make([]float32, tokens*kvRow)
			for i := range kc {
				kc[i], vc[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			k16, v16 := make([]uint16, len(kc)), make([]uint16, len(vc))
			half.F32ToF16Slice(k16, kc)
			half.F32ToF16Slice(v16, vc)
			half.F16ToF32Slice(kc, k16)
			half.F16ToF32Slice(vc, v16)
			k8, v8 := make([]int8, len(kc)), make([]int8, len(vc))
			ks, vs := make([]float32, len(kc)/hd), make([]float32, len(vc)/hd)
			for r := range ks {
				ks[r] = qQuantizeRow(kc[r*hd:][:hd], k8[r*hd:][:hd])
				vs[r] = qQuantizeRow(vc[r*hd:][:hd], v8[r*hd:][:hd])
			}
			i8 := pagedCache{k8: k8, v8: v8, ks: ks, vs: vs, hd: hd}
			kw, vw := make([]float32, len(kc)), make([]float32, len(vc))
			i8.widen(kw, true, 0)
			i8.widen(vw, false, 0)
			nq := heads * group
			q := make([]float32, nq*hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64()) * 0.3
			}
			for nt := 1; nt <= attnDecodeCols; nt++ {
				type state struct{ m, l, o []float32 }
				fresh := func() state {
					s := state{make([]float32, nq), make([]float32, nq), make([]float32, nq*hd)}
					for h := range nq {
						s.m[h] = attnInitMax
					}
					return s
				}
				got, got16, want, gotW, got8 := fresh(), fresh(), fresh(), fresh(), fresh()
				f32, f16 := pagedCache{k: kc, v: vc}, pagedCache{k16: k16, v16: v16}
				for s0 := 0; s0+nt <= tokens; s0 += nt {
					off := s0*kvRow + hd
					next := f16.next(off+nt*kvRow, min(nt, tokens-s0-nt), heads*hd, kvRow, nq)
					next8 := i8.next(off+nt*kvRow, min(nt, tokens-s0-nt), heads*hd, kvRow, nq)
					attnDecode(f32, q, off, kvRow, nt, heads, group, hd, got.m, got.l, got.o, &attnNext{})
					attnDecode(f16, q, off, kvRow, nt, heads, group, hd, got16.m, got16.l, got16.o, &next)
					attnDecodeGo(f32, q, off, kvRow, nt, heads, group, hd, want.m, want.l, want.o)
					attnDecode(pagedCache{k: kw, v: vw}, q, off, kvRow, nt, heads, group, hd, gotW.m, gotW.l, gotW.o,
						&attnNext{})
					attnDecode(i8, q, off, kvRow, nt, heads, group, hd, got8.m, got8.l, got8.o, &next8)
				}
				name := fmt.Sprintf("hd=%d/heads=%d/group=%d/nt=%d", hd, heads, group, nt)
				for h := range nq {
					if !attnClose(got.m[h], want.m[h]) || !attnClose(got.l[h], want.l[h]) {
						t.Fatalf("%s: head %d: m, l = %v, %v, want %v, %v", name, h, got.m[h], got.l[h], want.m[h], want.l[h])
					}
				}
				for i := range got.o {
					if !attnClose(got.o[i], want.o[i]) {
						t.Fatalf("%s: o[%d] = %v, want %v", name, i, got.o[i], want.o[i])
					}
				}
				for i := range got.o {
					if math.Float32bits(got16.o[i]) != math.Float32bits(got.o[i]) {
						t.Fatalf("%s: binary16 cache: o[%d] = %v, want %v (float32 cache)", name, i, got16.o[i], got.o[i])
					}
					if !attnClose(got8.o[i], gotW.o[i]) {
						t.Fatalf("%s: int8 cache: o[%d] = %v, want %v (float32 cache of code·scale)", name, i, got8.o[i],
							gotW.o[i])
					}
				}
				for h := range nq {
					if !attnClose(got8.m[h], gotW.m[h]) || !attnClose(got8.l[h], gotW.l[h]) {
						t.Fatalf("%s: int8 cache: head %d: m, l = %v, %v, want %v, %v", name, h, got8.m[h], got8.l[h],
							gotW.m[h], gotW.l[h])
					}
				}
			}
		}
	}
}
