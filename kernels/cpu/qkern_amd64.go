//go:build !noasm

package cpu

import (
	"encoding/binary"
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"

	xcpu "golang.org/x/sys/cpu"
)

// Feature switches for the quantized kernels of qkern_amd64.s. Tests clear them to run the pure-Go paths on the
// same machine.
var (
	// qVNNI selects the VPDPBUSD kernels: AVX-512 F, BW (byte masks and broadcasts), VL (the 256-bit forms of the
	// GGUF dots), VNNI, and F16C for the GGUF block scales.
	qVNNI = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512BW && xcpu.X86.HasAVX512VL && xcpu.X86.HasAVX512VNNI &&
		xcpu.X86.HasF16C
	// qAVX512 selects the float kernels of W8A16, W4A16 and the quantizer (AVX-512 F, and VL for the 128- and
	// 256-bit EVEX forms of their reductions).
	qAVX512 = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512VL
	// qAVX2 selects the AVX2 twins (qkern_avx2_amd64.s) where AVX-512 VNNI is missing: AVX2 and FMA.
	qAVX2 = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA
)

//go:noescape
func qDotW4A8Rows32AVX2(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa float32, y *float32)

//go:noescape
func qDotW4A8Rows32x4AVX2(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa *float32, y *float32, ldy int)

//go:noescape
func qDotI8x4VNNI(w *int8, k int, a *int8, acc *[4]int32)

//go:noescape
func qDotI8RowsVNNI(w *int8, k int, a *int8, rows int, acc *int32)

//go:noescape
func qSumI8VNNI(a *int8, n int) int32

//go:noescape
func qPackW(dst, src *byte, idx *int32, mask uint64, kq, nr int, flip uint32, sums *float32, gsteps int)

//go:noescape
func qW4UnpackAVX512(dst, w *uint8, n int)

//go:noescape
func qDeinterleaveAVX512(dst, src *int8, n int)

//go:noescape
func qW4A8TileVNNI(codes *uint8, k int, tok *int8, groups, steps int, zf, scale *float32, gs int, sa *float32,
	mask uint64, c *float32, ldc int, pf *linePrefetch, tsum *float32, next *[2]linePrefetch)

//go:noescape
func qW8A8TileVNNI(w *int8, k int, tok *uint8, steps int, bias *int32, sw, sa *float32, mask uint64, c *float32,
	ldc int, pf *prefetchStream)

//go:noescape
func qKernelI8VNNI(a *int8, lda int, wp *uint8, kq int, c *int32, ldc, rows int, mask uint64, bias *int32,
	pf *prefetchStream)

//go:noescape
func qKernelI8F32VNNI(a *int8, lda int, wp *uint8, kq int, c *float32, ldc, rows int, mask uint64, bias *int32,
	sa, sw *float32, pf *prefetchStream)

//go:noescape
func qDotI8F32AVX512(x *float32, w *int8, n int) float32

//go:noescape
func qDotW4AVX512(xd *float32, w *uint8, s *float32, z *uint8, groups, pairs int) float32

//go:noescape
func qDotW4A8RowsVNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa float32, y *float32)

//go:noescape
func qDotW4A8Rows4VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa float32, y *float32)

//go:noescape
func qDotW4A8Rows32VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa float32, y *float32)

//go:noescape
func qDotW4A8Rows64VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
	sa float32, y *float32)

//go:noescape
func qMaxAbsAVX512(x *float32, n int) float32

// qU8ToF32AVX512 writes dst[i] = float32(src[i]) for i < n.
//
//go:noescape
func qU8ToF32AVX512(dst *float32, src *uint8, n int)

//go:noescape
func qRoundInt8AVX512(x *float32, q *int8, n int, inv float32)

//go:noescape
func qStoreInt32AVX512(dst, acc *int32, n int, bias int32)

//go:noescape
func qStoreScaledAVX512(dst *float32, acc *int32, n int, bias int32, sa float32, sw *float32)

//go:noescape
func qTileI8F32AVX512(a *float32, lda int, w *int8, ldw int, n int, c *[16]float32)

//go:noescape
func qTileW4AVX512(xd *float32, ldx int, w *uint8, ldw int, sz *float32, groups, chunks int, c *[16]float32)

//go:noescape
func qRowQ8_0AVX512(w *byte, xq *int8, dx *float32, corr *int32, nb int) float32

//go:noescape
func qRowQ4_0AVX512(w *byte, xq *int8, dx *float32, corr *int32, nb int) float32

// qDotI8F32 returns Σ_p x[p]·float32(w[p]): the assembly takes whole runs of 16, Go the rest.
func qDotI8F32(x []float32, w []int8) float32 {
	n := len(w) &^ 15
	if !qAVX512 || n == 0 {
		return qDotI8F32Go(x, w)
	}
	return qDotI8F32AVX512(&x[0], &w[0], n) + qDotI8F32Go(x[n:], w[n:])
}

// qMaxAbs returns max_p |x[p]|: the assembly takes whole runs of 16, Go the rest.
func qMaxAbs(x []float32) float32 {
	n := len(x) &^ 15
	if !qAVX512 || n == 0 {
		return qMaxAbsGo(x)
	}
	return max(qMaxAbsAVX512(&x[0], n), qMaxAbsGo(x[n:]))
}

