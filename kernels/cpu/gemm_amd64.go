//go:build !noasm

package cpu

import (
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"
	xcpu "golang.org/x/sys/cpu"
)

// The GEMM here is BLIS's loop nest (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
// Functionality", 2015) around one register-blocked micro-kernel in gemm_amd64.s:
//
//	for jc over n by gemmNC:            a block of gemmNC outputs
//	  for pc over k by gemmKC:          pack W[jc:jc+nc, pc:pc+kc] into panels of nr outputs, step-major (L3)
//	    for ic over m by gemmMC:        copy A[ic:ic+mc, pc:pc+kc] into rows of stride gemmKC (L2)
//	      for jr over the W panels:     one W panel, kc×nr, stays in L1 ...
//	        for ir over rows by mr:     ... while mr rows of A pass it: the micro-kernel, C[mr×nr] += A·Wᵀ
//
// The micro-kernel keeps an mr×nr tile of C in registers, as nr/16 (or nr/8) vectors along the outputs per row,
// and per step p loads one row of the W panel and broadcasts mr values of A. Because W is [n, k], a W panel is
// a transpose of nr rows of W (gathered, gemmPackB32AVX512); A's rows are used as stored, only copied into a
// buffer with a fixed row stride gemmKC that the kernel addresses by constant displacements.

// The micro-kernels compute, for r < mr and j < nr,
//
//	c[r*ldc+j] = Σ_{p<kc} a[r*lda+p]·b[p*nr+j]   (acc == 0)
//	c[r*ldc+j] += Σ_{p<kc} a[r*lda+p]·b[p*nr+j]  (acc != 0)
//
// with a the rows of A (copied, or W's rows in place in gemmFew) and b a packed W panel. kc >= 1.
//
//go:noescape
func gemmKernel14x32AVX512(kc int, a *float32, lda int, b, c *float32, ldc, acc int)

//go:noescape
func gemmKernel6x16AVX2(kc int, a *float32, lda int, b, c *float32, ldc, acc int)

// gemmPackB32AVX512 packs a W panel of 32 outputs: dst[p*32+r] = src[r*ld+p] for p < kc, r < rows, and 0 for
// rows <= r < 32. 1 <= rows <= 32 and 31*ld < 1<<31 (the gather indices are int32).
//
//go:noescape
func gemmPackB32AVX512(dst, src *float32, ld, rows, kc int)

// The GEMV kernels set y[j] = Σ_p w[j*k+p]·x[p] for j < rows. AVX-512: any positive rows, every step p < k (its
// masked loads read nothing past a row), four rows at a time against each load of x (the rest one at a time),
// one accumulator a row, so that each output is summed in the order every AVX-512 GEMV kernel keeps
// (gemm_amd64.s). AVX2: rows a positive multiple of 4, p < k&^7 (the caller adds the rest), four rows at a time,
// two accumulators each, against the same loads of x. The F16 kernels widen the binary16 weights with VCVTPH2PS
// as they are loaded.
//
//go:noescape
func gemvAVX512(rows, k int, w, x, y *float32)

//go:noescape
func gemvF16AVX512(rows, k int, w *uint16, x, y *float32)

//go:noescape
func gemvAVX2(rows, k int, w, x, y *float32)

// gemvTokensAVX512 and gemvTokensF16AVX512 are the AVX-512 GEMV kernels for tokens (1-4) tokens at once, x
// holding them k floats apart: y[t*ldy+j] = Σ_p w[j*k+p]·x[t*k+p], each bit for bit what the one-token kernel
// gives. They read one row at a time. gemvTiles8AVX512 and gemvTiles8F16AVX512 read three (groups groups of
// three rows) against up to eight tokens, for six times the FMAs a load of W, with the tokens' x packed by
// gemvPanel, and prefetch pf.per lines a step from pf. They run k steps of rows ldw values apart. In mode 1 each
// group's 24 sums start from those acc holds (1536 bytes a group), and in mode 2 they are left there instead of
// folded and stored: a long row then runs as calls over chunks of its steps (gemvTileK), whose x stays in L1.
//
//go:noescape
func gemvTokensAVX512(rows, k int, w, x, y *float32, tokens, ldy int)

//go:noescape
func gemvTokensF16AVX512(rows, k int, w *uint16, x, y *float32, tokens, ldy int)

//go:noescape
func gemvTiles8AVX512(groups, k, ldw int, w, xp, y *float32, tokens, ldy int, pf *linePrefetch, acc *float32, mode int)

