package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/ref"
)

// Attention is checked by FlashAttention's rule: its RMS error against the float64 reference is at most twice
// that of the naive float32 implementation below (scores, softmax and weighted sum each in float32, one pass) on
// the same inputs, that is its normalized MSE at most 4 times the naive one. Tiling, the online rescaling, the
// pre-scaled queries and the polynomial exp2 change the rounding but must not make it worse than that.
// attnFloor keeps the bound above 0 where the naive version happens to be exact (one key: out = v): 16·u²
// (u = 2⁻²⁴), an RMS error of 4 float32 ulps, as kernels/kerneltest allows.
const attnFloor = 16 * 0x1p-48

// attnNaive is the naive float32 attention of one query over n keys: o = Σ softmax(scale·q·k)·v.
func attnNaive(o, q []float32, n int, scale float32, keyAt, valueAt func(s int) []float32) {
	scores := make([]float32, n)
	mx := float32(math.Inf(-1))
	for s := range scores {
		var dot float32
		for d, k := range keyAt(s) {
			dot += q[d] * k
		}
		scores[s] = scale * dot
		mx = max(mx, scores[s])
	}
	var sum float32
	for s := range scores {
		scores[s] = float32(math.Exp(float64(scores[s] - mx)))
		sum += scores[s]
	}
	clear(o)
	for s, p := range scores {
		for d, v := range valueAt(s) {
			o[d] += p / sum * v
		}
	}
}

// attnNaiveCausal is CausalAttention written with attnNaive.
func attnNaiveCausal(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, hd int, scale float32) {
	kvRow := nKVHeads * hd
	for t := range nq {
		for h := range nHeads {
			g := h / (nHeads / nKVHeads)
			attnNaive(out[(t*nHeads+h)*hd:][:hd], q[(t*nHeads+h)*hd:][:hd], kvLen-nq+t+1, scale,
				func(s int) []float32 { return k[s*kvRow+g*hd:][:hd] },
				func(s int) []float32 { return v[s*kvRow+g*hd:][:hd] })
		}
	}
}

// attnPaths runs test with the pure-Go micro-kernels and with the AVX-512 ones (where available), two threads.
func attnPaths(t *testing.T, test func(t *testing.T)) {
	prevThreads := SetThreads(2)
	defer SetThreads(prevThreads)
	for _, asm := range attnAsmPaths() {
		name := "go"
		if asm {
			name = "avx512"
		}
		t.Run("path="+name, func(t *testing.T) {
			defer attnUseAsm(asm)()
			test(t)
		})
	}
}

// attnClose reports whether got is within 1e-5 of want, relative to want's magnitude or 1.
func attnClose(got, want float32) bool {
	return math.Abs(float64(got-want)) <= 1e-5*max(1, math.Abs(float64(want)))
}

// attnCheck compares got and the naive float32 output with the float64 reference.
func attnCheck(t *testing.T, what string, got, naive []float32, want []float64) {
	t.Helper()
	e, en := elemNMSE(got, want), elemNMSE(naive, want)
	if bound := 4 * max(en, attnFloor); e > bound {
		t.Errorf("%s: nMSE %.3g > %.3g (4x naive float32 %.3g)", what, e, bound, en)
	}
}

type attnHeads struct{ nHeads, nKVHeads, headDim int }

// attnHeadShapes cover GQA ratios 1, 2 and 4 and head dims that leave masked tails (17, 40) or fill the
// vectors (64, 128).
var attnHeadShapes = []attnHeads{{1, 1, 17}, {2, 2, 64}, {3, 3, 48}, {4, 2, 40}, {8, 2, 64}, {4, 1, 128}}

