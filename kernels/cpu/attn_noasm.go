//go:build noasm || !amd64

package cpu

// Without assembly every attention micro-kernel is its pure-Go loop.

func attnQK(s, q, kt []float32, hd int) { attnQKGo(s, q, kt, hd) }

func attnSoftmax(s, m, l, alpha []float32, cnt []int32, rows int) {
	attnSoftmaxGo(s, m, l, alpha, cnt, rows)
}

func attnKeys(s, q, k []float32, kStride, nk, rows, hd int) {
	attnKeysGo(s, q, k, kStride, nk, rows, hd)
}

func attnPackKT(dst, src []float32, stride, s0, n, hd int) { attnPackKTGo(dst, src, stride, s0, n, hd) }

func attnAxpys(o, p, v []float32, vStride int, alpha float32) { attnAxpysGo(o, p, v, vStride, alpha) }

func attnKeysF16(s, q []float32, k []uint16, kStride, nk, rows, hd int) {
	attnKeysF16Go(s, q, k, kStride, nk, rows, hd)
}

func attnAxpysF16(o, p []float32, v []uint16, vStride int, alpha float32) {
	attnAxpysF16Go(o, p, v, vStride, alpha)
}

func attnPV(o, p, v []float32, vStride, nk, hd int, alpha []float32) {
	attnPVGo(o, p, v, vStride, nk, hd, alpha)
}

// attnPrefetch is a hint that pure Go cannot give.
func attnPrefetch([]float32) {}

func attnPrefetchF16([]uint16) {}

func attnPrefetchI8([]int8) {}

// attnDecodeFused is false: without assembly, decode takes the general path.
func attnDecodeFused(n, hd int) bool { return false }

func attnDecode(c pagedCache, q []float32, off, kvRow, nt, heads, group, hd int, m, l, o []float32, pf *attnNext) {
	attnDecodeGo(c, q, off, kvRow, nt, heads, group, hd, m, l, o)
}
