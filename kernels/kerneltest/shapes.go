package kerneltest

import (
	"fmt"
)

// The shapes of the conformance tests (XShapes) and of the benchmarks (XBenchShapes). Test shapes are awkward on
// purpose: sizes 1, 7, 17, 1025, 5137 that no vector width or tile divides, KV lengths 54 and 97, page sizes 1, 8
// and 16, grouped-query ratios 1, 2 and 4, prefill chunks after a cached prefix, mixed decode and prefill batches.
// Benchmark shapes are the sizes of a Llama-class model's layers. The CPU and CUDA packages share both.

// GEMMShape is C[M,N] = A[M,K]·W[N,K]ᵀ; M = 1 is a GEMV.
type GEMMShape struct{ M, N, K int }

// Name is the sub-test or sub-benchmark name, m=M/n=N/k=K.
func (s GEMMShape) Name() string { return fmt.Sprintf("m=%d/n=%d/k=%d", s.M, s.N, s.K) }

func (s GEMMShape) work() int { return s.M * s.N * s.K }

// RowsShape is Rows rows of Dim elements: RMSNorm and AddRMSNorm over rows of Dim, Softmax over rows of Dim
// columns, SwiGLU over Rows*Dim elements (Rows tokens of an MLP of hidden size Dim).
type RowsShape struct{ Rows, Dim int }

// Name is rows=Rows/dim=Dim.
func (s RowsShape) Name() string { return fmt.Sprintf("rows=%d/dim=%d", s.Rows, s.Dim) }

func (s RowsShape) work() int { return s.Rows * s.Dim }

// RoPEShape is Tokens rows of NHeads heads of HeadDim, rotated with base Theta.
type RoPEShape struct {
	Tokens, NHeads, HeadDim int
	Theta                   float32
}

// Name is tokens=T/heads=H/hd=D/theta=Θ.
func (s RoPEShape) Name() string {
	return fmt.Sprintf("tokens=%d/heads=%d/hd=%d/theta=%g", s.Tokens, s.NHeads, s.HeadDim, s.Theta)
}

func (s RoPEShape) work() int { return s.Tokens * s.NHeads * s.HeadDim }

// AttentionShape is causal attention of the last NQ of KVLen tokens (a prompt chunk after KVLen-NQ cached tokens
// when NQ < KVLen) with NHeads query heads sharing NKVHeads KV heads of HeadDim.
type AttentionShape struct{ NQ, KVLen, NHeads, NKVHeads, HeadDim int }

// Name is nq=NQ/kv=KVLen/heads=H/kvheads=G/hd=D.
func (s AttentionShape) Name() string {
	return fmt.Sprintf("nq=%d/kv=%d/heads=%d/kvheads=%d/hd=%d", s.NQ, s.KVLen, s.NHeads, s.NKVHeads, s.HeadDim)
}

// pairs is the number of (query, key) pairs that causal attention computes.
func (s AttentionShape) pairs() int {
	prefix := s.KVLen - s.NQ
	return s.NQ*prefix + s.NQ*(s.NQ+1)/2
}

func (s AttentionShape) work() int { return s.pairs() * s.NHeads * s.HeadDim }

// PagedSeq is one sequence of a paged-attention batch: Len tokens in the cache, the last NQ of them queries
// (NQ = 1 is a decode step, NQ = Len a whole prompt, in between a prompt chunk after a cached prefix).
type PagedSeq struct{ Len, NQ int }

// PagedShape is a batch of sequences over a paged KV cache of BlockSize-token blocks.
type PagedShape struct {
	Label                                string // names the batch in Name, e.g. "batch=mixed"
	Seqs                                 []PagedSeq
	BlockSize, NHeads, NKVHeads, HeadDim int
}

// Name is Label/bs=B/heads=H/kvheads=G/hd=D.
func (s PagedShape) Name() string {
	return fmt.Sprintf("%s/bs=%d/heads=%d/kvheads=%d/hd=%d", s.Label, s.BlockSize, s.NHeads, s.NKVHeads, s.HeadDim)
}

func (s PagedShape) pairs() int {
	n := 0
	for _, q := range s.Seqs {
		n += AttentionShape{NQ: q.NQ, KVLen: q.Len}.pairs()
	}
	return n
}

func (s PagedShape) work() int { return s.pairs() * s.NHeads * s.HeadDim }

// KVAppendShape appends Tokens rows of NKVHeads heads of HeadDim into a cache of CacheSlots slots.
type KVAppendShape struct{ Tokens, CacheSlots, NKVHeads, HeadDim int }

// Name is tokens=T/slots=S/kvheads=G/hd=D.
func (s KVAppendShape) Name() string {
	return fmt.Sprintf("tokens=%d/slots=%d/kvheads=%d/hd=%d", s.Tokens, s.CacheSlots, s.NKVHeads, s.HeadDim)
}

// GEMMShapes are the GEMM test shapes: m = 1 (the GEMV path), m not a multiple of any register tile, n and k
// with tails, and k = 5137 for long accumulations.
var GEMMShapes = []GEMMShape{
	{1, 1, 1}, {1, 7, 17}, {1, 17, 7}, {1, 1025, 17}, {1, 17, 1025}, {1, 64, 5137}, {1, 5137, 64},
	{7, 7, 7}, {7, 17, 1025}, {7, 1025, 17}, {17, 17, 17}, {17, 64, 1025}, {17, 1025, 64},
	{64, 64, 64}, {64, 7, 5137}, {64, 1025, 128}, {64, 1025, 1025}, {65, 33, 1025},
}

// RowsShapes are the RMSNorm, AddRMSNorm, Softmax and SwiGLU test shapes.
var RowsShapes = []RowsShape{
	{1, 1}, {1, 7}, {3, 17}, {7, 64}, {2, 1025}, {1, 5137}, {33, 4096},
}

