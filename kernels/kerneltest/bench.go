package kerneltest

import (
	"testing"

	"github.com/morphlab/morphlab/kernels/probe"
)

// Benchmarks: BenchmarkX(b, f, s) times f on shape s with random inputs. A package benchmarks its
// implementation over the shared shape tables:
//
//	func BenchmarkGEMM(b *testing.B) {
//		for _, s := range kerneltest.GEMMBenchShapes {
//			b.Run(s.Name(), func(b *testing.B) { kerneltest.BenchmarkGEMM(b, cpu.GEMM, s) })
//		}
//	}
//
// Each reports b.SetBytes (the bytes the op must move at least: every operand read once, every output written
// once, so MB/s and GB/s are effective bandwidth), GB/s, GFLOP/s where the op's flops are well defined (GEMM and
// attention, a multiply-add counted as 2), and the ratios to the machine's ceilings from kernels/probe: %fma (of
// the f32 FMA peak) and %bw (of the read bandwidth at the op's working-set size). On a noisy shared machine
// compare the ratios.

// report adds GB/s, GFLOP/s (when flops > 0) and the ceiling ratios to a finished b.Loop benchmark that moved
// bytes and computed flops per call, over a working set of workingSet bytes.
func report(b *testing.B, flops, bytes, workingSet int64) {
	b.StopTimer()
	sec := b.Elapsed().Seconds() / float64(b.N)
	if sec <= 0 {
		return
	}
	c := probe.Cached()
	gbs := float64(bytes) / sec / 1e9
	b.ReportMetric(gbs, "GB/s")
	if bw := c.BandwidthAt(workingSet); bw > 0 {
		b.ReportMetric(100*gbs/bw, "%bw")
	}
	if flops > 0 {
		gflops := float64(flops) / sec / 1e9
		b.ReportMetric(gflops, "GFLOP/s")
		if c.FMAPeakGFLOPS > 0 {
			b.ReportMetric(100*gflops/c.FMAPeakGFLOPS, "%fma")
		}
	}
}