func TestCausalAttention(t *testing.T) {
	attnPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, hs := range attnHeadShapes {
			for _, lens := range [][2]int{{1, 1}, {7, 7}, {17, 54}, {54, 54}, {1, 97}, {97, 97}, {40, 97}} {
				nq, kvLen := lens[0], lens[1]
				if testing.Short() && (hs.headDim == 128 || hs.nHeads == 8) && nq > 20 {
					continue // keeps -race -short quick
				}
				q, q64 := elemRand(rng, nq*hs.nHeads*hs.headDim, 1)
				k, k64 := elemRand(rng, kvLen*hs.nKVHeads*hs.headDim, 1)
				v, v64 := elemRand(rng, kvLen*hs.nKVHeads*hs.headDim, 1)
				scale := float32(1 / math.Sqrt(float64(hs.headDim)))
				want := make([]float64, len(q))
				ref.CausalAttention(want, q64, k64, v64, nq, kvLen, hs.nHeads, hs.nKVHeads, hs.headDim, float64(scale))
				naive := make([]float32, len(q))
				attnNaiveCausal(naive, q, k, v, nq, kvLen, hs.nHeads, hs.nKVHeads, hs.headDim, scale)
				got := elemPoisoned(len(q))
				CausalAttention(got, q, k, v, nq, kvLen, hs.nHeads, hs.nKVHeads, hs.headDim, scale)
				attnCheck(t, fmt.Sprintf("nq=%d kvLen=%d heads=%d/%d headDim=%d", nq, kvLen, hs.nHeads, hs.nKVHeads, hs.headDim),
					got, naive, want)
			}
		}
	})
}

// attnPagedCase is a batch for PagedAttention: sequence lengths and query counts, laid out in a cache whose
// blocks are handed out in a shuffled order, so that block tables are not the identity.
type attnPagedCase struct {
	seqLens, nQueries []int
	blockSize         int
	heads             attnHeads
}

func (c attnPagedCase) run(t *testing.T, rng *rand.Rand) {
	hd, nKV, nHeads := c.heads.headDim, c.heads.nKVHeads, c.heads.nHeads
	kvRow := nKV * hd
	maxBlocks := 0
	totalBlocks := 0
	for _, L := range c.seqLens {
		nb := (L + c.blockSize - 1) / c.blockSize
		maxBlocks = max(maxBlocks, nb)
		totalBlocks += nb
	}
	totalBlocks += 3 // blocks no sequence owns
	order := rng.Perm(totalBlocks)
	nSeqs := len(c.seqLens)
	tables := make([]int32, nSeqs*maxBlocks)
	for i := range tables {
		tables[i] = -1 // entries past a sequence's end are never read
	}
	used := 0
	qStart := make([]int32, nSeqs+1)
	seqLens := make([]int32, nSeqs)
	for i, L := range c.seqLens {
		for b := range (L + c.blockSize - 1) / c.blockSize {
			tables[i*maxBlocks+b] = int32(order[used])
			used++
		}
		qStart[i+1] = qStart[i] + int32(c.nQueries[i])
		seqLens[i] = int32(L)
	}
	kc, kc64 := elemRand(rng, totalBlocks*c.blockSize*kvRow, 1)
	vc, vc64 := elemRand(rng, totalBlocks*c.blockSize*kvRow, 1)
	nq := int(qStart[nSeqs])
	q, q64 := elemRand(rng, nq*nHeads*hd, 1)
	scale := float32(1 / math.Sqrt(float64(hd)))
	want := make([]float64, len(q))
	ref.PagedAttention(want, q64, kc64, vc64, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd, float64(scale))
	naive := make([]float32, len(q))
	for i, L := range c.seqLens {
		slot := func(s int) int { return int(tables[i*maxBlocks+s/c.blockSize])*c.blockSize + s%c.blockSize }
		n := c.nQueries[i]
		for j := range n {
			t := int(qStart[i]) + j
			for h := range nHeads {
				g := h / (nHeads / nKV)
				attnNaive(naive[(t*nHeads+h)*hd:][:hd], q[(t*nHeads+h)*hd:][:hd], L-n+j+1, scale,
					func(s int) []float32 { return kc[slot(s)*kvRow+g*hd:][:hd] },
					func(s int) []float32 { return vc[slot(s)*kvRow+g*hd:][:hd] })
			}
		}
	}
	got := elemPoisoned(len(q))
	PagedAttention(got, q, kc, vc, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd, scale)
	name := fmt.Sprintf("seqLens=%v queries=%v blockSize=%d heads=%d/%d headDim=%d",
		c.seqLens, c.nQueries, c.blockSize, nHeads, nKV, hd)
	attnCheck(t, name, got, naive, want)

	// Binary16 caches: bit for bit the float32 path over the same (rounded) values.
	kc16, vc16 := make([]uint16, len(kc)), make([]uint16, len(vc))
	half.F32ToF16Slice(kc16, kc)
	half.F32ToF16Slice(vc16, vc)
	half.F16ToF32Slice(kc, kc16)
	half.F16ToF32Slice(vc, vc16)
	rounded, got16 := elemPoisoned(len(q)), elemPoisoned(len(q))
	PagedAttention(rounded, q, kc, vc, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd, scale)
	PagedAttentionF16(got16, q, kc16, vc16, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd, scale)
	for i := range got16 {
		if math.Float32bits(got16[i]) != math.Float32bits(rounded[i]) {
			t.Fatalf("%s: F16 cache: out[%d] = %v, want %v (float32 cache of the same values)", name, i, got16[i],
				rounded[i])
		}
	}

	// Int8 caches: the float32 path over code·scale, bit for bit where the values are widened, within float32
	// roundings where the fused decode kernel scales each row's score and probability instead.
	kc8, vc8 := make([]int8, len(kc)), make([]int8, len(vc))
	ks, vs := make([]float32, len(kc)/hd), make([]float32, len(vc)/hd)
	QuantizeRowsInt8(len(ks), hd, kc, kc8, ks)
	QuantizeRowsInt8(len(vs), hd, vc, vc8, vs)
	for i := range kc {
		kc[i], vc[i] = float32(kc8[i])*ks[i/hd], float32(vc8[i])*vs[i/hd]
	}
	widened, got8 := elemPoisoned(len(q)), elemPoisoned(len(q))
	PagedAttention(widened, q, kc, vc, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd, scale)
	PagedAttentionInt8(got8, q, kc8, vc8, ks, vs, qStart, seqLens, tables, maxBlocks, c.blockSize, nHeads, nKV, hd,
		scale)
	exact := !attnDecodeFused(1, hd)
	for i := range got8 {
		if exact && math.Float32bits(got8[i]) != math.Float32bits(widened[i]) || !attnClose(got8[i], widened[i]) {
			t.Fatalf("%s: int8 cache: out[%d] = %v, want %v (float32 cache of code·scale)", name, i, got8[i],
				widened[i])
		}
	}
}