// qRoundRow sets q[p] = qRoundInt8(x[p]·inv): the assembly takes whole runs of 16, Go the rest.
func qRoundRow(x []float32, q []int8, inv float32) {
	n := len(x) &^ 15
	if qAVX512 && n > 0 {
		qRoundInt8AVX512(&x[0], &q[0], n, inv)
		x, q = x[n:], q[n:]
	}
	qRoundRowGo(x, q, inv)
}

// qDotI8x4 sets acc[r] = Σ_p w[r*k+p]·a[p] for the four rows of w (k = len(a)); asum = Σ_p a[p] corrects the
// VNNI kernel's offset weights.
func qDotI8x4(w, a []int8, asum int32, acc *[4]int32) {
	if !qVNNI {
		qDotI8x4Go(w, a, acc)
		return
	}
	qDotI8x4VNNI(&w[0], len(a), &a[0], acc)
	for r := range acc {
		acc[r] -= 128 * asum
	}
}

// qDotI8Rows sets acc[r] = Σ_p w[r*k+p]·a[p] + bias for the len(acc) rows of w (k = len(a)) and returns the bias
// for the store to take off; asum = Σ_p a[p] is the VNNI kernel's bias, 128·asum.
func qDotI8Rows(w, a []int8, asum int32, acc []int32) (bias int32) {
	if !qVNNI {
		return qDotI8RowsGo(w, a, acc)
	}
	qDotI8RowsVNNI(&w[0], len(a), &a[0], len(acc), &acc[0])
	return 128 * asum
}

// qSumI8 returns Σ_p a[p].
func qSumI8(a []int8) int32 {
	if !qVNNI {
		return qSumI8Go(a)
	}
	return qSumI8VNNI(&a[0], len(a))
}

// qStoreInt32 sets dst[j] = acc[j] - bias.
func qStoreInt32(dst, acc []int32, bias int32) {
	if !qAVX512 {
		qStoreInt32Go(dst, acc, bias)
		return
	}
	qStoreInt32AVX512(&dst[0], &acc[0], len(dst), bias)
}

// qStoreScaled sets dst[j] = float32(acc[j] - bias)·(sa·sw[j]).
func qStoreScaled(dst []float32, acc []int32, bias int32, sa float32, sw []float32) {
	if !qAVX512 {
		qStoreScaledGo(dst, acc, bias, sa, sw)
		return
	}
	qStoreScaledAVX512(&dst[0], &acc[0], len(dst), bias, sa, &sw[0])
}

// The W8A8 GEMM tile: the micro-kernels compute qMR rows of A against qNR rows (columns of C) of W.
const (
	qMR = 8
	qNR = 48
)

// qGEMMInt8 is qInt8 for many tokens. With VNNI, each thread packs panels of qNR rows of W, four bytes of k at a
// time and offset by 128 ([kq][qNR][4]), and runs the micro-kernel over every block of qMR rows of A against its
// panel, which stays in L2; A is read in place (a copy only pads k to a multiple of four, and the last block to
// qMR rows, with zeros). The micro-kernel writes C itself, taking off the excess 128·Σ_p a[i,p] (and scaling, for
// W8A8) as it stores. Up to qNR tokens, with k a multiple of four, run qFewInt8 instead, which packs no W.
func qGEMMInt8(m, n, k int, a, w []int8, out *qInt8Out) {
	if !qVNNI {
		qGEMMInt8Go(m, n, k, a, w, out)
		return
	}
	if m <= qNR && k%4 == 0 && out.cf == nil {
		qFewInt8(m, n, k, a, w, out)
		return
	}
	qPackedInt8(m, n, k, a, w, out)
}

// qPackedInt8 is qGEMMInt8 with W packed, as described there.
func qPackedInt8(m, n, k int, a, w []int8, out *qInt8Out) {
	bias, biasBuf := scratchI32(m)
	defer biasBuf.release()
	for i := range bias {
		bias[i] = 128 * qSumI8VNNI(&a[i*k], k)
	}
	kq := (k + 3) / 4
	lda := 4 * kq
	mb := (m + qMR - 1) / qMR
	if lda != k || m%qMR != 0 {
		pad, padBuf := scratchI8(mb * qMR * lda)
		defer padBuf.release()
		clear(pad)
		for i := 0; i < m; i++ {
			copy(pad[i*lda:], a[i*k:(i+1)*k])
		}
		a = pad
	}
	wb := qBytes(w)
	Parallel((n+qNR-1)/qNR, 1, func(lo, hi int) {
		wpi, wpiBuf := scratchI8(kq * qNR * 4)
		defer wpiBuf.release()
		wp := qBytes(wpi)
		for pj := lo; pj < hi; pj++ {
			j0 := pj * qNR
			nc := min(qNR, n-j0)
			qPackPanel(wp, wb[j0*k:(j0+nc)*k], nc, k, qNR)
			mask := uint64(1)<<nc - 1
			for ib := 0; ib < mb; ib++ {
				i0 := ib * qMR
				rows := min(qMR, m-i0)
				if out.cf != nil {
					qKernelI8F32VNNI(&a[i0*lda], lda, &wp[0], kq, &out.cf[i0*n+j0], n, rows, mask, &bias[i0],
						&out.sa[i0], &out.sw[j0], &noPrefetch)
				} else {
					qKernelI8VNNI(&a[i0*lda], lda, &wp[0], kq, &out.ci[i0*n+j0], n, rows, mask, &bias[i0], &noPrefetch)
				}
			}
		}
	})
}

