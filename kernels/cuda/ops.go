//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"
)

// DType is the storage type of a kernel's float tensors; arithmetic is float32 whatever it is.
type DType int

const (
	F32 DType = iota
	F16
	BF16
)

func (t DType) String() string { return [...]string{"f32", "f16", "bf16"}[t] }

// Size is the bytes of one element.
func (t DType) Size() int { return [...]int{4, 2, 2}[t] }

// The launchers below take device buffers and enqueue kernels on the default stream without waiting; they must
// run inside Device.Do. Sizes are not checked here: the host-slice wrappers check them (kernels/internal/shape)
// before any launch.

const (
	rowThreads = 256 // threads a block of the row kernels
	gemvRows   = 8   // m up to which GEMMs use the dot (GEMV) kernels: weight-bandwidth bound
	dotTM      = 4   // DOT_TM and DOT_WARPS of gemm.cu
	dotWarps   = 4
	tileMN     = 128 // BM = BN of gemm.cu
)

func ceil(a, b int) int { return (a + b - 1) / b }

// RMSNormOn: out = RMSNorm(x) ⊙ weight over rows of dim.
func (d *Device) RMSNormOn(t DType, out, x, weight Buffer, rows, dim int, eps float32) error {
	return d.launch("rmsnorm_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, x, weight, dim, eps)
}

// AddRMSNormOn: residual += x, out = RMSNorm(residual) ⊙ weight.
func (d *Device) AddRMSNormOn(t DType, out, residual, x, weight Buffer, rows, dim int, eps float32) error {
	return d.launch("add_rmsnorm_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, out, residual, x, weight,
		dim, eps)
}

// RoPEOn rotates x [tokens, nHeads*headDim] in place by the int32 positions pos.
func (d *Device) RoPEOn(t DType, x, pos Buffer, tokens, nHeads, headDim int, theta float32) error {
	return d.launch("rope_"+t.String(), dim3{tokens, 1, 1}, dim3{rowThreads, 1, 1}, x, pos, nHeads, headDim, theta)
}

// SwiGLUOn: out = silu(gate)·up over n elements.
func (d *Device) SwiGLUOn(t DType, out, gate, up Buffer, n int) error {
	return d.launch("swiglu_"+t.String(), dim3{min(ceil(n, rowThreads), d.SMs*32), 1, 1}, dim3{rowThreads, 1, 1},
		out, gate, up, n)
}

// SoftmaxOn replaces each row of x [rows, cols] by its softmax.
func (d *Device) SoftmaxOn(t DType, x Buffer, rows, cols int) error {
	return d.launch("softmax_"+t.String(), dim3{rows, 1, 1}, dim3{rowThreads, 1, 1}, x, cols)
}

func dotGrid(m, n int) (dim3, dim3) {
	return dim3{ceil(n, dotWarps), ceil(m, dotTM), 1}, dim3{32 * dotWarps, 1, 1}
}

func tileGrid(m, n int) (dim3, dim3) {
	return dim3{ceil(n, tileMN), ceil(m, tileMN), 1}, dim3{256, 1, 1}
}

// vec names the vectorized dot kernel when ok (its alignment holds).
func vec(name string, ok bool) string {
	if ok {
		return name + "_vec"
	}
	return name
}

// GEMMOn: c = a·wᵀ with a [m,k], w [n,k] of type t and c [m,n] float32. F16 and BF16 run on tensor cores when
// k % 8 == 0 and m > 8; F32, decode-sized m and other k use the dot kernels.
func (d *Device) GEMMOn(t DType, m, n, k int, a, w, c Buffer) error {
	if t != F32 && m > gemvRows && k%8 == 0 {
		g, b := tileGrid(m, n)
		return d.launch("gemm_"+t.String(), g, b, m, n, k, a, w, c)
	}
	g, b := dotGrid(m, n)
	return d.launch(vec("dot_"+t.String(), t != F32 && k%8 == 0), g, b, m, n, k, a, w, c)
}

// GEMMW8A8On: c = sa[i]·sw[j]·Σ qa·qw with int8 qa [m,k], qw [n,k] and float32 scales. Tensor cores (mma.sync
// s8) when k % 16 == 0 and m > 8, dp4a dot kernels otherwise.
func (d *Device) GEMMW8A8On(m, n, k int, qa, sa, qw, sw, c Buffer) error {
	if m > gemvRows && k%16 == 0 {
		g, b := tileGrid(m, n)
		return d.launch("gemm_w8a8", g, b, m, n, k, qa, sa, qw, sw, c)
	}
	g, b := dotGrid(m, n)
	return d.launch(vec("dot_w8a8", k%16 == 0), g, b, m, n, k, qa, sa, qw, sw, c)
}

// GEMMInt8On: c = Σ a·w as int32, a [m,k] and w [n,k] int8.
func (d *Device) GEMMInt8On(m, n, k int, a, w, c Buffer) error {
	if m > gemvRows && k%16 == 0 {
		g, b := tileGrid(m, n)
		return d.launch("gemm_s8s32", g, b, m, n, k, a, w, c)
	}
	g, b := dotGrid(m, n)
	return d.launch(vec("dot_s8s32", k%16 == 0), g, b, m, n, k, a, w, c)
}

// GEMMW8A16On: c = sw[j]·Σ a·q with activations a [m,k] of type act (F16 or F32), int8 weights q [n,k] and a
// float32 scale a row. F16 activations with m > 8 and k % 16 == 0 run on tensor cores.
func (d *Device) GEMMW8A16On(act DType, m, n, k int, a, w, sw, c Buffer) error {
	if act == F16 && m > gemvRows && k%16 == 0 {
		g, b := tileGrid(m, n)
		return d.launch("gemm_w8a16", g, b, m, n, k, a, w, sw, c)
	}
	g, b := dotGrid(m, n)
	return d.launch(vec("dot_w8a16_"+act.String(), k%16 == 0), g, b, m, n, k, a, w, sw, c)
}

// GEMMW4A16On: c = Σ a·(q - z)·s with activations a [m,k] of type act (F16 or F32), packed 4-bit weights w
// [n,k/2] and float32 scales s and uint8 zero points z [n,k/group]. F16 activations with m > 8, k % 16 == 0 and
// group % 16 == 0 run on tensor cores.
func (d *Device) GEMMW4A16On(act DType, m, n, k, group int, a, w, s, z, c Buffer) error {
	if act == F16 && m > gemvRows && k%16 == 0 && group%16 == 0 {
		g, b := tileGrid(m, n)
		return d.launch("gemm_w4a16", g, b, m, n, k, group, a, w, s, z, c)
	}
	g, b := dotGrid(m, n)
	return d.launch(vec("dot_w4a16_"+act.String(), k%32 == 0 && group%32 == 0), g, b, m, n, k, group, a, w, s, z, c)
}

// KVAppendOn writes the k and v rows [tokens, nKVHeads*headDim] into the caches at the int32 slots (negative:
// skipped).
func (d *Device) KVAppendOn(t DType, kc, vc, k, v, slots Buffer, tokens, rowLen int) error {
	return d.launch("kv_append_"+t.String(), dim3{tokens, 1, 1}, dim3{rowThreads, 1, 1}, kc, vc, k, v, slots, rowLen)
}

// maxHeadDim is PA_MAX_HD of attention.cu.
const maxHeadDim = 256

// headsPerBlock is the warps (query heads) a block of paged_attention: the largest divisor of the GQA ratio up
// to 16, so that one block's heads share a KV head.
func headsPerBlock(nHeads, nKVHeads int) int {
	r := nHeads / nKVHeads
	for h := min(r, 16); ; h-- {
		if r%h == 0 {
			return h
		}
	}
}

// PagedPlan is the split-KV decomposition of a paged attention call: Splits partial results a (row, head), each
// over Chunk keys, merged by attn_merge; WorkspaceBytes is the float32 workspace they need (0 with one split).
type PagedPlan struct {
	Splits, Chunk  int
	WorkspaceBytes int64
}

// PlanPaged splits the keys so that the grid has about two blocks an SM, with at least 256 keys a split.
func (d *Device) PlanPaged(rows, nHeads, nKVHeads, headDim, maxSeqLen int) PagedPlan {
	blocks := rows * nHeads / headsPerBlock(nHeads, nKVHeads)
	splits := max(1, min(ceil(2*d.SMs, blocks), ceil(maxSeqLen, 256)))
	chunk := ceil(ceil(maxSeqLen, splits), 32) * 32
	splits = ceil(maxSeqLen, chunk)
	p := PagedPlan{Splits: splits, Chunk: chunk}
	if splits > 1 {
		p.WorkspaceBytes = int64(rows*nHeads*splits) * int64(headDim+1) * 4
	}
	return p
}

// PagedAttentionOn is attention over the paged caches for rows query rows of nSeqs sequences (qStart, seqLens
// and blockTables int32 as in ref.PagedAttention), with plan from PlanPaged and ws at least its WorkspaceBytes.
// A zero blockTables Buffer reads kc and vc as contiguous [tokens, nKVHeads*headDim] (prefill).
func (d *Device) PagedAttentionOn(t DType, plan PagedPlan, ws, out, q, kc, vc, qStart, seqLens, blockTables Buffer,
	rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) error {
	if headDim > maxHeadDim {
		return fmt.Errorf("cuda: paged attention: headDim=%d, want <= %d", headDim, maxHeadDim)
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
	if !FlashPrefillOK(t, headDim) {
		return fmt.Errorf("cuda: flash prefill: dtype %v headDim %d, want f16 or bf16 and 64 or 128", t, headDim)
	}
	return d.launch(fmt.Sprintf("flash_prefill_%v_hd%d", t, headDim), dim3{ceil(nq, 64), nHeads, 1},
		dim3{128, 1, 1}, out, q, k, v, nq, kvLen, nHeads, nKVHeads, scale)
}

// FlashPrefillOK reports whether FlashPrefillOn has a kernel for t and headDim.
func FlashPrefillOK(t DType, headDim int) bool { return t != F32 && (headDim == 64 || headDim == 128) }
