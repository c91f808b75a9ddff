package executor

import (
	"time"

	kcuda "github.com/morphlab/morphlab/kernels/cuda"
)

// devPtr is a device address.
type devPtr uint64

// gpu is what the CUDA executor asks of a device: memory, copies and the kernels of kernels/cuda, each kernel
// enqueued on the device's default stream in call order. NewCUDA (-tags cuda) runs it on a GPU; the tests run it
// on an emulation over the CPU kernels, so that the executor's layout, swaps and step are checked without one.
type gpu interface {
	// Do runs f where the device's calls are valid (the goroutine that owns its context).
	Do(f func() error) error
	// Close frees what the executor's use of the device holds (not the device). It runs inside Do.
	Close()
	SMs() int
	Alloc(bytes int64) (devPtr, error)
	Free(p devPtr)
	// AllocPinned returns page-locked host memory, which copies on a side stream read while kernels run.
	AllocPinned(bytes int64) ([]byte, error)
	FreePinned(b []byte)
	// Upload and Download copy synchronously, after the default stream's work.
	Upload(dst devPtr, src []byte) error
	Download(dst []byte, src devPtr) error
	// Move copies n bytes device to device on the default stream.
	Move(dst, src devPtr, n int64) error
	// Copy starts copying host parts to the device on a side stream, after the default stream's work enqueued
	// so far, and returns at once.
	Copy(parts []hostPart) (copyJob, error)

	GatherRows(t kcuda.DType, out, table, idx devPtr, rows, dim int) error
	Cast(t kcuda.DType, out, in devPtr, n int) error
	QuantizeRows(t kcuda.DType, q, s, x devPtr, rows, k int) error
	Argmax(out, logits devPtr, rows, vocab int) error
	RMSNorm(t kcuda.DType, out, x, w devPtr, rows, dim int, eps float32) error
	AddRMSNorm(t kcuda.DType, out, residual, x, w devPtr, rows, dim int, eps float32) error
	RoPE(t kcuda.DType, x, pos devPtr, tokens, nHeads, headDim int, theta float32) error
	SwiGLU(t kcuda.DType, out, gate, up devPtr, n int) error
	KVAppend(t kcuda.DType, kc, vc, k, v, slots devPtr, tokens, rowLen int) error
	PagedAttention(t kcuda.DType, plan kcuda.PagedPlan, ws devPtr, wsBytes int64, out, q, kc, vc, qStart, seqLens, tables devPtr,
		rows, nSeqs, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) error
	FlashPrefill(t kcuda.DType, out, q, k, v devPtr, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) error
	GEMM(t kcuda.DType, m, n, k int, a, w, c devPtr) error
	GEMMW8A8(m, n, k int, qa, sa, qw, sw, c devPtr) error
	GEMMW4A16(t kcuda.DType, m, n, k, group int, a, w, s, z, c devPtr) error
}

// hostPart is a host-to-device copy of src to dst.
type hostPart struct {
	dst devPtr
	src []byte
}

// copyJob is a copy on a side stream. Its methods run inside gpu.Do.
type copyJob interface {
	// Done reports, without waiting, whether the copy has completed.
	Done() bool
	// Wait waits for it to complete.
	Wait() error
	// Elapsed is how long the copy took on the device, once complete.
	Elapsed() time.Duration
	// Release frees what the job holds.
	Release()
}