//go:noescape
func gemvTiles8F16AVX512(groups, k, ldw int, w *uint16, xp, y *float32, tokens, ldy int, pf *linePrefetch,
	acc *float32, mode int)

// linePrefetch is a run of cache lines for a kernel to prefetch: the address of the next, how many are left, and
// how many a step (at least one) for the GEMV tiles; the W4A8 tile takes one a step.
type linePrefetch struct {
	addr  uintptr
	lines int
	per   int
}

//go:noescape
func gemvFarAVX512(rows, k int, w, x, y *float32)

//go:noescape
func gemvF16AVX2(rows, k int, w *uint16, x, y *float32)

//go:noescape
func gemvTokensAVX2(rows, k int, w, x, y *float32, tokens, ldy int)

//go:noescape
func gemvTokensF16AVX2(rows, k int, w *uint16, x, y *float32, tokens, ldy int)

// Cache blocking, for Zen 4/5 and recent Intel cores (48 KiB L1D, 1-2 MiB L2 per core). A W panel, gemmKC×32
// floats (32 KiB), stays in L1 while up to gemmMC rows of A (gemmMC×gemmKC floats, under 512 KiB) come from L2;
// a packed block of W, gemmKC×gemmNC floats (2 MiB), comes from L3.
const (
	gemmKC = 256
	gemmMC = 448
	gemmNC = 2048
)

// gemmArch is one micro-kernel with its tile and its W panel packer.
type gemmArch struct {
	name   string
	mr, nr int
	kernel func(kc int, a *float32, lda int, b, c *float32, ldc, acc int)
	packB  func(dst, src []float32, ld, rows, kc int)
}

var (
	gemmAVX512 = gemmArch{"avx512", 14, 32, gemmKernel14x32AVX512, gemmPackB32}
	gemmAVX2   = gemmArch{"avx2", 6, 16, gemmKernel6x16AVX2, gemmPackBGo16}
)

var (
	hasGEMMAVX512 = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512BW
	hasGEMMAVX2   = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA && xcpu.X86.HasF16C
)

// gemvArch is one instruction set's GEMV kernels: they take a multiple of rows rows of W and leave the last
// k&rest steps of each row to the caller. tokens32 and tokens16, where set, run up to four tokens at once, a row
// at a time; tiles32 and tiles16 run up to gemvTileTokens tokens, gemvTileRows rows at a time.
type gemvArch struct {
	f32      func(rows, k int, w, x, y *float32)
	far32    func(rows, k int, w, x, y *float32) // f32 for W over gemvFarBytes (nil: f32)
	f16      func(rows, k int, w *uint16, x, y *float32)
	rows     int
	rest     int
	tokens32 func(rows, k int, w, x, y *float32, tokens, ldy int)
	tokens16 func(rows, k int, w *uint16, x, y *float32, tokens, ldy int)
	tiles32  func(groups, k, ldw int, w, xp, y *float32, tokens, ldy int, pf *linePrefetch, acc *float32, mode int)
	tiles16  func(groups, k, ldw int, w *uint16, xp, y *float32, tokens, ldy int, pf *linePrefetch, acc *float32,
		mode int)
}

var (
	gemvAVX512Arch = gemvArch{gemvAVX512, gemvFarAVX512, gemvF16AVX512, 1, 0, gemvTokensAVX512,
		gemvTokensF16AVX512, gemvTiles8AVX512, gemvTiles8F16AVX512}
	gemvAVX2Arch = gemvArch{gemvAVX2, nil, gemvF16AVX2, 4, 7, gemvTokensAVX2, gemvTokensF16AVX2, nil, nil}
)

// gemmActive and gemvActive are the kernels GEMM and GEMV use (nil: the pure-Go loops). Tests switch them to
// check every path on one machine.
var gemmActive, gemvActive = gemmPick()

func gemmPick() (*gemmArch, *gemvArch) {
	switch {
	case hasGEMMAVX512:
		return &gemmAVX512, &gemvAVX512Arch
	case hasGEMMAVX2:
		return &gemmAVX2, &gemvAVX2Arch
	}
	return nil, nil
}

// gemmPackB32 packs a panel of 32 outputs with AVX-512 gathers, or with the Go loop where ld is too large for
// the gathers' int32 indices.
func gemmPackB32(dst, src []float32, ld, rows, kc int) {
	if 31*ld >= 1<<31 {
		gemmPackBGo(dst, src, ld, rows, kc, 32)
		return
	}
	_ = dst[32*kc-1]
	_ = src[(rows-1)*ld+kc-1]
	gemmPackB32AVX512(&dst[0], &src[0], ld, rows, kc)
}