// BenchmarkGEMM times f on s: 2·m·n·k flops over A, W and C.
func BenchmarkGEMM(b *testing.B, f GEMMFunc, s GEMMShape) {
	c := newGEMMCase(s, newRand("bench/GEMM", s.Name()), Options{})
	out := make([]float32, s.M*s.N)
	bytes := int64(4 * (len(c.A) + len(c.W) + len(out)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(s.M, s.N, s.K, c.A, c.W, out)
	}
	report(b, 2*int64(s.M)*int64(s.N)*int64(s.K), bytes, bytes)
}

// BenchmarkRMSNorm times f on s: x read, out written.
func BenchmarkRMSNorm(b *testing.B, f RMSNormFunc, s RowsShape) {
	c := newRMSNormCase(s, newRand("bench/RMSNorm", s.Name()), Options{})
	out := make([]float32, len(c.X))
	bytes := int64(4 * (2*len(c.X) + len(c.Weight)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(out, c.X, c.Weight, c.Dim, c.Eps)
	}
	report(b, 0, bytes, bytes)
}

// BenchmarkAddRMSNorm times f on s: residual read and written, x read, out written. The residual keeps growing
// by x from call to call, which changes no timing.
func BenchmarkAddRMSNorm(b *testing.B, f AddRMSNormFunc, s RowsShape) {
	c := newAddRMSNormCase(s, newRand("bench/AddRMSNorm", s.Name()), Options{})
	out := make([]float32, len(c.X))
	bytes := int64(4 * (4*len(c.X) + len(c.Weight)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(out, c.Residual, c.X, c.Weight, c.Dim, c.Eps)
	}
	report(b, 0, bytes, int64(4*(3*len(c.X)+len(c.Weight))))
}

// BenchmarkRoPE times f on s: x read and written in place (rotations keep it bounded).
func BenchmarkRoPE(b *testing.B, f RoPEFunc, s RoPEShape) {
	c := newRoPECase(s, newRand("bench/RoPE", s.Name()), Options{})
	bytes := int64(4 * (2*len(c.X) + len(c.Pos)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(c.X, c.Pos, c.NHeads, c.HeadDim, c.Theta)
	}
	report(b, 0, bytes, int64(4*(len(c.X)+len(c.Pos))))
}

// BenchmarkSwiGLU times f on Rows·Dim elements: gate and up read, out written.
func BenchmarkSwiGLU(b *testing.B, f SwiGLUFunc, s RowsShape) {
	c := newSwiGLUCase(s, newRand("bench/SwiGLU", s.Name()), Options{})
	out := make([]float32, len(c.Gate))
	bytes := int64(4 * 3 * len(c.Gate))
	b.SetBytes(bytes)
	for b.Loop() {
		f(out, c.Gate, c.Up)
	}
	report(b, 0, bytes, bytes)
}

// BenchmarkSoftmax times f on Rows rows of Dim columns, in place (after the first call the rows are
// probabilities, which takes the same time).
func BenchmarkSoftmax(b *testing.B, f SoftmaxFunc, s RowsShape) {
	c := newSoftmaxCase(s, newRand("bench/Softmax", s.Name()), Options{})
	bytes := int64(4 * 2 * len(c.X))
	b.SetBytes(bytes)
	for b.Loop() {
		f(c.X, c.Rows, c.Cols)
	}
	report(b, 0, bytes, int64(4*len(c.X)))
}

// BenchmarkCausalAttention times f on s: 4·headDim flops per (query head, visible key) pair; q, k and v read
// once, out written once.
func BenchmarkCausalAttention(b *testing.B, f CausalAttentionFunc, s AttentionShape) {
	c := newAttentionCase(s, newRand("bench/CausalAttention", s.Name()), Options{})
	out := make([]float32, len(c.Q))
	bytes := int64(4 * (2*len(c.Q) + len(c.K) + len(c.V)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(out, c.Q, c.K, c.V, c.NQ, c.KVLen, c.NHeads, c.NKVHeads, c.HeadDim, c.Scale)
	}
	report(b, 4*int64(s.pairs())*int64(s.NHeads*s.HeadDim), bytes, bytes)
}

// BenchmarkPagedAttention times f on s: 4·headDim flops per (query head, visible key) pair; each sequence's keys
// and values read once, q read and out written once.
func BenchmarkPagedAttention(b *testing.B, f PagedAttentionFunc, s PagedShape) {
	c := newPagedCase(s, newRand("bench/PagedAttention", s.Name()), Options{}, false)
	out := make([]float32, len(c.Q))
	tokens := 0
	for _, q := range s.Seqs {
		tokens += q.Len
	}
	bytes := int64(4 * (2*len(c.Q) + 2*tokens*s.NKVHeads*s.HeadDim))
	b.SetBytes(bytes)
	for b.Loop() {
		f(out, c.Q, c.KCache, c.VCache, c.QStart, c.SeqLens, c.BlockTables, c.MaxBlocksPerSeq, c.BlockSize,
			c.NHeads, c.NKVHeads, c.HeadDim, c.Scale)
	}
	report(b, 4*int64(s.pairs())*int64(s.NHeads*s.HeadDim), bytes, bytes)
}

// BenchmarkKVAppend times f on s: k and v read, their rows written into the caches (every token kept).
func BenchmarkKVAppend(b *testing.B, f KVAppendFunc, s KVAppendShape) {
	c := newKVAppendCase(s, newRand("bench/KVAppend", s.Name()), Options{}, false)
	for t := range c.Slots {
		c.Slots[t] = int32(t)
	}
	bytes := int64(4 * 2 * (len(c.K) + len(c.V)))
	b.SetBytes(bytes)
	for b.Loop() {
		f(c.KCache, c.VCache, c.K, c.V, c.Slots, c.NKVHeads, c.HeadDim)
	}
	report(b, 0, bytes, bytes)
}
