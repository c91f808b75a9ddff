package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/kernels/ref"
)

// These tests check the launch decisions of plan.go (kernel choice, grids, split-K and split-KV, alignment and
// shape errors) without a GPU; the kernels themselves are tested on one (cuda_test.go, -tags cuda).

const h200SMs = 132

func TestPlanGEMM(t *testing.T) {
	const al = 0x10000 // 16-byte aligned
	cases := []struct {
		t       DType
		m, n, k int
		a       uintptr
		want    kernelPlan
	}{
		// Decode: dot kernels, vectorized when k % 8 == 0 and a, w are 16-byte aligned.
		{F16, 1, 4096, 4096, al, kernelPlan{"dot_f16_vec", dim3{1024, 1, 1}, dim3{128, 1, 1}, 1, 0}},
		{BF16, 8, 4096, 4096, al, kernelPlan{"dot_bf16_vec", dim3{1024, 2, 1}, dim3{128, 1, 1}, 1, 0}},
		{F16, 1, 17, 1025, al, kernelPlan{"dot_f16", dim3{5, 1, 1}, dim3{128, 1, 1}, 1, 0}},
		{F16, 16, 64, 64, al + 2, kernelPlan{"dot_f16", dim3{16, 4, 1}, dim3{128, 1, 1}, 1, 0}},
		{F32, 64, 64, 64, al, kernelPlan{"dot_f32", dim3{16, 16, 1}, dim3{128, 1, 1}, 1, 0}},
		// Decode batches through the tensor cores: 32 block tiles on 132 SMs, k split 5 ways (128 k-tiles of 64
		// bytes, 26 a split).
		{F16, 16, 4096, 4096, al, kernelPlan{"gemm_f16", dim3{32, 1, 5}, dim3{256, 1, 1}, 5, 26}},
		{BF16, 128, 4096, 4096, al, kernelPlan{"gemm_bf16", dim3{32, 1, 5}, dim3{256, 1, 1}, 5, 26}},
		// Prefill: 1024 tiles fill the GPU, no split.
		{BF16, 4096, 4096, 4096, al, kernelPlan{"gemm_bf16", dim3{32, 32, 1}, dim3{256, 1, 1}, 1, 128}},
		// A short k is not split below minSplitTiles k-tiles: k = 136 is 5 k-tiles.
		{F16, 9, 130, 136, al, kernelPlan{"gemm_f16", dim3{2, 1, 1}, dim3{256, 1, 1}, 1, 5}},
		{F16, 200, 257, 512, al, kernelPlan{"gemm_f16", dim3{3, 2, 2}, dim3{256, 1, 1}, 2, 8}},
	}
	for _, c := range cases {
		got, err := planGEMM(c.t, c.m, c.n, c.k, h200SMs, c.a, al, al)
		if err != nil || got != c.want {
			t.Errorf("planGEMM(%v, m=%d n=%d k=%d, a=%#x) = %+v, %v; want %+v", c.t, c.m, c.n, c.k, c.a, got, err, c.want)
		}
	}
	if _, err := planGEMM(F16, 16, 16, 16, h200SMs, al+1, al, al); err == nil ||
		err.Error() != "cuda: GEMM: a at 0x10001 is not 2-byte aligned" {
		t.Errorf("planGEMM with a at an odd address: %v", err)
	}
	if _, err := planGEMM(F32, 16, 16, 16, h200SMs, al, al, al+2); err == nil || !strings.Contains(err.Error(), "c at") {
		t.Errorf("planGEMM with c not 4-byte aligned: %v", err)
	}
	if _, err := planGEMM(DType(7), 16, 16, 16, h200SMs, al, al, al); err == nil ||
		err.Error() != "cuda: GEMM: dtype DType(7), want f32, f16 or bf16" {
		t.Errorf("planGEMM with a bad dtype: %v", err)
	}
}

