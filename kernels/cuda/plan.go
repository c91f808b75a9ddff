package cuda

import (
	"fmt"

	"github.com/morphlab/morphlab/kernels/half"
)

// This file holds what the launchers decide before any CUDA call: which kernel takes a call, its grid, the split
// of k or of the keys, and whether the pointers are aligned for the kernel's loads. It has no build tag, so its
// tests run on any machine.

// DType is the storage type of a kernel's float tensors; arithmetic is float32 whatever it is.
type DType int

const (
	F32 DType = iota
	F16
	BF16
)

func (t DType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// Size is the bytes of one element.
func (t DType) Size() int {
	if t == F32 {
		return 4
	}
	return 2
}

// Round rounds x to the nearest value of type t (ties to even): what a float32 input becomes on its way to a
// kernel of that type, and the InputRounding of that type's conformance tests.
func (t DType) Round(x float32) float32 {
	switch t {
	case F16:
		return half.F16ToF32(half.F32ToF16(x))
	case BF16:
		return half.BF16ToF32(half.F32ToBF16(x))
	}
	return x
}

func (t DType) check(op string) error {
	if t != F32 && t != F16 && t != BF16 {
		return fmt.Errorf("cuda: %s: dtype %v, want f32, f16 or bf16", op, t)
	}
	return nil
}

// dim3 is a grid or block size.
type dim3 struct{ x, y, z int }

// The launch geometry of the .cu files.
const (
	rowThreads = 256 // threads a block of the row kernels
	gemvRows   = 8   // m up to which GEMMs use the dot (GEMV) kernels: weight-bandwidth bound
	dotTM      = 4   // DOT_TM and DOT_WARPS of gemm.cu
	dotWarps   = 4
	tileMN     = 128 // BM = BN of gemm.cu
	tileKBytes = 64  // BKB of gemm.cu: bytes of each row a k-tile
	// minSplitTiles is the fewest k-tiles a split-K part gets, so that a split's main loop amortizes its
	// prologue and its partial's write.
	minSplitTiles = 8
	// pagedMaxHPB is the most warps (query heads) a paged attention block; pagedMinChunk the fewest keys a split.
	pagedMaxHPB   = 16
	pagedMinChunk = 256
	// pagedBlocksPerSM is the paged attention blocks an SM should have to hide memory latency: 4-warp blocks of
	// 64 registers a thread fit 8 to an SM.
	pagedBlocksPerSM = 8
)

func ceil(a, b int) int { return (a + b - 1) / b }

// kernelPlan is one kernel launch worked out from a call's shapes and pointers.
type kernelPlan struct {
	name        string
	grid, block dim3
	// splits and ksplit are the split-K of a tensor-core GEMM: k-tiles in parts of ksplit, splits parts (1: the
	// kernel writes c itself; more: partials into a workspace, then splitk_reduce). ksplit is 0 for the other
	// kernels, which take no such argument.
	splits, ksplit int
}

// workspaceBytes is the split-K workspace a tensor-core GEMM plan needs for an m x n result of 4-byte elements.
func (p kernelPlan) workspaceBytes(m, n int) int64 {
	if p.splits <= 1 {
		return 0
	}
	return int64(p.splits) * int64(m) * int64(n) * 4
}

// ptr is a device address with the name of the argument it is, for the alignment errors.
type ptr struct {
	name string
	addr uintptr
}

// checkAlign returns an error naming the first of ps that is not a multiple of align bytes.
func checkAlign(op string, align int, ps ...ptr) error {
	for _, p := range ps {
		if p.addr%uintptr(align) != 0 {
			return fmt.Errorf("cuda: %s: %s at %#x is not %d-byte aligned", op, p.name, p.addr, align)
		}
	}
	return nil
}

func aligned16(ps ...ptr) bool { return checkAlign("", 16, ps...) == nil }

// tilePlan is the launch of a tensor-core kernel over an m x n result with rows of kbytes bytes. When the block
// tiles do not fill the sms SMs (decode batches: m <= 128 is one row of tiles), k is split so that they do, each
// part at least minSplitTiles k-tiles.
func tilePlan(name string, m, n, kbytes, sms int) kernelPlan {
	tiles := ceil(m, tileMN) * ceil(n, tileMN)
	nk := ceil(kbytes, tileKBytes)
	splits := 1
	if tiles < sms {
		splits = max(1, min(ceil(sms, tiles), nk/minSplitTiles))
	}
	ksplit := ceil(nk, splits)
	splits = ceil(nk, ksplit)
	return kernelPlan{name: name, grid: dim3{ceil(n, tileMN), ceil(m, tileMN), splits}, block: dim3{256, 1, 1},
		splits: splits, ksplit: ksplit}
}

// dotPlan is the launch of a dot (GEMV) kernel: one warp an output column for dotTM tokens.
func dotPlan(name string, m, n int) kernelPlan {
	return kernelPlan{name: name, grid: dim3{ceil(n, dotWarps), ceil(m, dotTM), 1}, block: dim3{32 * dotWarps, 1, 1},
		splits: 1}
}

// vec names the vectorized dot kernel when ok (its shape and alignment hold).
func vec(name string, ok bool) string {
	if ok {
		return name + "_vec"
	}
	return name
}

// planGEMM picks the kernel of c = a·wᵀ (a [m,k], w [n,k] of type t, c float32): tensor cores for 16-bit t
// when m > gemvRows, k % 8 == 0 and a and w are 16-byte aligned; otherwise the dot kernels, vectorized when
// k % 8 == 0 and the same alignment holds.
func planGEMM(t DType, m, n, k, sms int, a, w, c uintptr) (kernelPlan, error) {
	if err := t.check("GEMM"); err != nil {
		return kernelPlan{}, err
	}
	pa, pw := ptr{"a", a}, ptr{"w", w}
	if err := checkAlign("GEMM", t.Size(), pa, pw); err != nil {
		return kernelPlan{}, err
	}
	if err := checkAlign("GEMM", 4, ptr{"c", c}); err != nil {
		return kernelPlan{}, err
	}
	v := t != F32 && k%8 == 0 && aligned16(pa, pw)
	if v && m > gemvRows {
		return tilePlan("gemm_"+t.String(), m, n, 2*k, sms), nil
	}
	return dotPlan(vec("dot_"+t.String(), v), m, n), nil
}

// planInt8 picks the kernel of an int8 x int8 GEMM, name "w8a8" (float32 scales sa [m], sw [n]; scales may be
// 0) or "s8s32" (int32 output): tensor cores when m > gemvRows, k % 16 == 0 and qa, qw are 16-byte aligned, the
// dp4a dot kernels otherwise.
func planInt8(name string, m, n, k, sms int, qa, qw, c uintptr, scales ...ptr) (kernelPlan, error) {
	op := "GEMM" + map[string]string{"w8a8": "W8A8", "s8s32": "Int8"}[name]
	if err := checkAlign(op, 4, append([]ptr{{"c", c}}, scales...)...); err != nil {
		return kernelPlan{}, err
	}
	v := k%16 == 0 && aligned16(ptr{"qa", qa}, ptr{"qw", qw})
	if v && m > gemvRows {
		return tilePlan("gemm_"+name, m, n, k, sms), nil
	}
	return dotPlan(vec("dot_"+name, v), m, n), nil
}

// planW8A16 picks the kernel of c = sw[j]·Σ a·q with activations of type act: tensor cores for 16-bit act when
// m > gemvRows, k % 16 == 0 and a, w are 16-byte aligned; the dot kernels otherwise.
func planW8A16(act DType, m, n, k, sms int, a, w, sw, c uintptr) (kernelPlan, error) {
	if err := act.check("GEMMW8A16"); err != nil {
		return kernelPlan{}, err
	}
	pa, pw := ptr{"a", a}, ptr{"w", w}
	if err := checkAlign("GEMMW8A16", act.Size(), pa); err != nil {
		return kernelPlan{}, err
	}
	if err := checkAlign("GEMMW8A16", 4, ptr{"sw", sw}, ptr{"c", c}); err != nil {
		return kernelPlan{}, err
	}
	v := k%16 == 0 && aligned16(pa, pw)
	if v && act != F32 && m > gemvRows {
		return tilePlan("gemm_w8a16_"+act.String(), m, n, 2*k, sms), nil
	}
	return dotPlan(vec("dot_w8a16_"+act.String(), v), m, n), nil
}

// planW4A16 picks the kernel of c = Σ a·(q - z)·s with activations of type act: tensor cores for 16-bit act when
// m > gemvRows, k % 16 == 0, group % 16 == 0 and a, w are 16-byte aligned; the dot kernels otherwise, vectorized
// when k % 32 == 0 and group % 32 == 0 (a lane's 32 weights share a group).
func planW4A16(act DType, m, n, k, group, sms int, a, w, s, c uintptr) (kernelPlan, error) {
	if err := act.check("GEMMW4A16"); err != nil {
		return kernelPlan{}, err
	}
	pa, pw := ptr{"a", a}, ptr{"w", w}
	if err := checkAlign("GEMMW4A16", act.Size(), pa); err != nil {
		return kernelPlan{}, err
	}
	if err := checkAlign("GEMMW4A16", 4, ptr{"s", s}, ptr{"c", c}); err != nil {
		return kernelPlan{}, err
	}
	al := aligned16(pa, pw)
	if act != F32 && m > gemvRows && k%16 == 0 && group%16 == 0 && al {
		return tilePlan("gemm_w4a16_"+act.String(), m, n, 2*k, sms), nil
	}
	return dotPlan(vec("dot_w4a16_"+act.String(), k%32 == 0 && group%32 == 0 && al), m, n), nil
}

// checkRows checks the pointers of a row or elementwise kernel of type t: each aligned to its element.
func checkRows(op string, t DType, ps ...ptr) error {
	if err := t.check(op); err != nil {
		return err
	}
	return checkAlign(op, t.Size(), ps...)
}

// pagedVec is the elements of t in the 16 bytes a lane of paged attention loads (PA_VEC of attention.cu).
func pagedVec(t DType) int { return 16 / t.Size() }

// headsPerBlock is the warps (query heads) a block of paged_attention: the largest divisor of the GQA ratio up
// to pagedMaxHPB, so that one block's heads share a KV head.
func headsPerBlock(nHeads, nKVHeads int) int {
	r := nHeads / nKVHeads
	for h := min(r, pagedMaxHPB); ; h-- {
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

// PlanPaged is the split-KV plan of a paged attention call on a GPU of sms SMs: the keys split so that the grid
// has about pagedBlocksPerSM blocks an SM, with at least pagedMinChunk keys a split.
func PlanPaged(sms, rows, nHeads, nKVHeads, headDim, maxSeqLen int) PagedPlan {
	blocks := rows * nHeads / headsPerBlock(nHeads, nKVHeads)
	splits := max(1, min(ceil(pagedBlocksPerSM*sms, blocks), ceil(maxSeqLen, pagedMinChunk)))
	chunk := ceil(ceil(maxSeqLen, splits), 32) * 32
	splits = ceil(maxSeqLen, chunk)
	p := PagedPlan{Splits: splits, Chunk: chunk}
	if splits > 1 {
		p.WorkspaceBytes = int64(rows*nHeads*splits) * int64(headDim+1) * 4
	}
	return p
}

// checkPaged checks what paged_attention needs of a call: a head dimension that lanes of 16-byte loads split
// (a multiple of 16/size, at most 32 lanes), 16-byte aligned q, caches and output, and a workspace for the plan.
func checkPaged(t DType, plan PagedPlan, headDim int, q, kc, vc, out, ws uintptr, wsBytes int64) error {
	const op = "PagedAttention"
	if err := t.check(op); err != nil {
		return err
	}
	v := pagedVec(t)
	if headDim%v != 0 || headDim > 32*v {
		return fmt.Errorf("cuda: %s: headDim=%d for %v, want a multiple of %d up to %d", op, headDim, t, v, 32*v)
	}
	if err := checkAlign(op, 16, ptr{"q", q}, ptr{"kCache", kc}, ptr{"vCache", vc}, ptr{"out", out}); err != nil {
		return err
	}
	if plan.Splits > 1 {
		if err := checkAlign(op, 16, ptr{"workspace", ws}); err != nil {
			return err
		}
		if wsBytes < plan.WorkspaceBytes {
			return fmt.Errorf("cuda: %s: workspace of %d bytes, want %d for %d splits", op, wsBytes,
				plan.WorkspaceBytes, plan.Splits)
		}
	}
	return nil
}

// FlashPrefillOK reports whether FlashPrefillOn has a kernel for t and headDim.
func FlashPrefillOK(t DType, headDim int) bool {
	return (t == F16 || t == BF16) && (headDim == 64 || headDim == 128)
}

// checkFlash checks what flash_prefill needs: a kernel for t and headDim, and q, k, v 16-byte aligned
// (cp.async) with out aligned to its elements.
func checkFlash(t DType, headDim int, q, k, v, out uintptr) error {
	const op = "FlashPrefill"
	if !FlashPrefillOK(t, headDim) {
		return fmt.Errorf("cuda: %s: dtype %v headDim %d, want f16 or bf16 and 64 or 128", op, t, headDim)
	}
	if err := checkAlign(op, 16, ptr{"q", q}, ptr{"k", k}, ptr{"v", v}); err != nil {
		return err
	}
	return checkAlign(op, t.Size(), ptr{"out", out})
}
