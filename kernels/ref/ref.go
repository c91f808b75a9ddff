// Package ref is the specification of morphlab's kernels: each op written in float64 as the plainest loop that
// computes it. Faster implementations (kernels/cpu, kernels/cuda) are tested against these functions through the
// shared suite in kernels/kerneltest, and the golden files in testdata/golden are written from them.
//
// Layouts, shared by every implementation:
//   - Matrices are row-major. A weight matrix is [out, in], as llama2.c stores it, so a linear layer is y = W·x.
//   - Activations of several tokens are [tokens, features].
//   - Attention heads are interleaved in a token's row: q is [tokens, nHeads*headDim], k and v are
//     [tokens, nKVHeads*headDim]. Query head h reads KV head h/(nHeads/nKVHeads) (grouped-query attention).
//   - The paged KV cache is [numBlocks, blockSize, nKVHeads, headDim] for keys and the same for values. Token s of
//     a sequence lives in block blockTable[s/blockSize] at offset s%blockSize, that is at slot
//     blockTable[s/blockSize]*blockSize + s%blockSize (vLLM's slot mapping).
//
// Bad sizes panic with a one-line message "kernels: OP: WHAT=GOT, want EXPECTED" (see kernels/internal/shape);
// every implementation panics with the same message.
package ref

import (
	"math"

	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// GEMM computes C = A·Wᵀ: c[i*n+j] = Σ_p a[i*k+p]·w[j*k+p], with A [m, k], W [n, k] ([out, in]) and C [m, n].
// With m = 1 it is the matrix-vector product y = W·x.
func GEMM(m, n, k int, a, w, c []float64) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += a[i*k+p] * w[j*k+p]
			}
			c[i*n+j] = s
		}
	}
}

// RMSNorm normalizes each row of length dim: out = x / sqrt(mean(x²) + eps) ⊙ weight.
func RMSNorm(out, x, weight []float64, dim int, eps float64) {
	shape.Rows("RMSNorm", dim, []string{"x", "out"}, len(x), len(out))
	shape.Len("RMSNorm", "weight", len(weight), dim, "dim")
	for r := 0; r < len(x); r += dim {
		rmsNormRow(out[r:r+dim], x[r:r+dim], weight, eps)
	}
}

func rmsNormRow(out, x, weight []float64, eps float64) {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i, v := range x {
		out[i] = v * inv * weight[i]
	}
}

// AddRMSNorm is the fused residual step of a decoder layer, row by row: residual += x, then
// out = RMSNorm(residual) ⊙ weight. residual is updated in place.
func AddRMSNorm(out, residual, x, weight []float64, dim int, eps float64) {
	shape.Rows("AddRMSNorm", dim, []string{"residual", "x", "out"}, len(residual), len(x), len(out))
	shape.Len("AddRMSNorm", "weight", len(weight), dim, "dim")
	for i := range residual {
		residual[i] += x[i]
	}
	for r := 0; r < len(residual); r += dim {
		rmsNormRow(out[r:r+dim], residual[r:r+dim], weight, eps)
	}
}

// RoPE rotates queries or keys in place by their positions, with Llama's pairing as llama2.c and GGUF's llama
// architecture apply it: within each head, the consecutive pair (x[2i], x[2i+1]) is rotated by the angle
// pos[t]·theta^(-2i/headDim). x is [len(pos), nHeads*headDim].
//
// Hugging Face checkpoints rotate the pair (x[i], x[i+headDim/2]) instead ("rotate_half"); their Q and K weight
// rows are permuted so that both conventions compute the same attention, and loaders of HF weights undo that
// permutation so that this kernel applies to them unchanged.
func RoPE(x []float64, pos []int32, nHeads, headDim int, theta float64) {
	shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
	for t, p := range pos {
		for h := 0; h < nHeads; h++ {
			head := x[(t*nHeads+h)*headDim:][:headDim]
			for i := 0; i < headDim; i += 2 {
				angle := float64(p) * math.Pow(theta, -float64(i)/float64(headDim))
				sin, cos := math.Sincos(angle)
				a, b := head[i], head[i+1]
				head[i] = a*cos - b*sin
				head[i+1] = a*sin + b*cos
			}
		}
	}
}

// SwiGLU is the gated activation of Llama's MLP: out[i] = silu(gate[i])·up[i], silu(g) = g/(1+e^(-g)).
func SwiGLU(out, gate, up []float64) {
	shape.Positive("SwiGLU", "len(gate)", len(gate))
	shape.Len("SwiGLU", "up", len(up), len(gate), "len(gate)")
	shape.Len("SwiGLU", "out", len(out), len(gate), "len(gate)")
	for i, g := range gate {
		out[i] = g / (1 + math.Exp(-g)) * up[i]
	}
}