func TestPagedAttention(t *testing.T) {
	attnPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		blockSizes := []int{1, 8, 16, 32}
		if testing.Short() {
			blockSizes = []int{1, 16}
		}
		for _, bs := range blockSizes {
			for _, hs := range attnHeadShapes {
				// Decode: one query a sequence.
				attnPagedCase{[]int{1, 54, 97, 33}, []int{1, 1, 1, 1}, bs, hs}.run(t, rng)
				// Chunked prefill mixed with decode.
				attnPagedCase{[]int{54, 97, 7}, []int{17, 1, 7}, bs, hs}.run(t, rng)
			}
		}
	})
}

// TestPagedAttentionSplit has a single long sequence per call, so that its KV range is split across threads
// (flash-decoding) and the partial results are merged.
func TestPagedAttentionSplit(t *testing.T) {
	attnPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 16))
		heads := []attnHeads{{1, 1, 64}, {4, 2, 40}, {8, 2, 64}}
		if testing.Short() {
			heads = heads[:2]
		}
		for _, hs := range heads {
			attnPagedCase{[]int{1100}, []int{1}, 16, hs}.run(t, rng)
			attnPagedCase{[]int{777}, []int{5}, 8, hs}.run(t, rng)
			attnPagedCase{[]int{900, 3}, []int{2, 3}, 32, hs}.run(t, rng)
		}
	})
}

// TestPagedAttentionHeadGroups shrinks the output budget of a work item so that KV heads are split into groups
// (as for long prefill chunks), with and without the flash-decoding split.
func TestPagedAttentionHeadGroups(t *testing.T) {
	defer func(prev int) { attnPagedOut = prev }(attnPagedOut)
	attnPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(19, 20))
		for _, budget := range []int{1, 8 << 10} {
			attnPagedOut = budget
			for _, hs := range []attnHeads{{4, 2, 40}, {8, 2, 64}, {12, 3, 17}} {
				attnPagedCase{[]int{54, 97, 7}, []int{17, 1, 7}, 16, hs}.run(t, rng)
				attnPagedCase{[]int{600}, []int{3}, 8, hs}.run(t, rng)
			}
		}
	})
}

