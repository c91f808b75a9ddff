package executor

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/kernels/cpu"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"github.com/morphlab/morphlab/kernels/half"
)

// fakeGPU runs the CUDA executor's device calls on the CPU: device memory is Go memory at made-up addresses, a
// kernel is the CPU kernel of the same semantics over its operands read in the storage type (results rounded to
// it), and a side-stream copy is done when it is asked for. Every access is checked against the allocations and
// every pointer against its alignment, so an executor that addresses its arena wrongly fails here as it would
// fault on a GPU.
type fakeGPU struct {
	allocs []fakeAlloc
	next   devPtr
	copies int // copies started, for the tests
}

type fakeAlloc struct {
	base devPtr
	mem  []byte
}

func newFakeGPU() *fakeGPU { return &fakeGPU{next: 1 << 32} }

func (g *fakeGPU) Do(f func() error) error { return f() }
func (g *fakeGPU) Close()                  {}
func (g *fakeGPU) SMs() int                { return 132 }

func (g *fakeGPU) Alloc(bytes int64) (devPtr, error) {
	p := g.next
	g.allocs = append(g.allocs, fakeAlloc{p, make([]byte, bytes)})
	g.next += devPtr(alignUp(bytes, 1<<20) + 1<<20)
	return p, nil
}

func (g *fakeGPU) Free(p devPtr) {
	g.allocs = slices.DeleteFunc(g.allocs, func(a fakeAlloc) bool { return a.base == p })
}

func (g *fakeGPU) AllocPinned(bytes int64) ([]byte, error) { return make([]byte, bytes), nil }
func (g *fakeGPU) FreePinned([]byte)                       {}

// mem is the n bytes at p; it panics, as a GPU would fault, outside every allocation.
func (g *fakeGPU) mem(p devPtr, n int64) []byte {
	for _, a := range g.allocs {
		if p >= a.base && int64(p-a.base)+n <= int64(len(a.mem)) {
			return a.mem[p-a.base:][:n]
		}
	}
	panic(fmt.Sprintf("fake GPU: %d bytes at %#x are outside every allocation", n, uint64(p)))
}

func (g *fakeGPU) Upload(dst devPtr, src []byte) error {
	copy(g.mem(dst, int64(len(src))), src)
	return nil
}

func (g *fakeGPU) Download(dst []byte, src devPtr) error {
	copy(dst, g.mem(src, int64(len(dst))))
	return nil
}

func (g *fakeGPU) Move(dst, src devPtr, n int64) error {
	copy(g.mem(dst, n), g.mem(src, n))
	return nil
}

func (g *fakeGPU) Copy(parts []hostPart) (copyJob, error) {
	for _, p := range parts {
		copy(g.mem(p.dst, int64(len(p.src))), p.src)
	}
	g.copies++
	return fakeCopy{}, nil
}

type fakeCopy struct{}

func (fakeCopy) Done() bool             { return true }
func (fakeCopy) Wait() error            { return nil }
func (fakeCopy) Elapsed() time.Duration { return time.Microsecond }
func (fakeCopy) Release()               {}

// aligned fails for the first pointer not a multiple of align bytes, as the launchers' plans do.
func aligned(op string, align int, ps ...devPtr) error {
	for i, p := range ps {
		if uint64(p)%uint64(align) != 0 {
			return fmt.Errorf("fake GPU: %s: pointer %d at %#x is not %d-byte aligned", op, i, uint64(p), align)
		}
	}
	return nil
}

// get reads n elements of storage type t at p as float32.
func (g *fakeGPU) get(t kcuda.DType, p devPtr, n int) []float32 {
	out := make([]float32, n)
	if n == 0 {
		return out
	}
	b := g.mem(p, int64(n*t.Size()))
	switch t {
	case kcuda.F16:
		half.F16ToF32Slice(out, unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n))
	case kcuda.BF16:
		half.BF16ToF32Slice(out, unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n))
	default:
		copy(out, unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n))
	}
	return out
}

// put writes x at p in storage type t, rounding to nearest even.
func (g *fakeGPU) put(t kcuda.DType, p devPtr, x []float32) {
	copy(g.mem(p, int64(len(x)*t.Size())), storage(t, x))
}

func (g *fakeGPU) ints(p devPtr, n int) []int32 {
	out := make([]int32, n)
	copy(bytesOf(out), g.mem(p, int64(4*n)))
	return out
}

func (g *fakeGPU) GatherRows(t kcuda.DType, out, table, idx devPtr, rows, dim int) error {
	if err := aligned("GatherRows", t.Size(), out, table); err != nil {
		return err
	}
	row := int64(dim * t.Size())
	for r, i := range g.ints(idx, rows) {
		copy(g.mem(out+devPtr(int64(r)*row), row), g.mem(table+devPtr(int64(i)*row), row))
	}
	return nil
}

func (g *fakeGPU) Cast(t kcuda.DType, out, in devPtr, n int) error {
	g.put(t, out, g.get(kcuda.F32, in, n))
	return aligned("Cast", 4, in)
}

func (g *fakeGPU) QuantizeRows(t kcuda.DType, q, s, x devPtr, rows, k int) error {
	qs, ss := make([]int8, rows*k), make([]float32, rows)
	cpu.QuantizeRowsInt8(rows, k, g.get(t, x, rows*k), qs, ss)
	copy(g.mem(q, int64(rows*k)), bytesOf(qs))
	copy(g.mem(s, int64(4*rows)), bytesOf(ss))
	return aligned("QuantizeRows", 4, s)
}

func (g *fakeGPU) Argmax(out, logits devPtr, rows, vocab int) error {
	l := g.get(kcuda.F32, logits, rows*vocab)
	idx := make([]int32, rows)
	for r := range idx {
		idx[r] = int32(sample.Argmax(l[r*vocab : (r+1)*vocab]))
	}
	copy(g.mem(out, int64(4*rows)), bytesOf(idx))
	return nil
}