// qFewInt8 is qGEMMInt8 with int32 outputs for at most qNR tokens and k a multiple of four (float32 outputs take
// qW8A8Tile), with the operands' roles swapped as in gemmFew: the tokens are packed once into a panel, offset by
// 128, and the micro-kernel runs qMR rows of W, read in place as its signed operand, against them, computing a
// tile of Cᵀ. Packing W would cost more than the products at this m and be paid again on every call. The excess
// is now 128·Σ_p w[j,p], summed a tile at a time; the sums are exact integers, so C is what the packed path
// gives. Each kernel call prefetches the next tile's rows into L2.
func qFewInt8(m, n, k int, a, w []int8, out *qInt8Out) {
	kq := k / 4
	panelI8, panelBuf := scratchI8(kq * qNR * 4)
	defer panelBuf.release()
	panel := qBytes(panelI8)
	qPackPanel(panel, qBytes(a), m, k, qNR)
	mask := uint64(1)<<m - 1
	Parallel((n+qMR-1)/qMR, qRowGrain(qMR*k), func(lo, hi int) {
		var bias [qMR]int32
		var pf prefetchStream
		ct, ctBuf := scratchI32(qMR * qNR) // Cᵀ for the tile
		defer ctBuf.release()
		pad, padBuf := scratchI8(qMR * k)
		defer padBuf.release()
		for tile := lo; tile < hi; tile++ {
			j0 := tile * qMR
			rows := min(qMR, n-j0)
			wt := qTileRows(w, j0, rows, qMR, k, pad)
			for r := range rows {
				bias[r] = 128 * qSumI8VNNI(&wt[r*k], k)
			}
			if tile+1 < hi {
				pf = prefetchRows(uintptr(unsafe.Pointer(&w[(j0+qMR)*k])), k, min(qMR, n-j0-qMR), k)
			}
			qKernelI8VNNI(&wt[0], k, &panel[0], kq, &ct[0], qNR, rows, mask, &bias[0], &pf)
			storeTransposed(out.ci, n, j0, rows, m, ct, qNR)
		}
	})
}

// qTileW8A8 runs qW8A8Tile for the calls it serves best: float32 outputs (W8A8), VNNI, k a multiple of four,
// and qW8TileMinM to qNR tokens. It reports whether it ran.
func qTileW8A8(m, n, k int, a, w []int8, out *qInt8Out) bool {
	if !qW8TileFits(m, k) || out.cf == nil {
		return false
	}
	qW8A8Tile(m, k, a, out.sa, []W8A8Weights{{n, w, out.sw}}, [][]float32{out.cf})
	return true
}

// qW8TileFits reports whether qW8A8Tile takes m tokens of k values.
func qW8TileFits(m, k int) bool { return qVNNI && k%4 == 0 && m >= qW8TileMinM && m <= qNR }

// qW8TileMinM is the fewest tokens for which W8A8 runs qW8A8Tile: at 8 tokens (4096x768) the GEMVs are 1.2x the
// tile, at 16 the tile is 1.8x the GEMVs and at 24 1.9x (BenchmarkW8A8Few, medians of three).
const qW8TileMinM = 12

// qTileW8A8s runs GEMMW8A8s as one qW8A8Tile call where qInt8 would run the tile, and reports whether it did.
func qTileW8A8s(m, k int, qa []int8, sa []float32, ws []W8A8Weights, cs [][]float32) bool {
	if !qW8TileFits(m, k) {
		return false
	}
	qW8A8Tile(m, k, qa, sa, ws, cs)
	return true
}

// qW8A8Tile is qInt8 with float32 outputs for a few tokens (qTileW8A8), for one or more matrices of W that share
// the tokens: the W4A8 tile's shape, six rows of W (read in place) against panels of qW4TileTokens tokens,
// twelve VPDPBUSD a step for eight loads, every lane a token that exists when the panel is full
// (qKernelI8F32VNNI's 48 columns left a third idle at 32 tokens), and the results stored by the kernel in C's
// layout. The tokens are packed once, and the tiles of all the matrices are ParallelWork's items (qTileRuns). The
// sums and their scaling are the packed path's, so C is bit for bit the same.
func qW8A8Tile(m, k int, a []int8, sa []float32, mats []W8A8Weights, cs [][]float32) {
	const rowsT, tokT = qW4TileRows, qW4TileTokens
	kq := k / 4
	tokI8, tokBuf := qPackTokens(m, k, a, 0x80808080, nil, 0) // k is a multiple of four (qW8TileFits)
	defer tokBuf.release()
	tok := qBytes(tokI8)
	tiles := newTileList(mats, func(w W8A8Weights) int { return w.N }, rowsT)
	ParallelWork(tiles.total(), qRowGrain(rowsT*k), func(work *Work) {
		var bias [rowsT]int32
		var sw [rowsT]float32
		var pf prefetchStream
		part, partBuf := scratchF32(tokT * rowsT) // a partial tile, [tokT][rowsT] as C's layout
		defer partBuf.release()
		pad, padBuf := scratchI8(rowsT * k)
		defer padBuf.release()
		qTileRuns(work, func(b, next int) {
			i, j0, rows := tiles.at(b)
			w, c, n := mats[i].Q, cs[i], mats[i].N
			wt := qTileRows(w, j0, rows, rowsT, k, pad)
			for r := range rowsT {
				bias[r], sw[r] = 0, 0
				if r < rows {
					bias[r], sw[r] = 128*qSumI8VNNI(&wt[r*k], k), mats[i].Scales[j0+r]
				}
			}
			pf = prefetchStream{}
			if next >= 0 {
				ni, nj, nr := tiles.at(next)
				pf = prefetchRows(uintptr(unsafe.Pointer(&mats[ni].Q[nj*k])), k, nr, k)
			}
			qTilePanels(m, n, j0, rows, c, part, nil, func(p, t0 int, mask uint64, dst *float32, ldc int) {
				qW8A8TileVNNI(&wt[0], k, &tok[p*kq*tokT*4], kq, &bias[0], &sw[0], &sa[t0], mask, dst, ldc, &pf)
			})
		})
	})
}