func gemmPackBGo16(dst, src []float32, ld, rows, kc int) { gemmPackBGo(dst, src, ld, rows, kc, 16) }

// gemmPackBGo packs a W panel of nr outputs: dst[p*nr+r] = src[r*ld+p] for p < kc, r < rows, and 0 for
// rows <= r < nr.
func gemmPackBGo(dst, src []float32, ld, rows, kc, nr int) {
	dst = dst[:kc*nr]
	for r := 0; r < rows; r++ {
		for p, v := range src[r*ld : r*ld+kc] {
			dst[p*nr+r] = v
		}
	}
	for p := 0; p < kc; p++ {
		clear(dst[p*nr+rows : (p+1)*nr])
	}
}

// gemmBufs are one thread's packing buffers, reused through a free list (scratch.go says why not a sync.Pool).
type gemmBufs struct {
	a    []float32 // rows of A, stride gemmKC
	b    []float32 // panels of W
	wide []float32 // rows of binary16 W widened to float32, stride gemmKC
	tile []float32 // an edge tile of C
}

var gemmBufsList freeList[gemmBufs]

// getGEMMBufs returns a thread's buffers from the list, allocated on first use; put them back with
// gemmBufsList.put.
func getGEMMBufs() *gemmBufs {
	const maxMR, maxNR = 14, 32
	b := gemmBufsList.get()
	if b.a == nil {
		*b = gemmBufs{
			a:    make([]float32, (gemmMC+maxMR)*gemmKC),
			b:    make([]float32, (gemmNC+maxNR)*gemmKC),
			wide: make([]float32, maxNR*gemmKC),
			tile: make([]float32, maxMR*maxNR),
		}
	}
	return b
}

// gemmPanel packs the W panel of outputs j..j+rows-1, steps pc..pc+kc-1 into dst, using wide as scratch.
type gemmPanel func(u *gemmArch, dst, wide []float32, j, pc, rows, kc int)

func gemm(m, n, k int, a, w, c []float32) {
	u := gemmActive
	if u == nil {
		gemmGo(m, n, k, a, w, c)
		return
	}
	if g := gemvActive; g.takesTokens(m, k) {
		gemvTokens(g, m, k, a, []GEMMWeights{{N: n, F32: w}}, [][]float32{c})
		return
	}
	if m <= gemmFewMaxM {
		gemmFew(u, m, n, k, a, c, GEMMWeights{F32: w})
		return
	}
	gemmRun(u, m, n, k, a, c, func(u *gemmArch, dst, _ []float32, j, pc, rows, kc int) {
		u.packB(dst, w[j*k+pc:], k, rows, kc)
	})
}

func gemmF16(m, n, k int, a []float32, w []uint16, c []float32) {
	u := gemmActive
	if u == nil {
		gemmF16Go(m, n, k, a, w, c)
		return
	}
	if g := gemvActive; g.takesTokens(m, k) {
		gemvTokens(g, m, k, a, []GEMMWeights{{N: n, F16: w}}, [][]float32{c})
		return
	}
	if m <= gemmFewMaxM {
		gemmFew(u, m, n, k, a, c, GEMMWeights{F16: w})
		return
	}
	gemmRun(u, m, n, k, a, c, func(u *gemmArch, dst, wide []float32, j, pc, rows, kc int) {
		for r := 0; r < rows; r++ {
			half.F16ToF32Slice(wide[r*gemmKC:r*gemmKC+kc], w[(j+r)*k+pc:][:kc])
		}
		u.packB(dst, wide, gemmKC, rows, kc)
	})
}

// gemvTokensMaxM is the most tokens for which GEMM runs as few-token GEMVs (gemvTokens). Up to it a token's
// outputs do not depend on how many tokens share the call, which holds the engine's batched logits to those of
// each sequence alone. At 8 tokens it is about 2.7x gemmFew; at 32, 20% (4096x768) and 50% (stories110M's
// classifier, 32000x768) faster, and 25% slower at k=2048, where eight tokens' x no longer fits L1:
// BenchmarkGEMMFew against BenchmarkGEMMf32 at those shapes.
const gemvTokensMaxM = 64

// gemvTileRows and gemvTileTokens are the tile kernels' shape: rows of W by tokens.
const gemvTileRows, gemvTileTokens = 3, 8

