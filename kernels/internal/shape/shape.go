// Package shape checks the sizes that morphlab's kernels are given. Every implementation (ref, cpu, cuda) calls
// the same checks, so a bad call panics with the same one-line message whichever implementation it reaches:
// "kernels: OP: WHAT=GOT, want EXPECTED".
package shape

import "fmt"

func fail(op, format string, args ...any) {
	panic(fmt.Sprintf("kernels: %s: ", op) + fmt.Sprintf(format, args...))
}

// Positive panics unless every named size is > 0. names and sizes alternate: "m", m, "n", n, ... Only copies of
// the failing pair reach the message, so the arguments do not escape and a passing check allocates nothing (a
// kernel call of a decode step must not: the garbage of hundreds of calls a step lands on fresh pages).
func Positive(op string, namesAndSizes ...any) {
	for i := 0; i+1 < len(namesAndSizes); i += 2 {
		if v := namesAndSizes[i+1].(int); v <= 0 {
			name, _ := namesAndSizes[i].(string)
			fail(op, "%s=%d, want > 0", name, v)
		}
	}
}

// Len panics unless got == want for the slice named name.
func Len(op, name string, got, want int, wantExpr string) {
	if got != want {
		fail(op, "len(%s)=%d, want %s=%d", name, got, wantExpr, want)
	}
}

// AtLeast panics unless got >= want for the slice named name.
func AtLeast(op, name string, got, want int, wantExpr string) {
	if got < want {
		fail(op, "len(%s)=%d, want >= %s=%d", name, got, wantExpr, want)
	}
}

// GEMM checks C[m,n] = A[m,k]·W[n,k]ᵀ.
func GEMM(op string, m, n, k, la, lw, lc int) {
	Positive(op, "m", m, "n", n, "k", k)
	Len(op, "a", la, m*k, "m*k")
	Len(op, "w", lw, n*k, "n*k")
	Len(op, "c", lc, m*n, "m*n")
}

// Rows checks row-wise ops over rows of length dim: every slice has the same length, a whole number of rows.
func Rows(op string, dim int, names []string, lens ...int) {
	Positive(op, "dim", dim)
	if lens[0] == 0 || lens[0]%dim != 0 {
		fail(op, "len(%s)=%d, want a positive multiple of dim=%d", names[0], lens[0], dim)
	}
	for i := 1; i < len(lens); i++ {
		Len(op, names[i], lens[i], lens[0], "len("+names[0]+")")
	}
}

// Heads checks a head layout: nHeads a positive multiple of nKVHeads, headDim > 0.
func Heads(op string, nHeads, nKVHeads, headDim int) {
	Positive(op, "nHeads", nHeads, "nKVHeads", nKVHeads, "headDim", headDim)
	if nHeads%nKVHeads != 0 {
		fail(op, "nHeads=%d, want a multiple of nKVHeads=%d", nHeads, nKVHeads)
	}
}

// RoPE checks x [len(pos), nHeads*headDim] with an even headDim.
func RoPE(op string, lx, npos, nHeads, headDim int) {
	Positive(op, "tokens", npos, "nHeads", nHeads, "headDim", headDim)
	if headDim%2 != 0 {
		fail(op, "headDim=%d, want an even number", headDim)
	}
	Len(op, "x", lx, npos*nHeads*headDim, "len(pos)*nHeads*headDim")
}

// CausalAttention checks q, out [nq, nHeads*headDim] and k, v [kvLen, nKVHeads*headDim] with nq <= kvLen.
func CausalAttention(op string, lout, lq, lk, lv, nq, kvLen, nHeads, nKVHeads, headDim int) {
	Positive(op, "nq", nq, "kvLen", kvLen)
	Heads(op, nHeads, nKVHeads, headDim)
	if nq > kvLen {
		fail(op, "nq=%d, want <= kvLen=%d", nq, kvLen)
	}
	Len(op, "q", lq, nq*nHeads*headDim, "nq*nHeads*headDim")
	Len(op, "out", lout, nq*nHeads*headDim, "nq*nHeads*headDim")
	Len(op, "k", lk, kvLen*nKVHeads*headDim, "kvLen*nKVHeads*headDim")
	Len(op, "v", lv, kvLen*nKVHeads*headDim, "kvLen*nKVHeads*headDim")
}