// qTilePanels runs a tile kernel on the token panels of m tokens for the rows rows of W from j0, C having n
// columns: kernel(p, t0, mask, dst, ldc) computes panel p (tokens from t0, those present set in mask) into dst, ldc
// bytes a token. A whole tile writes into C; a partial one (fewer rows, or a last panel of fewer tokens) goes
// through out, [qW4TileTokens][qW4TileRows] as C's layout, so as not to write past C. The lines in ahead (the next
// tile's, prefetched into L1 by the kernel) are asked for by the first panel only.
func qTilePanels(m, n, j0, rows int, c, out []float32, ahead *[2]linePrefetch,
	kernel func(p, t0 int, mask uint64, dst *float32, ldc int)) {
	const rowsT, tokT = qW4TileRows, qW4TileTokens
	for p := range (m + tokT - 1) / tokT {
		if p == 1 && ahead != nil {
			*ahead = [2]linePrefetch{}
		}
		t0 := p * tokT
		tn := min(tokT, m-t0)
		mask := uint64(1)<<tn - 1
		if rows == rowsT && tn == tokT {
			kernel(p, t0, mask, &c[t0*n+j0], 4*n)
			continue
		}
		kernel(p, t0, mask, &out[0], 4*rowsT)
		for t := range tn {
			copy(c[(t0+t)*n+j0:][:rows], out[t*rowsT:])
		}
	}
}

// qTileRows returns the want rows of W (k bytes each) from row j0 for a kernel that reads want rows: W in place,
// or, where only rows < want are left, pad (want·k bytes) holding them and then zeros.
func qTileRows(w []int8, j0, rows, want, k int, pad []int8) []int8 {
	if rows == want {
		return w[j0*k:]
	}
	clear(pad[copy(pad, w[j0*k:j0*k+rows*k]):])
	return pad
}

// qDeinterleave writes a's values in even places, then those in odd places, to r (as qDeinterleaveAVX512 does
// for each 128): the order qDotW4A8RowsVNNI and its twins read a chunk of a token in.
func qDeinterleave(r, a []int8) {
	half := len(a) / 2
	for t := range half {
		r[t], r[half+t] = a[2*t], a[2*t+1]
	}
}

// qTileRun is the most tiles a part of a tile kernel's ParallelWork claims at once.
const qTileRun = 4

// qTileRuns calls do for each tile that work hands out, in order, with the tile to prefetch while it runs (next <
// 0: none): the next of its run, or the first that work would hand out next.
func qTileRuns(work *Work, do func(b, next int)) {
	for lo, hi, ok := work.Next(qTileRun); ok; lo, hi, ok = work.Next(qTileRun) {
		for b := lo; b < hi; b++ {
			next := b + 1
			if next == hi {
				if nb, ok := work.Peek(); ok {
					next = nb
				} else {
					next = -1
				}
			}
			do(b, next)
		}
	}
}

// qPackPanel packs rows (at most nr, which is 16, 32 or 48) rows of W, or tokens, k bytes each, into a panel of
// nr columns: byte 4q+t of row c, XOR 0x80 (offset by 128, for the kernels that take the panel unsigned), at
// dst[(q*nr+c)*4+t]. qPackW copies the whole groups of four; a last partial group is padded with zeros.
func qPackPanel(dst, src []byte, rows, k, nr int) {
	if k/4 > 0 {
		qPackRun(dst, src, rows, k, nr, 0x80808080, nil, 0)
	}
	if k%4 == 0 {
		return
	}
	q := k / 4
	for c := 0; c < rows; c++ {
		var b [4]byte
		copy(b[:], src[c*k+4*q:(c+1)*k])
		binary.LittleEndian.PutUint32(dst[(q*nr+c)*4:], binary.LittleEndian.Uint32(b[:])^0x80808080)
	}
}

// qPackRun runs qPackW on the whole groups of four of rows rows of src, k bytes each (k >= 4).
func qPackRun(dst, src []byte, rows, k, nr int, flip uint32, sums []float32, group int) {
	var idx [48]int32
	for c := range rows {
		idx[c] = int32(c * k)
	}
	_ = dst[(k/4*nr)*4-1]
	_ = src[rows*k-1]
	var ps *float32
	if group > 0 {
		_ = sums[k/group*nr-1]
		ps = &sums[0]
	}
	qPackW(&dst[0], &src[0], &idx[0], uint64(1)<<rows-1, k/4, nr, flip, ps, group/4)
}

