package executor

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

func testCost(t testing.TB, shape string, kv model.KVType) *costmodel.Model {
	t.Helper()
	cfg, err := model.ShapeByName(shape)
	if err != nil {
		t.Fatal(err)
	}
	hw := costmodel.Hardware{Name: "a100", F16FLOPS: 312e12, Int8OPS: 624e12, F32FLOPS: 19.5e12, VectorFLOPS: 78e12,
		Bandwidth: 2039e9, Memory: 80e9, HostLink: 26e9, ActBytes: 2}
	r := costmodel.Roofline{Compute: costmodel.Efficiency{Max: 0.7, Half: 64, Shape: 1}, Memory: costmodel.Efficiency{Max: 0.8}, Floor: 2e-6}
	p := costmodel.Params{Linear: r, Norm: r, RoPE: r, Act: r, Add: r, Embedding: r}
	m, err := costmodel.New(cfg, hw, p, kv, quant.F16)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var allFormats = []quant.Format{quant.F32, quant.Int8, quant.Int4}

// TestSimMirrorsCPUMemory: over the same shape, budget and options the sim reports exactly the CPU executor's
// memory and layer bytes.
func TestSimMirrorsCPUMemory(t *testing.T) {
	m := synthModel(t)
	for _, kv := range []model.KVType{model.KVF32, model.KVF16, model.KVInt8} {
		opt := CPUOptions{Pool: Pool{Bytes: 4 << 20}, BlockSize: 16, MaxBatchedTokens: 64, KVType: kv}
		c, err := NewCPU(m, opt)
		if err != nil {
			t.Fatal(err)
		}
		cost := testCost(t, "stories260K", kv)
		s, err := NewSim(SimOptions{Cost: cost, Formats: allFormats, Outer: quant.F32, Pool: opt.Pool, BlockSize: 16, MaxBatchedTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		if cm, sm := c.Memory(), s.Memory(); cm != sm {
			t.Errorf("%v: CPU memory %+v, sim %+v", kv, cm, sm)
		}
		if cl, sl := c.LayerBytes(), s.LayerBytes(); len(cl) != len(sl) {
			t.Fatalf("%d layers, sim %d", len(cl), len(sl))
		} else {
			for l := range cl {
				for f, n := range cl[l] {
					if sl[l][f] != n {
						t.Errorf("layer %d %v: CPU %d bytes, sim %d", l, f, n, sl[l][f])
					}
				}
			}
		}
	}
}

func newSim(t *testing.T, o SimOptions) *Sim {
	t.Helper()
	if o.Cost == nil {
		o.Cost = testCost(t, "llama2-7b", model.KVF16)
	}
	if o.Formats == nil {
		o.Formats = []quant.Format{quant.F16, quant.Int8, quant.Int4}
	}
	if o.Pool == (Pool{}) {
		o.Pool = Pool{Bytes: 80e9}
	}
	if o.BlockSize == 0 {
		o.BlockSize, o.MaxBatchedTokens = 16, 4096
	}
	o.Outer = quant.F16
	s, err := NewSim(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decodeBatch(seqs, ctx int) *Batch {
	b := &Batch{}
	for i := range seqs {
		table := make([]int32, (ctx+15)/16)
		for j := range table {
			table[j] = int32(i*len(table) + j)
		}
		b.Seqs = append(b.Seqs, SeqWork{Tokens: []int32{int32(10 + i)}, SeqLen: ctx, Table: table, Sample: true})
	}
	return b
}

// TestSimDuration: a step lasts what the cost model predicts for its work and its layers' formats.
func TestSimDuration(t *testing.T) {
	s := newSim(t, SimOptions{})
	b := decodeBatch(8, 100)
	b.Seqs = append(b.Seqs, SeqWork{Tokens: make([]int32, 300), SeqLen: 500, Table: make([]int32, 32)})
	res, err := s.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	var w costmodel.Work
	for _, q := range b.Seqs {
		w.AddSeq(len(q.Tokens), q.SeqLen, q.Sample)
	}
	want := s.opt.Cost.StepTime(w, []costmodel.LayerFormat{{Format: quant.F16, Layers: 32}})
	if res.Duration != want || want <= 0 {
		t.Fatalf("duration %v, want the cost model's %v", res.Duration, want)
	}
	if w.Tokens != 308 || w.Sampled != 8 || w.DecodeSeqs != 8 || w.DecodeKeys != 800 || w.PrefillTokens != 300 ||
		w.PrefillKeys != 300*500-300*299/2 || w.PrefillContext != 500 {
		t.Fatalf("work %+v", w)
	}
	for l := range 16 {
		if err := s.SetLayerPrecision(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	// Decode steps stream the weights: with half the layers in int4 they are faster.
	d := decodeBatch(8, 100)
	full := s.opt.Cost.StepTime(workOf(d), []costmodel.LayerFormat{{Format: quant.F16, Layers: 32}})
	res, err = s.Step(d)
	if err != nil {
		t.Fatal(err)
	}
	mixed := s.opt.Cost.StepTime(workOf(d), []costmodel.LayerFormat{{Format: quant.F16, Layers: 16}, {Format: quant.Int4, Layers: 16}})
	if res.Duration != mixed || !(float64(mixed) < 0.9*float64(full)) {
		t.Fatalf("half the layers in int4: %v, want the cost model's %v (< 0.9 × %v)", res.Duration, mixed, full)
	}
}

// TestSimSwapTransfer: an overlapped swap takes effect at the first step boundary after its transfer over the
// host link, transfers queue on the link behind the last step, idle time counts, and a blocking swap adds its
// transfer to the next step.
func TestSimSwapTransfer(t *testing.T) {
	const link = 26e9
	s := newSim(t, SimOptions{Swap: SwapCost{HostLink: link}})
	transfer := time.Duration(float64(s.LayerBytes()[0][quant.Int4]) / link * 1e9)
	b := decodeBatch(4, 64)
	first, err := s.Step(b) // the link starts when this step ends
	if err != nil {
		t.Fatal(err)
	}
	for l := range 2 {
		if err := s.SetLayerPrecision(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	now := first.Duration
	var got []time.Duration // when each layer's swap took effect
	for len(got) < 2 {
		b.Now = now
		res, err := s.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Swapped {
			if res.Formats[l] != quant.Int4 {
				t.Fatalf("layer %d swapped but runs %v", l, res.Formats[l])
			}
			got = append(got, now)
		}
		if len(res.Swapped) > 0 && res.SwapTime != time.Duration(len(res.Swapped))*transfer {
			t.Fatalf("swap time %v for %v, want %v each", res.SwapTime, res.Swapped, transfer)
		}
		if len(got) == 0 && res.Formats[0] != quant.F16 {
			t.Fatalf("layer 0 runs %v before its transfer is done", res.Formats[0])
		}
		now += res.Duration
		if now > time.Second {
			t.Fatal("swaps never took effect")
		}
	}
	start := first.Duration
	if got[0] < start+transfer || got[0] > start+transfer+first.Duration || got[1] < start+2*transfer || got[1] > start+2*transfer+first.Duration {
		t.Fatalf("swaps took effect at %v, want the first boundaries after %v and %v", got, start+transfer, start+2*transfer)
	}

	// Idle time counts: a step long after the ask finds the transfer done.
	idle := newSim(t, SimOptions{Swap: SwapCost{HostLink: link}})
	if err := idle.SetLayerPrecision(7, quant.Int8); err != nil {
		t.Fatal(err)
	}
	b.Now = time.Second
	if res, _ := idle.Step(b); !slices.Equal(res.Swapped, []int{7}) {
		t.Fatalf("after a second idle: swapped %v, want [7]", res.Swapped)
	}

	bl := newSim(t, SimOptions{Swap: SwapCost{HostLink: link, Blocking: true}})
	b.Now = 0
	base, _ := bl.Step(b)
	if err := bl.SetLayerPrecision(3, quant.Int8); err != nil {
		t.Fatal(err)
	}
	res, err := bl.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	tr := time.Duration(float64(bl.LayerBytes()[3][quant.Int8]) / link * 1e9)
	without := bl.opt.Cost.StepTime(workOf(b), []costmodel.LayerFormat{{Format: quant.F16, Layers: 31}, {Format: quant.Int8, Layers: 1}})
	if !slices.Equal(res.Swapped, []int{3}) || res.SwapTime != tr || res.Duration != without+tr || base.Duration <= 0 {
		t.Fatalf("blocking swap: %+v, want layer 3 swapped, swap time %v, duration %v", res, tr, without+tr)
	}
	// Asking a layer back for the format it runs in cancels its pending swap.
	if err := bl.SetLayerPrecision(5, quant.Int4); err != nil {
		t.Fatal(err)
	}
	if err := bl.SetLayerPrecision(5, quant.F16); err != nil {
		t.Fatal(err)
	}
	if res, _ := bl.Step(b); len(res.Swapped) != 0 || res.SwapTime != 0 || res.Formats[5] != quant.F16 {
		t.Fatalf("cancelled swap: %+v", res)
	}
}

func workOf(b *Batch) costmodel.Work {
	var w costmodel.Work
	for _, q := range b.Seqs {
		w.AddSeq(len(q.Tokens), q.SeqLen, q.Sample)
	}
	return w
}

// TestSimTokens: tokens depend only on the seed, the position and the last token fed (so recomputing a
// preempted sequence draws the same ones), avoid ids 0-2 unless a stop rate asks, and a stop rate of 1
// always stops.
func TestSimTokens(t *testing.T) {
	a, b := newSim(t, SimOptions{Seed: 7}), newSim(t, SimOptions{Seed: 7})
	seen := map[int32]bool{}
	for ctx := 1; ctx < 2000; ctx++ {
		x := a.draw(ctx, int32(ctx%50))
		if x < 3 || x >= 32000 {
			t.Fatalf("drew %d at %d", x, ctx)
		}
		seen[x] = true
	}
	if len(seen) < 1900 {
		t.Errorf("%d distinct tokens in 1999 draws, want nearly all distinct", len(seen))
	}
	r1, _ := a.Step(&Batch{Seqs: []SeqWork{{Tokens: []int32{5, 6, 7}, SeqLen: 3, Table: []int32{0}, Sample: true}}})
	r2, _ := b.Step(&Batch{Seqs: []SeqWork{
		{Tokens: []int32{1}, SeqLen: 9, Table: []int32{4}, Sample: true},
		{Tokens: []int32{9, 7}, SeqLen: 3, Table: []int32{8}, Sample: true},
	}})
	if r1.Next[0] != r2.Next[1] {
		t.Errorf("the same position and last token drew %d and %d", r1.Next[0], r2.Next[1])
	}
	if c := newSim(t, SimOptions{Seed: 8}); c.draw(3, 7) == a.draw(3, 7) && c.draw(4, 7) == a.draw(4, 7) {
		t.Error("another seed drew the same tokens")
	}
	stop := newSim(t, SimOptions{StopRate: 1})
	half := newSim(t, SimOptions{StopRate: 0.5})
	n := 0
	for ctx := 1; ctx < 1000; ctx++ {
		if stop.draw(ctx, 1) != 2 {
			t.Fatal("stop rate 1 drew another token")
		}
		if half.draw(ctx, 1) == 2 {
			n++
		}
	}
	if n < 400 || n > 600 {
		t.Errorf("stop rate 0.5 stopped %d of 999 times", n)
	}
}

// TestSimErrors: what the sim rejects beyond the suite's errors.
func TestSimErrors(t *testing.T) {
	s := newSim(t, SimOptions{})
	for name, b := range map[string]*Batch{
		"no tokens":            {Seqs: []SeqWork{{SeqLen: 1, Table: []int32{0}}}},
		"past the context":     {Seqs: []SeqWork{{Tokens: []int32{1}, SeqLen: 4097, Table: make([]int32, 257)}}},
		"fewer positions":      {Seqs: []SeqWork{{Tokens: []int32{1, 2, 3}, SeqLen: 2, Table: []int32{0}}}},
		"a table too short":    {Seqs: []SeqWork{{Tokens: []int32{1}, SeqLen: 17, Table: []int32{0}}}},
		"a block not attached": {Seqs: []SeqWork{{Tokens: []int32{1}, SeqLen: 1, Table: []int32{int32(s.Memory().Blocks)}}}},
	} {
		if _, err := s.Step(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cost := testCost(t, "llama2-7b", model.KVF16)
	for name, o := range map[string]SimOptions{
		"no cost model":  {Formats: allFormats, Pool: Pool{Bytes: 80e9}, BlockSize: 16, MaxBatchedTokens: 64},
		"no formats":     {Cost: cost, Pool: Pool{Bytes: 80e9}, BlockSize: 16, MaxBatchedTokens: 64},
		"stop rate 2":    {Cost: cost, Formats: allFormats, Pool: Pool{Bytes: 80e9}, BlockSize: 16, MaxBatchedTokens: 64, StopRate: 2},
		"a small budget": {Cost: cost, Formats: allFormats, Pool: Pool{Bytes: 1e9}, BlockSize: 16, MaxBatchedTokens: 64},
		"int8 outer":     {Cost: cost, Formats: allFormats, Pool: Pool{Bytes: 80e9}, BlockSize: 16, MaxBatchedTokens: 64, Outer: quant.Int8},
	} {
		if _, err := NewSim(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// BenchmarkSimStep is the cost of one simulated step of llama-2-7b on an A100 (a cost model's time per step,
// not the simulated time): a continuous-batching step of decodes at 1,000-token contexts beside a 512-token
// prompt chunk, half the layers in int4. Run with GOMAXPROCS=1.
func BenchmarkSimStep(b *testing.B) {
	for _, decodes := range []int{16, 64, 100} {
		b.Run("decodes="+strconv.Itoa(decodes), func(b *testing.B) {
			s, err := NewSim(SimOptions{Cost: testCost(b, "llama2-7b", model.KVF16), Formats: []quant.Format{quant.F16, quant.Int4},
				Outer: quant.F16, Pool: Pool{Bytes: 80e9}, BlockSize: 16, MaxBatchedTokens: 4096})
			if err != nil {
				b.Fatal(err)
			}
			for l := range 16 {
				if err := s.SetLayerPrecision(l, quant.Int4); err != nil {
					b.Fatal(err)
				}
			}
			batch := decodeBatch(decodes, 1000)
			batch.Seqs = append(batch.Seqs, SeqWork{Tokens: make([]int32, 512), SeqLen: 512, Table: make([]int32, 32)})
			var simulated time.Duration
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.Step(batch)
				if err != nil {
					b.Fatal(err)
				}
				simulated += res.Duration
			}
			b.ReportMetric(simulated.Seconds()/float64(b.N)*1e3, "sim-ms/step")
		})
	}
}

// TestSimCalibrated: with a calibration the step lasts what the calibration predicts, and a calibration that
// does not cover a prepared format is refused.
func TestSimCalibrated(t *testing.T) {
	cost := testCost(t, "stories260K", model.KVF32)
	cost.Calibration = &costmodel.Calibration{Config: cost.Config, Formats: []costmodel.FormatTerms{{Format: "f32", Layer: 1e-3, LayerToken: 1e-5}, {Format: "int8", Layer: 5e-4, LayerToken: 5e-6}},
		DecodeKey: 1e-7, Sampled: 2e-4}
	opt := SimOptions{Cost: cost, Formats: []quant.Format{quant.F32, quant.Int8}, Outer: quant.F32, Pool: Pool{Bytes: 4 << 20}, BlockSize: 16, MaxBatchedTokens: 64}
	s, err := NewSim(opt)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Step(decodeBatch(2, 30))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Duration((5*(1e-3+2*1e-5) + 5*1e-7*60 + 2*2e-4) * 1e9)
	if d := res.Duration - want; d < -time.Microsecond || d > time.Microsecond {
		t.Fatalf("duration %v, want the calibration's %v", res.Duration, want)
	}
	opt.Formats = append(opt.Formats, quant.Int4)
	if _, err := NewSim(opt); err == nil {
		t.Error("a calibration without int4 terms was accepted for int4 layers")
	}
}
