// Package kerneltest is the conformance suite and benchmark set shared by every implementation of morphlab's
// kernels (kernels/cpu, kernels/cuda): TestX(t, impl) checks an implementation of op X against the float64
// reference in kernels/ref on seeded random inputs over awkward shapes, and BenchmarkX(b, impl, shape) measures it.
//
// # Conformance tests
//
// TestGEMM, TestRMSNorm, TestAddRMSNorm, TestRoPE, TestSwiGLU, TestSoftmax, TestCausalAttention, TestKVAppend and
// TestPagedAttention each run the implementation, one sub-test a shape, on the shapes of the exported tables
// (GEMMShapes, RowsShapes, RoPEShapes, AttentionShapes, KVAppendShapes, PagedShapes): sizes 1, 7, 17, 1025 and
// 5137, KV lengths 54 and 97 (and 1025), page sizes 1, 8 and 16, 8 query heads over 8, 4 and 2 KV heads, prompt
// chunks after a cached prefix, decode and mixed batches over shuffled block tables. Inputs are fresh random
// numbers from fixed seeds (never zero; rows of RMSNorm at scales where eps matters, softmax logits offset beyond
// exp's float32 range); outputs are NaN before the call, so an output never written fails; inputs must come back
// unchanged. A sub-test "bad_sizes" checks that bad sizes panic with the message of kernels/internal/shape.
// Under -short the largest shapes are skipped.
//
// The comparison is the normalized MSE Σ(got-ref)²/Σref² against kernels/ref, and NaN or Inf never passes:
//   - RMSNorm, AddRMSNorm, RoPE, SwiGLU, Softmax: 1e-7 (float32 rounding of a few operations is ~1e-14; the
//     margin admits vectorized exp, rsqrt with a Newton step and float32 angles).
//   - GEMM: 64·k·u² (u = 2^-24), the random-walk growth of float32 rounding over k terms with room for any
//     summation order, at least 1e-12, at most 5e-4.
//   - CausalAttention, PagedAttention: FlashAttention's rule, RMS error at most twice that of a naive float32
//     implementation (scores, softmax and p·v materialized in float32) on the same inputs, floored at a few ulps.
//   - KVAppend: exact; slots not written stay as they were and skipped tokens (slot -1) write nothing.
//
// TestXWith takes Options for an implementation of reduced precision (CUDA with float16 inputs): InputRounding
// rounds every input first, BaselineRounding makes the naive attention baseline round its intermediates the same
// way, ToleranceScale widens the fixed tolerances. TestAll runs every op a Funcs value provides.
//
// # Golden files
//
// testdata/golden/<op>.json hold a few small cases of every op: float32 inputs and float64 reference outputs
// (format in golden.go). TestGolden(t, Funcs{...}) checks an implementation against them without kernels/ref, as
// a device run can; VerifyGoldenFiles recomputes them with kernels/ref (kernels/ref's tests call it). They are
// written by tools/goldengen or by `go test ./kernels/... -update`; the -update flag is defined here so that every
// kernel test binary accepts it, and the kerneltest package's own test is the one that writes.
//
// # Benchmarks
//
// BenchmarkGEMM, BenchmarkRMSNorm, BenchmarkAddRMSNorm, BenchmarkRoPE, BenchmarkSwiGLU, BenchmarkSoftmax,
// BenchmarkCausalAttention, BenchmarkPagedAttention and BenchmarkKVAppend time an implementation on one shape of
// the XBenchShapes tables, whose Name methods give key=value sub-benchmark names. They report b.SetBytes, GB/s,
// GFLOP/s (GEMM and attention) and the ratios %bw and %fma to the machine's ceilings from kernels/probe.
package kerneltest
