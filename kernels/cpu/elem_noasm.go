//go:build noasm || !amd64

package cpu

// Without assembly every elementwise primitive is its pure-Go loop.

func elemSumSquares(x []float32) float32          { return elemSumSquaresGo(x) }
func elemAddSumSquares(res, x []float32) float32  { return elemAddSumSquaresGo(res, x) }
func elemScaleMul(out, x, w []float32, s float32) { elemScaleMulGo(out, x, w, s) }
func elemSwiGLU(out, gate, up []float32)          { elemSwiGLUGo(out, gate, up) }
func elemMax(x []float32) float32                 { return elemMaxGo(x) }
func elemExpSum(x []float32, m float32) float32   { return elemExpSumGo(x, m) }
func elemScale(x []float32, s float32)            { elemScaleGo(x, s) }
func elemRotate(x, cs, sn []float32)              { elemRotateGo(x, cs, sn) }
