//go:build noasm || !amd64

package cpu

// Without assembly every quantized inner loop is its pure-Go version. qDotI8x4 gets the activation sum that the
// VNNI path needs for its correction; the exact integer loop does not use it.

func qDotI8F32(x []float32, w []int8) float32            { return qDotI8F32Go(x, w) }
func qDotI8x4(w, a []int8, _ int32, acc *[4]int32)       { qDotI8x4Go(w, a, acc) }
func qDotI8Rows(w, a []int8, _ int32, acc []int32) int32 { return qDotI8RowsGo(w, a, acc) }
func qSumI8(a []int8) int32                              { return qSumI8Go(a) }
func qW4A8(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32) {
	qW4A8Go(m, n, k, group, qa, sa, w, s, z, c)
}
func qTileW4A8s(int, int, int, []int8, []float32, []W4A8Weights, [][]float32) bool { return false }
func qTileW8A8s(int, int, []int8, []float32, []W8A8Weights, [][]float32) bool      { return false }
func qGEMMInt8(m, n, k int, a, w []int8, out *qInt8Out)                            { qGEMMInt8Go(m, n, k, a, w, out) }
func qTileW8A8(int, int, int, []int8, []int8, *qInt8Out) bool                      { return false }
func qW4Rows(k, group int, x []float32) func(w []uint8, s []float32, z []uint8) float32 {
	return qW4RowsGo(k, group, x)
}
func qGGUFRows(xq []byte, q4 bool) func(w []byte) float32 { return qGGUFRowsGo(xq, q4) }
func qMaxAbs(x []float32) float32                         { return qMaxAbsGo(x) }
func qRoundRow(x []float32, q []int8, inv float32)        { qRoundRowGo(x, q, inv) }
func qStoreInt32(dst, acc []int32, bias int32)            { qStoreInt32Go(dst, acc, bias) }
func qStoreScaled(dst []float32, acc []int32, bias int32, sa float32, sw []float32) {
	qStoreScaledGo(dst, acc, bias, sa, sw)
}
func qGEMMW8(m, n, k int, a []float32, w []int8, sw, c []float32) { qGEMMW8Go(m, n, k, a, w, sw, c) }
func qGEMMW4(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32) {
	qGEMMW4Go(m, n, k, group, a, w, s, z, c)
}
func qQ8_0A8(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32) {
	qQ8_0A8Go(m, n, k, qa, sa, w, d, c)
}
func qQ4_0A8(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32) {
	qQ4_0A8Go(m, n, k, qa, sa, w, d, c)
}
