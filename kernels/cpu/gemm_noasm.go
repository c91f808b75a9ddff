//go:build noasm || !amd64

package cpu

func gemm(m, n, k int, a, w, c []float32) { gemmGo(m, n, k, a, w, c) }

func gemmF16(m, n, k int, a []float32, w []uint16, c []float32) { gemmF16Go(m, n, k, a, w, c) }

// gemms has no joint path here: GEMMs runs each matrix on its own.
func gemms(m, k int, a []float32, ws []GEMMWeights, cs [][]float32) bool { return false }

func gemv(n, k int, w, x, y []float32) { gemvGo(n, k, w, x, y) }

func gemvF16(n, k int, w []uint16, x, y []float32) { gemvF16Go(n, k, w, x, y) }

// TokenInvariant reports whether GEMM and GEMMF16 give each token, bit for bit, the outputs it gets alone: the
// pure-Go GEMM computes every output as one dot product of a token's row, so it always does.
func TokenInvariant() bool { return true }
