//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"
)

// The launchers below take device buffers and enqueue kernels on the default stream without waiting; they must
// run inside Device.Do. Sizes are not checked here (the host-slice wrappers check them with kernels/internal/shape
// before any launch); what each kernel needs of its pointers (alignment to its elements, 16 bytes for its vector
// loads) and of its shape is, by the plans of plan.go, and a call that breaks it gets a one-line error and no
// launch.

func addr(b Buffer) uintptr { return uintptr(b.Ptr) }

// RMSNormOn: out = RMSNorm(x) ⊙ weight over rows of dim.
func (d *Device) RMSNormOn(t DType, out, x, weight Buffer, rows, dim int, eps float32) error {
	if err := checkRows("RMSNorm", t, ptr{"out", addr(out)}, ptr{"x", addr(x)}, ptr{"weight", addr(weight)}); err != nil {
		return err
	}
	return d.launch("rmsnorm_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, x, weight, dim, eps)
}

// AddRMSNormOn: residual += x, out = RMSNorm(residual) ⊙ weight.
func (d *Device) AddRMSNormOn(t DType, out, residual, x, weight Buffer, rows, dim int, eps float32) error {
	if err := checkRows("AddRMSNorm", t, ptr{"out", addr(out)}, ptr{"residual", addr(residual)}, ptr{"x", addr(x)},
		ptr{"weight", addr(weight)}); err != nil {
		return err
	}
	return d.launch("add_rmsnorm_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, residual, x, weight,
		dim, eps)
}

// RoPEOn rotates x [tokens, nHeads*headDim] in place by the int32 positions pos.
func (d *Device) RoPEOn(t DType, x, pos Buffer, tokens, nHeads, headDim int, theta float32) error {
	if err := checkRows("RoPE", t, ptr{"x", addr(x)}); err != nil {
		return err
	}
	if err := checkAlign("RoPE", 4, ptr{"pos", addr(pos)}); err != nil {
		return err
	}
	return d.launch("rope_"+t.String(), dim3{tokens, 1, 1}, dim3{rowThreads, 1, 1}, x, pos, nHeads, headDim, theta)
}

// SwiGLUOn: out = silu(gate)·up over n elements.
func (d *Device) SwiGLUOn(t DType, out, gate, up Buffer, n int) error {
	if err := checkRows("SwiGLU", t, ptr{"out", addr(out)}, ptr{"gate", addr(gate)}, ptr{"up", addr(up)}); err != nil {
		return err
	}
	return d.launch("swiglu_"+t.String(), dim3{min(ceil(n, rowThreads), d.SMs*32), 1, 1}, dim3{rowThreads, 1, 1},
		out, gate, up, n)
}

// SoftmaxOn replaces each row of x [rows, cols] by its softmax.
func (d *Device) SoftmaxOn(t DType, x Buffer, rows, cols int) error {
	if err := checkRows("Softmax", t, ptr{"x", addr(x)}); err != nil {
		return err
	}
	return d.launch("softmax_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, x, cols)
}

// gemm launches a GEMM-like plan whose kernel arguments are (m, n, k, [group,] [ksplit,] operands..., c): the
// tensor-core kernels take ksplit before the operands and, split, write partials into the device's workspace,
// which splitk_reduce_<red> sums into c.
func (d *Device) gemm(p kernelPlan, red string, m, n int, lead []any, operands []any, c Buffer) error {
	if p.ksplit == 0 {
		return d.launch(p.name, p.grid, p.block, append(append(lead, operands...), c)...)
	}
	out := c
	if p.splits > 1 {
		ws, err := d.workspace(p.workspaceBytes(m, n))
		if err != nil {
			return err
		}
		out = ws
	}
	args := append(append(append(lead, p.ksplit), operands...), out)
	if err := d.launch(p.name, p.grid, p.block, args...); err != nil || p.splits == 1 {
		return err
	}
	mn := m * n
	return d.launch("splitk_reduce_"+red, dim3{min(ceil(mn, rowThreads), d.SMs*8), 1, 1}, dim3{rowThreads, 1, 1},
		c, out, mn, p.splits)
}

// GEMMOn: c = a·wᵀ with a [m,k], w [n,k] of type t and c [m,n] float32. F16 and BF16 run on tensor cores when
// m > 8 and k % 8 == 0 (split-K when the block tiles do not fill the GPU); F32, decode-sized m and other k use
// the dot kernels.
func (d *Device) GEMMOn(t DType, m, n, k int, a, w, c Buffer) error {
	p, err := planGEMM(t, m, n, k, d.SMs, addr(a), addr(w), addr(c))
	if err != nil {
		return err
	}
	return d.gemm(p, "f32", m, n, []any{m, n, k}, []any{a, w}, c)
}

// GEMMW8A8On: c = sa[i]·sw[j]·Σ qa·qw with int8 qa [m,k], qw [n,k] and float32 scales. Tensor cores (mma.sync
// s8) when m > 8 and k % 16 == 0, dp4a dot kernels otherwise.
func (d *Device) GEMMW8A8On(m, n, k int, qa, sa, qw, sw, c Buffer) error {
	p, err := planInt8("w8a8", m, n, k, d.SMs, addr(qa), addr(qw), addr(c), ptr{"sa", addr(sa)}, ptr{"sw", addr(sw)})
	if err != nil {
		return err
	}
	return d.gemm(p, "f32", m, n, []any{m, n, k}, []any{qa, sa, qw, sw}, c)
}

// GEMMInt8On: c = Σ a·w as int32, a [m,k] and w [n,k] int8.
func (d *Device) GEMMInt8On(m, n, k int, a, w, c Buffer) error {
	p, err := planInt8("s8s32", m, n, k, d.SMs, addr(a), addr(w), addr(c))
	if err != nil {
		return err
	}
	return d.gemm(p, "s32", m, n, []any{m, n, k}, []any{a, w}, c)
}

// GEMMW8A16On: c = sw[j]·Σ a·q with activations a [m,k] of type act (F32, F16 or BF16), int8 weights q [n,k]
// and a float32 scale a row. 16-bit activations with m > 8 and k % 16 == 0 run on tensor cores.
func (d *Device) GEMMW8A16On(act DType, m, n, k int, a, w, sw, c Buffer) error {
	p, err := planW8A16(act, m, n, k, d.SMs, addr(a), addr(w), addr(sw), addr(c))
	if err != nil {
		return err
	}
	return d.gemm(p, "f32", m, n, []any{m, n, k}, []any{a, w, sw}, c)
}

// GEMMW4A16On: c = Σ a·(q - z)·s with activations a [m,k] of type act (F32, F16 or BF16), packed 4-bit weights
// w [n,k/2] and float32 scales s and uint8 zero points z [n,k/group]. 16-bit activations with m > 8,
// k % 16 == 0 and group % 16 == 0 run on tensor cores.
func (d *Device) GEMMW4A16On(act DType, m, n, k, group int, a, w, s, z, c Buffer) error {
	p, err := planW4A16(act, m, n, k, group, d.SMs, addr(a), addr(w), addr(s), addr(c))
	if err != nil {
		return err
	}
	return d.gemm(p, "f32", m, n, []any{m, n, k, group}, []any{a, w, s, z}, c)
}

// KVAppendOn writes the k and v rows [tokens, nKVHeads*headDim] into the caches at the int32 slots (negative:
// skipped).
func (d *Device) KVAppendOn(t DType, kc, vc, k, v, slots Buffer, tokens, rowLen int) error {
	if err := checkRows("KVAppend", t, ptr{"kCache", addr(kc)}, ptr{"vCache", addr(vc)}, ptr{"k", addr(k)},
		ptr{"v", addr(v)}); err != nil {
		return err
	}
	if err := checkAlign("KVAppend", 4, ptr{"slots", addr(slots)}); err != nil {
		return err
	}
	return d.launch("kv_append_"+t.String(), dim3{tokens, 1, 1}, dim3{rowThreads, 1, 1}, kc, vc, k, v, slots, rowLen)
}

// PlanPaged is the split-KV plan of a paged attention call on this device.
func (d *Device) PlanPaged(rows, nHeads, nKVHeads, headDim, maxSeqLen int) PagedPlan {
	return PlanPaged(d.SMs, rows, nHeads, nKVHeads, headDim, maxSeqLen)
}

// PagedAttentionOn is attention over the paged caches for rows query rows of nSeqs sequences (qStart, seqLens
// and blockTables int32 as in ref.PagedAttention), with plan from PlanPaged and ws at least its WorkspaceBytes.
// A zero blockTables Buffer reads kc and vc as contiguous [tokens, nKVHeads*headDim] (prefill).
func (d *Device) PagedAttentionOn(t DType, plan PagedPlan, ws, out, q, kc, vc, qStart, seqLens, blockTables Buffer,
	rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) error {
	if err := checkPaged(t, plan, headDim, addr(q), addr(kc), addr(vc), addr(out), addr(ws), ws.Bytes); err != nil {
		return err
	}
	hpb := headsPerBlock(nHeads, nKVHeads)
	po, pl := ws.Ptr, ws.Ptr // partial outputs [rows, nHeads, splits, headDim], then log-sum-exps
	if plan.Splits > 1 {
		pl += cu.DevicePtr(rows * nHeads * plan.Splits * headDim * 4)
	}
	err := d.launch("paged_attention_"+t.String(), dim3{rows, nHeads / hpb, plan.Splits}, dim3{32 * hpb, 1, 1},
		out, po, pl, q, kc, vc, qStart, seqLens, blockTables, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads,
		headDim, scale, plan.Chunk)
	if err != nil || plan.Splits == 1 {
		return err
	}
	return d.launch("attn_merge_"+t.String(), dim3{rows * nHeads, 1, 1}, dim3{min(ceil(headDim, 32)*32, 256), 1, 1},
		out, po, pl, plan.Splits, headDim)
}

// FlashPrefillOn is causal prefill attention on tensor cores (FlashAttention-2) for F16 or BF16 q, k, v, out and
// headDim 64 or 128; FlashPrefillOK says whether it takes a call.
func (d *Device) FlashPrefillOn(t DType, out, q, k, v Buffer, nq, kvLen, nHeads, nKVHeads, headDim int,
	scale float32) error {
	if err := checkFlash(t, headDim, addr(q), addr(k), addr(v), addr(out)); err != nil {
		return err
	}
	return d.launch(fmt.Sprintf("flash_prefill_%v_hd%d", t, headDim), dim3{ceil(nq, 64), nHeads, 1},
		dim3{128, 1, 1}, out, q, k, v, nq, kvLen, nHeads, nKVHeads, scale)
}

// GatherRowsOn: out[r] = table[idx[r]] for rows rows of dim elements (token embeddings, each sequence's last
// row), idx int32.
func (d *Device) GatherRowsOn(t DType, out, table, idx Buffer, rows, dim int) error {
	if err := checkRows("GatherRows", t, ptr{"out", addr(out)}, ptr{"table", addr(table)}); err != nil {
		return err
	}
	if err := checkAlign("GatherRows", 4, ptr{"idx", addr(idx)}); err != nil {
		return err
	}
	return d.launch("gather_rows_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, table, idx, dim)
}

// CastOn narrows n float32 values of in to t into out (rounding to nearest even): a GEMM's float32 output to the
// storage type of the next kernel. With t F32 it is a copy.
func (d *Device) CastOn(t DType, out, in Buffer, n int) error {
	if err := checkRows("Cast", t, ptr{"out", addr(out)}); err != nil {
		return err
	}
	if err := checkAlign("Cast", 4, ptr{"in", addr(in)}); err != nil {
		return err
	}
	return d.launch("cast_"+t.String(), dim3{min(ceil(n, rowThreads), d.SMs*32), 1, 1}, dim3{rowThreads, 1, 1},
		out, in, n)
}

// QuantizeRowsOn quantizes rows rows of x [rows, k] of type t to int8 codes q and float32 scales s, a row each,
// as kernels/cpu's QuantizeRowsInt8: the activations of GEMMW8A8On.
func (d *Device) QuantizeRowsOn(t DType, q, s, x Buffer, rows, k int) error {
	if err := checkRows("QuantizeRows", t, ptr{"x", addr(x)}); err != nil {
		return err
	}
	if err := checkAlign("QuantizeRows", 4, ptr{"s", addr(s)}); err != nil {
		return err
	}
	return d.launch("quantize_rows_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, q, s, x, k)
}

// ArgmaxOn writes the index of the largest value of each row of logits [rows, vocab] (float32) into out (int32),
// the first on ties, as sample.Argmax.
func (d *Device) ArgmaxOn(out, logits Buffer, rows, vocab int) error {
	if err := checkAlign("Argmax", 4, ptr{"out", addr(out)}, ptr{"logits", addr(logits)}); err != nil {
		return err
	}
	return d.launch("argmax_f32", dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, logits, vocab)
}