// gemvTileK is the most steps of a tile kernel call: eight tokens' x over them, 32 KiB, stays in L1 with the
// rows of W. A longer k runs as calls over chunks of it, the sums carried from one to the next in acc (bit for
// bit a single call).
const gemvTileK = 1024

// takesTokens reports whether GEMM of m tokens over k steps runs as few-token GEMVs (gemvTokens). Without tile
// kernels (AVX2) that is up to four tokens, and up to gemvTokensMaxM where four tokens' x, over k <= gemvTileK
// steps, stays in L1: past it the packed products (gemmFew) are faster.
func (g *gemvArch) takesTokens(m, k int) bool {
	if g == nil || g.tokens32 == nil || m > gemvTokensMaxM {
		return false
	}
	return g.tiles32 != nil || m <= 4 || k <= gemvTileK
}

// gemvRowsL2 is the bytes of a block of W (as float32) that gemvTokens runs against every four tokens in turn
// where there are no tile kernels: a share of L2 that the block stays in from the first four tokens to the last.
const gemvRowsL2 = 128 << 10

// gemvTokensRows is the rows of W that gemvTokens runs against all the tokens before it moves on, while the
// kernels prefetch the next as many: 63, whole tiles.
const gemvTokensRows = 64 / gemvTileRows * gemvTileRows

// gemms runs GEMMs as one gemvTokens call where GEMM would run the few-token GEMVs, and reports whether it did.
func gemms(m, k int, a []float32, ws []GEMMWeights, cs [][]float32) bool {
	g := gemvActive
	if gemmActive == nil || !g.takesTokens(m, k) {
		return false
	}
	gemvTokens(g, m, k, a, ws, cs)
	return true
}

// gemvTokens is GEMM for a few tokens as GEMVs, each token's outputs bit for bit those of a one-token GEMV, for
// one or more matrices ws that share the tokens a (matrix i's outputs into cs[i]): the rows of all the matrices
// split across threads as one range. Up to four tokens, each thread's rows run in blocks of up to
// gemvTokensRows rows of one matrix, the row-at-a-time kernel streaming W from memory. For more, the blocks
// (gemvTokensRows rows of one matrix) are ParallelWork's items, and the tile kernels run each against each group
// of eight tokens in turn (the block's last rows short of a tile on the row-at-a-time kernel), from cache, and
// prefetch the next block of the thread's run, spread over this block's steps: W is read from memory once,
// mostly ahead of its products. Without tile kernels (AVX2) the row-at-a-time kernel runs each block, of
// gemvRowsL2 bytes, against every four tokens in turn, the block in L2 after the first; one token runs GEMV's
// kernel of several rows at once.
func gemvTokens(g *gemvArch, m, k int, a []float32, ws []GEMMWeights, cs [][]float32) {
	if m == 1 && g.rows > 1 {
		// One token: the kernel of several rows at once (AVX2), the same sums.
		for i, w := range ws {
			if w.F32 != nil {
				gemv(w.N, k, w.F32, a, cs[i])
			} else {
				gemvF16(w.N, k, w.F16, a, cs[i])
			}
		}
		return
	}
	rows := gemvTokensRows
	if m > 4 && g.tiles32 == nil {
		// Each four tokens read the block again: it must stay in L2 for them.
		rows = min(max(gemvRowsL2/(4*k), 4), gemvTokensRows)
	}
	blocks := newTileList(ws, func(w GEMMWeights) int { return w.N }, rows)
	grain := (gemmMinWork/(m*k) + rows) / rows // blocks
	if m <= 4 || g.tiles32 == nil {
		Parallel(blocks.total(), grain, func(lo, hi int) {
			for b := lo; b < hi; b++ {
				i, j, n := blocks.at(b)
				ws[i].gemvRows(g, n, k, j, a, cs[i][j:], m, ws[i].N)
			}
		})
		return
	}
	xp, xpBuf := scratchF32(gemvPanelLen(m, k))
	defer xpBuf.release()
	gemvPanel(xp, m, k, a)
	stride := gemvPanelLen(gemvTileTokens, k)
	// A long k runs in chunks of gemvTileK steps. Past two chunks they go outermost, each chunk of the block run
	// against every group of tokens before the next, so that the chunk of W stays in L1 across the groups; at
	// 7B-class shapes (k = 4096, 11008) that is the faster order, at k = 2048 the two are level.
	outer := k > 2*gemvTileK
	ParallelWork(blocks.total(), grain, func(work *Work) {
		var pf linePrefetch
		var acc []float32 // the sums between chunks: a group of tokens' (inner), or all the groups' (outer)
		const accGroup = gemvTokensRows / gemvTileRows * gemvTileSums
		if k > gemvTileK {
			size := accGroup
			if outer {
				size *= (m + gemvTileTokens - 1) / gemvTileTokens
			}
			var accBuf scratchHandle[float32]
			acc, accBuf = scratchF32(size)
			defer accBuf.release()
		}
		for b, _, ok := work.Next(1); ok; b, _, ok = work.Next(1) {
			i, j, n := blocks.at(b)
			w, c, ldc := ws[i], cs[i], ws[i].N
			tiled := n / gemvTileRows * gemvTileRows
			pf = linePrefetch{}
			if nb, ok := work.Peek(); ok {
				ni, nj, nn := blocks.at(nb)
				// Spread over this block's steps, so that a few tokens (one group) still fetch it all.
				steps := (m + gemvTileTokens - 1) / gemvTileTokens * tiled / gemvTileRows * ((k + 15) / 16)
				pf = ws[ni].lines(nj, nn, k, max(1, steps))
			}
			tile := func(t, pc int, acc []float32) {
				w.gemvTiles(g, tiled, k, pc, j, xp[t/gemvTileTokens*stride:], c[t*ldc+j:], min(gemvTileTokens, m-t),
					ldc, &pf, acc)
			}
			for t := 0; t < m && tiled > 0 && !outer; t += gemvTileTokens {
				for pc := 0; pc < k; pc += gemvTileK {
					tile(t, pc, acc)
				}
			}
			for pc := 0; pc < k && tiled > 0 && outer; pc += gemvTileK {
				for t := 0; t < m; t += gemvTileTokens {
					tile(t, pc, acc[t/gemvTileTokens*accGroup:])
				}
			}
			for t := 0; t < m && tiled < n; t += gemvTileTokens {
				w.gemvRows(g, n-tiled, k, j+tiled, a[t*k:], c[t*ldc+j+tiled:], min(gemvTileTokens, m-t), ldc)
			}
		}
	})
}

