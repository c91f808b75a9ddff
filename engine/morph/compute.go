package morph

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Compute is morph:compute's rule (beyond the paper, whose runs use INT4 only): it tells memory pressure from
// compute pressure and answers each with the tier that relieves it, both state-preserving.
//
// Memory pressure is morph:default's without its queueing-delay trigger: mean KV usage over the last Window
// iterations above Usage, a prefill at the head of the queue that the free blocks cannot admit, or a preemption.
// It takes layers to Int4, the tier that frees the most bytes, sized by the blocks the waiting queue lacks and at
// most MemoryLayers, as morph:default's actions.
//
// Compute pressure is a queue that waits for prefill, not for blocks: with no memory pressure, the TTFT that the
// queue's prefill work at the measured prefill rate predicts (predictTTFT with the blocks there) is above Margin of
// the TTFT SLO. It takes layers to Int8, which runs as W8A8: integer tensor cores prefill at twice the FP16 rate on
// the catalog's GPUs (L4, A100, H100 datasheets) and this CPU's W8A8 kernels at 2.3x its F16 ones (BENCHMARKS.md,
// Prefill), while an Int4 layer, W4A16 on a GPU, prefills no faster than FP16. A compute action moves the fewest
// layers whose faster prefill (prefillGain) brings the prediction under the target, or, when no count does (the
// head of the queue has waited too long already), the fewest that bring it to its shortest: morph:slo's sizing
// (sloLayers). Every swap's log entry names the pressure and the tier.
//
// It is calm once the queue is empty and the pool without the last region keeps RestoreMargin free; a restore
// undoes the last action first, whichever pressure made it.
//
// Its parameters (DefaultCompute) are fixed here, the same for every trace: morph:default's memory triggers and
// restore (usage 0.85 over 8 iterations, at most 4 layers a memory action, restore after 8 calm iterations and 5 s
// with 30% free); morph:slo's prediction and persistence (half the 2 s SLO, the prefill rate smoothed at 0.3, 2
// iterations), since compute pressure is its prediction; no bound on a compute action below the catalog's deepest
// model (64 layers an action), since a W8A8 swap frees memory and its prediction sizes it; and the INT8-over-FP16
// peak of the catalog's GPUs (2) as the speedup the sizing assumes.
type Compute struct {
	Control
	Usage     float64       // mean KV usage over the window that is memory pressure
	Window    int           // iterations KV usage is averaged over
	TTFT      time.Duration // the TTFT SLO the queue's prefill work is held against
	Margin    float64       // the share of the SLO the predicted TTFT is held under
	Smoothing float64       // exponential smoothing of the measured prefill rate (the weight of a step)
	Speedup   float64       // how many times faster an Int8 layer prefills than a full-precision one, for sizing
	// MemoryLayers is the most layers a memory action moves (Control.LayersPerAction bounds compute actions).
	MemoryLayers int
	// Memory and Compute are the tiers that relieve each pressure.
	Memory, Compute quant.Format
}

// DefaultCompute is morph:compute's parameters.
var DefaultCompute = Compute{Usage: 0.85, Window: 8, TTFT: 2 * time.Second, Margin: 0.5, Smoothing: 0.3, Speedup: 2, MemoryLayers: 4,
	Memory: quant.Int4, Compute: quant.Int8,
	Control: Control{Persistence: 2, LayersPerAction: 64, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.3, RestoreHold: 5 * time.Second,
		Tiers: []quant.Format{quant.Int8, quant.Int4}}}

// Params are the mode's own parameters: usage, window, ttft, margin, prefill_smoothing, speedup and
// memory_layers.
func (p *Compute) Params() []Param {
	return []Param{Share("usage", &p.Usage), Count("window", &p.Window), Duration("ttft", &p.TTFT, true),
		Share("margin", &p.Margin), Share("prefill_smoothing", &p.Smoothing), above1("speedup", &p.Speedup),
		Count("memory_layers", &p.MemoryLayers)}
}

// check reports tiers that do not hold both the memory and the compute tier.
func (p *Compute) check() error {
	if !slices.Contains(p.Tiers, p.Memory) || !slices.Contains(p.Tiers, p.Compute) {
		return fmt.Errorf("tiers %v: morph:compute moves layers to %v under compute pressure and to %v under memory pressure, want int8,int4",
			p.Tiers, p.Compute, p.Memory)
	}
	return nil
}

// Rule returns the rule with an empty usage window and no prefill rate measured yet.
func (p *Compute) Rule() Rule { return &computeRule{p: p} }

type computeRule struct {
	p       *Compute
	usage   meanWindow  // KV usage over the last Window iterations
	prefill prefillRate // prompt tokens per second, smoothed over the steps that prefill
}

// Judge finds the pressure of one iteration, its kind and the tier that relieves it, and calm.
func (j *computeRule) Judge(in Input) Verdict {
	p, s, act, info := j.p, in.Signals, in.Actuator, in.Step
	mean := j.usage.add(s.Usage, p.Window)
	prefill := j.prefill.observe(info, p.Smoothing)
	v := Verdict{Calm: p.calm(s, act)}
	var why []string
	if mean > p.Usage {
		why = append(why, fmt.Sprintf("kv usage %.3f > %.2f", mean, p.Usage))
	}
	if why = append(why, memoryShort(s)...); len(why) > 0 {
		v.Pressure, v.To = prefix("memory: ", why), p.Memory
		v.Layers = func() int {
			if per := act.BlocksPerLayer(p.Memory); per > 0 {
				return min(int(math.Ceil(float64(s.WaitingBlocks-s.Free)/per)), p.MemoryLayers)
			}
			return 1
		}
		return v
	}
	target := time.Duration(p.Margin * float64(p.TTFT))
	predicted := predictTTFT(s, math.MaxInt, 0, prefill)
	if s.Waiting == 0 || predicted <= target {
		return v
	}
	v.Pressure = []string{fmt.Sprintf("compute: predicted TTFT %v > %v (%.0f%% of the %v SLO): %d tokens to prefill at %.0f tokens/s",
		shown(predicted), target, 100*p.Margin, p.TTFT, s.WaitingTokens, prefill)}
	v.To = p.Compute
	v.Layers = func() int {
		layers, fast := len(act.cur), act.InFormat(p.Compute)
		left, _ := act.next(layers, p.Compute)
		predict := func(more int) time.Duration {
			return predictTTFT(s, math.MaxInt, 0, prefill*prefillGain(layers, fast, more, p.Speedup))
		}
		return sloLayers(predict, len(left), target)
	}
	return v
}

// prefillGain is how many times faster prefill runs with more of layers in the compute tier than with fast of them
// there: with every layer costing the same and a layer there speedup times faster, prefill time is in proportion to
// layers - n·(1 - 1/speedup) with n of them there.
func prefillGain(layers, fast, more int, speedup float64) float64 {
	g := 1 - 1/speedup
	return (float64(layers) - float64(fast)*g) / (float64(layers) - float64(fast+more)*g)
}

func prefix(p string, s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = p + x
	}
	return out
}