// prefetchStream is a stream of cache lines for a micro-kernel to prefetch into L2 as it computes, one a step
// (prefetch_amd64.h): lines lines in all, taken rowBytes/64 a row from rows ld bytes apart, starting off bytes
// into the row at addr. The zero value is an empty stream. (Prefetches do not fault, so the addresses need no
// bounds and addr no pointer type.)
type prefetchStream struct {
	addr     uintptr
	off      int
	rowBytes int
	ld       int
	lines    int
}

// lineRange is the lines that hold the size bytes at p (per left zero: for kernels that take one a step).
func lineRange(p unsafe.Pointer, size int) linePrefetch {
	addr := uintptr(p)
	return linePrefetch{addr: addr &^ 63, lines: int(addr+uintptr(size)-addr&^63+63) / 64}
}

// noPrefetch is an empty stream for the kernel calls that prefetch nothing. It is never advanced.
var noPrefetch prefetchStream

// prefetchRows is the stream of the cache lines that hold bytes [0, size) of each of rows rows, ld bytes apart,
// the first at addr. A row's bytes span at most size/64 + 2 lines from the line that holds its first byte.
func prefetchRows(addr uintptr, ld, rows, size int) prefetchStream {
	lines := size/64 + 2
	return prefetchStream{addr: addr &^ 63, rowBytes: 64 * lines, ld: ld, lines: rows * lines}
}

