package kerneltest

import (
	"fmt"
	"testing"

	"github.com/morphlab/morphlab/kernels/probe"
	"github.com/morphlab/morphlab/kernels/ref"
)

// Benchmarks of the quantized kernels. Each reports tokens/s (rows of A a second), GFLOP/s (2·m·n·k, integer ops
// counted alike), bytes of weights a second (b.SetBytes) and its ratio to the ceiling that bounds it, from
// probe.Cached(): for GEMVs the read bandwidth at the weights' size ("bw-ratio"), for the int8 GEMM the int8 dot
// peak ("int8-peak-ratio").

// qReport adds the metrics common to every quantized benchmark.
func qReport(b *testing.B, m, n, k int) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(m)/sec, "tokens/s")
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)/sec/1e9, "GFLOP/s")
}

// qReportBandwidth adds the ratio of the weight bytes read a second to the probe's bandwidth at that size.
func qReportBandwidth(b *testing.B, weightBytes int) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	if bw := probe.Cached().BandwidthAt(int64(weightBytes)); bw > 0 {
		b.ReportMetric(float64(weightBytes)/sec/1e9/bw, "bw-ratio")
	}
}

// BenchmarkGEMMW8A16 measures f on m×k activations and n×k INT8 weights.
func BenchmarkGEMMW8A16(b *testing.B, f GEMMW8A16Func, m, n, k int) {
	r := qRand(1)
	a, w, sw, c := qFloats(r, m*k), qInt8s(r, n*k), qScales(r, n), make([]float32, m*n)
	probe.Cached()
	b.SetBytes(int64(n * k))
	b.ResetTimer()
	for b.Loop() {
		f(m, n, k, a, w, sw, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, n*k)
}

// BenchmarkGEMMW8A8 measures what a W8A8 layer costs: quantize the m×k float activations per token, then f.
func BenchmarkGEMMW8A8(b *testing.B, quantize QuantizeRowsInt8Func, f GEMMW8A8Func, m, n, k int) {
	r := qRand(2)
	x, w, sw, c := qFloats(r, m*k), qInt8s(r, n*k), qScales(r, n), make([]float32, m*n)
	qa, sa := make([]int8, m*k), make([]float32, m)
	probe.Cached()
	b.SetBytes(int64(n * k))
	b.ResetTimer()
	for b.Loop() {
		quantize(m, k, x, qa, sa)
		f(m, n, k, qa, sa, w, sw, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, n*k)
}

// BenchmarkGEMMInt8 measures the integer core of W8A8 and its ratio to the probe's int8 dot peak.
func BenchmarkGEMMInt8(b *testing.B, f GEMMInt8Func, m, n, k int) {
	r := qRand(3)
	a, w, c := qInt8s(r, m*k), qInt8s(r, n*k), make([]int32, m*n)
	peak := probe.Cached().Int8DotPeakGOPS
	b.SetBytes(int64(n * k))
	b.ResetTimer()
	for b.Loop() {
		f(m, n, k, a, w, c)
	}
	qReport(b, m, n, k)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)/sec/1e9/peak, "int8-peak-ratio")
}

// BenchmarkGEMMW4A16 measures f on m×k activations and n×k INT4 weights in groups of group.
func BenchmarkGEMMW4A16(b *testing.B, f GEMMW4A16Func, m, n, k, group int) {
	r := qRand(4)
	a, c := qFloats(r, m*k), make([]float32, m*n)
	w, s, z := qInt4(r, n, k, group)
	bytes := len(w) + 4*len(s) + len(z)
	probe.Cached()
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for b.Loop() {
		f(m, n, k, group, a, w, s, z, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, bytes)
}

// BenchmarkGEMMW4A8 measures f on m×k activations, quantized per token (quantize, included), and n×k INT4 weights
// in groups of group.
func BenchmarkGEMMW4A8(b *testing.B, quantize QuantizeRowsInt8Func, f GEMMW4A8Func, m, n, k, group int) {
	r := qRand(4)
	a, c := qFloats(r, m*k), make([]float32, m*n)
	qa, sa := make([]int8, m*k), make([]float32, m)
	w, s, z := qInt4(r, n, k, group)
	bytes := len(w) + 4*len(s) + len(z)
	probe.Cached()
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for b.Loop() {
		quantize(m, k, a, qa, sa)
		f(m, n, k, group, qa, sa, w, s, z, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, bytes)
}

// BenchmarkGEMVQ measures a GGUF GEMV (GEMVQ8_0 or GEMVQ4_0, blockBytes 34 or 18) on n×k weights, the
// activation's quantization to Q8_0 (quantize) included.
func BenchmarkGEMVQ(b *testing.B, quantize QuantizeRowQ8_0Func, f GEMVQFunc, n, k, blockBytes int) {
	r := qRand(5)
	x, y := qFloats(r, k), make([]float32, n)
	w := qQ8_0(r, n*k)
	if blockBytes != 34 {
		w = qQ4_0(r, n*k)
	}
	if len(w) != n*k/32*blockBytes {
		panic(fmt.Sprintf("kerneltest: BenchmarkGEMVQ: blockBytes=%d, want 34 or 18", blockBytes))
	}
	xq := make([]byte, k/32*34)
	probe.Cached()
	b.SetBytes(int64(len(w)))
	b.ResetTimer()
	for b.Loop() {
		quantize(x, xq)
		f(n, k, w, xq, y)
	}
	qReport(b, 1, n, k)
	qReportBandwidth(b, len(w))
}

// BenchmarkGEMMQ8_0A8 measures f on m×k activations, quantized per token (quantize, included), and n×k Q8_0
// weights repacked (ref.RepackQ8_0).
func BenchmarkGEMMQ8_0A8(b *testing.B, quantize QuantizeRowsInt8Func, f GEMMQ8_0A8Func, m, n, k int) {
	r := qRand(6)
	a, c := qFloats(r, m*k), make([]float32, m*n)
	qa, sa := make([]int8, m*k), make([]float32, m)
	w, d := ref.RepackQ8_0(qQ8_0(r, n*k))
	bytes := len(w) + 2*len(d)
	probe.Cached()
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for b.Loop() {
		quantize(m, k, a, qa, sa)
		f(m, n, k, qa, sa, w, d, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, bytes)
}

// BenchmarkGEMMQ4_0A8 is BenchmarkGEMMQ8_0A8 for repacked Q4_0 weights (ref.RepackQ4_0).
func BenchmarkGEMMQ4_0A8(b *testing.B, quantize QuantizeRowsInt8Func, f GEMMQ4_0A8Func, m, n, k int) {
	r := qRand(7)
	a, c := qFloats(r, m*k), make([]float32, m*n)
	qa, sa := make([]int8, m*k), make([]float32, m)
	w, d := ref.RepackQ4_0(qQ4_0(r, n*k))
	bytes := len(w) + 2*len(d)
	probe.Cached()
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for b.Loop() {
		quantize(m, k, a, qa, sa)
		f(m, n, k, qa, sa, w, d, c)
	}
	qReport(b, m, n, k)
	qReportBandwidth(b, bytes)
}