// tileList is the tiles of rows rows (a matrix's last may have fewer) of several matrices taken one after another,
// for ParallelWork or Parallel to hand out: matrix i's are [first[i], first[i+1]), of its n[i] rows.
type tileList struct {
	rows     int
	first, n []int
}

// newTileList lists the tiles of rows rows of mats, whose rows n gives.
func newTileList[W any](mats []W, n func(W) int, rows int) tileList {
	l := tileList{rows, make([]int, 1, len(mats)+1), make([]int, 0, len(mats))}
	for _, w := range mats {
		l.first = append(l.first, l.first[len(l.first)-1]+(n(w)+rows-1)/rows)
		l.n = append(l.n, n(w))
	}
	return l
}

func (l tileList) total() int { return l.first[len(l.first)-1] }

// at returns the matrix, the first row and the rows of tile b.
func (l tileList) at(b int) (i, j, rows int) {
	for b >= l.first[i+1] {
		i++
	}
	j = (b - l.first[i]) * l.rows
	return i, j, min(l.rows, l.n[i]-j)
}

// gemvPanelLen is the floats of the x panel of m tokens over k steps.
func gemvPanelLen(m, k int) int {
	return (m + gemvTileTokens - 1) / gemvTileTokens * ((k + 15) / 16) * 16 * gemvTileTokens
}

// gemvPanel packs the m tokens of a (k floats apart) for the tile kernels: for each group of gemvTileTokens
// tokens, for each 16 steps, the 16 values of each token in turn, zero past k; a group short of gemvTileTokens
// repeats its first token.
func gemvPanel(xp []float32, m, k int, a []float32) {
	i := 0
	for t0 := 0; t0 < m; t0 += gemvTileTokens {
		for p := 0; p < k; p += 16 {
			for t := t0; t < t0+gemvTileTokens; t++ {
				src := t
				if src >= m {
					src = t0
				}
				if p+16 <= k {
					*(*[16]float32)(xp[i:]) = *(*[16]float32)(a[src*k+p:])
				} else {
					clear(xp[i+copy(xp[i:i+16], a[src*k+p:src*k+k]) : i+16])
				}
				i += 16
			}
		}
	}
}