// TestTilePlanSplits checks split-K's invariants over many shapes: every split has work, the splits cover k,
// a split takes at least minSplitTiles k-tiles unless k is shorter, and a grid that fills the SMs is not split.
func TestTilePlanSplits(t *testing.T) {
	for _, sms := range []int{1, 46, 108, 132} {
		for _, m := range []int{9, 16, 64, 128, 129, 300, 4096} {
			for _, n := range []int{16, 130, 1024, 4096, 14336} {
				for _, kb := range []int{16, 64, 200, 1024, 8192, 28672} {
					p := tilePlan("gemm_f16", m, n, kb, sms)
					nk := ceil(kb, tileKBytes)
					tiles := ceil(m, tileMN) * ceil(n, tileMN)
					bad := p.splits < 1 || p.grid.z != p.splits || p.splits*p.ksplit < nk ||
						(p.splits-1)*p.ksplit >= nk || (p.splits > 1 && p.ksplit < minSplitTiles) ||
						(tiles >= sms && p.splits != 1) || p.splits > max(1, ceil(sms, tiles))
					if bad {
						t.Fatalf("tilePlan(m=%d n=%d kbytes=%d sms=%d) = %+v (nk=%d tiles=%d)", m, n, kb, sms, p, nk, tiles)
					}
					if p.splits > 1 && p.workspaceBytes(m, n) != int64(p.splits*m*n*4) {
						t.Fatalf("workspaceBytes = %d", p.workspaceBytes(m, n))
					}
				}
			}
		}
	}
}

func TestPlanQuant(t *testing.T) {
	const al = 0x20000
	check := func(name string, p kernelPlan, err error, want string, splits int) {
		t.Helper()
		if err != nil || p.name != want || p.splits != splits {
			t.Errorf("%s = %q (%d splits), %v; want %q (%d splits)", name, p.name, p.splits, err, want, splits)
		}
	}
	p, err := planW8A16(BF16, 16, 4096, 4096, h200SMs, al, al, al, al)
	check("planW8A16(bf16, m=16)", p, err, "gemm_w8a16_bf16", 5)
	p, err = planW8A16(F16, 1, 4096, 4096, h200SMs, al, al, al, al)
	check("planW8A16(f16, m=1)", p, err, "dot_w8a16_f16_vec", 1)
	p, err = planW8A16(F32, 64, 4096, 4096, h200SMs, al, al, al, al)
	check("planW8A16(f32, m=64)", p, err, "dot_w8a16_f32_vec", 1)
	p, err = planW8A16(BF16, 64, 64, 40, h200SMs, al, al, al, al)
	check("planW8A16(bf16, k=40)", p, err, "dot_w8a16_bf16", 1)
	p, err = planW4A16(BF16, 128, 4096, 4096, 128, h200SMs, al, al, al, al)
	check("planW4A16(bf16, m=128)", p, err, "gemm_w4a16_bf16", 5)
	p, err = planW4A16(F16, 1, 4096, 4096, 128, h200SMs, al, al, al, al)
	check("planW4A16(f16, m=1)", p, err, "dot_w4a16_f16_vec", 1)
	p, err = planW4A16(F16, 1, 64, 256, 16, h200SMs, al, al, al, al)
	check("planW4A16(f16, group=16)", p, err, "dot_w4a16_f16", 1)
	p, err = planW4A16(F16, 32, 64, 256, 128, h200SMs, al, al+8, al, al)
	check("planW4A16(f16, w 8-byte aligned)", p, err, "dot_w4a16_f16", 1)
	p, err = planInt8("w8a8", 4096, 4096, 4096, h200SMs, al, al, al, ptr{"sa", al}, ptr{"sw", al})
	check("planInt8(w8a8, m=4096)", p, err, "gemm_w8a8", 1)
	p, err = planInt8("s8s32", 16, 4096, 4096, h200SMs, al, al, al)
	check("planInt8(s8s32, m=16)", p, err, "gemm_s8s32", 5)
	p, err = planInt8("w8a8", 4, 64, 48, h200SMs, al, al, al, ptr{"sa", al}, ptr{"sw", al})
	check("planInt8(w8a8, m=4)", p, err, "dot_w8a8_vec", 1)

	for _, c := range []struct {
		err  error
		want string
	}{
		{second(planW8A16(DType(3), 4, 4, 16, h200SMs, al, al, al, al)), "cuda: GEMMW8A16: dtype DType(3), want f32, f16 or bf16"},
		{second(planW8A16(BF16, 4, 4, 16, h200SMs, al+1, al, al, al)), "cuda: GEMMW8A16: a at 0x20001 is not 2-byte aligned"},
		{second(planW4A16(F32, 4, 4, 32, 32, h200SMs, al+2, al, al, al)), "cuda: GEMMW4A16: a at 0x20002 is not 4-byte aligned"},
		{second(planW4A16(F16, 4, 4, 32, 32, h200SMs, al, al, al+1, al)), "cuda: GEMMW4A16: s at 0x20001 is not 4-byte aligned"},
		{second(planInt8("w8a8", 4, 4, 16, h200SMs, al, al, al, ptr{"sa", al + 2})), "cuda: GEMMW8A8: sa at 0x20002 is not 4-byte aligned"},
	} {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("error %v, want %q", c.err, c.want)
		}
	}
}

