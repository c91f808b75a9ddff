//go:build cuda

package executor

import (
	"time"
	"unsafe"

	"github.com/morphlab/morphlab/engine/model"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
	"gorgonia.org/cu"
)

// NewCUDA returns an executor over m on GPU d, whose layers' formats (f32, f16 or bf16, all the same) are its
// full precision, with opt's budget (see CUDA). It copies what it needs: m may be dropped after. Close frees the
// device and pinned memory.
func NewCUDA(d *kcuda.Device, m *model.Model, opt CUDAOptions) (*CUDA, error) {
	return newCUDA(&cudaGPU{d: d}, m, opt)
}

// cudaGPU runs the executor's device calls on a kernels/cuda Device: kernels on the default stream, swap copies
// on a non-blocking side stream (made at the first copy) that waits for the default stream's work enqueued before
// it.
type cudaGPU struct {
	d     *kcuda.Device
	side  cu.Stream
	fence cu.Event
	ready bool // side and fence are made
}

func buf(p devPtr) kcuda.Buffer { return kcuda.Buffer{Ptr: cu.DevicePtr(p)} }

func (g *cudaGPU) Do(f func() error) error { return g.d.Do(f) }

func (g *cudaGPU) Close() {
	if g.ready {
		_ = g.side.Destroy()
		_ = cu.DestroyEvent(&g.fence)
	}
}
func (g *cudaGPU) SMs() int { return g.d.SMs }

func (g *cudaGPU) Alloc(bytes int64) (devPtr, error) {
	b, err := kcuda.Alloc(bytes)
	return devPtr(b.Ptr), err
}

func (g *cudaGPU) Free(p devPtr) { buf(p).Free() }

func (g *cudaGPU) AllocPinned(bytes int64) ([]byte, error) { return kcuda.AllocPinned(bytes) }
func (g *cudaGPU) FreePinned(b []byte)                     { kcuda.FreePinned(b) }

func (g *cudaGPU) Upload(dst devPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return cu.MemcpyHtoD(cu.DevicePtr(dst), unsafe.Pointer(&src[0]), int64(len(src)))
}

func (g *cudaGPU) Download(dst []byte, src devPtr) error {
	if len(dst) == 0 {
		return nil
	}
	return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), cu.DevicePtr(src), int64(len(dst)))
}

func (g *cudaGPU) Move(dst, src devPtr, n int64) error {
	return cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), n, cu.Stream{})
}

// Copy records the default stream's progress, makes the side stream wait for it, and enqueues the parts there
// between two timing events.
func (g *cudaGPU) Copy(parts []hostPart) (copyJob, error) {
	if !g.ready {
		var err error
		if g.side, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return nil, err
		}
		if g.fence, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			_ = g.side.Destroy()
			return nil, err
		}
		g.ready = true
	}
	j := &cudaCopy{}
	var err error
	if j.start, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return nil, err
	}
	if j.end, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		_ = cu.DestroyEvent(&j.start)
		return nil, err
	}
	err = g.fence.Record(cu.Stream{})
	if err == nil {
		err = g.side.Wait(g.fence, 0)
	}
	if err == nil {
		err = j.start.Record(g.side)
	}
	for _, p := range parts {
		if err == nil && len(p.src) > 0 {
			err = cu.MemcpyHtoDAsync(cu.DevicePtr(p.dst), unsafe.Pointer(&p.src[0]), int64(len(p.src)), g.side)
		}
	}
	if err == nil {
		err = j.end.Record(g.side)
	}
	if err != nil {
		j.Release()
		return nil, err
	}
	return j, nil
}

// cudaCopy is a copy on the side stream between two events.
type cudaCopy struct{ start, end cu.Event }

func (j *cudaCopy) Done() bool  { return j.end.Query() == nil }
func (j *cudaCopy) Wait() error { return j.end.Synchronize() }

func (j *cudaCopy) Elapsed() time.Duration {
	ms, err := j.start.Elapsed(j.end)
	if err != nil {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (j *cudaCopy) Release() {
	_ = cu.DestroyEvent(&j.start)
	_ = cu.DestroyEvent(&j.end)
}

func (g *cudaGPU) GatherRows(t kcuda.DType, out, table, idx devPtr, rows, dim int) error {
	return g.d.GatherRowsOn(t, buf(out), buf(table), buf(idx), rows, dim)
}

func (g *cudaGPU) Cast(t kcuda.DType, out, in devPtr, n int) error {
	return g.d.CastOn(t, buf(out), buf(in), n)
}

func (g *cudaGPU) QuantizeRows(t kcuda.DType, q, s, x devPtr, rows, k int) error {
	return g.d.QuantizeRowsOn(t, buf(q), buf(s), buf(x), rows, k)
}

func (g *cudaGPU) Argmax(out, logits devPtr, rows, vocab int) error {
	return g.d.ArgmaxOn(buf(out), buf(logits), rows, vocab)
}

func (g *cudaGPU) RMSNorm(t kcuda.DType, out, x, w devPtr, rows, dim int, eps float32) error {
	return g.d.RMSNormOn(t, buf(out), buf(x), buf(w), rows, dim, eps)
}

func (g *cudaGPU) AddRMSNorm(t kcuda.DType, out, residual, x, w devPtr, rows, dim int, eps float32) error {
	return g.d.AddRMSNormOn(t, buf(out), buf(residual), buf(x), buf(w), rows, dim, eps)
}

func (g *cudaGPU) RoPE(t kcuda.DType, x, pos devPtr, tokens, nHeads, headDim int, theta float32) error {
	return g.d.RoPEOn(t, buf(x), buf(pos), tokens, nHeads, headDim, theta)
}

func (g *cudaGPU) SwiGLU(t kcuda.DType, out, gate, up devPtr, n int) error {
	return g.d.SwiGLUOn(t, buf(out), buf(gate), buf(up), n)
}

func (g *cudaGPU) KVAppend(t kcuda.DType, kc, vc, k, v, slots devPtr, tokens, rowLen int) error {
	return g.d.KVAppendOn(t, buf(kc), buf(vc), buf(k), buf(v), buf(slots), tokens, rowLen)
}

func (g *cudaGPU) PagedAttention(t kcuda.DType, plan kcuda.PagedPlan, ws devPtr, wsBytes int64, out, q, kc, vc, qStart, seqLens, tables devPtr,
	rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) error {
	return g.d.PagedAttentionOn(t, plan, kcuda.Buffer{Ptr: cu.DevicePtr(ws), Bytes: wsBytes}, buf(out), buf(q), buf(kc), buf(vc),
		buf(qStart), buf(seqLens), buf(tables), rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim, scale)
}

func (g *cudaGPU) FlashPrefill(t kcuda.DType, out, q, k, v devPtr, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) error {
	return g.d.FlashPrefillOn(t, buf(out), buf(q), buf(k), buf(v), nq, kvLen, nHeads, nKVHeads, headDim, scale)
}

func (g *cudaGPU) GEMM(t kcuda.DType, m, n, k int, a, w, c devPtr) error {
	return g.d.GEMMOn(t, m, n, k, buf(a), buf(w), buf(c))
}

func (g *cudaGPU) GEMMW8A8(m, n, k int, qa, sa, qw, sw, c devPtr) error {
	return g.d.GEMMW8A8On(m, n, k, buf(qa), buf(sa), buf(qw), buf(sw), buf(c))
}

func (g *cudaGPU) GEMMW4A16(t kcuda.DType, m, n, k, group int, a, w, s, z, c devPtr) error {
	return g.d.GEMMW4A16On(t, m, n, k, group, buf(a), buf(w), buf(s), buf(z), buf(c))
}
