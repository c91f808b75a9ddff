package cpu

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// The quantized kernels through the shared conformance suite (kernels/kerneltest/quant.go). On amd64 without
// noasm, quant_amd64_test.go runs the suite again with the assembly switched off.

func testQuant(t *testing.T) {
	t.Run("GEMMW8A16", func(t *testing.T) { kerneltest.TestGEMMW8A16(t, GEMMW8A16) })
	t.Run("GEMMInt8", func(t *testing.T) { kerneltest.TestGEMMInt8(t, GEMMInt8) })
	t.Run("GEMMW8A8", func(t *testing.T) { kerneltest.TestGEMMW8A8(t, GEMMW8A8) })
	t.Run("QuantizeRowsInt8", func(t *testing.T) { kerneltest.TestQuantizeRowsInt8(t, QuantizeRowsInt8) })
	t.Run("GEMMW4A16", func(t *testing.T) { kerneltest.TestGEMMW4A16(t, GEMMW4A16) })
	t.Run("GEMMW4A8", func(t *testing.T) { kerneltest.TestGEMMW4A8(t, GEMMW4A8) })
	t.Run("QuantizeRowQ8_0", func(t *testing.T) { kerneltest.TestQuantizeRowQ8_0(t, QuantizeRowQ8_0) })
	t.Run("DotQ8_0", func(t *testing.T) { kerneltest.TestDotQ8_0(t, DotQ8_0) })
	t.Run("DotQ4_0Q8_0", func(t *testing.T) { kerneltest.TestDotQ4_0Q8_0(t, DotQ4_0Q8_0) })
	t.Run("GEMVQ8_0", func(t *testing.T) { kerneltest.TestGEMVQ8_0(t, GEMVQ8_0) })
	t.Run("GEMVQ4_0", func(t *testing.T) { kerneltest.TestGEMVQ4_0(t, GEMVQ4_0) })
}

func TestQuant(t *testing.T) { testQuant(t) }