func second(_ kernelPlan, err error) error { return err }

func TestPlanPaged(t *testing.T) {
	// Batch 64 of 4k-token contexts, 32 heads over 8 KV heads: 4 heads a block, 512 blocks, split 3 ways to
	// reach 8 blocks an SM on 132 SMs.
	p := PlanPaged(h200SMs, 64, 32, 8, 128, 4096)
	want := PagedPlan{Splits: 3, Chunk: 1376, WorkspaceBytes: 64 * 32 * 3 * 129 * 4}
	if p != want {
		t.Errorf("PlanPaged(batch 64, ctx 4096) = %+v, want %+v", p, want)
	}
	// Short contexts are not split below pagedMinChunk keys.
	if p := PlanPaged(h200SMs, 1, 8, 2, 128, 200); p.Splits != 1 || p.WorkspaceBytes != 0 {
		t.Errorf("PlanPaged(1 row, 200 keys) = %+v, want one split", p)
	}
	for _, rows := range []int{1, 7, 64, 512} {
		for _, l := range []int{1, 97, 1025, 5000, 32768} {
			p := PlanPaged(h200SMs, rows, 32, 8, 128, l)
			if p.Splits < 1 || p.Chunk%32 != 0 || p.Splits*p.Chunk < l || (p.Splits-1)*p.Chunk >= l {
				t.Errorf("PlanPaged(rows=%d, len=%d) = %+v: splits do not tile the keys", rows, l, p)
			}
		}
	}
	for _, c := range []struct{ nHeads, nKV, want int }{{32, 8, 4}, {8, 8, 1}, {64, 1, 16}, {24, 1, 12}, {56, 8, 7}} {
		if got := headsPerBlock(c.nHeads, c.nKV); got != c.want {
			t.Errorf("headsPerBlock(%d, %d) = %d, want %d", c.nHeads, c.nKV, got, c.want)
		}
	}
}

