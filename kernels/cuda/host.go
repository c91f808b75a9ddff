//go:build cuda

package cuda

import (
	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// The host-slice wrappers have the signatures of kernels/kerneltest (and kernels/cpu), so the shared conformance
// suite and the golden files run on the GPU. Each checks sizes with kernels/internal/shape (the same panics as
// every implementation), copies its inputs to the device, runs the kernel, copies the outputs back and frees the
// device memory. They are for tests and for callers that hold host data; serving code keeps its tensors on the
// device and calls the launchers (Device.GEMMOn, ...).

// arena holds the device buffers of one host-slice call and the first error of their copies.
type arena struct {
	bufs []Buffer
	err  error
}

func up[T any](a *arena, s []T) Buffer {
	if a.err != nil {
		return Buffer{}
	}
	b, err := Upload(s)
	a.err = err
	a.bufs = append(a.bufs, b)
	return b
}

func down[T any](a *arena, s []T, b Buffer) {
	if a.err == nil {
		a.err = Download(s, b)
	}
}

func (a *arena) free() {
	for _, b := range a.bufs {
		b.Free()
	}
}

// run executes f on the device with a fresh arena; f's launches and the arena's copies share the error.
func (d *Device) run(f func(a *arena) error) {
	d.must(func() error {
		a := &arena{}
		defer a.free()
		if err := f(a); err != nil {
			return err
		}
		return a.err
	})
}

func toF16(x []float32) []uint16 {
	h := make([]uint16, len(x))
	half.F32ToF16Slice(h, x)
	return h
}

func fromF16(dst []float32, h []uint16) { half.F16ToF32Slice(dst, h) }

// RoundF16 rounds x to the nearest float16 value: the InputRounding of the f16 kernels' conformance tests.
func RoundF16(x float32) float32 { return half.F16ToF32(half.F32ToF16(x)) }

// GEMM is c = a·wᵀ in float32 (dot kernels: exact float32 products, float32 sums).
func (d *Device) GEMM(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	d.gemm(F32, m, n, k, a, w, c)
}

// GEMMF16 is GEMM with a and w rounded to float16 and multiplied on tensor cores (f32 accumulation).
func (d *Device) GEMMF16(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	d.gemm(F16, m, n, k, a, w, c)
}

func (d *Device) gemm(t DType, m, n, k int, a, w, c []float32) {
	d.run(func(ar *arena) error {
		var ab, wb Buffer
		if t == F16 {
			ab, wb = up(ar, toF16(a)), up(ar, toF16(w))
		} else {
			ab, wb = up(ar, a), up(ar, w)
		}
		cb := up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := d.GEMMOn(t, m, n, k, ab, wb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// RMSNorm: out = x / sqrt(mean(x²) + eps) ⊙ weight, row by row.
func (d *Device) RMSNorm(out, x, weight []float32, dim int, eps float32) {
	shape.Rows("RMSNorm", dim, []string{"x", "out"}, len(x), len(out))
	shape.Len("RMSNorm", "weight", len(weight), dim, "dim")
	d.run(func(a *arena) error {
		ob, xb, wb := up(a, out), up(a, x), up(a, weight)
		if a.err != nil {
			return a.err
		}
		if err := d.RMSNormOn(F32, ob, xb, wb, len(x)/dim, dim, eps); err != nil {
			return err
		}
		down(a, out, ob)
		return nil
	})
}

// AddRMSNorm: residual += x, out = RMSNorm(residual) ⊙ weight.
func (d *Device) AddRMSNorm(out, residual, x, weight []float32, dim int, eps float32) {
	shape.Rows("AddRMSNorm", dim, []string{"residual", "x", "out"}, len(residual), len(x), len(out))
	shape.Len("AddRMSNorm", "weight", len(weight), dim, "dim")
	d.run(func(a *arena) error {
		ob, rb, xb, wb := up(a, out), up(a, residual), up(a, x), up(a, weight)
		if a.err != nil {
			return a.err
		}
		if err := d.AddRMSNormOn(F32, ob, rb, xb, wb, len(x)/dim, dim, eps); err != nil {
			return err
		}
		down(a, out, ob)
		down(a, residual, rb)
		return nil
	})
}

// RoPE rotates x in place by the positions pos (Llama's consecutive pairs).
func (d *Device) RoPE(x []float32, pos []int32, nHeads, headDim int, theta float32) {
	shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
	d.run(func(a *arena) error {
		xb, pb := up(a, x), up(a, pos)
		if a.err != nil {
			return a.err
		}
		if err := d.RoPEOn(F32, xb, pb, len(pos), nHeads, headDim, theta); err != nil {
			return err
		}
		down(a, x, xb)
		return nil
	})
}

// SwiGLU: out = silu(gate)·up.
func (d *Device) SwiGLU(out, gate, upv []float32) {
	shape.Positive("SwiGLU", "len(gate)", len(gate))
	shape.Len("SwiGLU", "up", len(upv), len(gate), "len(gate)")
	shape.Len("SwiGLU", "out", len(out), len(gate), "len(gate)")
	d.run(func(a *arena) error {
		ob, gb, ub := up(a, out), up(a, gate), up(a, upv)
		if a.err != nil {
			return a.err
		}
		if err := d.SwiGLUOn(F32, ob, gb, ub, len(gate)); err != nil {
			return err
		}
		down(a, out, ob)
		return nil
	})
}

// Softmax replaces each row of x [rows, cols] by its softmax.
func (d *Device) Softmax(x []float32, rows, cols int) {
	shape.Positive("Softmax", "rows", rows, "cols", cols)
	shape.Len("Softmax", "x", len(x), rows*cols, "rows*cols")
	d.run(func(a *arena) error {
		xb := up(a, x)
		if a.err != nil {
			return a.err
		}
		if err := d.SoftmaxOn(F32, xb, rows, cols); err != nil {
			return err
		}
		down(a, x, xb)
		return nil
	})
}

// CausalAttention is prefill attention in float32 (the split-KV kernel over contiguous keys).
func (d *Device) CausalAttention(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	d.causal(F32, out, q, k, v, nq, kvLen, nHeads, nKVHeads, headDim, scale)
}

// CausalAttentionF16 is CausalAttention with q, k, v and out in float16: FlashAttention-2 on tensor cores for
// headDim 64 and 128, the split-KV kernel otherwise.
func (d *Device) CausalAttentionF16(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	d.causal(F16, out, q, k, v, nq, kvLen, nHeads, nKVHeads, headDim, scale)
}

func (d *Device) causal(t DType, out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	d.run(func(a *arena) error {
		var ob, qb, kb, vb Buffer
		if t == F16 {
			ob, qb, kb, vb = up(a, toF16(out)), up(a, toF16(q)), up(a, toF16(k)), up(a, toF16(v))
		} else {
			ob, qb, kb, vb = up(a, out), up(a, q), up(a, k), up(a, v)
		}
		if a.err != nil {
			return a.err
		}
		var err error
		if FlashPrefillOK(t, headDim) {
			err = d.FlashPrefillOn(t, ob, qb, kb, vb, nq, kvLen, nHeads, nKVHeads, headDim, scale)
		} else {
			plan := d.PlanPaged(nq, nHeads, nKVHeads, headDim, kvLen)
			ws := up(a, make([]byte, plan.WorkspaceBytes))
			qs, ls := up(a, []int32{0, int32(nq)}), up(a, []int32{int32(kvLen)})
			if a.err != nil {
				return a.err
			}
			err = d.PagedAttentionOn(t, plan, ws, ob, qb, kb, vb, qs, ls, Buffer{}, nq, 1, 1, 1, nHeads, nKVHeads,
				headDim, scale)
		}
		if err != nil {
			return err
		}
		if t == F16 {
			h := make([]uint16, len(out))
			down(a, h, ob)
			fromF16(out, h)
		} else {
			down(a, out, ob)
		}
		return nil
	})
}

// KVAppend writes token rows into the paged caches at slots (negative: skipped).
func (d *Device) KVAppend(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppend", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	d.run(func(a *arena) error {
		kc, vc, kb, vb, sb := up(a, kCache), up(a, vCache), up(a, k), up(a, v), up(a, slots)
		if a.err != nil {
			return a.err
		}
		if err := d.KVAppendOn(F32, kc, vc, kb, vb, sb, len(slots), nKVHeads*headDim); err != nil {
			return err
		}
		down(a, kCache, kc)
		down(a, vCache, vc)
		return nil
	})
}

// PagedAttention is attention over the paged caches in float32, split-KV with a merge for long sequences.
func (d *Device) PagedAttention(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttention", len(out), len(q), len(kCache), len(vCache), qStart, seqLens, blockTables,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	rows := int(qStart[len(seqLens)])
	maxLen := 0
	for _, l := range seqLens {
		maxLen = max(maxLen, int(l))
	}
	d.run(func(a *arena) error {
		plan := d.PlanPaged(rows, nHeads, nKVHeads, headDim, maxLen)
		ws := up(a, make([]byte, plan.WorkspaceBytes))
		ob, qb, kc, vc := up(a, out), up(a, q), up(a, kCache), up(a, vCache)
		qs, ls, bt := up(a, qStart), up(a, seqLens), up(a, blockTables)
		if a.err != nil {
			return a.err
		}
		if err := d.PagedAttentionOn(F32, plan, ws, ob, qb, kc, vc, qs, ls, bt, rows, len(seqLens), maxBlocksPerSeq,
			blockSize, nHeads, nKVHeads, headDim, scale); err != nil {
			return err
		}
		down(a, out, ob)
		return nil
	})
}

// GEMMW8A16 is c = sw[j]·Σ a·q with float32 activations (dot kernels, dequantized in registers).
func (d *Device) GEMMW8A16(m, n, k int, a []float32, w []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A16", m, n, k, len(a), len(w), len(c))
	shape.Len("GEMMW8A16", "sw", len(sw), n, "n")
	d.gemmW8A16(F32, m, n, k, a, w, sw, c)
}

// GEMMW8A16F16 is GEMMW8A16 with the activations rounded to float16 (tensor cores for m > 8).
func (d *Device) GEMMW8A16F16(m, n, k int, a []float32, w []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A16", m, n, k, len(a), len(w), len(c))
	shape.Len("GEMMW8A16", "sw", len(sw), n, "n")
	d.gemmW8A16(F16, m, n, k, a, w, sw, c)
}

func (d *Device) gemmW8A16(act DType, m, n, k int, a []float32, w []int8, sw, c []float32) {
	d.run(func(ar *arena) error {
		ab := up(ar, a)
		if act == F16 {
			ab = up(ar, toF16(a))
		}
		wb, sb, cb := up(ar, w), up(ar, sw), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := d.GEMMW8A16On(act, m, n, k, ab, wb, sb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMW4A16 is c = Σ a·(q - z)·s with float32 activations (dot kernels, dequantized in registers).
func (d *Device) GEMMW4A16(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	shape.GEMMGroup("GEMMW4A16", m, n, k, group, len(a), len(w), len(s), len(z), len(c))
	d.gemmW4A16(F32, m, n, k, group, a, w, s, z, c)
}

// GEMMW4A16F16 is GEMMW4A16 with the activations rounded to float16 (tensor cores for m > 8, the weights
// dequantized to float16 in registers on their way to shared memory).
func (d *Device) GEMMW4A16F16(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	shape.GEMMGroup("GEMMW4A16", m, n, k, group, len(a), len(w), len(s), len(z), len(c))
	d.gemmW4A16(F16, m, n, k, group, a, w, s, z, c)
}

func (d *Device) gemmW4A16(act DType, m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8,
	c []float32) {
	d.run(func(ar *arena) error {
		ab := up(ar, a)
		if act == F16 {
			ab = up(ar, toF16(a))
		}
		wb, sb, zb, cb := up(ar, w), up(ar, s), up(ar, z), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := d.GEMMW4A16On(act, m, n, k, group, ab, wb, sb, zb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMW8A8 is c = sa[i]·sw[j]·Σ qa·qw (int8 tensor cores, or dp4a).
func (d *Device) GEMMW8A8(m, n, k int, qa []int8, sa []float32, qw []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A8", m, n, k, len(qa), len(qw), len(c))
	shape.Len("GEMMW8A8", "sa", len(sa), m, "m")
	shape.Len("GEMMW8A8", "sw", len(sw), n, "n")
	d.run(func(ar *arena) error {
		ab, sab, wb, swb, cb := up(ar, qa), up(ar, sa), up(ar, qw), up(ar, sw), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := d.GEMMW8A8On(m, n, k, ab, sab, wb, swb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMInt8 is c = Σ a·w in int32.
func (d *Device) GEMMInt8(m, n, k int, a, w []int8, c []int32) {
	shape.GEMM("GEMMInt8", m, n, k, len(a), len(w), len(c))
	d.run(func(ar *arena) error {
		ab, wb, cb := up(ar, a), up(ar, w), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := d.GEMMInt8On(m, n, k, ab, wb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}
