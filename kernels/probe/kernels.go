package probe

// The measuring loops. Each exists as a pure-Go function (its doc comment is the loop) and, on amd64 without the
// noasm tag, as assembly twins for AVX-512 and AVX2; kernels_amd64.go lists the ones this CPU can run, fastest
// first. Every loop leaves a result a test can check exactly, so a timed loop is also a verified one.

// readKernel sums a buffer of 64-bit words: it is the load stream whose speed is the memory bandwidth.
type readKernel struct {
	name string
	sum  func(p []uint64) uint64
}

// fmaKernel runs n iterations of independent multiply-add chains, acc[j] += a*b for every j, with acc of length
// accLen; each iteration does flopsPerIter floating-point operations (a multiply and an add per element).
type fmaKernel struct {
	name         string
	accLen       int
	flopsPerIter int
	run          func(acc []float32, a, b float32, n int)
}

// dotKernel runs n iterations of independent int8 dot-product chains: every int32 lane of acc (length accLen)
// gains the dot product of the four unsigned bytes of u with the four signed bytes of s (little-endian byte
// order), as VPDPBUSD computes it; each iteration does opsPerIter operations (a multiply and an add per byte pair).
type dotKernel struct {
	name       string
	accLen     int
	opsPerIter int
	run        func(acc []int32, u, s uint32, n int)
}

// sumWordsGo returns the wrapping sum of p:
//
//	for _, w := range p {
//		sum += w
//	}
//
// with four independent partial sums so that the loop is bound by loads, not by the add latency.
func sumWordsGo(p []uint64) uint64 {
	var s0, s1, s2, s3 uint64
	i := 0
	for ; i+4 <= len(p); i += 4 {
		s0 += p[i]
		s1 += p[i+1]
		s2 += p[i+2]
		s3 += p[i+3]
	}
	for ; i < len(p); i++ {
		s0 += p[i]
	}
	return s0 + s1 + s2 + s3
}

// fmaGoLen is the number of scalar chains of fmaGo: enough to hide the add latency of a scalar core.
const fmaGoLen = 8

// fmaGo computes
//
//	for i := 0; i < n; i++ {
//		for j := range acc {
//			acc[j] += a * b
//		}
//	}
//
// for len(acc) == fmaGoLen, with the chains held in locals so that they stay in registers.
func fmaGo(acc []float32, a, b float32, n int) {
	acc = acc[:fmaGoLen]
	c0, c1, c2, c3, c4, c5, c6, c7 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	for i := 0; i < n; i++ {
		c0 += a * b
		c1 += a * b
		c2 += a * b
		c3 += a * b
		c4 += a * b
		c5 += a * b
		c6 += a * b
		c7 += a * b
	}
	acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7] = c0, c1, c2, c3, c4, c5, c6, c7
}

// dotGoLen is the number of scalar chains of dotGo.
const dotGoLen = 4

// dotGo computes
//
//	for i := 0; i < n; i++ {
//		for j := range acc {
//			for k := 0; k < 4; k++ {
//				acc[j] += int32(uint8(u>>(8*k))) * int32(int8(s>>(8*k)))
//			}
//		}
//	}
//
// for len(acc) == dotGoLen.
func dotGo(acc []int32, u, s uint32, n int) {
	acc = acc[:dotGoLen]
	for i := 0; i < n; i++ {
		for j := range acc {
			for k := 0; k < 4; k++ {
				acc[j] += int32(uint8(u>>(8*k))) * int32(int8(s>>(8*k)))
			}
		}
	}
}

var (
	readGo = readKernel{name: "go", sum: sumWordsGo}
	fmaGoK = fmaKernel{name: "go", accLen: fmaGoLen, flopsPerIter: 2 * fmaGoLen, run: fmaGo}
	dotGoK = dotKernel{name: "go", accLen: dotGoLen, opsPerIter: 2 * 4 * dotGoLen, run: dotGo}
)
