//go:build !noasm

package cpu

import (
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"
)

//go:noescape
func qDotQ8_0RowsVNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

// qFlipAVX512 sets dst[i] = src[i]^0x80 for n bytes, a multiple of 64.
//
//go:noescape
func qFlipAVX512(dst, src *byte, n int)

//go:noescape
func qDotQ8_0Rows4VNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

//go:noescape
func qDotQ4_0RowsVNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

//go:noescape
func qDotQ4_0Rows4VNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)

// qQ8_0A8 is GEMMQ8_0A8. With VNNI and k a multiple of 64, qW4TileMinM tokens or more run qGroupTile, each tile's
// codes made unsigned (q^0x80 = q+128) with zero point 128; fewer run qDotQ8_0RowsVNNI a token at a time, over
// blocks of qW4A8Rows rows that serve every token while they are in L2, with each token's block corrections
// (-128·Σ a a block: in lanes 0 and 8 of every 16 int32) made once. Other shapes run the pure-Go loop.
func qQ8_0A8(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32) {
	if !qVNNI || k%64 != 0 {
		qQ8_0A8Go(m, n, k, qa, sa, w, d, c)
		return
	}
	nb := k / qBlock
	if m >= qW4TileMinM {
		src := qTileSource{
			n: func(int) int { return n },
			tile: func(_, j0, rows int, cb []byte, zf, part []float32) []float32 {
				_ = w[(j0+rows)*k-1]
				qFlipAVX512(&cb[0], (*byte)(unsafe.Pointer(&w[j0*k])), rows*k)
				qFill(zf[:rows*nb], 128)
				clear(part[rows*nb:])
				half.F16ToF32Slice(part[:rows*nb], d[j0*nb:(j0+rows)*nb])
				return part
			},
			prefetch: func(_, j0, rows int) (linePrefetch, [2]linePrefetch) {
				return lineRange(unsafe.Pointer(&w[j0*k]), rows*k),
					[2]linePrefetch{lineRange(unsafe.Pointer(&d[j0*nb]), 2*rows*nb)}
			},
		}
		qGroupTile(m, k, qBlock, qa, sa, 1, src, [][]float32{c})
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

// qQ4_0A8 is GEMMQ4_0A8. With VNNI and k a multiple of 128, qW4TileMinM tokens or more run qGroupTile, each
// tile's codes unpacked to bytes with zero point 8; fewer run qDotQ4_0RowsVNNI a token at a time as qQ8_0A8 runs
// its row kernel, each token rearranged for it (qDeinterleaveAVX512) and its block corrections (-8·Σ a a block:
// in lanes 0, 4, 8 and 12 of every 16 int32) made once; blocks of four rows share each load of the token
// (qDotQ4_0Rows4VNNI). Other shapes run the pure-Go loop.
func qQ4_0A8(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32) {
	if !qVNNI || k%128 != 0 {
		qQ4_0A8Go(m, n, k, qa, sa, w, d, c)
		return
	}
	nb := k / qBlock
	if m >= qW4TileMinM {
		src := qTileSource{
			n: func(int) int { return n },
			tile: func(_, j0, rows int, cb []byte, zf, part []float32) []float32 {
				qW4UnpackAVX512(&cb[0], &w[j0*k/2], rows*k)
				qFill(zf[:rows*nb], 8)
				clear(part[rows*nb:])
				half.F16ToF32Slice(part[:rows*nb], d[j0*nb:(j0+rows)*nb])
				return part
			},
			prefetch: func(_, j0, rows int) (linePrefetch, [2]linePrefetch) {
				return lineRange(unsafe.Pointer(&w[j0*k/2]), rows*k/2),
					[2]linePrefetch{lineRange(unsafe.Pointer(&d[j0*nb]), 2*rows*nb)}
			},
		}
		qGroupTile(m, k, qBlock, qa, sa, 1, src, [][]float32{c})
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

// qFill sets every x[i] = v.
func qFill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}