// RoPEShapes are the RoPE test shapes: head dims 2, 8, 48 (stories15M), 64 and 128, Llama 2's and Llama 3's
// theta. Positions are random in [0, 4096).
var RoPEShapes = []RoPEShape{
	{1, 1, 2, 10000}, {2, 4, 8, 10000}, {3, 6, 48, 10000}, {7, 8, 64, 10000}, {17, 1, 128, 500000},
	{5, 32, 128, 500000},
}

// AttentionShapes are the CausalAttention test shapes: 8 query heads over 8, 4 and 2 KV heads, each with four of
// the six layouts (whole prompts of 1, 54 and 97 tokens, one query and a 17-token chunk over 97 tokens, a 7-token
// chunk over 54) so that every layout meets two ratios; then the head layouts of the stories models (hd 8,
// hd 48), multi-query attention with hd 128, and a long cached prefix.
var AttentionShapes = attentionShapes()

func attentionShapes() []AttentionShape {
	layouts := []PagedSeq{{1, 1}, {54, 54}, {97, 97}, {97, 1}, {97, 17}, {54, 7}}
	var s []AttentionShape
	for i, kvHeads := range []int{8, 4, 2} {
		for j := 0; j < 4; j++ {
			q := layouts[(2*i+j)%len(layouts)]
			s = append(s, AttentionShape{NQ: q.NQ, KVLen: q.Len, NHeads: 8, NKVHeads: kvHeads, HeadDim: 64})
		}
	}
	return append(s,
		AttentionShape{NQ: 17, KVLen: 17, NHeads: 8, NKVHeads: 4, HeadDim: 8},
		AttentionShape{NQ: 54, KVLen: 54, NHeads: 6, NKVHeads: 6, HeadDim: 48},
		AttentionShape{NQ: 7, KVLen: 97, NHeads: 4, NKVHeads: 1, HeadDim: 128},
		AttentionShape{NQ: 64, KVLen: 1025, NHeads: 8, NKVHeads: 2, HeadDim: 64},
	)
}

// PagedShapes are the PagedAttention test shapes: a decode batch (contexts 54, 97, 1 and 1025) and a mixed
// batch (decode steps, a whole prompt, a prompt chunk after a cached prefix) at each page size 1, 8 and 16, the
// three GQA ratios spread over them so that each ratio meets both batches, plus the stories260K head layout.
var PagedShapes = pagedShapes()

func pagedShapes() []PagedShape {
	decode := []PagedSeq{{54, 1}, {97, 1}, {1, 1}, {1025, 1}}
	mixed := []PagedSeq{{97, 1}, {54, 54}, {97, 17}, {1, 1}, {33, 1}}
	var s []PagedShape
	for i, bs := range []int{1, 8, 16} {
		s = append(s,
			PagedShape{Label: "batch=decode", Seqs: decode, BlockSize: bs, NHeads: 8, NKVHeads: 8 >> i, HeadDim: 64},
			PagedShape{Label: "batch=mixed", Seqs: mixed, BlockSize: bs, NHeads: 8, NKVHeads: 8 >> ((i + 1) % 3), HeadDim: 64})
	}
	return append(s, PagedShape{Label: "batch=mixed", Seqs: mixed, BlockSize: 16, NHeads: 8, NKVHeads: 4, HeadDim: 8})
}

// KVAppendShapes are the KVAppend test shapes; every shape with more than one token skips some (negative slots).
var KVAppendShapes = []KVAppendShape{
	{1, 1, 1, 2}, {1, 5, 8, 64}, {7, 16, 4, 64}, {5, 12, 6, 48}, {17, 40, 8, 128},
}

// GEMMBenchShapes: a decode GEMV (m = 1) of a 4096x4096 projection, a square 1024 GEMM, and a 512-token prefill
// through a 4096x4096 projection.
var GEMMBenchShapes = []GEMMShape{{1, 4096, 4096}, {1024, 1024, 1024}, {512, 4096, 4096}}

// RowsBenchShapes: one token and a 32-token batch of a 4096-wide model (decode), and 8M floats as 2048 rows of
// 4096 (prefill; far beyond any cache).
var RowsBenchShapes = []RowsShape{{1, 4096}, {32, 4096}, {2048, 4096}}

// RoPEBenchShapes: a decode batch of 32 tokens and 8M floats (2048 tokens of 32 heads of 128).
var RoPEBenchShapes = []RoPEShape{{32, 32, 128, 10000}, {2048, 32, 128, 10000}}

// AttentionBenchShapes: a 512-token prompt with 8 heads of 64, without and with grouped-query attention.
var AttentionBenchShapes = []AttentionShape{{512, 512, 8, 8, 64}, {512, 512, 8, 2, 64}}

// PagedBenchShapes: a decode step of 32 sequences of 1024 tokens in 16-token pages, without and with GQA.
var PagedBenchShapes = []PagedShape{
	{Label: "batch=32/ctx=1024", Seqs: repeatSeq(PagedSeq{1024, 1}, 32), BlockSize: 16, NHeads: 8, NKVHeads: 8, HeadDim: 64},
	{Label: "batch=32/ctx=1024", Seqs: repeatSeq(PagedSeq{1024, 1}, 32), BlockSize: 16, NHeads: 8, NKVHeads: 2, HeadDim: 64},
}

// KVAppendBenchShapes: a decode step of 32 tokens and a 512-token prompt with 8 KV heads of 128.
var KVAppendBenchShapes = []KVAppendShape{{32, 4096, 8, 128}, {512, 4096, 8, 128}}

func repeatSeq(q PagedSeq, n int) []PagedSeq {
	s := make([]PagedSeq, n)
	for i := range s {
		s[i] = q
	}
	return s
}
