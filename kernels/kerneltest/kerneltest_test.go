package kerneltest

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// A float32 port of kernels/ref, line for line, that runs through the whole suite: it exercises the suite before
// any fast kernel exists, and it is what the broken implementations below start from.

func portGEMM(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				s += a[i*k+p] * w[j*k+p]
			}
			c[i*n+j] = s
		}
	}
}

func portRMSNorm(out, x, weight []float32, dim int, eps float32) {
	shape.Rows("RMSNorm", dim, []string{"x", "out"}, len(x), len(out))
	shape.Len("RMSNorm", "weight", len(weight), dim, "dim")
	for r := 0; r < len(x); r += dim {
		portRMSNormRow(out[r:r+dim], x[r:r+dim], weight, eps)
	}
}

func portRMSNormRow(out, x, weight []float32, eps float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / float32(math.Sqrt(float64(ss/float32(len(x))+eps)))
	for i, v := range x {
		out[i] = v * inv * weight[i]
	}
}

func portAddRMSNorm(out, residual, x, weight []float32, dim int, eps float32) {
	shape.Rows("AddRMSNorm", dim, []string{"residual", "x", "out"}, len(residual), len(x), len(out))
	shape.Len("AddRMSNorm", "weight", len(weight), dim, "dim")
	for i := range residual {
		residual[i] += x[i]
	}
	for r := 0; r < len(residual); r += dim {
		portRMSNormRow(out[r:r+dim], residual[r:r+dim], weight, eps)
	}
}

func portRoPE(x []float32, pos []int32, nHeads, headDim int, theta float32) {
	shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
	for t, p := range pos {
		for h := 0; h < nHeads; h++ {
			head := x[(t*nHeads+h)*headDim:][:headDim]
			for i := 0; i < headDim; i += 2 {
				freq := float32(math.Pow(float64(theta), -float64(i)/float64(headDim)))
				sin, cos := math.Sincos(float64(float32(p) * freq))
				s, c := float32(sin), float32(cos)
				a, b := head[i], head[i+1]
				head[i] = a*c - b*s
				head[i+1] = a*s + b*c
			}
		}
	}
}

