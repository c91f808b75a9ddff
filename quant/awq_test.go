package quant

import (
	"math"
	"testing"
)

// TestAWQBeatsRTN quantizes a layer whose input has 8 outlier channels (30x the others) to Int4 with plain
// round-to-nearest and with AWQ, and compares the layer output errors ||X·Wᵀ - X·Ŵᵀ||² on the calibration tokens
// and on as many held-out tokens from the same distribution. AWQ must be at least 2.5x better on both (measured:
// about 4x).
func TestAWQBeatsRTN(t *testing.T) {
	tokens, k, n := 256, 512, 128
	if testing.Short() {
		tokens, n = 128, 64
	}
	xAll, w := synthLayer(2*tokens, k, n, 8, 30, 1)
	x, held := xAll[:tokens*k], xAll[tokens*k:]
	ref := matmulT(x, w, tokens, n, k)
	m, err := Quantize(Int4, w, n, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	rtn := matmulT(x, m.Dequantize(), tokens, n, k)
	rtnErr := sqErr(ref, rtn)

	res, err := AWQ(x, tokens, k, []Linear{{W: w, N: n}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Run the layer the way the engine will: the input divided by s (folded into the norm), the Int4 weights as
	// stored.
	xs := scaleColumns(x, res.Scales, true)
	awq := matmulT(xs, res.Weights[0].Dequantize(), tokens, n, k)
	awqErr := sqErr(ref, awq)
	if math.Abs(awqErr-res.Err) > 1e-3*res.Err {
		t.Errorf("output error with X/s and the stored weights %g, AWQ reported %g", awqErr, res.Err)
	}
	t.Logf("output error: RTN %.4g (SQNR %.2f dB), AWQ scales only %.4g, AWQ+clip %.4g (SQNR %.2f dB), alpha %.2f",
		rtnErr, SQNR(ref, rtn), res.ErrScaled, awqErr, SQNR(ref, awq), res.Alpha)
	if awqErr*2.5 > rtnErr {
		t.Errorf("AWQ output error %g, want < RTN %g / 2.5", awqErr, rtnErr)
	}
	heldRef := matmulT(held, w, tokens, n, k)
	heldRTN := sqErr(heldRef, matmulT(held, m.Dequantize(), tokens, n, k))
	heldAWQ := sqErr(heldRef, matmulT(scaleColumns(held, res.Scales, true), res.Weights[0].Dequantize(), tokens, n, k))
	t.Logf("held-out tokens: RTN %.4g, AWQ %.4g", heldRTN, heldAWQ)
	if heldAWQ*2.5 > heldRTN {
		t.Errorf("held-out AWQ output error %g, want < RTN %g / 2.5", heldAWQ, heldRTN)
	}
	if res.Err > res.ErrScaled {
		t.Errorf("clipping raised the error: %g -> %g", res.ErrScaled, res.Err)
	}
	if res.Alpha == 0 {
		t.Error("AWQ chose alpha = 0 (no scaling) on a layer with outlier channels")
	}
}

// TestAWQSharedInput runs AWQ on two layers reading one input (as q, k, v do): one s for both, each layer's
// stored weights reproducing its share of the reported error.
func TestAWQSharedInput(t *testing.T) {
	const tokens, k, n1, n2 = 64, 256, 32, 16
	x, w := synthLayer(tokens, k, n1+n2, 4, 20, 2)
	layers := []Linear{{W: w[:n1*k], N: n1}, {W: w[n1*k:], N: n2}}
	res, err := AWQ(x, tokens, k, layers, &AWQConfig{Group: 64, Grid: 10, ClipTokens: 32})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scales) != k || len(res.Weights) != 2 || res.Weights[1].Rows != n2 || res.Weights[0].Group != 64 {
		t.Fatalf("result shapes: %d scales, %d weights", len(res.Scales), len(res.Weights))
	}
	xs := scaleColumns(x, res.Scales, true)
	var e float64
	for i, l := range layers {
		e += sqErr(matmulT(x, l.W, tokens, l.N, k), matmulT(xs, res.Weights[i].Dequantize(), tokens, l.N, k))
	}
	if math.Abs(e-res.Err) > 1e-3*res.Err {
		t.Errorf("summed output error %g, AWQ reported %g", e, res.Err)
	}
	if _, err := AWQ(x, tokens, k, layers, &AWQConfig{Group: 100}); err == nil {
		t.Error("AWQ accepted a group that does not divide k")
	}
	if _, err := AWQ(x[:10], tokens, k, layers, nil); err == nil {
		t.Error("AWQ accepted a short x")
	}
}