// gemvRows runs the row-at-a-time kernel on rows rows of W from row j against tokens tokens of x (k apart), the
// outputs ldy apart in y, four tokens a call.
func (w GEMMWeights) gemvRows(g *gemvArch, rows, k, j int, x, y []float32, tokens, ldy int) {
	for t := 0; t < tokens; t += 4 {
		n := min(4, tokens-t)
		if w.F32 != nil {
			g.tokens32(rows, k, &w.F32[j*k], &x[t*k], &y[t*ldy], n, ldy)
		} else {
			g.tokens16(rows, k, &w.F16[j*k], &x[t*k], &y[t*ldy], n, ldy)
		}
	}
	if kk := k &^ g.rest; kk < k {
		for t := 0; t < tokens; t++ {
			w.gemvTail(rows, k, kk, j, x[t*k:(t+1)*k], y[t*ldy:])
		}
	}
}

// gemvTail adds the last steps from kk of rows rows of W from row j against x to y, as gemv and gemvF16 do
// after a kernel that leaves them.
func (w GEMMWeights) gemvTail(rows, k, kk, j int, x, y []float32) {
	for r := 0; r < rows; r++ {
		if w.F32 != nil {
			y[r] += gemmDot(w.F32[(j+r)*k+kk:(j+r+1)*k], x[kk:])
			continue
		}
		for p := kk; p < k; p++ {
			y[r] += half.F16ToF32(w.F16[(j+r)*k+p]) * x[p]
		}
	}
}

// gemvTiles runs the tile kernels on rows rows of W (whole tiles) from row j against a group of tokens of the x
// panel, over the gemvTileK steps from pc (or to k), with acc (gemvTileSums floats a group of rows) holding the
// sums from one chunk of steps to the next where k is longer.
func (w GEMMWeights) gemvTiles(g *gemvArch, rows, k, pc, j int, xp, y []float32, tokens, ldy int, pf *linePrefetch,
	acc []float32) {
	groups := rows / gemvTileRows
	var sums *float32
	if k > gemvTileK {
		sums = &acc[:groups*gemvTileSums][0]
	}
	kc, mode := min(gemvTileK, k-pc), 0
	if pc > 0 {
		mode |= 1
	}
	if pc+kc < k {
		mode |= 2
	}
	x := &xp[pc*gemvTileTokens] // 16 steps of the eight tokens after 16 steps of them
	if w.F32 != nil {
		g.tiles32(groups, kc, k, &w.F32[j*k+pc], x, &y[0], tokens, ldy, pf, sums, mode)
	} else {
		g.tiles16(groups, kc, k, &w.F16[j*k+pc], x, &y[0], tokens, ldy, pf, sums, mode)
	}
}

// gemvTileSums is the floats of a tile kernel's sums for a group of rows: 24 vectors of 16.
const gemvTileSums = gemvTileRows * gemvTileTokens * 16

// lines is the prefetch stream of rows rows of W from row j, spread over steps kernel steps.
func (w GEMMWeights) lines(j, rows, k, steps int) linePrefetch {
	var p linePrefetch
	if w.F32 != nil {
		p = linePrefetch{uintptr(unsafe.Pointer(&w.F32[j*k])), (rows*k*4 + 63) / 64, 0}
	} else {
		p = linePrefetch{uintptr(unsafe.Pointer(&w.F16[j*k])), (rows*k*2 + 63) / 64, 0}
	}
	p.per = max(1, (p.lines+steps-1)/steps)
	return p
}

// gemmFewMaxM is the most tokens for which GEMM runs gemmFew.
const gemmFewMaxM = 64

// copy writes steps pc..pc+kc-1 of rows j..j+rows-1 of W, as float32, into dst at stride gemmKC.
func (w GEMMWeights) copy(dst []float32, k, j, pc, rows, kc int) {
	for r := 0; r < rows; r++ {
		if w.F16 != nil {
			half.F16ToF32Slice(dst[r*gemmKC:r*gemmKC+kc], w.F16[(j+r)*k+pc:][:kc])
		} else {
			copy(dst[r*gemmKC:r*gemmKC+kc], w.F32[(j+r)*k+pc:][:kc])
		}
	}
}

