package cpu

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// TestAttnSuite runs the shared conformance suite on the attention kernels, on every micro-kernel set.
func TestAttnSuite(t *testing.T) {
	attnPaths(t, func(t *testing.T) {
		t.Run("CausalAttention", func(t *testing.T) { kerneltest.TestCausalAttention(t, CausalAttention) })
		t.Run("KVAppend", func(t *testing.T) { kerneltest.TestKVAppend(t, KVAppend) })
		t.Run("PagedAttention", func(t *testing.T) { kerneltest.TestPagedAttention(t, PagedAttention) })
	})
}