func TestKVAppend(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const nKV, hd, nSlots = 2, 17, 40
	row := nKV * hd
	slots := []int32{5, -1, 0, 39, 12, -7, 6}
	k, k64 := elemRand(rng, len(slots)*row, 1)
	v, v64 := elemRand(rng, len(slots)*row, 1)
	kc, kc64 := elemRand(rng, nSlots*row, 1)
	vc, vc64 := elemRand(rng, nSlots*row, 1)
	ref.KVAppend(kc64, vc64, k64, v64, slots, nKV, hd)
	KVAppend(kc, vc, k, v, slots, nKV, hd)
	for i := range kc {
		if float64(kc[i]) != kc64[i] || float64(vc[i]) != vc64[i] {
			t.Fatalf("slot %d dim %d: got k=%g v=%g, want k=%g v=%g", i/row, i%row, kc[i], vc[i], kc64[i], vc64[i])
		}
	}
}

func TestKVAppendF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const nKV, hd, nSlots = 2, 17, 40
	row := nKV * hd
	slots := []int32{5, -1, 0, 39, 12, -7, 6}
	k, _ := elemRand(rng, len(slots)*row, 1)
	v, _ := elemRand(rng, len(slots)*row, 1)
	kc, vc := make([]uint16, nSlots*row), make([]uint16, nSlots*row)
	for i := range kc {
		kc[i], vc[i] = uint16(i), uint16(3*i)
	}
	want, wantV := slices.Clone(kc), slices.Clone(vc)
	for t, s := range slots {
		if s >= 0 {
			half.F32ToF16Slice(want[int(s)*row:][:row], k[t*row:][:row])
			half.F32ToF16Slice(wantV[int(s)*row:][:row], v[t*row:][:row])
		}
	}
	KVAppendF16(kc, vc, k, v, slots, nKV, hd)
	if !slices.Equal(kc, want) || !slices.Equal(vc, wantV) {
		t.Fatal("KVAppendF16 did not write exactly the rounded rows at their slots, and only there")
	}
}

// TestKVAppendInt8 checks that each KV head's row of a token lands at its slot as QuantizeRowsInt8 quantizes
// it, codes and scale, within half a step of each value, and that nothing else changes.
func TestKVAppendInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const nKV, hd, nSlots = 3, 17, 40
	row := nKV * hd
	slots := []int32{5, -1, 0, 39, 12, -7, 6}
	k, _ := elemRand(rng, len(slots)*row, 1)
	v, _ := elemRand(rng, len(slots)*row, 1)
	clear(k[2*row+hd : 2*row+2*hd]) // a zero row: scale 0, codes 0
	kc, vc := make([]int8, nSlots*row), make([]int8, nSlots*row)
	ks, vs := make([]float32, nSlots*nKV), make([]float32, nSlots*nKV)
	for i := range kc {
		kc[i], vc[i] = int8(i), int8(-i)
	}
	for i := range ks {
		ks[i], vs[i] = float32(i), float32(-i)
	}
	want, wantV, wantS, wantVS := slices.Clone(kc), slices.Clone(vc), slices.Clone(ks), slices.Clone(vs)
	for t, s := range slots {
		if s >= 0 {
			QuantizeRowsInt8(nKV, hd, k[t*row:][:row], want[int(s)*row:][:row], wantS[int(s)*nKV:][:nKV])
			QuantizeRowsInt8(nKV, hd, v[t*row:][:row], wantV[int(s)*row:][:row], wantVS[int(s)*nKV:][:nKV])
		}
	}
	KVAppendInt8(kc, vc, ks, vs, k, v, slots, nKV, hd)
	if !slices.Equal(kc, want) || !slices.Equal(vc, wantV) || !slices.Equal(ks, wantS) || !slices.Equal(vs, wantVS) {
		t.Fatal("KVAppendInt8 did not write exactly the quantized rows and their scales at their slots, and only there")
	}
	for tok, s := range slots {
		for i := 0; s >= 0 && i < row; i++ {
			j := int(s)*row + i
			for _, c := range []struct {
				x    float32
				code int8
				s    float32
			}{{k[tok*row+i], kc[j], ks[j/hd]}, {v[tok*row+i], vc[j], vs[j/hd]}} {
				if d := math.Abs(float64(c.x - float32(c.code)*c.s)); d > 0.5001*float64(c.s) {
					t.Fatalf("slot %d value %d: %v stored as %d·%v, off by %v, more than half a step", s, i, c.x, c.code,
						c.s, d)
				}
			}
		}
	}
	if ks[0*nKV+1] != 0 || slices.ContainsFunc(kc[1*hd:2*hd], func(c int8) bool { return c != 0 }) {
		t.Fatal("a zero row did not get scale 0 and zero codes")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("KVAppendInt8 with short scales did not panic")
		}
	}()
	KVAppendInt8(kc, vc, ks[1:], vs, k, v, slots, nKV, hd)
}