// qBytes views int8s as bytes.
func qBytes(x []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// qW4Rows returns the row function of qGEMVW4 for activations x. The assembly needs groups of a multiple of 64,
// and x rearranged in chunks of 32: the 16 even elements, then the 16 odd ones, the order in which the low and
// high nibbles of 16 packed bytes come out.
func qW4Rows(k, group int, x []float32) func(w []uint8, s []float32, z []uint8) float32 {
	if !qAVX512 || group%64 != 0 {
		return qW4RowsGo(k, group, x)
	}
	xd := make([]float32, k)
	for c := 0; c < k; c += 32 {
		for t := 0; t < 16; t++ {
			xd[c+t], xd[c+16+t] = x[c+2*t], x[c+2*t+1]
		}
	}
	pairs := group / 64
	return func(w []uint8, s []float32, z []uint8) float32 {
		return qDotW4AVX512(&xd[0], &w[0], &s[0], &z[0], len(s), pairs)
	}
}

// qGGUFRows returns the dot product of a row of GGUF blocks (Q4_0 if q4, else Q8_0) with the Q8_0 blocks xq. With
// VNNI, xq is first laid out for qRowQ8_0AVX512 and qRowQ4_0AVX512: codes contiguous, scales as float32, and the
// correction of each block's integer sum (128·Σ q_x for Q8_0 weights, offset by 128 to make them unsigned; 8·Σ q_x
// for Q4_0's codes, which are stored offset by 8) in lane 0 of eight int32.
func qGGUFRows(xq []byte, q4 bool) func(w []byte) float32 {
	if !qVNNI {
		return qGGUFRowsGo(xq, q4)
	}
	nb := len(xq) / qQ8_0Size
	codes, dx, corr := make([]int8, nb*qBlock), make([]float32, nb), make([]int32, nb*8)
	off := int32(128)
	if q4 {
		off = 8
	}
	for b := 0; b < nb; b++ {
		blk := xq[b*qQ8_0Size : (b+1)*qQ8_0Size]
		dx[b] = half.F16ToF32(binary.LittleEndian.Uint16(blk))
		var sum int32
		for i, c := range blk[2:] {
			codes[b*qBlock+i] = int8(c)
			sum += int32(int8(c))
		}
		corr[b*8] = off * sum
	}
	if q4 {
		return func(w []byte) float32 { return qRowQ4_0AVX512(&w[0], &codes[0], &dx[0], &corr[0], nb) }
	}
	return func(w []byte) float32 { return qRowQ8_0AVX512(&w[0], &codes[0], &dx[0], &corr[0], nb) }
}

// qTokens is how many tokens' activations (k floats each) a tile loop keeps in L2 (256 KiB) while it passes over
// its rows of W; a multiple of four, at least four.
func qTokens(k int) int { return max(4, (1<<16/k)&^3) }

// qGEMMW8 is GEMMW8A16 for m > 1: with AVX-512, the rows and tokens that fill tiles of four by four run
// qTileI8F32AVX512 (the last k%16 columns in Go), and the rest run as GEMVs.
func qGEMMW8(m, n, k int, a []float32, w []int8, sw, c []float32) {
	m4, n4, k16 := m&^3, n&^3, k&^15
	if !qAVX512 || m4 == 0 || n4 == 0 || k16 == 0 {
		qGEMMW8Go(m, n, k, a, w, sw, c)
		return
	}
	Parallel(n4/4, qRowGrain(4*k), func(lo, hi int) {
		var tile [16]float32
		for i0 := 0; i0 < m4; i0 += qTokens(k) {
			for jb := lo; jb < hi; jb++ {
				j0 := 4 * jb
				for i := i0; i < min(m4, i0+qTokens(k)); i += 4 {
					qTileI8F32AVX512(&a[i*k], k, &w[j0*k], k, k16, &tile)
					for t := 0; t < 4; t++ {
						for r := 0; r < 4; r++ {
							v := tile[t*4+r]
							if k16 < k {
								v += qDotI8F32Go(a[(i+t)*k+k16:(i+t+1)*k], w[(j0+r)*k+k16:(j0+r+1)*k])
							}
							c[(i+t)*n+j0+r] = sw[j0+r] * v
						}
					}
				}
			}
		}
	})
	for i := 0; i < m; i++ {
		if i < m4 && n4 < n {
			qGEMVW8(n-n4, k, a[i*k:(i+1)*k], w[n4*k:], sw[n4:], c[i*n+n4:(i+1)*n])
		} else if i >= m4 {
			qGEMVW8(n, k, a[i*k:(i+1)*k], w, sw, c[i*n:(i+1)*n])
		}
	}
}

// qW4A8 is GEMMW4A8. With VNNI, qW4TileMinM tokens or more and groups of a multiple of 64 run the tile kernel
// (qW4A8Tile). Fewer tokens, with groups of a multiple of 128 (or 64, or 32), run one token at a time: each token
// is rearranged for qDotW4A8RowsVNNI (or its 256- or 128-bit twin; with chunks of 128 codes, qDotW4A8Rows4VNNI
// runs four rows at a time and the row kernel the rest, and qDeinterleaveAVX512 rearranges all the tokens at once)
// and its group sums taken once, and blocks of qW4A8Rows rows of W serve every token while they are in L2, so a
// token's outputs do not depend on the others.
// Other groups run the pure-Go loop.
// qTileW4A8s runs GEMMW4A8s as one qW4A8Tile call where qW4A8 would run the tile, and reports whether it did.
func qTileW4A8s(m, k, group int, qa []int8, sa []float32, ws []W4A8Weights, cs [][]float32) bool {
	if !qVNNI || m < qW4TileMinM || group%64 != 0 {
		return false
	}
	qW4A8Tile(m, k, group, qa, sa, ws, cs)
	return true
}

func qW4A8(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32) {
	chunk, rowsKernel := 128, qDotW4A8RowsVNNI
	switch {
	case group%128 == 0:
	case group%64 == 0:
		chunk, rowsKernel = 64, qDotW4A8Rows64VNNI
	default:
		chunk, rowsKernel = 32, qDotW4A8Rows32VNNI
	}
	if !qVNNI || group%chunk != 0 {
		if qAVX2 && group%32 == 0 {
			qW4A8AVX2(m, n, k, group, qa, sa, w, s, z, c)
			return
		}
		qW4A8Go(m, n, k, group, qa, sa, w, s, z, c)
		return
	}
	if m >= qW4TileMinM && group%64 == 0 {
		qW4A8Tile(m, k, group, qa, sa, []W4A8Weights{{n, w, s, z}}, [][]float32{c})
		return
	}
	gpr := k / group
	xr, xs, release := qW4A8Tokens(m, k, group, chunk, qa)
	defer release()
	Parallel((n+qW4A8Rows-1)/qW4A8Rows, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			j0 := b * qW4A8Rows
			rows := min(qW4A8Rows, n-j0)
			// With chunks of 128 codes, blocks of four rows share each load of the token.
			r4 := 0
			if chunk == 128 {
				r4 = rows &^ 3
			}
			for i := 0; i < m; i++ {
				if r4 > 0 {
					qDotW4A8Rows4VNNI(&w[j0*k/2], k, &xr[i*k], &xs[i*gpr], &s[j0*gpr], &z[j0*gpr], gpr, group/chunk,
						r4, sa[i], &c[i*n+j0])
				}
				if j := j0 + r4; r4 < rows {
					rowsKernel(&w[j*k/2], k, &xr[i*k], &xs[i*gpr], &s[j*gpr], &z[j*gpr], gpr, group/chunk, rows-r4,
						sa[i], &c[i*n+j])
				}
			}
		}
	})
}

// qW4A8Tokens prepares the m tokens of qa for the W4A8 row kernels: each rearranged per chunk of chunk values
// (its even values, then its odd ones: the order of the packed codes' low and high nibbles) into xr, and the sums
// of its groups into xs. release gives the scratch back.
func qW4A8Tokens(m, k, group, chunk int, qa []int8) (xr []int8, xs []int32, release func()) {
	gpr := k / group
	xr, xrBuf := scratchI8(m * k)
	xs, xsBuf := scratchI32(m * gpr)
	// k is a multiple of chunk, so the tokens' chunks follow one another.
	if chunk == 128 && qAVX512 {
		qDeinterleaveAVX512(&xr[0], &qa[0], m*k)
	} else {
		for c := 0; c < m*k; c += chunk {
			qDeinterleave(xr[c:c+chunk], qa[c:c+chunk])
		}
	}
	for i := 0; i < m; i++ {
		a := qa[i*k : (i+1)*k]
		for g := 0; g < gpr; g++ {
			xs[i*gpr+g] = qSumI8(a[g*group : (g+1)*group])
		}
	}
	return xr, xs, func() { xsBuf.release(); xrBuf.release() }
}