// KVAppend checks k, v [len(slots), nKVHeads*headDim] and that every slot fits the caches.
func KVAppend(op string, lkc, lvc, lk, lv int, slots []int32, nKVHeads, headDim int) {
	Positive(op, "tokens", len(slots), "nKVHeads", nKVHeads, "headDim", headDim)
	row := nKVHeads * headDim
	Len(op, "k", lk, len(slots)*row, "len(slots)*nKVHeads*headDim")
	Len(op, "v", lv, len(slots)*row, "len(slots)*nKVHeads*headDim")
	Len(op, "vCache", lvc, lkc, "len(kCache)")
	if lkc == 0 || lkc%row != 0 {
		fail(op, "len(kCache)=%d, want a positive multiple of nKVHeads*headDim=%d", lkc, row)
	}
	nSlots := lkc / row
	for t, s := range slots {
		if int(s) >= nSlots {
			fail(op, "slots[%d]=%d, want < %d (cache slots)", t, s, nSlots)
		}
	}
}

// PagedAttention checks a batch of sequences over a paged cache: qStart has nSeqs+1 non-decreasing offsets
// into q's rows, every sequence has 1 <= its query count <= seqLens[i] <= maxBlocksPerSeq*blockSize, and every
// block it reads is inside the caches.
func PagedAttention(op string, lout, lq, lkc, lvc int, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int) {
	Heads(op, nHeads, nKVHeads, headDim)
	Positive(op, "maxBlocksPerSeq", maxBlocksPerSeq, "blockSize", blockSize)
	nSeqs := len(seqLens)
	Positive(op, "len(seqLens)", nSeqs)
	Len(op, "qStart", len(qStart), nSeqs+1, "len(seqLens)+1")
	Len(op, "blockTables", len(blockTables), nSeqs*maxBlocksPerSeq, "len(seqLens)*maxBlocksPerSeq")
	if qStart[0] != 0 {
		fail(op, "qStart[0]=%d, want 0", qStart[0])
	}
	nq := int(qStart[nSeqs])
	Len(op, "q", lq, nq*nHeads*headDim, "qStart[len(seqLens)]*nHeads*headDim")
	Len(op, "out", lout, nq*nHeads*headDim, "qStart[len(seqLens)]*nHeads*headDim")
	Len(op, "vCache", lvc, lkc, "len(kCache)")
	blockElems := blockSize * nKVHeads * headDim
	if lkc == 0 || lkc%blockElems != 0 {
		fail(op, "len(kCache)=%d, want a positive multiple of blockSize*nKVHeads*headDim=%d", lkc, blockElems)
	}
	nBlocks := lkc / blockElems
	for i := 0; i < nSeqs; i++ {
		n := int(qStart[i+1] - qStart[i])
		L := int(seqLens[i])
		if n < 1 || n > L {
			fail(op, "sequence %d has %d queries and seqLens=%d, want 1 <= queries <= seqLens", i, n, L)
		}
		if L > maxBlocksPerSeq*blockSize {
			fail(op, "seqLens[%d]=%d, want <= maxBlocksPerSeq*blockSize=%d", i, L, maxBlocksPerSeq*blockSize)
		}
		for b := 0; b < (L+blockSize-1)/blockSize; b++ {
			if id := blockTables[i*maxBlocksPerSeq+b]; id < 0 || int(id) >= nBlocks {
				fail(op, "blockTables[%d][%d]=%d, want a block id in [0, %d)", i, b, id, nBlocks)
			}
		}
	}
}

// GEMMGroup checks a group-quantized GEMM: A [m,k] float, W packed two 4-bit values a byte [n, k/2], scales and
// zero points [n, k/group], C [m,n], with group a positive even number dividing k.
func GEMMGroup(op string, m, n, k, group, la, lw, ls, lz, lc int) {
	Positive(op, "m", m, "n", n, "k", k, "group", group)
	if group%2 != 0 || k%group != 0 {
		fail(op, "group=%d, want an even divisor of k=%d", group, k)
	}
	Len(op, "a", la, m*k, "m*k")
	Len(op, "w", lw, n*k/2, "n*k/2")
	Len(op, "s", ls, n*k/group, "n*k/group")
	Len(op, "z", lz, n*k/group, "n*k/group")
	Len(op, "c", lc, m*n, "m*n")
}

// Blocks checks that n, a count of elements, is a positive multiple of block (GGUF quantizes in blocks of 32).
func Blocks(op, name string, n, block int) {
	if n <= 0 || n%block != 0 {
		fail(op, "%s=%d, want a positive multiple of %d", name, n, block)
	}
}

// GEMV checks y[n] = W[n,k]·x[k].
func GEMV(op string, n, k, lw, lx, ly int) {
	Positive(op, "n", n, "k", k)
	Len(op, "w", lw, n*k, "n*k")
	Len(op, "x", lx, k, "k")
	Len(op, "y", ly, n, "n")
}