func TestAttnBadSizes(t *testing.T) {
	f32, f64 := make([]float32, 64), make([]float64, 64)
	one := []int32{0, 1}
	cases := []struct {
		name       string
		impl, spec func()
	}{
		{"Causal/nq>kvLen", func() { CausalAttention(f32[:8], f32[:8], f32[:4], f32[:4], 2, 1, 1, 1, 4, 1) },
			func() { ref.CausalAttention(f64[:8], f64[:8], f64[:4], f64[:4], 2, 1, 1, 1, 4, 1) }},
		{"Causal/gqa", func() { CausalAttention(f32[:12], f32[:12], f32[:8], f32[:8], 1, 1, 3, 2, 4, 1) },
			func() { ref.CausalAttention(f64[:12], f64[:12], f64[:8], f64[:8], 1, 1, 3, 2, 4, 1) }},
		{"Causal/v", func() { CausalAttention(f32[:4], f32[:4], f32[:4], f32[:3], 1, 1, 1, 1, 4, 1) },
			func() { ref.CausalAttention(f64[:4], f64[:4], f64[:4], f64[:3], 1, 1, 1, 1, 4, 1) }},
		{"KVAppend/slot", func() { KVAppend(f32[:8], f32[:8], f32[:4], f32[:4], []int32{2}, 1, 4) },
			func() { ref.KVAppend(f64[:8], f64[:8], f64[:4], f64[:4], []int32{2}, 1, 4) }},
		{"Paged/seqLen", func() {
			PagedAttention(f32[:4], f32[:4], f32[:8], f32[:8], one, []int32{3}, []int32{0}, 1, 2, 1, 1, 4, 1)
		}, func() {
			ref.PagedAttention(f64[:4], f64[:4], f64[:8], f64[:8], one, []int32{3}, []int32{0}, 1, 2, 1, 1, 4, 1)
		}},
		{"Paged/block", func() {
			PagedAttention(f32[:4], f32[:4], f32[:8], f32[:8], one, []int32{2}, []int32{1}, 1, 2, 1, 1, 4, 1)
		}, func() {
			ref.PagedAttention(f64[:4], f64[:4], f64[:8], f64[:8], one, []int32{2}, []int32{1}, 1, 2, 1, 1, 4, 1)
		}},
	}
	for _, c := range cases {
		want := refPanic(t, c.spec)
		if got := panicMessage(c.impl); got != want {
			t.Errorf("%s: panic %q, want %q", c.name, got, want)
		}
	}
}