// qW4A8AVX2 is qW4A8 on AVX2 (groups of a multiple of 32): the tokens prepared once (qW4A8Tokens, chunks of 32),
// then blocks of qW4A8Rows rows of W serve every token while they are in cache, four tokens a call of
// qDotW4A8Rows32x4AVX2 and the rest one a call of qDotW4A8Rows32AVX2. Both add a token's sums in the same order,
// so its outputs do not depend on the tokens beside it.
func qW4A8AVX2(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32) {
	gpr := k / group
	xr, xs, release := qW4A8Tokens(m, k, group, 32, qa)
	defer release()
	Parallel((n+qW4A8Rows-1)/qW4A8Rows, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			j0 := b * qW4A8Rows
			rows := min(qW4A8Rows, n-j0)
			i := 0
			for ; i+4 <= m; i += 4 {
				qDotW4A8Rows32x4AVX2(&w[j0*k/2], k, &xr[i*k], &xs[i*gpr], &s[j0*gpr], &z[j0*gpr], gpr, group/32, rows,
					&sa[i], &c[i*n+j0], n)
			}
			for ; i < m; i++ {
				qDotW4A8Rows32AVX2(&w[j0*k/2], k, &xr[i*k], &xs[i*gpr], &s[j0*gpr], &z[j0*gpr], gpr, group/32, rows,
					sa[i], &c[i*n+j0])
			}
		}
	})
}

// qW4A8Tile is qW4A8 for qW4TileMinM tokens or more, groups of a multiple of 64 and VNNI: qGroupTile, each
// tile's codes unpacked to bytes (qW4UnpackAVX512, which takes whole runs of 64 codes) and its zero points
// widened to float32, its scales read in place.
func qW4A8Tile(m, k, group int, qa []int8, sa []float32, mats []W4A8Weights, cs [][]float32) {
	gpr := k / group
	src := qTileSource{
		n: func(i int) int { return mats[i].N },
		tile: func(i, j0, rows int, cb []byte, zf, part []float32) []float32 {
			w := mats[i]
			qW4UnpackAVX512(&cb[0], &w.Packed[j0*k/2], rows*k) // the tile's rows are consecutive, in W and in cb
			qU8ToF32AVX512(&zf[0], &w.Zeros[j0*gpr : (j0+rows)*gpr][0], rows*gpr)
			scale := w.Scales[j0*gpr:]
			if rows < qW4TileRows {
				clear(part[copy(part, scale[:rows*gpr]):])
				scale = part
			}
			return scale
		},
		prefetch: func(i, j0, rows int) (linePrefetch, [2]linePrefetch) {
			w := mats[i]
			return lineRange(unsafe.Pointer(&w.Packed[j0*k/2]), rows*k/2),
				[2]linePrefetch{lineRange(unsafe.Pointer(&w.Scales[j0*gpr]), 4*rows*gpr),
					lineRange(unsafe.Pointer(&w.Zeros[j0*gpr]), rows*gpr)}
		},
	}
	qGroupTile(m, k, group, qa, sa, len(mats), src, cs)
}

// qTileSource is what qGroupTile needs of the matrices it runs: each one's rows (n), and for the tile of rows
// rows from row j0 of matrix i, its codes as unsigned bytes in cb (rows·k, the rows one after another) and its
// zero points as float32 in zf ([rows][groups]); tile returns the tile's scales, [rows][groups] float32, the
// weights' own or a copy in part, zero past rows (as zf is, so that missing rows come out zero). prefetch gives
// the lines of a tile to fetch while the one before it runs: its codes into L2, and two more ranges into L1.
type qTileSource struct {
	n        func(i int) int
	tile     func(i, j0, rows int, cb []byte, zf, part []float32) []float32
	prefetch func(i, j0, rows int) (linePrefetch, [2]linePrefetch)
}

// qPackTokens packs the m tokens of qa (k values each) for the tile kernels: panels of qW4TileTokens tokens,
// [k/4][qW4TileTokens][4] each, every byte XOR flip, with each group's sums in sums ([panel][k/group][token]) when
// group > 0. The panels go in a scratch buffer that the caller releases.
func qPackTokens(m, k int, qa []int8, flip uint32, sums []float32, group int) ([]int8, scratchHandle[int8]) {
	const tokT = qW4TileTokens
	panels, kq := (m+tokT-1)/tokT, k/4
	tokI8, buf := scratchI8(panels * kq * tokT * 4)
	tok := qBytes(tokI8)
	for p := range panels {
		var ps []float32
		if group > 0 {
			ps = sums[p*k/group*tokT:]
		}
		qPackRun(tok[p*kq*tokT*4:], qBytes(qa[p*tokT*k:]), min(tokT, m-p*tokT), k, tokT, flip, ps, group)
	}
	return tokI8, buf
}

