//go:build !noasm

package cpu

import (
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"
)

//go:noescape
func qDotQ8_0RowsVNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

//go:noescape
func qGGUFTileVNNI(w *int8, k int, tok *uint8, blocks int, corr *int32, scale *float32, gs int, sa *float32,
	mask uint64, c *float32, ldc int, pf *linePrefetch, next *[2]linePrefetch)

//go:noescape
func qQ4_0UnpackAVX512(dst *int8, w *uint8, n int, corr *int32)

//go:noescape
func qQ8_0CorrAVX512(corr *int32, w *int8, n int)

//go:noescape
func qDotQ8_0Rows4VNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

//go:noescape
func qDotQ4_0RowsVNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

//go:noescape
func qDotQ4_0Rows4VNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

// qQ8_0A8 is GEMMQ8_0A8. With VNNI and k a multiple of 64, qW4TileMinM tokens or more run qBlockTile on the codes
// in place; fewer run qDotQ8_0RowsVNNI a token at a time, over blocks of qW4A8Rows rows that serve every token
// while they are in L2, with each token's block corrections (-128·Σ a a block: in lanes 0 and 8 of every 16
// int32) made once. Other shapes run the pure-Go loop.
func qQ8_0A8(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32) {
	if !qVNNI || k%64 != 0 {
		qQ8_0A8Go(m, n, k, qa, sa, w, d, c)
		return
	}
	nb := k / qBlock
	if m >= qW4TileMinM {
		qBlockTile(m, n, k, qa, sa, c, qBlockSource{
			tile: func(j0, rows int, cb []int8, corr []int32, scale []float32) []int8 {
				wt := qTileRows(w, j0, rows, qW4TileRows, k, cb)
				qQ8_0CorrAVX512(&corr[0], &wt[0], qW4TileRows*k)
				clear(scale[rows*nb:])
				half.F16ToF32Slice(scale[:rows*nb], d[j0*nb:(j0+rows)*nb])
				return wt
			},
			prefetch: func(j0, rows int) (linePrefetch, [2]linePrefetch) {
				return lineRange(unsafe.Pointer(&w[j0*k]), rows*k),
					[2]linePrefetch{lineRange(unsafe.Pointer(&d[j0*nb]), 2*rows*nb)}
			},
		})
		return
	}
	corr, corrBuf := scratchI32(m * k / 4)
	defer corrBuf.release()
	clear(corr)
	for i := 0; i < m; i++ {
		for b := 0; b < nb; b++ {
			corr[i*k/4+b/2*16+b%2*8] = -128 * qSumI8Go(qa[i*k+b*qBlock:][:qBlock])
		}
	}
	Parallel((n+qW4A8Rows-1)/qW4A8Rows, 1, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			j0 := blk * qW4A8Rows
			rows := min(qW4A8Rows, n-j0)
			// With whole chunks of 128 codes, blocks of four rows share each load of the token.
			r4 := 0
			if k%128 == 0 {
				r4 = rows &^ 3
			}
			for i := 0; i < m; i++ {
				if r4 > 0 {
					qDotQ8_0Rows4VNNI(&w[j0*k], k, &qa[i*k], &corr[i*k/4], &d[j0*nb], r4, sa[i], &c[i*n+j0])
				}
				if j := j0 + r4; r4 < rows {
					qDotQ8_0RowsVNNI(&w[j*k], k, &qa[i*k], &corr[i*k/4], &d[j*nb], rows-r4, sa[i], &c[i*n+j])
				}
			}
		}
	})
}

