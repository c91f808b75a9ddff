package cpu

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// TestGolden checks every float32 kernel of the package against the golden files in testdata/golden (the
// conformance suites on random shapes run in TestConformanceGEMM, TestElemSuite and TestAttnSuite).
func TestGolden(t *testing.T) {
	kerneltest.TestGolden(t, kerneltest.Funcs{
		GEMM: GEMM, RMSNorm: RMSNorm, AddRMSNorm: AddRMSNorm, RoPE: RoPE, SwiGLU: SwiGLU, Softmax: Softmax,
		CausalAttention: CausalAttention, KVAppend: KVAppend, PagedAttention: PagedAttention,
	})
}
