package morph

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/quant"
)

// TestActuatorTargets: a swap to a named tier takes the first layers of the order above it (at full precision,
// within the cap, or at a tier before it); a swap to NextTier goes through the tiers in order as before; restores
// undo the last action first, putting each layer back where it was.
func TestActuatorTargets(t *testing.T) {
	x := newMemExec(6, 40, 0)
	e, err := engine.New(x, engine.Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	base := slices.Repeat([]quant.Format{quant.F16}, 6)
	order := []int{4, 2, 0, 1, 3, 5}
	a := NewActuator(e, order, base, []quant.Format{quant.Int8, quant.Int4}, 5)
	e.OnStep(a.Advance)
	// settle steps the engine, a short request arriving at each step, until the action in flight is carried out.
	settle := func() {
		t.Helper()
		for range 20 {
			e.Submit(engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 2})
			if _, err := e.Step(); err != nil {
				t.Fatal(err)
			}
			if !a.Busy() {
				return
			}
		}
		t.Fatalf("action still in flight: %+v", a.flight)
	}
	swap := func(n int, to quant.Format, want []int, formats ...quant.Format) {
		t.Helper()
		got, err := a.Swap(n, to, "test")
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Swap(%d, %v) = %v, %v; want %v", n, to, got, err, want)
		}
		settle()
		if !slices.Equal(a.cur, formats) {
			t.Fatalf("after Swap(%d, %v): formats %v, want %v", n, to, a.cur, formats)
		}
	}
	// freeable checks FreeableBlocks: each layer that may still move, from where it is to int4, in blocks of 1000
	// bytes (a layer is 20000 bytes in f16, 10600 in int8, 5600 in int4).
	freeable := func(want float64) {
		t.Helper()
		if got := a.FreeableBlocks(); math.Abs(got-want) > 1e-9 {
			t.Errorf("FreeableBlocks %v, want %v", got, want)
		}
	}
	F, I8, I4 := quant.F16, quant.Int8, quant.Int4
	freeable(72) // 5 layers (the cap) from f16
	if got := a.Tier(); got != I8 {
		t.Errorf("next tier %v, want int8 (the first)", got)
	}
	swap(2, I8, []int{4, 2}, F, F, I8, F, I8, F)
	freeable(2*5 + 3*14.4)
	// To int4: the int8 layers first in the order, then full-precision ones.
	swap(3, I4, []int{4, 2, 0}, I4, F, I4, F, I4, F)
	freeable(2 * 14.4)
	// To int8 again: only full-precision layers, and the cap of 5 quantized layers stops it at two.
	swap(6, I8, []int{1, 3}, I4, I8, I4, I8, I4, F)
	freeable(2 * 5) // at the cap: only the int8 layers may move
	if a.CanSwap(I8) || !a.CanSwap(I4) || a.InFormat(I8) != 2 || a.InFormat(I4) != 3 {
		t.Errorf("at the cap: CanSwap(int8) %v, CanSwap(int4) %v, %d in int8, %d in int4", a.CanSwap(I8), a.CanSwap(I4), a.InFormat(I8), a.InFormat(I4))
	}
	// NextTier: no full-precision layer may move (cap), so the next tier is int4, for the int8 layers.
	if got := a.Tier(); got != I4 {
		t.Errorf("next tier at the cap %v, want int4", got)
	}
	swap(4, NextTier, []int{1, 3}, I4, I4, I4, I4, I4, F)
	freeable(0)
	for _, want := range [][]quant.Format{{I4, I8, I4, I8, I4, F}, {I4, F, I4, F, I4, F}, {F, F, I8, F, I8, F}, {F, F, F, F, F, F}} {
		if err := a.Restore("test"); err != nil {
			t.Fatal(err)
		}
		settle()
		if !slices.Equal(a.cur, want) {
			t.Fatalf("after a restore: formats %v, want %v", a.cur, want)
		}
	}
	if _, err := a.Swap(1, quant.Q8_0, "test"); err == nil {
		t.Error("a swap to a format that is not a tier moved layers")
	}
}

// TestPrefillGain: prefill time in proportion to layers - n·(1 - 1/speedup) with n layers in the compute tier.
func TestPrefillGain(t *testing.T) {
	for _, c := range []struct {
		layers, fast, more int
		speedup, want      float64
	}{
		{32, 0, 16, 2, 32.0 / 24},    // half the layers at twice the rate
		{32, 16, 16, 2, 24.0 / 16},   // the other half, from 24 layer-times to 16
		{40, 0, 40, 4, 4},            // every layer: the whole speedup
		{48, 8, 0, 2, 1},             // no more: no gain
		{10, 0, 5, 3.5, 10.0 / 6.43}, // half the layers at 3.5x
	} {
		if got := prefillGain(c.layers, c.fast, c.more, c.speedup); math.Abs(got-c.want) > 1e-3 {
			t.Errorf("prefillGain(%d, %d, %d, %v) = %v, want %v", c.layers, c.fast, c.more, c.speedup, got, c.want)
		}
	}
}