// gemmFew is GEMM for a few tokens (batched decode) where the few-token GEMV kernels are missing (AVX2), with
// the operands' roles swapped: it computes Cᵀ = W·Aᵀ, so that W's rows are the micro-kernel's broadcast operand,
// read in place (float32) or widened into a buffer (binary16, and the last rows, which fill no whole tile), and
// the tokens are packed into panels of nr instead, once a call. Packing W, a gather and transpose of every
// weight, costs as much as the products at this m and would be paid again on every call. Each output is summed
// in the same order as gemmRun sums it (kc steps in registers, then added to C), so the two give identical
// results.
func gemmFew(u *gemmArch, m, n, k int, a, c []float32, w GEMMWeights) {
	mr, nr := u.mr, u.nr
	panels := (m + nr - 1) / nr
	blocks := (k + gemmKC - 1) / gemmKC
	// at[(pb*panels+tp)*gemmKC*nr:] is the panel of tokens tp*nr.., steps pb*gemmKC.. (kc×nr).
	at, atBuf := scratchF32(blocks * panels * gemmKC * nr)
	defer atBuf.release()
	for pb := range blocks {
		pc := pb * gemmKC
		kc := min(gemmKC, k-pc)
		for tp := range panels {
			u.packB(at[(pb*panels+tp)*gemmKC*nr:], a[tp*nr*k+pc:], k, min(nr, m-tp*nr), kc)
		}
	}
	Parallel((n+mr-1)/mr, gemmMinWork/(m*k*mr)+1, func(lo, hi int) {
		bufs := getGEMMBufs()
		defer gemmBufsList.put(bufs)
		ct := bufs.tile // Cᵀ for mr outputs and nr tokens
		wa := bufs.a    // widened rows of W, kc steps at a time: block pb at wa[pb*mr*gemmKC:]
		if len(wa) < blocks*mr*gemmKC {
			var waBuf scratchHandle[float32]
			wa, waBuf = scratchF32(blocks * mr * gemmKC)
			defer waBuf.release()
		}
		for g := lo; g < hi; g++ {
			j := g * mr
			rows := min(mr, n-j)
			inPlace := w.F16 == nil && rows == mr
			for tp := range panels {
				for pb := range blocks {
					pc := pb * gemmKC
					kc := min(gemmKC, k-pc)
					if tp == 0 && !inPlace {
						w.copy(wa[pb*mr*gemmKC:], k, j, pc, rows, kc)
					}
					acc := 0
					if pb > 0 {
						acc = 1
					}
					wr, lda := &wa[pb*mr*gemmKC], gemmKC
					if inPlace {
						wr, lda = &w.F32[j*k+pc], k
					}
					u.kernel(kc, wr, lda, &at[(pb*panels+tp)*gemmKC*nr], &ct[0], nr, acc)
				}
				storeTransposed(c[tp*nr*n:], n, j, rows, min(nr, m-tp*nr), ct, nr)
			}
		}
	})
}

// storeTransposed writes a kernel's tile of Cᵀ back to C [tokens, n]: c[t*n+j0+r] = tile[r*ld+t] for the
// tile's rows r < rows (outputs j0..) and tokens t < tokens.
func storeTransposed[T float32 | int32](c []T, n, j0, rows, tokens int, tile []T, ld int) {
	for t := range tokens {
		dst := c[t*n+j0:][:rows]
		for r := range dst {
			dst[r] = tile[r*ld+t]
		}
	}
}

// gemmRun splits C into one block of whole tiles per thread, across the outputs (columns) when there are at least
// as many column tiles as row tiles, else across the rows, and runs the loop nest on each block.
func gemmRun(u *gemmArch, m, n, k int, a, c []float32, panel gemmPanel) {
	tm, tn := (m+u.mr-1)/u.mr, (n+u.nr-1)/u.nr
	if tn >= tm {
		Parallel(tn, gemmMinWork/(m*k*u.nr)+1, func(lo, hi int) {
			gemmBlock(u, m, n, k, a, c, panel, 0, m, lo*u.nr, min(hi*u.nr, n))
		})
		return
	}
	Parallel(tm, gemmMinWork/(n*k*u.mr)+1, func(lo, hi int) {
		gemmBlock(u, m, n, k, a, c, panel, lo*u.mr, min(hi*u.mr, m), 0, n)
	})
}

// gemmBlock computes rows i0..i1-1, columns j0..j1-1 of C with the loop nest described at the top of this file.
func gemmBlock(u *gemmArch, m, n, k int, a, c []float32, panel gemmPanel, i0, i1, j0, j1 int) {
	bufs := getGEMMBufs()
	defer gemmBufsList.put(bufs)
	mcMax := gemmMC / u.mr * u.mr
	for jc := j0; jc < j1; jc += gemmNC {
		nc := min(gemmNC, j1-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			for jr := 0; jr < nc; jr += u.nr {
				panel(u, bufs.b[jr*kc:], bufs.wide, jc+jr, pc, min(u.nr, nc-jr), kc)
			}
			acc := 0
			if pc > 0 {
				acc = 1
			}
			for ic := i0; ic < i1; ic += mcMax {
				mc := min(mcMax, i1-ic)
				for r := 0; r < mc; r++ {
					copy(bufs.a[r*gemmKC:r*gemmKC+kc], a[(ic+r)*k+pc:])
				}
				gemmMacro(u, bufs, c[ic*n+jc:], n, mc, nc, kc, acc)
			}
		}
	}
}