// BenchmarkCausalAttention measures prefill attention. FLOPs: the causal half of two [nq, kvLen, headDim]
// matrix products per query head, 4·nq·kvLen·headDim·nHeads/2 (the exponentials are not counted).
func BenchmarkCausalAttention(b *testing.B) {
	n := 512
	if testing.Short() {
		n = 64
	}
	for _, hs := range []attnHeads{{8, 8, 64}, {8, 2, 64}, {32, 8, 128}} {
		rng := rand.New(rand.NewPCG(1, 1))
		q, _ := elemRand(rng, n*hs.nHeads*hs.headDim, 1)
		k, _ := elemRand(rng, n*hs.nKVHeads*hs.headDim, 1)
		v, _ := elemRand(rng, n*hs.nKVHeads*hs.headDim, 1)
		out := make([]float32, len(q))
		scale := float32(1 / math.Sqrt(float64(hs.headDim)))
		b.Run(fmt.Sprintf("tokens=%d/nHeads=%d/nKVHeads=%d/headDim=%d", n, hs.nHeads, hs.nKVHeads, hs.headDim), func(b *testing.B) {
			b.SetBytes(int64(4 * (2*len(q) + len(k) + len(v))))
			for b.Loop() {
				CausalAttention(out, q, k, v, n, n, hs.nHeads, hs.nKVHeads, hs.headDim, scale)
			}
			flops := 4 * float64(n) * float64(n) * float64(hs.headDim) * float64(hs.nHeads) / 2
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPagedAttentionDecode measures decode attention (one query a sequence) over float32 and binary16
// caches. Every shape runs over one cache (layers=1, warm in the caches of the CPU when it fits); stories110M's
// batch-32 step also over twelve caches in turn (layers=12, 154 MB of float32 or 77 MB of binary16 keys and
// values, as a model's step reads them). GB/s counts the keys and values read; ns/tile-head is the time a thread
// spends on a tile of 16 tokens of one head:
//
//	go test -run '^$' -bench 'PagedAttentionDecode/seqs=32/seqLen=65/' -count 6 ./kernels/cpu
func BenchmarkPagedAttentionDecode(b *testing.B) {
	type shape struct{ seqs, seqLen, nHeads, nKV, hd, layers int }
	// Long contexts of an 8B-class model, and stories110M's decode step at 65 tokens (the engine benchmark's).
	shapes := []shape{{8, 2048, 32, 8, 128, 1}, {1, 8192, 32, 8, 128, 1}, {1, 65, 12, 12, 64, 1},
		{32, 65, 12, 12, 64, 1}, {32, 65, 12, 12, 64, 12}}
	if testing.Short() {
		shapes = []shape{{2, 256, 32, 8, 128, 1}}
	}
	const bs = 16
	for _, sh := range shapes {
		nHeads, nKV, hd := sh.nHeads, sh.nKV, sh.hd
		rng := rand.New(rand.NewPCG(1, 1))
		blocksPer := (sh.seqLen + bs - 1) / bs
		q, _ := elemRand(rng, sh.seqs*nHeads*hd, 1)
		out := make([]float32, len(q))
		tables := make([]int32, sh.seqs*blocksPer)
		for i, p := range rng.Perm(len(tables)) {
			tables[i] = int32(p)
		}
		qStart := make([]int32, sh.seqs+1)
		seqLens := make([]int32, sh.seqs)
		for i := range seqLens {
			qStart[i+1] = int32(i + 1)
			seqLens[i] = int32(sh.seqLen)
		}
		values := sh.seqs * sh.seqLen * nKV * hd
		tiles := sh.seqs * ((sh.seqLen + 15) / 16) * nKV
		for _, cache := range []string{"f32", "f16", "int8"} {
			name := fmt.Sprintf("seqs=%d/seqLen=%d/nHeads=%d/nKVHeads=%d/headDim=%d/blockSize=%d/cache=%s/layers=%d",
				sh.seqs, sh.seqLen, nHeads, nKV, hd, bs, cache, sh.layers)
			b.Run(name, func(b *testing.B) {
				kc, vc := make([][]float32, sh.layers), make([][]float32, sh.layers)
				kc16, vc16 := make([][]uint16, sh.layers), make([][]uint16, sh.layers)
				kc8, vc8 := make([][]int8, sh.layers), make([][]int8, sh.layers)
				ks, vs := make([][]float32, sh.layers), make([][]float32, sh.layers)
				for l := range sh.layers {
					kc[l], _ = elemRand(rng, sh.seqs*blocksPer*bs*nKV*hd, 1)
					vc[l], _ = elemRand(rng, sh.seqs*blocksPer*bs*nKV*hd, 1)
					switch cache {
					case "f16":
						kc16[l], vc16[l] = make([]uint16, len(kc[l])), make([]uint16, len(vc[l]))
						half.F32ToF16Slice(kc16[l], kc[l])
						half.F32ToF16Slice(vc16[l], vc[l])
						kc[l], vc[l] = nil, nil
					case "int8":
						kc8[l], vc8[l] = make([]int8, len(kc[l])), make([]int8, len(vc[l]))
						ks[l], vs[l] = make([]float32, len(kc[l])/hd), make([]float32, len(vc[l])/hd)
						QuantizeRowsInt8(len(ks[l]), hd, kc[l], kc8[l], ks[l])
						QuantizeRowsInt8(len(vs[l]), hd, vc[l], vc8[l], vs[l])
						kc[l], vc[l] = nil, nil
					}
				}
				// Bytes a value read: its own, and for int8 a share of its row's scale.
				size := map[string]float64{"f32": 4, "f16": 2, "int8": 1 + 4/float64(hd)}[cache]
				b.SetBytes(int64(2 * size * float64(values)))
				i := 0
				for b.Loop() {
					l := i % sh.layers
					i++
					switch cache {
					case "f16":
						PagedAttentionF16(out, q, kc16[l], vc16[l], qStart, seqLens, tables, blocksPer, bs, nHeads, nKV, hd,
							0.088)
					case "int8":
						PagedAttentionInt8(out, q, kc8[l], vc8[l], ks[l], vs[l], qStart, seqLens, tables, blocksPer, bs,
							nHeads, nKV, hd, 0.088)
					default:
						PagedAttention(out, q, kc[l], vc[l], qStart, seqLens, tables, blocksPer, bs, nHeads, nKV, hd, 0.088)
					}
				}
				b.ReportMetric(2*size*float64(values)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				b.ReportMetric(b.Elapsed().Seconds()*1e9*float64(min(Threads(), tiles))/float64(b.N*tiles), "ns/tile-head")
			})
		}
	}
}

// BenchmarkPagedAttentionPrefill measures chunked prefill: one sequence whose last chunk of queries attends to
// its whole context in a paged cache of 16-token pages. FLOPs as BenchmarkCausalAttention, over the visible pairs.
func BenchmarkPagedAttentionPrefill(b *testing.B) {
	type shape struct{ seqLen, chunk int }
	shapes := []shape{{2048, 512}, {1024, 32}}
	if testing.Short() {
		shapes = []shape{{256, 32}}
	}
	const bs, nHeads, nKV, hd = 16, 32, 8, 128
	for _, sh := range shapes {
		rng := rand.New(rand.NewPCG(1, 1))
		blocks := sh.seqLen / bs
		kc, _ := elemRand(rng, sh.seqLen*nKV*hd, 1)
		vc, _ := elemRand(rng, sh.seqLen*nKV*hd, 1)
		q, _ := elemRand(rng, sh.chunk*nHeads*hd, 1)
		out := make([]float32, len(q))
		tables := make([]int32, blocks)
		for i, p := range rng.Perm(blocks) {
			tables[i] = int32(p)
		}
		qStart := []int32{0, int32(sh.chunk)}
		seqLens := []int32{int32(sh.seqLen)}
		b.Run(fmt.Sprintf("seqLen=%d/chunk=%d/nHeads=%d/nKVHeads=%d/headDim=%d/blockSize=%d", sh.seqLen, sh.chunk, nHeads, nKV, hd, bs), func(b *testing.B) {
			for b.Loop() {
				PagedAttention(out, q, kc, vc, qStart, seqLens, tables, blocks, bs, nHeads, nKV, hd, 0.088)
			}
			pairs := float64(sh.chunk) * float64(2*sh.seqLen-sh.chunk+1) / 2
			b.ReportMetric(4*pairs*hd*nHeads*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkAttnSoftmax is one online-softmax step of one row of 16 visible scores, decode's case:
//
//	go test -run '^$' -bench AttnSoftmax -count 3 ./kernels/cpu
func BenchmarkAttnSoftmax(b *testing.B) {
	row := make([]float32, attnCols)
	for i := range attnCols / 2 {
		row[i] = float32(i) * 0.01
	}
	s := make([]float32, attnRows*attnCols)
	m, l, alpha := make([]float32, attnRows), make([]float32, attnRows), make([]float32, attnRows)
	cnt := make([]int32, attnRows)
	for i := range cnt {
		cnt[i], m[i] = attnCols/2, attnInitMax
	}
	for b.Loop() {
		copy(s, row)
		attnSoftmax(s, m, l, alpha, cnt, 1)
	}
}
