//go:build noasm || !amd64

package cpu

// Without assembly every attention micro-kernel is its pure-Go loop.

func attnQK(s, q, kt []float32, hd int)                 { attnQKGo(s, q, kt, hd) }
func attnSoftmax(s, m, l, alpha []float32, cnt []int32) { attnSoftmaxGo(s, m, l, alpha, cnt) }
func attnDots(s, q, base []float32, offs []int32)       { attnDotsGo(s, q, base, offs) }
func attnAxpys(o, p, base []float32, offs []int32, alpha float32) {
	attnAxpysGo(o, p, base, offs, alpha)
}

func attnPV(o, p, v []float32, vStride, nk, hd int, alpha []float32) {
	attnPVGo(o, p, v, vStride, nk, hd, alpha)
}