func portSwiGLU(out, gate, up []float32) {
	shape.Positive("SwiGLU", "len(gate)", len(gate))
	shape.Len("SwiGLU", "up", len(up), len(gate), "len(gate)")
	shape.Len("SwiGLU", "out", len(out), len(gate), "len(gate)")
	for i, g := range gate {
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

func portSoftmax(x []float32, rows, cols int) {
	shape.Positive("Softmax", "rows", rows, "cols", cols)
	shape.Len("Softmax", "x", len(x), rows*cols, "rows*cols")
	for r := 0; r < rows; r++ {
		portSoftmaxRow(x[r*cols : (r+1)*cols])
	}
}

func portSoftmaxRow(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range x {
		x[i] = float32(math.Exp(float64(v - mx)))
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

func portCausalAttention(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	kvRow := nKVHeads * headDim
	keyAt := func(s, g int) []float32 { return k[s*kvRow+g*headDim:][:headDim] }
	valueAt := func(s, g int) []float32 { return v[s*kvRow+g*headDim:][:headDim] }
	for t := 0; t < nq; t++ {
		for h := 0; h < nHeads; h++ {
			o := out[(t*nHeads+h)*headDim:][:headDim]
			portAttendOne(o, q[(t*nHeads+h)*headDim:][:headDim], kvLen-nq+t+1, h/(nHeads/nKVHeads), scale, keyAt, valueAt)
		}
	}
}

func portAttendOne(o, qv []float32, n, g int, scale float32, keyAt, valueAt func(s, g int) []float32) {
	scores := make([]float32, n)
	for s := range scores {
		var dot float32
		for d, kv := range keyAt(s, g) {
			dot += qv[d] * kv
		}
		scores[s] = scale * dot
	}
	portSoftmaxRow(scores)
	clear(o)
	for s, p := range scores {
		for d, vv := range valueAt(s, g) {
			o[d] += p * vv
		}
	}
}

func portKVAppend(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppend", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	row := nKVHeads * headDim
	for t, s := range slots {
		if s < 0 {
			continue
		}
		copy(kCache[int(s)*row:][:row], k[t*row:][:row])
		copy(vCache[int(s)*row:][:row], v[t*row:][:row])
	}
}

func portPagedAttention(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttention", len(out), len(q), len(kCache), len(vCache), qStart, seqLens, blockTables,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	kvRow := nKVHeads * headDim
	for i, L := range seqLens {
		table := blockTables[i*maxBlocksPerSeq:][:maxBlocksPerSeq]
		slot := func(s int) int { return int(table[s/blockSize])*blockSize + s%blockSize }
		keyAt := func(s, g int) []float32 { return kCache[slot(s)*kvRow+g*headDim:][:headDim] }
		valueAt := func(s, g int) []float32 { return vCache[slot(s)*kvRow+g*headDim:][:headDim] }
		n := int(qStart[i+1] - qStart[i])
		for j := 0; j < n; j++ {
			t := int(qStart[i]) + j
			for h := 0; h < nHeads; h++ {
				o := out[(t*nHeads+h)*headDim:][:headDim]
				portAttendOne(o, q[(t*nHeads+h)*headDim:][:headDim], int(L)-n+j+1, h/(nHeads/nKVHeads), scale, keyAt, valueAt)
			}
		}
	}
}

var port = Funcs{
	GEMM: portGEMM, RMSNorm: portRMSNorm, AddRMSNorm: portAddRMSNorm, RoPE: portRoPE, SwiGLU: portSwiGLU,
	Softmax: portSoftmax, CausalAttention: portCausalAttention, KVAppend: portKVAppend, PagedAttention: portPagedAttention,
}

// TestPort runs the float32 port through every conformance test and the golden files.
func TestPort(t *testing.T) { TestAll(t, port) }

// TestGoldenFiles regenerates the golden files under -update, then checks them against kernels/ref.
func TestGoldenFiles(t *testing.T) {
	dir, err := GoldenDir()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := WriteGolden(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := VerifyGoldenFiles(dir); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenCorruptionFails checks that VerifyGoldenFiles notices a golden output off by one float32 ulp of one
// value, and that a golden check fails an implementation whose output is off.
func TestGoldenCorruptionFails(t *testing.T) {
	g := goldenOps[0]
	data, err := g.generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.verify(data); err != nil {
		t.Fatalf("fresh %s: %v", g.file(), err)
	}
	cs, err := decodeGEMMGolden(data)
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	c.Want["c"][0] = float64(math.Nextafter32(float32(c.Want["c"][0]), 2))
	if err := sameOutputs(c.Case.reference(), c.Want); err == nil {
		t.Errorf("golden output changed by one float32 ulp passes the reference check")
	}
	var failed int
	if err := g.check(data, Funcs{GEMM: dropLastK}, Options{}, func(_ string, err error) {
		if err != nil {
			failed++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Errorf("a GEMM that drops the last k term passes the golden GEMM cases")
	}
}

func decodeGEMMGolden(data []byte) ([]goldenCase[*gemmCase], error) {
	var f goldenFile[*gemmCase]
	err := json.Unmarshal(data, &f)
	return f.Cases, err
}

// Deliberately broken implementations, each a realistic bug: every one must fail its conformance check on at
// least one shape, and the port must pass them all.

func dropLastK(m, n, k int, a, w, c []float32) {
	shape.GEMM("GEMM", m, n, k, len(a), len(w), len(c))
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k-1; p++ {
				s += a[i*k+p] * w[j*k+p]
			}
			c[i*n+j] = s
		}
	}
}

func TestBrokenImplementationsFail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func() error
	}{
		{"GEMM drops last k term", func() error { return gemmErrors(dropLastK) }},
		{"GEMM leaves last column", func() error {
			return gemmErrors(func(m, n, k int, a, w, c []float32) {
				portGEMM(m, n, k, a, w, c)
				for i := 0; i < m; i++ {
					c[i*n+n-1] = float32(math.NaN())
				}
			})
		}},
		{"GEMM stores float16-precision outputs", func() error {
			return gemmErrors(func(m, n, k int, a, w, c []float32) {
				portGEMM(m, n, k, a, w, c)
				for i := range c {
					c[i] = toF16(c[i])
				}
			})
		}},
		{"RMSNorm without eps", func() error {
			return rowsErrors(func(s RowsShape) error {
				return checkRMSNorm(func(out, x, weight []float32, dim int, eps float32) { portRMSNorm(out, x, weight, dim, 0) }, s, Options{})
			})
		}},
		{"AddRMSNorm leaves residual", func() error {
			return rowsErrors(func(s RowsShape) error {
				return checkAddRMSNorm(func(out, residual, x, weight []float32, dim int, eps float32) {
					r := clone(residual)
					portAddRMSNorm(out, r, x, weight, dim, eps)
				}, s, Options{})
			})
		}},
		{"RoPE rotate_half pairing", func() error {
			return ropeErrors(func(x []float32, pos []int32, nHeads, headDim int, theta float32) {
				shape.RoPE("RoPE", len(x), len(pos), nHeads, headDim)
				for t, p := range pos {
					for h := 0; h < nHeads; h++ {
						head := x[(t*nHeads+h)*headDim:][:headDim]
						for i := 0; i < headDim/2; i++ {
							angle := float64(p) * math.Pow(float64(theta), -2*float64(i)/float64(headDim))
							sin, cos := math.Sincos(angle)
							a, b := head[i], head[i+headDim/2]
							head[i] = a*float32(cos) - b*float32(sin)
							head[i+headDim/2] = a*float32(sin) + b*float32(cos)
						}
					}
				}
			})
		}},
		{"SwiGLU gates the wrong input", func() error {
			return rowsErrors(func(s RowsShape) error {
				return checkSwiGLU(func(out, gate, up []float32) { portSwiGLU(out, up, gate) }, s, Options{})
			})
		}},
		{"Softmax without max subtraction", func() error {
			return rowsErrors(func(s RowsShape) error {
				return checkSoftmax(func(x []float32, rows, cols int) {
					for r := 0; r < rows; r++ {
						row := x[r*cols : (r+1)*cols]
						var sum float32
						for i, v := range row {
							row[i] = float32(math.Exp(float64(v)))
							sum += row[i]
						}
						for i := range row {
							row[i] /= sum
						}
					}
				}, s, Options{})
			})
		}},
		{"CausalAttention maps query heads to KV heads by h%nKVHeads", func() error {
			return attentionErrors(func(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
				kvRow := nKVHeads * headDim
				keyAt := func(s, g int) []float32 { return k[s*kvRow+g*headDim:][:headDim] }
				valueAt := func(s, g int) []float32 { return v[s*kvRow+g*headDim:][:headDim] }
				for t := 0; t < nq; t++ {
					for h := 0; h < nHeads; h++ {
						o := out[(t*nHeads+h)*headDim:][:headDim]
						portAttendOne(o, q[(t*nHeads+h)*headDim:][:headDim], kvLen-nq+t+1, h%nKVHeads, scale, keyAt, valueAt)
					}
				}
			})
		}},
		{"CausalAttention ignores the cached prefix", func() error {
			return attentionErrors(func(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
				off := (kvLen - nq) * nKVHeads * headDim
				portCausalAttention(out, q, k[off:], v[off:], nq, nq, nHeads, nKVHeads, headDim, scale)
			})
		}},
		{"CausalAttention with 2^-16 relative errors (a crude exp)", func() error {
			return attentionErrors(func(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
				portCausalAttention(out, q, k, v, nq, kvLen, nHeads, nKVHeads, headDim, scale)
				for i := range out {
					out[i] = roundMantissa(out[i], 16)
				}
			})
		}},
		{"KVAppend writes skipped tokens to slot 0", func() error {
			return kvAppendErrors(func(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int) {
				s := clone(slots)
				for i := range s {
					s[i] = max(s[i], 0)
				}
				portKVAppend(kCache, vCache, k, v, s, nKVHeads, headDim)
			})
		}},
		{"PagedAttention ignores the block table", func() error {
			return pagedErrors(func(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
				maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
				identity := clone(blockTables)
				for i := range identity {
					identity[i] = int32(i % maxBlocksPerSeq)
				}
				portPagedAttention(out, q, kCache, vCache, qStart, seqLens, identity, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim, scale)
			})
		}},
		{"PagedAttention reads the whole last block", func() error {
			return pagedErrors(func(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
				maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
				full := clone(seqLens)
				for i, L := range full {
					full[i] = (L + int32(blockSize) - 1) / int32(blockSize) * int32(blockSize)
				}
				portPagedAttention(out, q, kCache, vCache, qStart, full, blockTables, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim, scale)
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check()
			if err == nil {
				t.Fatal("passes every shape")
			}
			t.Log(err)
		})
	}
}

// roundMantissa keeps bits significant bits of x's mantissa: a model of a lower-precision computation.
func roundMantissa(x float32, bits uint) float32 {
	drop := 24 - bits
	b := math.Float32bits(x)
	b += 1 << (drop - 1)
	return math.Float32frombits(b &^ (1<<drop - 1))
}

// firstError returns the error of the first shape that fails check, nil if none does.
func firstError[S any](shapes []S, check func(S) error) error {
	for _, s := range shapes {
		if err := check(s); err != nil {
			return err
		}
	}
	return nil
}

// bySize returns shapes from the smallest to the largest, so that firstError finds a cheap failing shape first.
func bySize[S interface{ work() int }](shapes []S) []S {
	out := clone(shapes)
	slices.SortStableFunc(out, func(a, b S) int { return a.work() - b.work() })
	return out
}

func gemmErrors(f GEMMFunc) error {
	return firstError(bySize(GEMMShapes), func(s GEMMShape) error { return checkGEMM(f, s, Options{}) })
}

func rowsErrors(check func(RowsShape) error) error { return firstError(bySize(RowsShapes), check) }

func ropeErrors(f RoPEFunc) error {
	return firstError(bySize(RoPEShapes), func(s RoPEShape) error { return checkRoPE(f, s, Options{}) })
}

func attentionErrors(f CausalAttentionFunc) error {
	return firstError(bySize(AttentionShapes), func(s AttentionShape) error { return checkCausalAttention(f, s, Options{}) })
}

func kvAppendErrors(f KVAppendFunc) error {
	return firstError(KVAppendShapes, func(s KVAppendShape) error { return checkKVAppend(f, s, Options{}) })
}

func pagedErrors(f PagedAttentionFunc) error {
	return firstError(bySize(PagedShapes), func(s PagedShape) error { return checkPagedAttention(f, s, Options{}) })
}

// TestBadSizeChecks checks the bad-size check itself: an implementation that does not panic, or panics with
// another message, fails it.
func TestBadSizeChecks(t *testing.T) {
	if err := checkPanics(gemmBadCalls(portGEMM)); err != nil {
		t.Errorf("port: %v", err)
	}
	silent := func(m, n, k int, a, w, c []float32) {}
	if err := checkPanics(gemmBadCalls(silent)); err == nil || !strings.Contains(err.Error(), "did not panic") {
		t.Errorf("GEMM that never panics: err = %v, want \"did not panic\"", err)
	}
	other := func(m, n, k int, a, w, c []float32) { panic("index out of range") }
	if err := checkPanics(gemmBadCalls(other)); err == nil || !strings.Contains(err.Error(), `want "kernels: GEMM: `) {
		t.Errorf("GEMM that panics with another message: err = %v", err)
	}
}

// TestNaiveBaselineError pins the size of the naive float32 attention error that the attention bound is built on:
// neither zero (the bound would be the floor) nor large (the bound would pass anything).
func TestNaiveBaselineError(t *testing.T) {
	s := AttentionShape{NQ: 97, KVLen: 97, NHeads: 8, NKVHeads: 2, HeadDim: 64}
	c := newAttentionCase(s, newRand("CausalAttention", s.Name()), Options{})
	want := c.reference()
	e := c.naiveError(want, Options{})
	if e < unitRoundoff2/4 || e > 1e-12 {
		t.Errorf("naive float32 attention nMSE = %.3g, want between u²/4 = %.3g and 1e-12", e, unitRoundoff2/4)
	}
	t.Logf("naive float32 attention nMSE %.3g for %s", e, s.Name())

	// At float16 (10 stored mantissa bits), the naive baseline's error grows by about 2^26.
	e16 := c.naiveError(want, Options{BaselineRounding: toF16})
	if e16 < e*1e5 {
		t.Errorf("naive attention with float16 rounding nMSE = %.3g, want far above float32's %.3g", e16, e)
	}
}

// BenchmarkPort runs the float32 port through each benchmark on its smallest shape: it keeps the benchmark code
// exercised (go test -bench Port -benchtime 1x) without waiting for the port on large shapes.
func BenchmarkPort(b *testing.B) {
	b.Run("GEMM/"+GEMMBenchShapes[0].Name(), func(b *testing.B) { BenchmarkGEMM(b, portGEMM, GEMMBenchShapes[0]) })
	rows := RowsBenchShapes[0]
	b.Run("RMSNorm/"+rows.Name(), func(b *testing.B) { BenchmarkRMSNorm(b, portRMSNorm, rows) })
	b.Run("AddRMSNorm/"+rows.Name(), func(b *testing.B) { BenchmarkAddRMSNorm(b, portAddRMSNorm, rows) })
	b.Run("SwiGLU/"+rows.Name(), func(b *testing.B) { BenchmarkSwiGLU(b, portSwiGLU, rows) })
	b.Run("Softmax/"+rows.Name(), func(b *testing.B) { BenchmarkSoftmax(b, portSoftmax, rows) })
	b.Run("RoPE/"+RoPEBenchShapes[0].Name(), func(b *testing.B) { BenchmarkRoPE(b, portRoPE, RoPEBenchShapes[0]) })
	b.Run("CausalAttention/"+AttentionBenchShapes[0].Name(), func(b *testing.B) {
		BenchmarkCausalAttention(b, portCausalAttention, AttentionBenchShapes[0])
	})
	b.Run("PagedAttention/"+PagedBenchShapes[1].Name(), func(b *testing.B) {
		BenchmarkPagedAttention(b, portPagedAttention, PagedBenchShapes[1])
	})
	b.Run("KVAppend/"+KVAppendBenchShapes[0].Name(), func(b *testing.B) {
		BenchmarkKVAppend(b, portKVAppend, KVAppendBenchShapes[0])
	})
}

func toF16(x float32) float32 { return half.F16ToF32(half.F32ToF16(x)) }

// TestReducedPrecisionOptions shows what the Options are for: implementations that store float16 outputs fail
// the float32 default and pass once the Options say float16.
func TestReducedPrecisionOptions(t *testing.T) {
	f16 := Options{InputRounding: toF16, BaselineRounding: toF16, ToleranceScale: 1 << 26}

	attention := func(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
		portCausalAttention(out, q, k, v, nq, kvLen, nHeads, nKVHeads, headDim, scale)
		for i := range out {
			out[i] = toF16(out[i])
		}
	}
	s := AttentionShape{NQ: 17, KVLen: 97, NHeads: 8, NKVHeads: 2, HeadDim: 64}
	if err := checkCausalAttention(attention, s, Options{}); err == nil {
		t.Errorf("attention with float16 outputs passes the float32 bound")
	}
	if err := checkCausalAttention(attention, s, f16); err != nil {
		t.Errorf("attention with float16 outputs, float16 options: %v", err)
	}

	gemm := func(m, n, k int, a, w, c []float32) {
		portGEMM(m, n, k, a, w, c)
		for i := range c {
			c[i] = toF16(c[i])
		}
	}
	g := GEMMShape{M: 7, N: 17, K: 1025}
	if err := checkGEMM(gemm, g, Options{}); err == nil {
		t.Errorf("GEMM with float16 outputs passes the float32 tolerance")
	}
	if err := checkGEMM(gemm, g, f16); err != nil {
		t.Errorf("GEMM with float16 outputs, float16 options: %v", err)
	}

	// InputRounding reaches the inputs: with it, every input of a case is a float16 value.
	c := newAttentionCase(s, newRand("CausalAttention", s.Name()), f16)
	for i, v := range c.Q {
		if toF16(v) != v {
			t.Fatalf("q[%d] = %v is not a float16 value", i, v)
		}
	}
}
