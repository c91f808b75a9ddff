package kerneltest

// The signatures of the quantized kernels, with the semantics and layouts of the float64 functions of the same
// name in kernels/ref (see kernels/ref/quant.go). Scales and activations are float32; weights stay int8, packed
// int4 or GGUF blocks.
type (
	GEMMW8A16Func        func(m, n, k int, a []float32, w []int8, sw, c []float32)
	GEMMInt8Func         func(m, n, k int, a, w []int8, c []int32)
	GEMMW8A8Func         func(m, n, k int, qa []int8, sa []float32, qw []int8, sw, c []float32)
	QuantizeRowsInt8Func func(m, k int, x []float32, q []int8, s []float32)
	GEMMW4A16Func        func(m, n, k, group int, a []float32, w []uint8, s []float32, z []uint8, c []float32)
	GEMMW4A8Func         func(m, n, k, group int, qa []int8, sa []float32, w []uint8, s []float32, z []uint8, c []float32)
	QuantizeRowQ8_0Func  func(x []float32, out []byte)
	// DotQFunc is DotQ8_0 or DotQ4_0Q8_0: n values, w and x as GGUF blocks.
	DotQFunc func(n int, w, x []byte) float32
	// GEMVQFunc is GEMVQ8_0 or GEMVQ4_0: W [n, k] as GGUF blocks, x as k/32 Q8_0 blocks, y [n].
	GEMVQFunc func(n, k int, w, xq []byte, y []float32)
)

// GEMMQ8_0A8Func and GEMMQ4_0A8Func are the matmuls of repacked GGUF weights (ref.RepackQ8_0, ref.RepackQ4_0)
// with per-token INT8 activations.
type (
	GEMMQ8_0A8Func func(m, n, k int, qa []int8, sa []float32, w []int8, d []uint16, c []float32)
	GEMMQ4_0A8Func func(m, n, k int, qa []int8, sa []float32, w []uint8, d []uint16, c []float32)
)
