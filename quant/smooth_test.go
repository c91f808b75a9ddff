package quant

import "testing"

// w8a8 simulates a W8A8 linear layer in float: x [tokens, k] quantized per token and w [n, k] per output channel
// to int8 (QuantizeRowsInt8), then the dequantized product.
func w8a8(x, w []float32, tokens, n, k int) []float32 {
	qx, sx := make([]int8, len(x)), make([]float32, tokens)
	QuantizeRowsInt8(x, tokens, k, qx, sx)
	qw, sw := make([]int8, len(w)), make([]float32, n)
	QuantizeRowsInt8(w, n, k, qw, sw)
	dx, dw := make([]float32, len(x)), make([]float32, len(w))
	DequantizeRowsInt8(dx, qx, sx)
	DequantizeRowsInt8(dw, qw, sw)
	return matmulT(dx, dw, tokens, n, k)
}

// TestSmoothQuantBeatsPlainW8A8: on a layer whose input has outlier channels (50x), per-token activation
// quantization loses the ordinary channels; smoothing with α = 0.5 must cut the output error at least 4x
// (measured: about 20x).
func TestSmoothQuantBeatsPlainW8A8(t *testing.T) {
	const tokens, k, n = 128, 512, 128
	x, w := synthLayer(tokens, k, n, 8, 50, 3)
	ref := matmulT(x, w, tokens, n, k)
	plain := w8a8(x, w, tokens, n, k)

	stats := NewStats(k)
	stats.Add(x)
	s, ws, err := SmoothQuant(stats.MaxAbs(), []Linear{{W: w, N: n}}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// The smoothed layer computes the same product before quantization.
	xs := scaleColumns(x, s, true)
	if e := MaxAbsErr(ref, matmulT(xs, ws[0], tokens, n, k)); e > 1e-4 {
		t.Errorf("(X/s)·(W·s)ᵀ differs from X·Wᵀ by %g", e)
	}
	smooth := w8a8(xs, ws[0], tokens, n, k)
	plainErr, smoothErr := sqErr(ref, plain), sqErr(ref, smooth)
	t.Logf("W8A8 output error: plain %.4g (SQNR %.2f dB), SmoothQuant %.4g (SQNR %.2f dB)",
		plainErr, SQNR(ref, plain), smoothErr, SQNR(ref, smooth))
	if smoothErr*4 > plainErr {
		t.Errorf("SmoothQuant output error %g, want < plain W8A8 %g / 4", smoothErr, plainErr)
	}
}

func TestSmoothQuantScales(t *testing.T) {
	// k = 3: s_j = sqrt(max|X_j|) / sqrt(max|W_j|) over both layers' rows; a zero channel keeps s = 1.
	xMax := []float32{16, 1, 0}
	layers := []Linear{{W: []float32{4, -1, 2}, N: 1}, {W: []float32{-1, 0.25, 3}, N: 1}}
	s, ws, err := SmoothQuant(xMax, layers, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []float32{2, 1, 1} {
		if s[j] != want {
			t.Errorf("s[%d] = %v, want %v", j, s[j], want)
		}
	}
	if ws[0][0] != 8 || ws[1][0] != -2 {
		t.Errorf("smoothed weights %v %v, want column 0 doubled", ws[0], ws[1])
	}
	norm := []float32{1, 2, 3}
	FoldIntoNorm(norm, s)
	if norm[0] != 0.5 || norm[1] != 2 || norm[2] != 3 {
		t.Errorf("FoldIntoNorm: %v, want [0.5 2 3]", norm)
	}
	if _, _, err := SmoothQuant(xMax, layers, 1.5); err == nil {
		t.Error("SmoothQuant accepted alpha 1.5")
	}
	if _, _, err := SmoothQuant(xMax[:2], layers, 0.5); err == nil {
		t.Error("SmoothQuant accepted mismatched k")
	}
}