func TestCheckPaged(t *testing.T) {
	const al = 0x40000
	one := PagedPlan{Splits: 1, Chunk: 4096}
	split := PagedPlan{Splits: 2, Chunk: 2048, WorkspaceBytes: 1000}
	for _, c := range []struct {
		t       DType
		plan    PagedPlan
		hd      int
		q, ws   uintptr
		wsBytes int64
		want    string
	}{
		{F32, one, 48, al, 0, 0, ""},
		{BF16, one, 8, al, 0, 0, ""},
		{BF16, one, 256, al, 0, 0, ""},
		{F16, split, 128, al, al, 1000, ""},
		{F32, one, 6, al, 0, 0, "cuda: PagedAttention: headDim=6 for f32, want a multiple of 4 up to 128"},
		{F32, one, 132, al, 0, 0, "cuda: PagedAttention: headDim=132 for f32, want a multiple of 4 up to 128"},
		{BF16, one, 12, al, 0, 0, "cuda: PagedAttention: headDim=12 for bf16, want a multiple of 8 up to 256"},
		{BF16, one, 64, al + 8, 0, 0, "cuda: PagedAttention: q at 0x40008 is not 16-byte aligned"},
		{F16, split, 128, al, al + 4, 1000, "cuda: PagedAttention: workspace at 0x40004 is not 16-byte aligned"},
		{F16, split, 128, al, al, 999, "cuda: PagedAttention: workspace of 999 bytes, want 1000 for 2 splits"},
	} {
		err := checkPaged(c.t, c.plan, c.hd, c.q, al, al, al, c.ws, c.wsBytes)
		if got := errString(err); got != c.want {
			t.Errorf("checkPaged(%v, hd=%d, q=%#x) = %q, want %q", c.t, c.hd, c.q, got, c.want)
		}
	}
	if got := errString(checkFlash(F32, 64, al, al, al, al)); got != "cuda: FlashPrefill: dtype f32 headDim 64, want f16 or bf16 and 64 or 128" {
		t.Errorf("checkFlash(f32) = %q", got)
	}
	if got := errString(checkFlash(BF16, 128, al, al+2, al, al)); got != "cuda: FlashPrefill: k at 0x40002 is not 16-byte aligned" {
		t.Errorf("checkFlash(k misaligned) = %q", got)
	}
	if got := errString(checkRows("RMSNorm", BF16, ptr{"x", al + 1})); got != "cuda: RMSNorm: x at 0x40001 is not 2-byte aligned" {
		t.Errorf("checkRows(x odd) = %q", got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRound(t *testing.T) {
	for _, c := range []struct {
		t    DType
		x    float32
		want float32
	}{
		{F32, 1 + 0x1p-20, 1 + 0x1p-20},
		{F16, 1 + 0x1p-11, 1},            // a tie goes to the even neighbour
		{F16, 1 + 3*0x1p-11, 1 + 0x1p-9}, // a tie rounds up to even
		{F16, 70000, float32(math.Inf(1))},
		{BF16, 1 + 0x1p-8, 1},
		{BF16, 1 + 3*0x1p-8, 1 + 0x1p-6},
		{BF16, 257, 256}, // spacing 2 at 256: a tie, to even
	} {
		got := c.t.Round(c.x)
		if got != c.want {
			t.Errorf("%v.Round(%g) = %g, want %g", c.t, c.x, got, c.want)
		}
	}
	if !math.IsNaN(float64(BF16.Round(float32(math.NaN())))) || !math.IsNaN(float64(F16.Round(float32(math.NaN())))) {
		t.Error("Round(NaN) is not NaN")
	}
	if F16.String() != "f16" || BF16.Size() != 2 || F32.Size() != 4 {
		t.Error("DType names or sizes")
	}
}

// pagedUnroll is PA_UNROLL of attention.cu.
const pagedUnroll = 4

// emulatePaged runs paged_attention and attn_merge of attention.cu on the CPU, lane by lane and in the kernel's
// order of operations (float32 arithmetic, shuffles as exchanges between lane arrays), over the grid that
// PagedAttentionOn launches. It checks the algorithm and its index math — the lanes' split of the head
// dimension, the groups' keys, the uniform loop, the butterfly merge of the groups, the split ranges and the
// merge of the splits — which the CUDA code transcribes; the GPU tests check the transcription.
func emulatePaged(dt DType, plan PagedPlan, out, q, kc, vc []float32, qStart, seqLens, tables []int32,
	maxBlocks, bs, nHeads, nKV, hd int, scale float32) {
	vecN := pagedVec(dt)
	tpk := 1
	for tpk*vecN < hd {
		tpk <<= 1
	}
	kpw := 32 / tpk
	rows := int(qStart[len(seqLens)])
	po := make([]float32, rows*nHeads*plan.Splits*hd)
	pl := make([]float32, rows*nHeads*plan.Splits)
	exp := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	negInf := float32(math.Inf(-1))
	for t := 0; t < rows; t++ {
		seq := 0
		for seq+1 < len(seqLens) && int(qStart[seq+1]) <= t {
			seq++
		}
		visible := int(seqLens[seq]) - (int(qStart[seq+1]) - 1 - t)
		for h := 0; h < nHeads; h++ {
			g := h / (nHeads / nKV)
			oh := t*nHeads + h
			for z := 0; z < plan.Splits; z++ {
				s0, s1 := z*plan.Chunk, min(visible, (z+1)*plan.Chunk)
				var mx, sum [32]float32
				var acc, qv [32][8]float32
				for l := range 32 {
					mx[l] = negInf
					if d0 := (l % tpk) * vecN; d0 < hd {
						for i := range vecN {
							qv[l][i] = q[oh*hd+d0+i] * scale
						}
					}
				}
				for base := s0; base < s1; base += kpw * pagedUnroll {
					var sc [32][pagedUnroll]float32
					var vf [32][pagedUnroll][8]float32
					for u := range pagedUnroll {
						var d [32]float32
						for l := range 32 {
							kg, d0 := l/tpk, (l%tpk)*vecN
							s := base + u*kpw + kg
							if s < s1 && d0 < hd {
								off := (int(tables[seq*maxBlocks+s/bs])*bs+s%bs)*nKV*hd + g*hd + d0
								for i := range vecN {
									d[l] += qv[l][i] * kc[off+i]
									vf[l][u][i] = vc[off+i]
								}
							}
						}
						for o := tpk / 2; o > 0; o >>= 1 {
							var nd [32]float32
							for l := range 32 {
								nd[l] = d[l] + d[l^o]
							}
							d = nd
						}
						for l := range 32 {
							sc[l][u] = negInf
							if base+u*kpw+l/tpk < s1 {
								sc[l][u] = d[l]
							}
						}
					}
					for l := range 32 {
						mnew := mx[l]
						for u := range pagedUnroll {
							mnew = max(mnew, sc[l][u])
						}
						if mnew == negInf {
							continue
						}
						corr := exp(mx[l] - mnew)
						sum[l] *= corr
						for i := range vecN {
							acc[l][i] *= corr
						}
						mx[l] = mnew
						for u := range pagedUnroll {
							p := exp(sc[l][u] - mnew)
							sum[l] += p
							for i := range vecN {
								acc[l][i] += p * vf[l][u][i]
							}
						}
					}
				}
				for o := tpk; o < 32; o <<= 1 {
					omx, osum, oacc := mx, sum, acc
					for l := range 32 {
						mo, mnew := omx[l^o], max(omx[l], omx[l^o])
						var cs, co float32
						if omx[l] != negInf {
							cs = exp(omx[l] - mnew)
						}
						if mo != negInf {
							co = exp(mo - mnew)
						}
						sum[l] = osum[l]*cs + osum[l^o]*co
						for i := range vecN {
							acc[l][i] = oacc[l][i]*cs + oacc[l^o][i]*co
						}
						mx[l] = mnew
					}
				}
				for l := 0; l < tpk; l++ { // the lanes of group 0 write
					d0 := l * vecN
					if d0 >= hd {
						continue
					}
					var inv float32
					if sum[l] > 0 {
						inv = 1 / sum[l]
					}
					for i := range vecN {
						if plan.Splits == 1 {
							out[oh*hd+d0+i] = dt.Round(acc[l][i] * inv)
						} else {
							po[(oh*plan.Splits+z)*hd+d0+i] = acc[l][i] * inv
						}
					}
				}
				pl[oh*plan.Splits+z] = negInf
				if sum[0] > 0 {
					pl[oh*plan.Splits+z] = mx[0] + float32(math.Log(float64(sum[0])))
				}
			}
			if plan.Splits > 1 { // attn_merge
				m := negInf
				for z := range plan.Splits {
					m = max(m, pl[oh*plan.Splits+z])
				}
				var den float32
				for z := range plan.Splits {
					den += exp(pl[oh*plan.Splits+z] - m)
				}
				for d := range hd {
					var num float32
					for z := range plan.Splits {
						num += exp(pl[oh*plan.Splits+z]-m) * po[(oh*plan.Splits+z)*hd+d]
					}
					out[oh*hd+d] = dt.Round(num / den)
				}
			}
		}
	}
}

// TestPagedLaneAlgorithm checks emulatePaged against ref.PagedAttention on the lane layouts the kernel takes
// (head dims 8 and 48: groups with idle lanes; 64 and 128; 256 for 16-bit types, 32 lanes a key), split and
// unsplit, over shuffled block tables of sequences of odd lengths with several queries each. The emulation
// computes in float32 and rounds the output to the dtype as the kernel stores it, so nMSE is a float32
// softmax's for f32 (far below 1e-9) and about u²/3 for 16-bit types (bound 4u², as TestPagedSplit); a dropped
// key, a wrong merge of the groups or an off-by-one split boundary gives 1e-3 or more.
func TestPagedLaneAlgorithm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		dt          DType
		hd, nH, nKV int
		sms         int
	}{
		{F32, 8, 4, 2, 1}, {F32, 48, 6, 6, h200SMs}, {F32, 128, 8, 2, h200SMs}, {BF16, 64, 8, 8, h200SMs},
		{BF16, 128, 32, 8, h200SMs}, {F16, 256, 4, 1, 1}, {F16, 8, 8, 4, h200SMs},
	} {
		seqLens := []int32{1, 33, 700, 1025}
		nq := []int32{1, 5, 1, 3}
		const bs = 16
		qStart := make([]int32, len(seqLens)+1)
		maxBlocks, total := 0, 0
		for i, l := range seqLens {
			qStart[i+1] = qStart[i] + nq[i]
			maxBlocks = max(maxBlocks, ceil(int(l), bs))
			total += ceil(int(l), bs)
		}
		perm := r.Perm(total)
		tables := make([]int32, len(seqLens)*maxBlocks)
		next := 0
		for i, l := range seqLens {
			for b := range ceil(int(l), bs) {
				tables[i*maxBlocks+b] = int32(perm[next])
				next++
			}
		}
		rows := int(qStart[len(seqLens)])
		randv := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			return x
		}
		q, kc, vc := randv(rows*c.nH*c.hd), randv(total*bs*c.nKV*c.hd), randv(total*bs*c.nKV*c.hd)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		plan := PlanPaged(c.sms, rows, c.nH, c.nKV, c.hd, 1025)
		if err := checkPaged(c.dt, plan, c.hd, 0, 0, 0, 0, 0, plan.WorkspaceBytes); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, rows*c.nH*c.hd)
		emulatePaged(c.dt, plan, out, q, kc, vc, qStart, seqLens, tables, maxBlocks, bs, c.nH, c.nKV, c.hd, scale)
		want := make([]float64, len(out))
		ref.PagedAttention(want, to64(q), to64(kc), to64(vc), qStart, seqLens, tables, maxBlocks, bs, c.nH, c.nKV, c.hd,
			float64(scale))
		var num, den float64
		for i, w := range want {
			num += (float64(out[i]) - w) * (float64(out[i]) - w)
			den += w * w
		}
		tol := 1e-9
		if c.dt != F32 {
			u := math.Ldexp(1, -11)
			if c.dt == BF16 {
				u = math.Ldexp(1, -8)
			}
			tol = 4 * u * u
		}
		if e := num / den; !(e <= tol) {
			t.Errorf("%v hd=%d heads=%d/%d plan %+v: nMSE %.3g, want <= %.3g", c.dt, c.hd, c.nH, c.nKV, plan, e, tol)
		}
	}
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestKernelNames checks the kernel names the launchers use against the entry points of the embedded PTX: every
// name a plan can produce exists in both architectures' PTX (a misspelt name would fail only on a GPU), and every
// entry point is launched by some plan or by the row, attention and reduction launchers of ops.go (whose names
// are the op and the dtype), so no kernel goes untested.
func TestKernelNames(t *testing.T) {
	entries := map[string]map[string]bool{}
	re := regexp.MustCompile(`\.entry ([A-Za-z0-9_]+)\(`)
	for _, arch := range []string{"sm_80", "sm_90"} {
		entries[arch] = map[string]bool{}
		files, err := filepath.Glob("ptx/*." + arch + ".ptx")
		if err != nil || len(files) != 4 {
			t.Fatalf("ptx/*.%s.ptx: %v %v", arch, files, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				entries[arch][m[1]] = true
			}
		}
	}
	launched := map[string]bool{"splitk_reduce_f32": true, "splitk_reduce_s32": true, "argmax_f32": true}
	dtypes := []DType{F32, F16, BF16}
	for _, dt := range dtypes {
		for _, op := range []string{"rmsnorm", "add_rmsnorm", "rope", "swiglu", "softmax", "kv_append",
			"paged_attention", "attn_merge", "gather_rows", "cast", "quantize_rows"} {
			launched[op+"_"+dt.String()] = true
		}
		for _, hd := range []int{64, 128} {
			if FlashPrefillOK(dt, hd) {
				launched[fmt.Sprintf("flash_prefill_%v_hd%d", dt, hd)] = true
			}
		}
	}
	const al = 0x1000
	add := func(p kernelPlan, err error) {
		if err != nil {
			t.Fatal(err)
		}
		launched[p.name] = true
	}
	for _, m := range []int{1, 16} {
		for _, k := range []int{17, 40, 48, 64} {
			for _, dt := range dtypes {
				add(planGEMM(dt, m, 64, k, h200SMs, al, al, al))
				for _, group := range []int{16, 32} {
					add(planW4A16(dt, m, 64, k, group, h200SMs, al, al, al, al))
				}
				add(planW8A16(dt, m, 64, k, h200SMs, al, al, al, al))
			}
			add(planInt8("w8a8", m, 64, k, h200SMs, al, al, al))
			add(planInt8("s8s32", m, 64, k, h200SMs, al, al, al))
		}
	}
	for arch, names := range entries {
		for name := range launched {
			if !names[name] {
				t.Errorf("launchers use %s, which ptx/*.%s.ptx does not define", name, arch)
			}
		}
		for name := range names {
			if !launched[name] {
				t.Errorf("ptx/*.%s.ptx defines %s, which no launcher uses", arch, name)
			}
		}
	}
}