// qQ4_0A8 is GEMMQ4_0A8. With VNNI and k a multiple of 128, qW4TileMinM tokens or more run qBlockTile, each
// tile's codes unpacked to signed bytes q - 8 (qQ4_0UnpackAVX512); fewer run qDotQ4_0RowsVNNI a token at a time
// as qQ8_0A8 runs its row kernel, each token rearranged for it (qDeinterleaveAVX512) and its block corrections
// (-8·Σ a a block: in lanes 0, 4, 8 and 12 of every 16 int32) made once; blocks of four rows share each load of
// the token (qDotQ4_0Rows4VNNI). Other shapes run the pure-Go loop.
func qQ4_0A8(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32) {
	if !qVNNI || k%128 != 0 {
		qQ4_0A8Go(m, n, k, qa, sa, w, d, c)
		return
	}
	nb := k / qBlock
	if m >= qW4TileMinM {
		qBlockTile(m, n, k, qa, sa, c, qBlockSource{
			tile: func(j0, rows int, cb []int8, corr []int32, scale []float32) []int8 {
				qQ4_0UnpackAVX512(&cb[0], &w[j0*k/2], rows*k, &corr[0])
				clear(corr[rows*nb:])
				clear(scale[rows*nb:])
				half.F16ToF32Slice(scale[:rows*nb], d[j0*nb:(j0+rows)*nb])
				return cb
			},
			prefetch: func(j0, rows int) (linePrefetch, [2]linePrefetch) {
				return lineRange(unsafe.Pointer(&w[j0*k/2]), rows*k/2),
					[2]linePrefetch{lineRange(unsafe.Pointer(&d[j0*nb]), 2*rows*nb)}
			},
		})
		return
	}
	xr, xrBuf := scratchI8(m * k)
	defer xrBuf.release()
	qDeinterleaveAVX512(&xr[0], &qa[0], m*k)
	corr, corrBuf := scratchI32(m * k / 8)
	defer corrBuf.release()
	clear(corr)
	for i := 0; i < m; i++ {
		for b := 0; b < nb; b++ {
			corr[i*k/8+b*4] = -8 * qSumI8Go(qa[i*k+b*qBlock:][:qBlock])
		}
	}
	Parallel((n+qW4A8Rows-1)/qW4A8Rows, 1, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			j0 := blk * qW4A8Rows
			rows := min(qW4A8Rows, n-j0)
			r4 := rows &^ 3
			for i := 0; i < m; i++ {
				if r4 > 0 {
					qDotQ4_0Rows4VNNI(&w[j0*k/2], k, &xr[i*k], &corr[i*k/8], &d[j0*nb], r4, sa[i], &c[i*n+j0])
				}
				if j := j0 + r4; r4 < rows {
					qDotQ4_0RowsVNNI(&w[j*k/2], k, &xr[i*k], &corr[i*k/8], &d[j*nb], rows-r4, sa[i], &c[i*n+j])
				}
			}
		}
	})
}

// qBlockSource gives qBlockTile the tiles of one repacked GGUF matrix. tile prepares rows rows of W from row j0
// (at most qW4TileRows): it returns their codes as signed bytes, [qW4TileRows][k] (W's own where they already are),
// and fills corr and scale, [qW4TileRows][k/32], with each block's correction -128·Σ q and its scale, zero past
// rows. prefetch gives the lines of a tile's codes (prefetched into L2 over the tile before) and of its scales
// (into L1 as the tile before starts).
type qBlockSource struct {
	tile     func(j0, rows int, cb []int8, corr []int32, scale []float32) []int8
	prefetch func(j0, rows int) (linePrefetch, [2]linePrefetch)
}

// qBlockTile is the GEMM of the repacked GGUF matrices for qW4TileMinM tokens or more: qGroupTile's scheme, with
// the codes signed and the tokens packed once a call offset by 128 (unsigned), so that the offset comes off as
// each block's correction -128·Σ q, the start of its int32 sums (qGGUFTileVNNI), which needs no per-token sums
// and no float operation at the block's end beyond the conversion and the multiply-add with its scale. Every
// block's sum is exact, so C is bit for bit what qGroupTile gives with zero points.
func qBlockTile(m, n, k int, qa []int8, sa []float32, c []float32, src qBlockSource) {
	const rowsT, tokT = qW4TileRows, qW4TileTokens
	nb, kq := k/qBlock, k/4
	tokI8, tokBuf := qPackTokens(m, k, qa, 0x80808080, nil, 0)
	defer tokBuf.release()
	tok := qBytes(tokI8)
	tiles := newTileList([]int{n}, func(n int) int { return n }, rowsT)
	ParallelWork(tiles.total(), qRowGrain(rowsT*k), func(work *Work) {
		codes, codesBuf := scratchI8(rowsT * k)
		defer codesBuf.release()
		corr, corrBuf := scratchI32(rowsT * nb)
		defer corrBuf.release()
		buf, bufBuf := scratchF32(tokT*rowsT + rowsT*nb)
		defer bufBuf.release()
		out, scale := buf[:tokT*rowsT], buf[tokT*rowsT:] // out: a partial tile, [tokT][rowsT] as C's layout
		var pf linePrefetch
		var ahead [2]linePrefetch
		qTileRuns(work, func(b, next int) {
			_, j0, rows := tiles.at(b)
			wt := src.tile(j0, rows, codes, corr, scale)
			pf, ahead = linePrefetch{}, [2]linePrefetch{}
			if next >= 0 {
				_, nj, nr := tiles.at(next)
				pf, ahead = src.prefetch(nj, nr)
			}
			qTilePanels(m, n, j0, rows, c, out, &ahead, func(p, t0 int, mask uint64, dst *float32, ldc int) {
				qGGUFTileVNNI(&wt[0], k, &tok[p*kq*tokT*4], nb, &corr[0], &scale[0], 4*nb, &sa[t0], mask, dst, ldc, &pf,
					&ahead)
			})
		})
	})
}
