package kerneltest

// The float32 signatures that an implementation provides, one a kernel, with the semantics and layouts of the
// float64 functions of the same name in kernels/ref. An implementation passes its functions (or method values)
// to the suite: kerneltest.TestGEMM(t, cpu.GEMM).
type (
	GEMMFunc            func(m, n, k int, a, w, c []float32)
	RMSNormFunc         func(out, x, weight []float32, dim int, eps float32)
	AddRMSNormFunc      func(out, residual, x, weight []float32, dim int, eps float32)
	RoPEFunc            func(x []float32, pos []int32, nHeads, headDim int, theta float32)
	SwiGLUFunc          func(out, gate, up []float32)
	SoftmaxFunc         func(x []float32, rows, cols int)
	CausalAttentionFunc func(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32)
	KVAppendFunc        func(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int)
	PagedAttentionFunc  func(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32)
)
