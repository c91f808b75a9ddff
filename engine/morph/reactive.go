package morph

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Reactive is MorphServe's rule, the accuracy, default and performance modes (the package doc's table): pressure
// is KV usage over Usage (averaged over the last Window iterations), the oldest request waiting longer than Delay,
// a prefill at the head of the queue that the free blocks cannot admit, or a preemption; a swap moves the layers
// whose freed blocks would admit the waiting queue. Calm is an empty queue with RestoreMargin of the pool free
// without the last region.
type Reactive struct {
	Control
	Usage  float64       // mean KV usage over the window that counts as pressure
	Delay  time.Duration // oldest queueing delay that counts as pressure
	Window int           // iterations KV usage is averaged over
}

// ReactiveModes are the paper's three modes' parameters.
var ReactiveModes = map[string]Reactive{
	"accuracy": {Usage: 0.95, Delay: 500 * time.Millisecond, Window: 8, Control: Control{Persistence: 8, LayersPerAction: 2, Cap: 0.5,
		RestorePersistence: 4, RestoreMargin: 0.3, RestoreHold: 2 * time.Second, Tiers: []quant.Format{quant.Int4}}},
	"default": {Usage: 0.85, Delay: 100 * time.Millisecond, Window: 8, Control: Control{Persistence: 4, LayersPerAction: 4, Cap: 1,
		RestorePersistence: 8, RestoreMargin: 0.3, RestoreHold: 5 * time.Second, Tiers: []quant.Format{quant.Int4}}},
	"performance": {Usage: 0.75, Delay: 50 * time.Millisecond, Window: 8, Control: Control{Persistence: 2, LayersPerAction: 8, Cap: 1,
		RestorePersistence: 16, RestoreMargin: 0.3, RestoreHold: 10 * time.Second, Tiers: []quant.Format{quant.Int4}}},
}

// memoryShort is the pressure that memory is short already: the prefill at the head of the queue cannot get its
// blocks, or a request lost its own.
func memoryShort(s Signals) []string {
	var why []string
	if s.Waiting > 0 && s.HeadBlocks > s.Free {
		why = append(why, fmt.Sprintf("prefill blocked: %d blocks needed, %d free", s.HeadBlocks, s.Free))
	}
	if s.Preempted > 0 {
		why = append(why, fmt.Sprintf("%d preempted", s.Preempted))
	}
	return why
}

// reactive makes a fresh policy of a ReactiveModes mode.
func reactive(mode string) func() Morphing {
	return func() Morphing {
		r := ReactiveModes[mode]
		r.Tiers = slices.Clone(r.Tiers)
		return &r
	}
}

// Params are the mode's own parameters: usage, delay and window.
func (r *Reactive) Params() []Param {
	return []Param{Share("usage", &r.Usage), Duration("delay", &r.Delay, false), Count("window", &r.Window)}
}

// Rule returns the rule with an empty usage window.
func (r *Reactive) Rule() Rule { return &reactiveRule{p: r} }

type reactiveRule struct {
	p     *Reactive
	usage meanWindow // KV usage over the last Window iterations
}

// Judge finds the pressure and calm of one iteration.
func (j *reactiveRule) Judge(in Input) Verdict {
	p, s, act := j.p, in.Signals, in.Actuator
	mean := j.usage.add(s.Usage, p.Window)
	var why []string
	if mean > p.Usage {
		why = append(why, fmt.Sprintf("kv usage %.3f > %.2f", mean, p.Usage))
	}
	if s.OldestWait > p.Delay {
		why = append(why, fmt.Sprintf("queueing delay %v > %v", s.OldestWait.Round(time.Millisecond), p.Delay))
	}
	why = append(why, memoryShort(s)...)
	v := Verdict{Pressure: why, Calm: p.calm(s, act)}
	if len(why) > 0 {
		v.Layers = func() int {
			if per := act.BlocksPerLayer(NextTier); per > 0 {
				return int(math.Ceil(float64(s.WaitingBlocks-s.Free) / per))
			}
			return 1
		}
	}
	return v
}
