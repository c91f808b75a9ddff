// Package quant holds morphlab's weight number formats, the quantizers that produce them (round-to-nearest for
// every format, AWQ-style activation-aware INT4, SmoothQuant smoothing for W8A8), the calibration statistics they
// read, and the error metrics used to judge them.
//
// A weight matrix W is [n, k] = [out, in], row-major (kernels/ref's layout). Formats and their exact bytes; the
// quantized kernels in kernels/ref and kernels/cpu read these layouts:
//
//   - F32: float32 [n*k]. 32 bits per weight.
//   - F16: IEEE binary16 bits, uint16 [n*k] (little endian when serialized). 16 bits per weight.
//   - BF16: bfloat16 bits (the top half of a float32), uint16 [n*k]. 16 bits per weight.
//     Both round to nearest even from float32 (kernels/half).
//   - Int8 (W8A16 and the weights of W8A8): symmetric per output channel. int8 q [n*k] and float32 scale [n],
//     scale[j] = max_p |W[j,p]| / 127, q = round(W/scale) (halves away from zero), so q is in [-127, 127];
//     W[j,p] ≈ q[j*k+p]·scale[j]. 8 bits per weight plus 32 per row: 8 + 32/k.
//   - Q8_0: GGUF/ggml Q8_0's values. In a file, each row is k/32 blocks of 34 bytes: a binary16 scale d (2 bytes,
//     little endian) then 32 int8 q; value = q·d. d = max|x|/127 over the block and q = round(x·(1/d)) in
//     float32, as ggml's quantize_row_q8_0_ref. In a Matrix the blocks are repacked (RepackQ8_0; Blocks writes
//     them back byte for byte) for the W8A8-style kernel GEMMQ8_0A8: int8 q [n*k] and the binary16 scales
//     BlockScales [n, k/32]. 8.5 bits per weight either way.
//   - Q4_0: GGUF/ggml Q4_0's values. In a file, each row is k/32 blocks of 18 bytes: a binary16 scale d, then 16
//     bytes where byte j holds element j in its low nibble and element j+16 in its high nibble; value = (q-8)·d.
//     d = m/-8 where m is the block's value of largest magnitude (sign kept, first one on ties), and
//     q = min(15, trunc(x·(1/d) + 8.5)), as ggml's quantize_row_q4_0_ref. In a Matrix (RepackQ4_0) the codes
//     are Packed [n, k/2] in Int4's nibble order below, with zero point 8, and the scales BlockScales [n, k/32],
//     for the W4A8-style kernel GEMMQ4_0A8. 4.5 bits per weight either way.
//   - Int4 ("uniform"/RTN INT4 and AWQ; kernels W4A16, and W4A8, which the engine runs): group-wise asymmetric with
//     zero points, group size g (128 by default) along k. Packed uint8 [n, k/2]: byte i of a row holds element 2i
//     in its LOW nibble and element 2i+1 in its HIGH nibble. Per group a float32 scale s and a uint8 zero point z
//     in 0..15, each stored [n, k/g] (row-major, group index fastest). value = (q - z)·s. 4 + 40/g bits per weight
//     (4.3125 at g = 128).
//
// Activations for W8A8 and W4A8 are quantized per token at run time (QuantizeActivations): row scale = max|x|/127,
// q = round(x/scale), the same rule as the Int8 weights but along a token's row.
//
// AWQ returns Int4 weights quantized from W·diag(s) together with the per-input-channel scales s; the caller folds
// 1/s into whatever produces the layer's input (the preceding RMSNorm weight, see FoldIntoNorm), because the Int4
// layout has no per-column scale to hold it. SmoothQuant returns W·diag(s) in float32 and s, with the same folding
// of 1/s into the norm, and the smoothed weights are then quantized to Int8.
package quant
