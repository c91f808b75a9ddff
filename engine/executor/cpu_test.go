package executor

import (
	"slices"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/quant"
)

func synthModel(t *testing.T) *model.Model {
	return modeltest.Synthetic(t, "stories260K", 1, quant.Int8, quant.Int4)
}

// TestStepMatchesSequence: a step over two sequences (one prompt, one prompt chunk that does not sample) picks the
// greedy token model.Sequence picks for the same tokens.
func TestStepMatchesSequence(t *testing.T) {
	m := synthModel(t)
	e, err := NewCPU(m, CPUOptions{Pool: Pool{Bytes: 8 << 20}, BlockSize: 4, MaxBatchedTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	a := []int32{1, 5, 9, 33, 100, 7}
	b := []int32{3, 4, 200}
	res, err := e.Step(&Batch{Seqs: []SeqWork{
		{Tokens: a, SeqLen: len(a), Table: []int32{0, 1}, Sample: true},
		{Tokens: b, SeqLen: len(b), Table: []int32{2}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := model.NewSequence(m, 16)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := seq.Feed(a, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := int32(sample.Argmax(logits)); res.Next[0] != want || res.Next[1] != -1 {
		t.Errorf("next = %v, want [%d -1]", res.Next, want)
	}
	if res.Duration <= 0 {
		t.Errorf("duration %v, want > 0", res.Duration)
	}
	if _, err := e.Step(&Batch{Seqs: []SeqWork{{Tokens: a, SeqLen: len(a), Table: []int32{0, int32(e.Memory().Blocks)}}}}); err == nil {
		t.Error("a block id past the attached blocks was accepted")
	}
}

// TestReducedKV: with a binary16 cache a block takes half the bytes, with an int8 one a quarter and a scale a
// row of each KV head, so the same budget holds more blocks, and a step samples what a Sequence over that cache
// type samples.
func TestReducedKV(t *testing.T) {
	m := synthModel(t)
	cfg := m.Config
	full := int64(model.KVBytesPerBlock(cfg, 16))
	for _, c := range []struct {
		kv   model.KVType
		want int64
	}{{model.KVF16, full / 2}, {model.KVInt8, full/4 + int64(2*4*cfg.NLayers*16*cfg.NKVHeads)}} {
		bb := int64(c.kv.BytesPerBlock(cfg, 16))
		if bb != c.want {
			t.Fatalf("%v block of %d bytes, want %d", c.kv, bb, c.want)
		}
		budget := int64(m.WeightBytes()) + WorkspaceBytes(cfg, 32) + 10*bb
		e, err := NewCPU(m, CPUOptions{Pool: Pool{Bytes: budget}, BlockSize: 16, MaxBatchedTokens: 32, KVType: c.kv})
		if err != nil {
			t.Fatal(err)
		}
		if mem := e.Memory(); mem.Blocks != 10 || mem.BlockBytes != bb || mem.KV != 10*bb {
			t.Fatalf("%v: memory %+v: want 10 blocks of %d bytes", c.kv, mem, bb)
		}
		a := []int32{1, 5, 9, 33, 100, 7, 8, 2, 44, 10, 11, 12, 13, 14, 15, 16, 17}
		res, err := e.Step(&Batch{Seqs: []SeqWork{{Tokens: a, SeqLen: len(a), Table: []int32{0, 1}, Sample: true}}})
		if err != nil {
			t.Fatal(err)
		}
		m.SequenceKV = c.kv
		seq, err := model.NewSequence(m, 32)
		m.SequenceKV = model.KVF32
		if err != nil {
			t.Fatal(err)
		}
		logits, err := seq.Feed(a, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := int32(sample.Argmax(logits)); res.Next[0] != want {
			t.Errorf("%v: next = %d, want %d", c.kv, res.Next[0], want)
		}
	}
}

// TestMemoryAccounting: the parts add up to Used exactly, weights follow the applied precision (a swap shows as
// pending until the next step), freed bytes can be attached as KV and must be detached before going back.
func TestMemoryAccounting(t *testing.T) {
	m := synthModel(t)
	cfg := m.Config
	full := int64(m.WeightBytes())
	ws := WorkspaceBytes(cfg, 32)
	bb := int64(model.KVBytesPerBlock(cfg, 16))
	budget := full + ws + 10*bb + bb/2
	e, err := NewCPU(m, CPUOptions{Pool: Pool{Bytes: budget}, BlockSize: 16, MaxBatchedTokens: 32})
	if err != nil {
		t.Fatal(err)
	}
	mem := e.Memory()
	if mem.Blocks != 10 || mem.Weights != full || mem.KV != 10*bb || mem.Workspace != ws || mem.Used() != full+ws+10*bb || mem.Free() != bb/2 {
		t.Fatalf("memory %+v: want 10 blocks, weights %d, workspace %d, free %d", mem, full, ws, bb/2)
	}
	saved := int64(m.Layers[2].Variants[quant.F32].Bytes() - m.Layers[2].Variants[quant.Int4].Bytes())
	if err := e.SetLayerPrecision(2, quant.Int4); err != nil {
		t.Fatal(err)
	}
	mem = e.Memory()
	if mem.Weights != full || mem.SwapFrees() != saved || mem.Attachable() != 0 {
		t.Fatalf("pending swap: %+v, want weights %d, swap frees %d, nothing attachable yet", mem, full, saved)
	}
	if _, err := e.Step(&Batch{Seqs: []SeqWork{{Tokens: []int32{1}, SeqLen: 1, Table: []int32{0}, Sample: true}}}); err != nil {
		t.Fatal(err)
	}
	mem = e.Memory()
	wantBlocks := int((saved + bb/2) / bb)
	if mem.Weights != full-saved || mem.SwapFrees() != 0 || mem.Attachable() != wantBlocks || mem.Used() != mem.Weights+mem.KV+mem.Workspace {
		t.Fatalf("after swap: %+v, want weights %d and %d attachable blocks", mem, full-saved, wantBlocks)
	}
	if err := e.AttachKV(wantBlocks); err != nil {
		t.Fatal(err)
	}
	if err := e.SetLayerPrecision(2, quant.F32); err == nil {
		t.Fatal("going back to F32 with the freed bytes attached as KV was accepted")
	}
	if err := e.DetachKV(wantBlocks); err != nil {
		t.Fatal(err)
	}
	if err := e.SetLayerPrecision(2, quant.F32); err != nil {
		t.Fatal(err)
	}
	if got := e.Memory().SwapFrees(); got != -saved {
		t.Errorf("pending swap back frees %d, want %d", got, -saved)
	}
}

// TestSwapCost: with a host link, an overlapped swap takes effect at the first step that starts after its transfer
// (transfers queue on the link), and a blocking one at the next step, whose duration includes the transfer.
func TestSwapCost(t *testing.T) {
	m := synthModel(t)
	bytes := float64(m.Layers[0].Variants[quant.Int4].Bytes())
	link := bytes / 0.010 // a layer's Int4 variant crosses in 10 ms
	step := func(e *CPU, now time.Duration) Result {
		t.Helper()
		res, err := e.Step(&Batch{Now: now, Seqs: []SeqWork{{Tokens: []int32{1, 2}, SeqLen: 2, Table: []int32{0}, Sample: true}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e, err := NewCPU(m, CPUOptions{Pool: Pool{Bytes: 8 << 20}, BlockSize: 4, MaxBatchedTokens: 64, Swap: SwapCost{HostLink: link}})
	if err != nil {
		t.Fatal(err)
	}
	step(e, 0)
	for _, l := range []int{0, 1} {
		if err := e.SetLayerPrecision(l, quant.Int4); err != nil {
			t.Fatal(err)
		}
	}
	// The last step ended at about its duration; layer 0 is on the link until ~10 ms after, layer 1 until ~20 ms.
	if res := step(e, 5*time.Millisecond); len(res.Swapped) != 0 || res.Formats[0] != quant.F32 {
		t.Fatalf("at 5 ms swapped %v, formats %v: an overlapped swap applied before its transfer", res.Swapped, res.Formats)
	}
	if res := step(e, 15*time.Millisecond); !slices.Equal(res.Swapped, []int{0}) || res.SwapTime < 9*time.Millisecond || res.SwapTime > 11*time.Millisecond {
		t.Fatalf("at 15 ms swapped %v in %v, want layer 0 in 10 ms", res.Swapped, res.SwapTime)
	}
	if res := step(e, 50*time.Millisecond); !slices.Equal(res.Swapped, []int{1}) || res.Formats[1] != quant.Int4 {
		t.Fatalf("at 50 ms swapped %v, formats %v, want layer 1", res.Swapped, res.Formats)
	}

	e, err = NewCPU(m, CPUOptions{Pool: Pool{Bytes: 8 << 20}, BlockSize: 4, MaxBatchedTokens: 64, Swap: SwapCost{HostLink: link, Blocking: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetLayerPrecision(2, quant.Int4); err != nil {
		t.Fatal(err)
	}
	if res := step(e, 0); !slices.Equal(res.Swapped, []int{2}) || res.Duration < 10*time.Millisecond {
		t.Fatalf("blocking: swapped %v, step %v, want layer 2 and a step of at least the 10 ms transfer", res.Swapped, res.Duration)
	}
}
