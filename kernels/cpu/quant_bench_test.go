package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// BenchmarkQuant runs the quantized kernels on two threads, with the float32 GEMV/GEMM of the same shapes in the
// same run so that their ratios can be read off one benchstat table (benchstat -col /dtype). The m=32 shapes are
// stories110M's batched decode (gate and up together; down):
//
//	go test -run '^$' -bench BenchmarkQuant -count 6 ./kernels/cpu
func BenchmarkQuant(b *testing.B) {
	defer SetThreads(SetThreads(2))
	for _, sh := range [][3]int{{1, 4096, 4096}, {16, 4096, 4096}, {32, 4096, 768}, {32, 768, 2048}} {
		m, n, k := sh[0], sh[1], sh[2]
		name := fmt.Sprintf("m=%d/n=%d/k=%d/dtype=", m, n, k)
		b.Run(name+"f32", func(b *testing.B) { qBenchF32(b, m, n, k) })
		b.Run(name+"w8a16", func(b *testing.B) { kerneltest.BenchmarkGEMMW8A16(b, GEMMW8A16, m, n, k) })
		b.Run(name+"w8a8", func(b *testing.B) { kerneltest.BenchmarkGEMMW8A8(b, QuantizeRowsInt8, GEMMW8A8, m, n, k) })
		b.Run(name+"w4a16", func(b *testing.B) { kerneltest.BenchmarkGEMMW4A16(b, GEMMW4A16, m, n, k, 128) })
		b.Run(name+"w4a8", func(b *testing.B) {
			kerneltest.BenchmarkGEMMW4A8(b, QuantizeRowsInt8, GEMMW4A8, m, n, k, 128)
		})
		b.Run(name+"q8_0a8", func(b *testing.B) { kerneltest.BenchmarkGEMMQ8_0A8(b, QuantizeRowsInt8, GEMMQ8_0A8, m, n, k) })
		b.Run(name+"q4_0a8", func(b *testing.B) { kerneltest.BenchmarkGEMMQ4_0A8(b, QuantizeRowsInt8, GEMMQ4_0A8, m, n, k) })
		if m == 1 {
			b.Run(name+"q8_0", func(b *testing.B) { kerneltest.BenchmarkGEMVQ(b, QuantizeRowQ8_0, GEMVQ8_0, n, k, 34) })
			b.Run(name+"q4_0", func(b *testing.B) { kerneltest.BenchmarkGEMVQ(b, QuantizeRowQ8_0, GEMVQ4_0, n, k, 18) })
		}
	}
	b.Run("m=1024/n=1024/k=1024/dtype=f32", func(b *testing.B) { qBenchF32(b, 1024, 1024, 1024) })
	b.Run("m=1024/n=1024/k=1024/dtype=int8", func(b *testing.B) {
		kerneltest.BenchmarkGEMMInt8(b, GEMMInt8, 1024, 1024, 1024)
	})
	b.Run("m=1024/n=1024/k=1024/dtype=w8a8", func(b *testing.B) {
		kerneltest.BenchmarkGEMMW8A8(b, QuantizeRowsInt8, GEMMW8A8, 1024, 1024, 1024)
	})
}

// qBenchF32 is the float32 baseline: GEMM (GEMV for m = 1) with the metrics of the quantized benchmarks.
func qBenchF32(b *testing.B, m, n, k int) {
	r := rand.New(rand.NewPCG(9, 9))
	a, w, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	for i := range a {
		a[i] = r.Float32()
	}
	for i := range w {
		w[i] = r.Float32()
	}
	b.SetBytes(int64(4 * n * k))
	for b.Loop() {
		GEMM(m, n, k, a, w, c)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(m)/sec, "tokens/s")
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)/sec/1e9, "GFLOP/s")
}