// Softmax replaces each row of x ([rows, cols]) by exp(x - max(x)) / Σ exp(x - max(x)).
func Softmax(x []float64, rows, cols int) {
	shape.Positive("Softmax", "rows", rows, "cols", cols)
	shape.Len("Softmax", "x", len(x), rows*cols, "rows*cols")
	for r := 0; r < rows; r++ {
		softmaxRow(x[r*cols : (r+1)*cols])
	}
}

func softmaxRow(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var sum float64
	for i, v := range x {
		x[i] = math.Exp(v - mx)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// CausalAttention is prefill attention over contiguous keys and values. The nq queries are the last nq of kvLen
// tokens (a prompt, or a prompt chunk after kvLen-nq cached tokens): query t sits at position kvLen-nq+t and sees
// keys 0..kvLen-nq+t. For query head h and its KV head g = h/(nHeads/nKVHeads):
// out[t,h] = Σ_s softmax_s(scale·q[t,h]·k[s,g])·v[s,g].
// q, out: [nq, nHeads*headDim]; k, v: [kvLen, nKVHeads*headDim].
func CausalAttention(out, q, k, v []float64, nq, kvLen, nHeads, nKVHeads, headDim int, scale float64) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	kvRow := nKVHeads * headDim
	keyAt := func(s, g int) []float64 { return k[s*kvRow+g*headDim:][:headDim] }
	valueAt := func(s, g int) []float64 { return v[s*kvRow+g*headDim:][:headDim] }
	for t := 0; t < nq; t++ {
		for h := 0; h < nHeads; h++ {
			o := out[(t*nHeads+h)*headDim:][:headDim]
			attendOne(o, q[(t*nHeads+h)*headDim:][:headDim], kvLen-nq+t+1, h/(nHeads/nKVHeads), scale, keyAt, valueAt)
		}
	}
}

// attendOne writes into o the attention of query qv over the first n tokens, whose key and value rows for KV head
// g are given by keyAt and valueAt.
func attendOne(o, qv []float64, n, g int, scale float64, keyAt, valueAt func(s, g int) []float64) {
	scores := make([]float64, n)
	for s := range scores {
		var dot float64
		for d, kv := range keyAt(s, g) {
			dot += qv[d] * kv
		}
		scores[s] = scale * dot
	}
	softmaxRow(scores)
	clear(o)
	for s, p := range scores {
		for d, vv := range valueAt(s, g) {
			o[d] += p * vv
		}
	}
}

// KVAppend writes the key and value rows of token t into cache slot slots[t] (block*blockSize + offset, see the
// package doc); a negative slot skips the token, as vLLM does for padding. k, v: [len(slots), nKVHeads*headDim].
func KVAppend(kCache, vCache, k, v []float64, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppend", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	row := nKVHeads * headDim
	for t, s := range slots {
		if s < 0 {
			continue
		}
		copy(kCache[int(s)*row:][:row], k[t*row:][:row])
		copy(vCache[int(s)*row:][:row], v[t*row:][:row])
	}
}

// PagedAttention is attention for a batch of sequences whose keys and values are in the paged cache, one or more
// queries each: decode (one query a sequence) and chunked prefill in one call. Sequence i owns query rows
// qStart[i]..qStart[i+1]-1, which are its last queries among seqLens[i] tokens (their keys and values already
// appended), so its query j sits at position seqLens[i]-n+j (n its query count) and sees the tokens up to it.
// Its token s is read from block blockTables[i*maxBlocksPerSeq+s/blockSize] at offset s%blockSize.
// q, out: [qStart[nSeqs], nHeads*headDim]; caches [numBlocks, blockSize, nKVHeads, headDim].
func PagedAttention(out, q, kCache, vCache []float64, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float64) {
	shape.PagedAttention("PagedAttention", len(out), len(q), len(kCache), len(vCache), qStart, seqLens, blockTables,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	kvRow := nKVHeads * headDim
	for i, L := range seqLens {
		table := blockTables[i*maxBlocksPerSeq:][:maxBlocksPerSeq]
		slot := func(s int) int { return int(table[s/blockSize])*blockSize + s%blockSize }
		keyAt := func(s, g int) []float64 { return kCache[slot(s)*kvRow+g*headDim:][:headDim] }
		valueAt := func(s, g int) []float64 { return vCache[slot(s)*kvRow+g*headDim:][:headDim] }
		n := int(qStart[i+1] - qStart[i])
		for j := 0; j < n; j++ {
			t := int(qStart[i]) + j
			for h := 0; h < nHeads; h++ {
				o := out[(t*nHeads+h)*headDim:][:headDim]
				attendOne(o, q[(t*nHeads+h)*headDim:][:headDim], int(L)-n+j+1, h/(nHeads/nKVHeads), scale, keyAt, valueAt)
			}
		}
	}
}