func (g *fakeGPU) RMSNorm(t kcuda.DType, out, x, w devPtr, rows, dim int, eps float32) error {
	o := make([]float32, rows*dim)
	cpu.RMSNorm(o, g.get(t, x, rows*dim), g.get(t, w, dim), dim, eps)
	g.put(t, out, o)
	return aligned("RMSNorm", t.Size(), out, x, w)
}

func (g *fakeGPU) AddRMSNorm(t kcuda.DType, out, residual, x, w devPtr, rows, dim int, eps float32) error {
	r, d := g.get(t, residual, rows*dim), g.get(t, x, rows*dim)
	for i := range r {
		r[i] = t.Round(r[i] + d[i])
	}
	g.put(t, residual, r)
	return g.RMSNorm(t, out, residual, w, rows, dim, eps)
}

func (g *fakeGPU) RoPE(t kcuda.DType, x, pos devPtr, tokens, nHeads, headDim int, theta float32) error {
	xs := g.get(t, x, tokens*nHeads*headDim)
	cpu.RoPE(xs, g.ints(pos, tokens), nHeads, headDim, theta)
	g.put(t, x, xs)
	return aligned("RoPE", 4, pos)
}

func (g *fakeGPU) SwiGLU(t kcuda.DType, out, gate, up devPtr, n int) error {
	o := make([]float32, n)
	cpu.SwiGLU(o, g.get(t, gate, n), g.get(t, up, n))
	g.put(t, out, o)
	return nil
}

func (g *fakeGPU) KVAppend(t kcuda.DType, kc, vc, k, v, slots devPtr, tokens, rowLen int) error {
	row := int64(rowLen * t.Size())
	for i, s := range g.ints(slots, tokens) {
		if s >= 0 {
			copy(g.mem(kc+devPtr(int64(s)*row), row), g.mem(k+devPtr(int64(i)*row), row))
			copy(g.mem(vc+devPtr(int64(s)*row), row), g.mem(v+devPtr(int64(i)*row), row))
		}
	}
	return aligned("KVAppend", 16, kc, vc, k, v)
}

func (g *fakeGPU) PagedAttention(t kcuda.DType, plan kcuda.PagedPlan, ws devPtr, wsBytes int64, out, q, kc, vc, qStart, seqLens, tables devPtr,
	rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) error {
	if wsBytes < plan.WorkspaceBytes {
		return fmt.Errorf("fake GPU: paged attention: workspace of %d bytes, the plan needs %d", wsBytes, plan.WorkspaceBytes)
	}
	if plan.WorkspaceBytes > 0 {
		g.mem(ws, plan.WorkspaceBytes)
	}
	tb := g.ints(tables, nSeqs*maxBlocksPerSeq)
	span := (int(slices.Max(tb)) + 1) * blockSize * nKVHeads * headDim
	o := make([]float32, rows*nHeads*headDim)
	cpu.PagedAttention(o, g.get(t, q, rows*nHeads*headDim), g.get(t, kc, span), g.get(t, vc, span), g.ints(qStart, nSeqs+1),
		g.ints(seqLens, nSeqs), tb, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim, scale)
	g.put(t, out, o)
	return aligned("PagedAttention", 16, out, q, kc, vc, ws)
}

func (g *fakeGPU) FlashPrefill(t kcuda.DType, out, q, k, v devPtr, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) error {
	if !kcuda.FlashPrefillOK(t, headDim) {
		return fmt.Errorf("fake GPU: no flash prefill kernel for %v at head dim %d", t, headDim)
	}
	o := make([]float32, nq*nHeads*headDim)
	cpu.CausalAttention(o, g.get(t, q, nq*nHeads*headDim), g.get(t, k, kvLen*nKVHeads*headDim), g.get(t, v, kvLen*nKVHeads*headDim),
		nq, kvLen, nHeads, nKVHeads, headDim, scale)
	g.put(t, out, o)
	return aligned("FlashPrefill", 16, out, q, k, v)
}

func (g *fakeGPU) GEMM(t kcuda.DType, m, n, k int, a, w, c devPtr) error {
	o := make([]float32, m*n)
	cpu.GEMM(m, n, k, g.get(t, a, m*k), g.get(t, w, n*k), o)
	g.put(kcuda.F32, c, o)
	return aligned("GEMM", 16, a, w, c)
}

func (g *fakeGPU) GEMMW8A8(m, n, k int, qa, sa, qw, sw, c devPtr) error {
	qas, qws := make([]int8, m*k), make([]int8, n*k)
	copy(bytesOf(qas), g.mem(qa, int64(m*k)))
	copy(bytesOf(qws), g.mem(qw, int64(n*k)))
	o := make([]float32, m*n)
	cpu.GEMMW8A8(m, n, k, qas, g.get(kcuda.F32, sa, m), qws, g.get(kcuda.F32, sw, n), o)
	g.put(kcuda.F32, c, o)
	return aligned("GEMMW8A8", 16, qa, qw, c, sa, sw)
}

func (g *fakeGPU) GEMMW4A16(t kcuda.DType, m, n, k, group int, a, w, s, z, c devPtr) error {
	o := make([]float32, m*n)
	cpu.GEMMW4A16(m, n, k, group, g.get(t, a, m*k), g.mem(w, int64(n*k/2)), g.get(kcuda.F32, s, n*k/group),
		g.mem(z, int64(n*k/group)), o)
	g.put(kcuda.F32, c, o)
	return aligned("GEMMW4A16", 16, a, w, c, s)
}

var _ gpu = (*fakeGPU)(nil)