// TestComputeJudge: memory signals are memory pressure for int4, sized by the blocks the queue lacks; a queue that
// has its blocks but would wait past the target for prefill is compute pressure for int8; a short queue is none.
func TestComputeJudge(t *testing.T) {
	p := DefaultCompute
	act := NewActuator(nil, []int{0, 1, 2, 3}, slices.Repeat([]quant.Format{quant.F16}, 4), p.Tiers, 4)
	judge := func(s Signals, step engine.StepInfo) Verdict {
		rule := p.Rule()
		// 10,000 prompt tokens a second measured
		rule.Judge(Input{Signals: Signals{Total: 100, Free: 100}, Step: engine.StepInfo{PrefillTokens: 1000, Duration: 100 * time.Millisecond}, Actuator: act})
		return rule.Judge(Input{Signals: s, Step: step, Actuator: act})
	}
	v := judge(Signals{Waiting: 3, HeadBlocks: 30, WaitingBlocks: 60, WaitingTokens: 900, Free: 10, Used: 50, Total: 100, Usage: 0.5}, engine.StepInfo{})
	if got := strings.Join(v.Pressure, "; "); v.To != quant.Int4 || got != "memory: prefill blocked: 30 blocks needed, 10 free" {
		t.Errorf("blocked prefill: to %v, pressure %q", v.To, got)
	}
	v = judge(Signals{Waiting: 20, OldestWait: 200 * time.Millisecond, HeadBlocks: 2, WaitingBlocks: 40, WaitingTokens: 15000, Free: 60, Used: 40,
		Total: 100, Usage: 0.4}, engine.StepInfo{})
	want := "compute: predicted TTFT 1.5s > 1s (50% of the 2s SLO): 15000 tokens to prefill at 10000 tokens/s"
	if got := strings.Join(v.Pressure, "; "); v.To != quant.Int8 || got != want {
		t.Errorf("prefill-bound queue: to %v, pressure %q, want %q", v.To, got, want)
	}
	// 1.5 s of prefill to bring to 1 s: a third off at half the time a layer, 4·(1/3)/(1/2) = 2.67: 3 layers.
	if n := v.Layers(); n != 3 {
		t.Errorf("compute pressure asks for %d layers, want 3", n)
	}
	// The head has waited 1.2 s already: no count meets 1 s, every layer left brings the prediction to its shortest.
	v = judge(Signals{Waiting: 2, OldestWait: 1200 * time.Millisecond, HeadBlocks: 2, WaitingBlocks: 4, WaitingTokens: 2000, Free: 60, Used: 40,
		Total: 100, Usage: 0.4}, engine.StepInfo{})
	if n := v.Layers(); v.To != quant.Int8 || n != 4 {
		t.Errorf("a head that waited past the target: to %v, %d layers, want int8 and all 4", v.To, n)
	}
	v = judge(Signals{Waiting: 2, OldestWait: 100 * time.Millisecond, HeadBlocks: 2, WaitingBlocks: 4, WaitingTokens: 2000, Free: 60, Used: 40,
		Total: 100, Usage: 0.4}, engine.StepInfo{})
	if len(v.Pressure) != 0 {
		t.Errorf("a queue of 0.2 s of prefill: pressure %q", v.Pressure)
	}
}

