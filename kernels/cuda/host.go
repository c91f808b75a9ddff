//go:build cuda

package cuda

import (
	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// Host runs the kernels of one storage type on host float32 slices, with the signatures of kernels/kerneltest
// (and kernels/cpu), so that the shared conformance suite and the golden files run on the GPU. Each method checks
// sizes with kernels/internal/shape (the same panics as every implementation), converts its float inputs to the
// storage type (rounding to nearest even) and copies them to the device, runs the kernel, copies the outputs back
// widened to float32 and frees the device memory. Arithmetic is float32 whatever the type; GEMM outputs and the
// split-KV partials stay float32. For tests and for callers that hold host data; serving code keeps its tensors
// on the device and calls the launchers (Device.GEMMOn, ...).
type Host struct {
	d *Device
	t DType
}

// Host returns the host-slice wrappers of the kernels of storage type t.
func (d *Device) Host(t DType) Host { return Host{d, t} }

// DType is the storage type of h's kernels.
func (h Host) DType() DType { return h.t }

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

// upT uploads x converted to h's storage type.
func (h Host) upT(a *arena, x []float32) Buffer {
	switch h.t {
	case F16:
		b := make([]uint16, len(x))
		half.F32ToF16Slice(b, x)
		return up(a, b)
	case BF16:
		b := make([]uint16, len(x))
		half.F32ToBF16Slice(b, x)
		return up(a, b)
	}
	return up(a, x)
}

// downT downloads b, of h's storage type, into x.
func (h Host) downT(a *arena, x []float32, b Buffer) {
	if h.t == F32 {
		down(a, x, b)
		return
	}
	s := make([]uint16, len(x))
	down(a, s, b)
	if a.err != nil {
		return
	}
	if h.t == F16 {
		half.F16ToF32Slice(x, s)
	} else {
		half.BF16ToF32Slice(x, s)
	}
}

// run executes f on the device with a fresh arena; f's launches and the arena's copies share the error. A
// failure here is a broken device or a call the kernels cannot take (the shapes were checked), and panics.
func (h Host) run(f func(a *arena) error) {
	h.d.must(func() error {
		a := &arena{}
		defer a.free()
		if err := f(a); err != nil {
			return err
		}
		return a.err
	})
}

// GEMM is c = a·wᵀ with a and w in the storage type (tensor cores for 16-bit types and m > 8) and c float32.
func (h Host) GEMM(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	h.run(func(ar *arena) error {
		ab, wb, cb := h.upT(ar, a), h.upT(ar, w), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := h.d.GEMMOn(h.t, m, n, k, ab, wb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// RMSNorm: out = x / sqrt(mean(x²) + eps) ⊙ weight, row by row.
func (h Host) RMSNorm(out, x, weight []float32, dim int, eps float32) {
	shape.Rows("RMSNorm", dim, []string{"x", "out"}, len(x), len(out))
	shape.Len("RMSNorm", "weight", len(weight), dim, "dim")
	h.run(func(a *arena) error {
		ob, xb, wb := h.upT(a, out), h.upT(a, x), h.upT(a, weight)
		if a.err != nil {
			return a.err
		}
		if err := h.d.RMSNormOn(h.t, ob, xb, wb, len(x)/dim, dim, eps); err != nil {
			return err
		}
		h.downT(a, out, ob)
		return nil
	})
}

// AddRMSNorm: residual += x (stored in the storage type), out = RMSNorm(residual) ⊙ weight.
func (h Host) AddRMSNorm(out, residual, x, weight []float32, dim int, eps float32) {
	shape.Rows("AddRMSNorm", dim, []string{"residual", "x", "out"}, len(residual), len(x), len(out))
	shape.Len("AddRMSNorm", "weight", len(weight), dim, "dim")
	h.run(func(a *arena) error {
		ob, rb, xb, wb := h.upT(a, out), h.upT(a, residual), h.upT(a, x), h.upT(a, weight)
		if a.err != nil {
			return a.err
		}
		if err := h.d.AddRMSNormOn(h.t, ob, rb, xb, wb, len(x)/dim, dim, eps); err != nil {
			return err
		}
		h.downT(a, out, ob)
		h.downT(a, residual, rb)
		return nil
	})
}

// RoPE rotates x in place by the positions pos (Llama's consecutive pairs).
func (h Host) RoPE(x []float32, pos []int32, nHeads, headDim int, theta float32) {
	shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
	h.run(func(a *arena) error {
		xb, pb := h.upT(a, x), up(a, pos)
		if a.err != nil {
			return a.err
		}
		if err := h.d.RoPEOn(h.t, xb, pb, len(pos), nHeads, headDim, theta); err != nil {
			return err
		}
		h.downT(a, x, xb)
		return nil
	})
}

// SwiGLU: out = silu(gate)·up.
func (h Host) SwiGLU(out, gate, upv []float32) {
	shape.Positive("SwiGLU", "len(gate)", len(gate))
	shape.Len("SwiGLU", "up", len(upv), len(gate), "len(gate)")
	shape.Len("SwiGLU", "out", len(out), len(gate), "len(gate)")
	h.run(func(a *arena) error {
		ob, gb, ub := h.upT(a, out), h.upT(a, gate), h.upT(a, upv)
		if a.err != nil {
			return a.err
		}
		if err := h.d.SwiGLUOn(h.t, ob, gb, ub, len(gate)); err != nil {
			return err
		}
		h.downT(a, out, ob)
		return nil
	})
}

// Softmax replaces each row of x [rows, cols] by its softmax.
func (h Host) Softmax(x []float32, rows, cols int) {
	shape.Positive("Softmax", "rows", rows, "cols", cols)
	shape.Len("Softmax", "x", len(x), rows*cols, "rows*cols")
	h.run(func(a *arena) error {
		xb := h.upT(a, x)
		if a.err != nil {
			return a.err
		}
		if err := h.d.SoftmaxOn(h.t, xb, rows, cols); err != nil {
			return err
		}
		h.downT(a, x, xb)
		return nil
	})
}

// CausalAttention is prefill attention: FlashAttention-2 on tensor cores for 16-bit types and headDim 64 or
// 128, the split-KV kernel over contiguous keys otherwise.
func (h Host) CausalAttention(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	h.run(func(a *arena) error {
		ob, qb, kb, vb := h.upT(a, out), h.upT(a, q), h.upT(a, k), h.upT(a, v)
		if a.err != nil {
			return a.err
		}
		var err error
		if FlashPrefillOK(h.t, headDim) {
			err = h.d.FlashPrefillOn(h.t, ob, qb, kb, vb, nq, kvLen, nHeads, nKVHeads, headDim, scale)
		} else {
			plan := h.d.PlanPaged(nq, nHeads, nKVHeads, headDim, kvLen)
			ws := up(a, make([]byte, plan.WorkspaceBytes))
			qs, ls := up(a, []int32{0, int32(nq)}), up(a, []int32{int32(kvLen)})
			if a.err != nil {
				return a.err
			}
			err = h.d.PagedAttentionOn(h.t, plan, ws, ob, qb, kb, vb, qs, ls, Buffer{}, nq, 1, 1, 1, nHeads, nKVHeads,
				headDim, scale)
		}
		if err != nil {
			return err
		}
		h.downT(a, out, ob)
		return nil
	})
}

// KVAppend writes token rows into the paged caches at slots (negative: skipped).
func (h Host) KVAppend(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppend", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	h.run(func(a *arena) error {
		kc, vc, kb, vb, sb := h.upT(a, kCache), h.upT(a, vCache), h.upT(a, k), h.upT(a, v), up(a, slots)
		if a.err != nil {
			return a.err
		}
		if err := h.d.KVAppendOn(h.t, kc, vc, kb, vb, sb, len(slots), nKVHeads*headDim); err != nil {
			return err
		}
		h.downT(a, kCache, kc)
		h.downT(a, vCache, vc)
		return nil
	})
}

// PagedAttention is attention over the paged caches, split-KV with a merge for long sequences.
func (h Host) PagedAttention(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttention", len(out), len(q), len(kCache), len(vCache), qStart, seqLens, blockTables,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	rows := int(qStart[len(seqLens)])
	maxLen := 0
	for _, l := range seqLens {
		maxLen = max(maxLen, int(l))
	}
	h.run(func(a *arena) error {
		plan := h.d.PlanPaged(rows, nHeads, nKVHeads, headDim, maxLen)
		ws := up(a, make([]byte, plan.WorkspaceBytes))
		ob, qb, kc, vc := h.upT(a, out), h.upT(a, q), h.upT(a, kCache), h.upT(a, vCache)
		qs, ls, bt := up(a, qStart), up(a, seqLens), up(a, blockTables)
		if a.err != nil {
			return a.err
		}
		if err := h.d.PagedAttentionOn(h.t, plan, ws, ob, qb, kc, vc, qs, ls, bt, rows, len(seqLens), maxBlocksPerSeq,
			blockSize, nHeads, nKVHeads, headDim, scale); err != nil {
			return err
		}
		h.downT(a, out, ob)
		return nil
	})
}

// GEMMW8A16 is c = sw[j]·Σ a·q with the activations in the storage type (tensor cores for 16-bit types and
// m > 8; float32 activations stay exact in the dot kernels).
func (h Host) GEMMW8A16(m, n, k int, a []float32, w []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A16", m, n, k, len(a), len(w), len(c))
	shape.Len("GEMMW8A16", "sw", len(sw), n, "n")
	h.run(func(ar *arena) error {
		ab, wb, sb, cb := h.upT(ar, a), up(ar, w), up(ar, sw), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := h.d.GEMMW8A16On(h.t, m, n, k, ab, wb, sb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMW4A16 is c = Σ a·(q - z)·s with the activations in the storage type (tensor cores for 16-bit types and
// m > 8, the weights dequantized to that type on their way to shared memory).
func (h Host) GEMMW4A16(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	shape.GEMMGroup("GEMMW4A16", m, n, k, group, len(a), len(w), len(s), len(z), len(c))
	h.run(func(ar *arena) error {
		ab, wb, sb, zb, cb := h.upT(ar, a), up(ar, w), up(ar, s), up(ar, z), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := h.d.GEMMW4A16On(h.t, m, n, k, group, ab, wb, sb, zb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMW8A8 is c = sa[i]·sw[j]·Σ qa·qw (int8 tensor cores, or dp4a); the storage type plays no part.
func (h Host) GEMMW8A8(m, n, k int, qa []int8, sa []float32, qw []int8, sw, c []float32) {
	shape.GEMM("GEMMW8A8", m, n, k, len(qa), len(qw), len(c))
	shape.Len("GEMMW8A8", "sa", len(sa), m, "m")
	shape.Len("GEMMW8A8", "sw", len(sw), n, "n")
	h.run(func(ar *arena) error {
		ab, sab, wb, swb, cb := up(ar, qa), up(ar, sa), up(ar, qw), up(ar, sw), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := h.d.GEMMW8A8On(m, n, k, ab, sab, wb, swb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}

// GEMMInt8 is c = Σ a·w in int32; the storage type plays no part.
func (h Host) GEMMInt8(m, n, k int, a, w []int8, c []int32) {
	shape.GEMM("GEMMInt8", m, n, k, len(a), len(w), len(c))
	h.run(func(ar *arena) error {
		ab, wb, cb := up(ar, a), up(ar, w), up(ar, c)
		if ar.err != nil {
			return ar.err
		}
		if err := h.d.GEMMInt8On(m, n, k, ab, wb, cb); err != nil {
			return err
		}
		down(ar, c, cb)
		return nil
	})
}
