package cpu

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// TestElemSuite runs the shared conformance suite on the elementwise kernels, on every primitive set.
func TestElemSuite(t *testing.T) {
	elemPaths(t, func(t *testing.T) {
		t.Run("RMSNorm", func(t *testing.T) { kerneltest.TestRMSNorm(t, RMSNorm) })
		t.Run("AddRMSNorm", func(t *testing.T) { kerneltest.TestAddRMSNorm(t, AddRMSNorm) })
		t.Run("RoPE", func(t *testing.T) { kerneltest.TestRoPE(t, RoPE) })
		t.Run("SwiGLU", func(t *testing.T) { kerneltest.TestSwiGLU(t, SwiGLU) })
		t.Run("Softmax", func(t *testing.T) { kerneltest.TestSoftmax(t, Softmax) })
	})
}