// TestComputePolicy: on a compute-bound burst (long prompts, blocks to spare, an executor whose W8A8 layers prefill
// at twice the rate and whose W4A16 layers at the same rate as full precision), morph:compute swaps only to int8,
// for compute, and has fewer TTFT-SLO violations than morph:default and fp16; on a memory-bound burst it swaps to
// int4 for memory, with no more violations than morph:default. Every swap's log entry names its pressure.
func TestComputePolicy(t *testing.T) {
	gpu := func(blocks int) *memExec {
		x := newMemExec(8, blocks, 0)
		x.tokenCost = map[quant.Format]time.Duration{quant.F16: 40 * time.Microsecond, quant.Int8: 20 * time.Microsecond, quant.Int4: 40 * time.Microsecond}
		return x
	}
	base := slices.Repeat([]quant.Format{quant.F16}, 8)
	const slo = time.Second
	var rec *Recorder
	measure := func(x *memExec, policy string, reqs []engine.TimedRequest) (viol int, swaps map[string]int) {
		res, c, e := run(t, x, policy, reqs, base, nil)
		rec = c.Recorder
		swaps = map[string]int{}
		for _, ev := range e.Log() {
			if ev.Kind == engine.Decision && strings.HasPrefix(ev.Detail, "swap") {
				head, why, _ := strings.Cut(ev.Detail, ": ") // "swap layers [4 2] to int8", "compute: predicted ..."
				kind, _, _ := strings.Cut(why, ":")
				swaps[head[strings.LastIndex(head, " ")+1:]+" "+kind]++
			}
		}
		return violations(res, slo), swaps
	}
	compute := burstTrace(rand.New(rand.NewPCG(5, 5)), 100, 2*time.Second, 30*time.Second, 400, 4)
	fViol, _ := measure(gpu(4000), "fp16", compute)
	dViol, _ := measure(gpu(4000), "morph:default", compute)
	cViol, cSwaps := measure(gpu(4000), "morph:compute:ttft=1s", compute)
	t.Logf("compute-bound, %d requests: violations fp16 %d, morph:default %d, morph:compute %d; compute's swaps %v", len(compute), fViol, dViol, cViol, cSwaps)
	if cSwaps["int8 compute"] == 0 || len(cSwaps) != 1 {
		t.Errorf("compute-bound: swaps %v, want only int8 ones for compute", cSwaps)
	}
	if pos := rec.TokensByPosition(); slices.Max(pos[quant.Int4]) != 0 || pos[quant.Int8][0] == 0 {
		t.Errorf("compute-bound: tokens by position %v, want int8 ones only", pos)
	}
	if cViol >= dViol || cViol >= fViol {
		t.Errorf("compute-bound: morph:compute %d violations, morph:default %d, fp16 %d: want fewer than both", cViol, dViol, fViol)
	}
	memory := burstTrace(rand.New(rand.NewPCG(4, 4)), 40, 2*time.Second, 30*time.Second, 250, 60)
	fViol, _ = measure(gpu(60), "fp16", memory)
	dViol, _ = measure(gpu(60), "morph:default", memory)
	cViol, cSwaps = measure(gpu(60), "morph:compute:ttft=1s", memory)
	t.Logf("memory-bound, %d requests: violations fp16 %d, morph:default %d, morph:compute %d; compute's swaps %v", len(memory), fViol, dViol, cViol, cSwaps)
	if fViol == 0 || cSwaps["int4 memory"] == 0 {
		t.Errorf("memory-bound: swaps %v, want int4 ones for memory", cSwaps)
	}
	if cViol > dViol {
		t.Errorf("memory-bound: morph:compute %d violations, morph:default %d", cViol, dViol)
	}
}

// TestTokensByPosition: under a policy with two tiers the recorder counts each format's tokens by swap position,
// and the counts agree with the count of quantized layers each token was made with.
func TestTokensByPosition(t *testing.T) {
	reqs := burstTrace(rand.New(rand.NewPCG(4, 4)), 30, 2*time.Second, 20*time.Second, 250, 60)
	base := slices.Repeat([]quant.Format{quant.F16}, 8)
	spec, err := Parse("morph:compute:ttft=1s")
	if err != nil {
		t.Fatal(err)
	}
	x := newMemExec(8, 100, 0)
	e, err := engine.New(x, engine.Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	order := []int{7, 6, 5, 4, 3, 2, 1, 0}
	c, err := NewController(e, spec, order, base)
	if err != nil {
		t.Fatal(err)
	}
	e.OnStep(c.OnStep)
	res, err := e.Replay(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	byLayers := 0 // Σ k·tokens: quantized layer-tokens
	for _, r := range res {
		for k, n := range c.Recorder.Mix(r.ID) {
			byLayers += k * int(n)
		}
	}
	pos := c.Recorder.TokensByPosition()
	byPosition := 0
	for _, f := range []quant.Format{quant.Int8, quant.Int4} {
		for _, n := range pos[f] {
			byPosition += n
		}
	}
	if len(pos) != 2 || byLayers == 0 || byPosition != byLayers {
		t.Errorf("tokens by position %v (sum %d), quantized layer-tokens %d: want int8 and int4 summing to it", pos, byPosition, byLayers)
	}
	// The order swaps layer 7 first and restores last first: no position is quantized longer than position 0.
	at := func(i int) int { return pos[quant.Int8][i] + pos[quant.Int4][i] }
	for i := 1; i < len(order); i++ {
		if at(i) > at(0) {
			t.Errorf("position %d quantized for %d tokens, position 0 for %d", i, at(i), at(0))
		}
	}
	if NewRecorder(base).TokensByPosition() != nil {
		t.Error("a recorder that does not track positions returned counts")
	}
}
