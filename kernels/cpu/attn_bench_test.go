package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkPagedDecode is decode attention at stories110M's batched-decode shape: 32 sequences of 65 tokens,
// 12 heads of 64, blocks of 16 tokens, over each layer's cache in turn (12 of them, 77 MB of binary16 keys and
// values, 154 MB of float32 ones: more than the caches hold, as in a model's step). It reports the keys' and
// values' GB/s and the time a (tile of 16 tokens, head) per thread:
//
//	go test -run '^$' -bench PagedDecode -count 6 ./kernels/cpu
func BenchmarkPagedDecode(b *testing.B) {
	const seqs, ctx, heads, hd, bs, layers = 32, 65, 12, 64, 16, 12
	blocks := (ctx + bs - 1) / bs
	kvRow := heads * hd
	q := make([]float32, seqs*kvRow)
	out := make([]float32, seqs*kvRow)
	qStart := make([]int32, seqs+1)
	seqLens := make([]int32, seqs)
	table := make([]int32, seqs*blocks)
	for s := range seqs {
		qStart[s+1] = int32(s + 1)
		seqLens[s] = ctx
		for j := range blocks {
			table[s*blocks+j] = int32(s*blocks + j)
		}
	}
	for i := range q {
		q[i] = float32(i%7) * 0.1
	}
	tiles := seqs * ((ctx + bs - 1) / bs) * heads
	for _, cache := range []string{"f16", "f32"} {
		b.Run(fmt.Sprintf("cache=%s", cache), func(b *testing.B) {
			n := seqs * blocks * bs * kvRow
			var k, v [layers][]float32
			var k16, v16 [layers][]uint16
			for l := range layers {
				if cache == "f16" {
					k16[l], v16[l] = make([]uint16, n), make([]uint16, n)
					for i := range n {
						k16[l][i], v16[l][i] = 0x3c00+uint16(i%64), 0x3c00-uint16(i%32)
					}
					continue
				}
				k[l], v[l] = make([]float32, n), make([]float32, n)
				for i := range n {
					k[l][i], v[l][i] = 1+float32(i%64)/1024, 1-float32(i%32)/1024
				}
			}
			size := 4
			if cache == "f16" {
				size = 2
			}
			b.SetBytes(int64(2 * seqs * ctx * kvRow * size))
			b.ResetTimer()
			for i := range b.N {
				l := i % layers
				if cache == "f16" {
					PagedAttentionF16(out, q, k16[l], v16[l], qStart, seqLens, table, blocks, bs, heads, heads, hd, 0.125)
				} else {
					PagedAttention(out, q, k[l], v[l], qStart, seqLens, table, blocks, bs, heads, heads, hd, 0.125)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9*float64(Threads())/float64(b.N*tiles), "ns/tile-head")
		})
	}
}