// gemmMacro runs the micro-kernel over the mc×nc block of C at c (row stride ldc) from packed rows of A and
// panels of W. Edge tiles are computed into bufs.tile and their valid part copied (or added) into C.
func gemmMacro(u *gemmArch, bufs *gemmBufs, c []float32, ldc, mc, nc, kc, acc int) {
	mr, nr := u.mr, u.nr
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		b := &bufs.b[jr*kc]
		for ir := 0; ir < mc; ir += mr {
			rows := min(mr, mc-ir)
			a := &bufs.a[ir*gemmKC]
			if rows == mr && cols == nr {
				_ = c[(ir+mr-1)*ldc+jr+nr-1]
				u.kernel(kc, a, gemmKC, b, &c[ir*ldc+jr], ldc, acc)
				continue
			}
			u.kernel(kc, a, gemmKC, b, &bufs.tile[0], nr, 0)
			for r := 0; r < rows; r++ {
				dst := c[(ir+r)*ldc+jr:][:cols]
				src := bufs.tile[r*nr:][:cols]
				if acc != 0 {
					for j, v := range src {
						dst[j] += v
					}
				} else {
					copy(dst, src)
				}
			}
		}
	}
}

// gemvFarBytes is the size of W over which GEMV prefetches it into L2 ahead of the loads (gemvFarAVX512): W that
// large streams from memory in a model, and one that fits half a core's L2 is better read without the prefetches'
// load slots.
const gemvFarBytes = 1 << 20

func gemv(n, k int, w, x, y []float32) {
	g := gemvActive
	if g == nil {
		gemvGo(n, k, w, x, y)
		return
	}
	r, kk := g.rows, k&^g.rest
	groups := n / r
	f := g.f32
	if g.far32 != nil && 4*n*k > gemvFarBytes {
		f = g.far32
	}
	Parallel(groups, gemmMinWork/(r*k)+1, func(lo, hi int) {
		f(r*(hi-lo), k, &w[r*lo*k], &x[0], &y[r*lo])
		for j := r * lo; kk < k && j < r*hi; j++ {
			y[j] += gemmDot(w[j*k+kk:(j+1)*k], x[kk:])
		}
	})
	if rest := n - r*groups; rest > 0 && g.tokens32 != nil {
		GEMMWeights{N: n, F32: w}.gemvRows(g, rest, k, r*groups, x, y[r*groups:], 1, n)
		return
	}
	for j := r * groups; j < n; j++ {
		y[j] = gemmDot(w[j*k:(j+1)*k], x)
	}
}

func gemvF16(n, k int, w []uint16, x, y []float32) {
	g := gemvActive
	if g == nil {
		gemvF16Go(n, k, w, x, y)
		return
	}
	r, kk := g.rows, k&^g.rest
	groups := n / r
	Parallel(groups, gemmMinWork/(r*k)+1, func(lo, hi int) {
		g.f16(r*(hi-lo), k, &w[r*lo*k], &x[0], &y[r*lo])
		for j := r * lo; kk < k && j < r*hi; j++ {
			for p := kk; p < k; p++ {
				y[j] += half.F16ToF32(w[j*k+p]) * x[p]
			}
		}
	})
	if rest := n - r*groups; rest > 0 && g.tokens16 != nil {
		GEMMWeights{N: n, F16: w}.gemvRows(g, rest, k, r*groups, x, y[r*groups:], 1, n)
		return
	}
	if rest := n - r*groups; rest > 0 {
		gemvF16Go(rest, k, w[r*groups*k:], x, y[r*groups:])
	}
}

// TokenInvariant reports whether GEMM and GEMMF16 give each token of a call of up to 64 tokens, bit for bit, the
// outputs it gets alone: true where they run as few-token GEMVs (AVX-512). Elsewhere the packed products' tiles
// sum a token's rows in an order that depends on how many tokens share the call, and the outputs agree to
// rounding: on AVX2 that is above four tokens over more than gemvTileK steps (takesTokens).
func TokenInvariant() bool {
	g := gemvActive
	return gemmActive == nil || (g != nil && g.tokens32 != nil && g.tokens16 != nil && g.tiles32 != nil)
}
