package cpu

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// BenchmarkSuite runs the shared benchmarks of kernels/kerneltest on this package's kernels, over the shared
// shape tables, so that CPU and CUDA numbers line up: BenchmarkSuite/op=GEMM/m=1/n=4096/k=4096 and so on, each
// with GB/s, GFLOP/s (GEMM, attention) and the ratios %bw and %fma to the ceilings of kernels/probe.
func BenchmarkSuite(b *testing.B) {
	for _, s := range kerneltest.GEMMBenchShapes {
		b.Run("op=GEMM/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkGEMM(b, GEMM, s) })
	}
	for _, s := range kerneltest.RowsBenchShapes {
		b.Run("op=RMSNorm/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkRMSNorm(b, RMSNorm, s) })
		b.Run("op=AddRMSNorm/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkAddRMSNorm(b, AddRMSNorm, s) })
		b.Run("op=SwiGLU/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkSwiGLU(b, SwiGLU, s) })
		b.Run("op=Softmax/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkSoftmax(b, Softmax, s) })
	}
	for _, s := range kerneltest.RoPEBenchShapes {
		b.Run("op=RoPE/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkRoPE(b, RoPE, s) })
	}
	for _, s := range kerneltest.AttentionBenchShapes {
		b.Run("op=CausalAttention/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkCausalAttention(b, CausalAttention, s) })
	}
	for _, s := range kerneltest.PagedBenchShapes {
		b.Run("op=PagedAttention/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkPagedAttention(b, PagedAttention, s) })
	}
	for _, s := range kerneltest.KVAppendBenchShapes {
		b.Run("op=KVAppend/"+s.Name(), func(b *testing.B) { kerneltest.BenchmarkKVAppend(b, KVAppend, s) })
	}
}