// qGroupTile is the GEMM of W4A8 (groups with zero points) for qW4TileMinM tokens or more, groups of a multiple of
// 32 and VNNI: a GEMM rather than a GEMV a token. The tiles of all the matrices are ParallelWork's items
// (qTileRuns); a thread gets a tile's qW4TileRows rows of W as bytes q (src.tile), which the tile kernel broadcasts
// against panels of qW4TileTokens tokens packed once a call, with each group's sum of the tokens' values: each code
// is prepared once a call instead of once a token, and a step does twelve VPDPBUSD against eight loads; the zero
// point comes off at each group's end, as z·Σ a. Every group's sum is exact; the float32 sums of the group terms
// differ in their order from the one-token kernels', so a token's outputs here may differ from its outputs alone by
// a rounding, and do not depend on which other tokens share the call.
func qGroupTile(m, k, group int, qa []int8, sa []float32, mats int, src qTileSource, cs [][]float32) {
	const rowsT, tokT = qW4TileRows, qW4TileTokens
	gpr, kq := k/group, k/4
	panels := (m + tokT - 1) / tokT
	tsum, tsumBuf := scratchF32(panels * gpr * tokT) // [panel][group][token] Σ a
	defer tsumBuf.release()
	tokI8, tokBuf := qPackTokens(m, k, qa, 0, tsum, group)
	defer tokBuf.release()
	ns := make([]int, mats)
	for i := range ns {
		ns[i] = src.n(i)
	}
	tiles := newTileList(ns, func(n int) int { return n }, rowsT)
	ParallelWork(tiles.total(), qRowGrain(rowsT*k), func(work *Work) {
		codes, codesBuf := scratchI8(rowsT * k)
		defer codesBuf.release()
		cb := qBytes(codes)
		buf, bufBuf := scratchF32(tokT*rowsT + 2*rowsT*gpr)
		defer bufBuf.release()
		// zf and a partial tile's scales are [rowsT][gpr], as the weights' scales are; rows past n are zero, so
		// that their results are zero.
		out, part, zf := buf[:tokT*rowsT], buf[tokT*rowsT:][:rowsT*gpr], buf[tokT*rowsT+rowsT*gpr:]
		var pf linePrefetch
		var ahead [2]linePrefetch
		qTileRuns(work, func(b, next int) {
			i, j0, rows := tiles.at(b)
			c, n := cs[i], ns[i]
			if rows < rowsT {
				clear(zf[rows*gpr:])
			}
			scale := src.tile(i, j0, rows, cb, zf, part)
			pf, ahead = linePrefetch{}, [2]linePrefetch{}
			if next >= 0 {
				pf, ahead = src.prefetch(tiles.at(next))
			}
			qTilePanels(m, n, j0, rows, c, out, &ahead, func(p, t0 int, mask uint64, dst *float32, ldc int) {
				qW4A8TileVNNI(&cb[0], k, &tokI8[p*kq*tokT*4], gpr, group/4, &zf[0], &scale[0], 4*gpr, &sa[t0], mask,
					dst, ldc, &pf, &tsum[p*gpr*tokT], &ahead)
			})
		})
	})
}

// The W4A8 tile: rows of W and tokens a kernel call, and the fewest tokens for which qW4A8 runs it.
const (
	qW4TileRows   = 6
	qW4TileTokens = 32
	qW4TileMinM   = 12
)

// qW4A8Rows is the rows of W in a block of qW4A8: 64 rows of 4096 values are 128 KiB, an L2 share.
const qW4A8Rows = 64

// qGEMMW4 is GEMMW4A16 for m > 1: with AVX-512 and groups of a multiple of 32, the rows and tokens that fill
// tiles of four by four run qTileW4AVX512, and the rest run as GEMVs.
func qGEMMW4(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	m4, n4 := m&^3, n&^3
	if !qAVX512 || group%32 != 0 || m4 == 0 || n4 == 0 {
		qGEMMW4Go(m, n, k, group, a, w, s, z, c)
		return
	}
	gpr := k / group
	xd, xdBuf := scratchF32(m4 * k) // tokens rearranged as qDotW4AVX512 reads them
	defer xdBuf.release()
	for i := 0; i < m4*k; i += 32 {
		for t := 0; t < 16; t++ {
			xd[i+t], xd[i+16+t] = a[i+2*t], a[i+2*t+1]
		}
	}
	Parallel(n4/4, qRowGrain(2*k), func(lo, hi int) {
		var tile [16]float32
		sz, szBuf := scratchF32(gpr * 8)
		defer szBuf.release()
		for i0 := 0; i0 < m4; i0 += qTokens(k) {
			for jb := lo; jb < hi; jb++ {
				j0 := 4 * jb
				for g := 0; g < gpr; g++ {
					for r := 0; r < 4; r++ {
						sc := s[(j0+r)*gpr+g]
						sz[g*8+2*r], sz[g*8+2*r+1] = sc, -float32(z[(j0+r)*gpr+g])*sc
					}
				}
				for i := i0; i < min(m4, i0+qTokens(k)); i += 4 {
					qTileW4AVX512(&xd[i*k], k, &w[j0*k/2], k/2, &sz[0], gpr, group/32, &tile)
					for t := 0; t < 4; t++ {
						for r := 0; r < 4; r++ {
							c[(i+t)*n+j0+r] = tile[t*4+r]
						}
					}
				}
			}
		}
	})
	for i := 0; i < m; i++ {
		if i < m4 && n4 < n {
			qGEMVW4(n-n4, k, group, a[i*k:(i+1)*k], w[n4*k/2:], s[n4*gpr:], z[n4*gpr:], c[i*n+n4:(i+1)*n])
		} else if i >= m4 {
			qGEMVW4(n, k, group, a[i*k:(i+1)*k], w, s, z, c[i*n:(i+1)*n])
		}
	}
}
