package morph

import (
	"fmt"
	"slices"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/quant"
)

// phase is where the action in flight stands.
type phase int

const (
	idle      phase = iota
	swapping        // precisions asked for; waiting for the steps to run them
	attaching       // the freed bytes asked for as a KV region; waiting for the region
	draining        // restore: the action's region drains; waiting for it to be empty
	detaching       // restore: the region's detach asked for
	restoring       // restore: the layers' previous precisions asked for
)

// action is one swap: layers moved to a format together, and the KV region their freed bytes became.
type action struct {
	layers []int
	from   []quant.Format
	to     quant.Format
	blocks int // the region attached for it (0: the swap freed less than a block)
	phase  phase
	asked  int // Regions length expected once the asked region change has happened
}

// Actuator carries decisions out on an engine: its LayerSwapper half moves layers along the swap order through the
// tiers (to the next tier, or to the tier a rule names), its KVResizer half attaches what a swap freed as a region once the swap has taken effect, and, to undo the
// last action, drains and detaches that region once empty before restoring the layers. Actions stack: they are
// undone last first. One action is in flight at a time.
type Actuator struct {
	e      *engine.Engine
	order  []int
	base   []quant.Format
	tiers  []quant.Format
	cap    int
	cur    []quant.Format // each layer's precision as the steps run it
	stack  []*action      // done actions, last on top
	flight *action        // the action being carried out or undone
	Swaps  int            // swap actions begun
}

// NewActuator returns an actuator over e moving layers in order (a permutation of the layers) through tiers, at
// most cap of them quantized; base are the layers' stored precisions.
func NewActuator(e *engine.Engine, order []int, base, tiers []quant.Format, cap int) *Actuator {
	return &Actuator{e: e, order: order, base: base, tiers: tiers, cap: cap, cur: slices.Clone(base)}
}

// Busy reports whether an action is in flight.
func (a *Actuator) Busy() bool { return a.flight != nil }

// Restoring reports whether the action in flight is being undone.
func (a *Actuator) Restoring() bool { return a.flight != nil && a.flight.phase >= draining }

// Quantized is the number of layers not in their stored precision.
func (a *Actuator) Quantized() int {
	n := 0
	for l, f := range a.cur {
		if f != a.base[l] {
			n++
		}
	}
	return n
}

// Actions is the number of actions done and not undone.
func (a *Actuator) Actions() int { return len(a.stack) }

// NextTier, as the format a swap takes its layers to, is the next of the policy's tiers (Tier). It is the zero
// format: no tier is F32, a layer is never quantized to it.
const NextTier = quant.F32

// Tier is the format a swap to NextTier goes to: the first of the tiers that some layer can move to (within the
// cap), 0 when none can.
func (a *Actuator) Tier() quant.Format {
	for _, t := range a.tiers {
		if l, _ := a.next(1, t); len(l) > 0 {
			return t
		}
	}
	return NextTier
}

// next returns up to n layers a swap to `to` would move, and the format they would go to: the first layers of the
// order that are at their stored precision (while the cap allows more quantized layers) or at a tier before `to`.
// NextTier is Tier(); a format that is not one of the tiers moves no layer.
func (a *Actuator) next(n int, to quant.Format) ([]int, quant.Format) {
	if to == NextTier {
		if to = a.Tier(); to == NextTier {
			return nil, NextTier
		}
	}
	t := slices.Index(a.tiers, to)
	if t < 0 {
		return nil, to
	}
	var layers []int
	quantized := a.Quantized()
	for _, l := range a.order {
		if len(layers) == n {
			break
		}
		at := a.cur[l]
		switch {
		case at == a.base[l]:
			if quantized < a.cap {
				quantized++
				layers = append(layers, l)
			}
		case slices.Contains(a.tiers[:t], at):
			layers = append(layers, l)
		}
	}
	return layers, to
}

// InFormat is the number of layers in format f.
func (a *Actuator) InFormat(f quant.Format) int {
	n := 0
	for _, at := range a.cur {
		if at == f {
			n++
		}
	}
	return n
}

// Headroom is the number of layers that swaps could still move one tier on (within the cap).
func (a *Actuator) Headroom() int {
	n := 0
	for t := range a.tiers {
		for _, l := range a.order {
			at := a.cur[l]
			if (t == 0 && at == a.base[l]) || (t > 0 && at == a.tiers[t-1]) {
				n++
			}
		}
		if t == 0 {
			n = min(n, a.cap-a.Quantized())
		}
	}
	return max(n, 0)
}

// CanSwap reports whether a swap to `to` (NextTier: the next tier) would move any layer.
func (a *Actuator) CanSwap(to quant.Format) bool {
	l, _ := a.next(1, to)
	return len(l) > 0
}

// BlocksPerLayer is the KV blocks the next swap to `to` (NextTier: the next tier) frees for each layer it moves,
// as the first of them frees (0 when none would move).
func (a *Actuator) BlocksPerLayer(to quant.Format) float64 {
	layers, to := a.next(1, to)
	if len(layers) == 0 {
		return 0
	}
	mem := a.e.Memory()
	lb := a.e.LayerBytes()[layers[0]]
	return float64(lb[a.cur[layers[0]]]-lb[to]) / float64(mem.BlockBytes)
}

// FreeableBlocks is the KV blocks that the swaps still allowed would free, were they all made: each layer that
// may still move (within the cap, in the swap order) taken from its precision now to the last tier.
func (a *Actuator) FreeableBlocks() float64 {
	if len(a.tiers) == 0 {
		return 0
	}
	last, lb := a.tiers[len(a.tiers)-1], a.e.LayerBytes()
	room := a.cap - a.Quantized()
	var bytes int64
	for _, l := range a.order {
		switch at := a.cur[l]; {
		case at == a.base[l]:
			if room > 0 {
				room--
				bytes += lb[l][at] - lb[l][last]
			}
		case at != last:
			bytes += lb[l][at] - lb[l][last]
		}
	}
	return float64(bytes) / float64(a.e.Memory().BlockBytes)
}

// Swap begins an action moving up to n layers to `to` (NextTier: one tier on); why is logged with it. It returns
// the layers asked for.
func (a *Actuator) Swap(n int, to quant.Format, why string) ([]int, error) {
	if a.flight != nil {
		return nil, fmt.Errorf("morph: an action is in flight")
	}
	layers, to := a.next(n, to)
	if len(layers) == 0 {
		return nil, fmt.Errorf("morph: no layer left to swap to %v", to)
	}
	act := &action{to: to, phase: swapping}
	for _, l := range layers {
		if err := a.e.SetLayerPrecision(l, to); err != nil {
			break
		}
		act.layers = append(act.layers, l)
		act.from = append(act.from, a.cur[l])
	}
	if len(act.layers) == 0 {
		return nil, fmt.Errorf("morph: layer %d could not go to %v", layers[0], to)
	}
	a.flight = act
	a.Swaps++
	a.e.Note(fmt.Sprintf("swap layers %v to %v: %s", act.layers, to, why))
	return act.layers, nil
}

// Restore begins undoing the last action; why is logged with it.
func (a *Actuator) Restore(why string) error {
	if a.flight != nil || len(a.stack) == 0 {
		return fmt.Errorf("morph: nothing to restore, or an action in flight")
	}
	act := a.stack[len(a.stack)-1]
	a.stack = a.stack[:len(a.stack)-1]
	a.flight = act
	a.e.Note(fmt.Sprintf("restore layers %v from %v: %s", act.layers, act.to, why))
	if act.blocks > 0 {
		act.phase = draining
		a.e.DrainKV(true)
	} else {
		a.restoreLayers(act)
	}
	return nil
}

// CancelRestore stops undoing an action whose region is still draining: the region takes new blocks again and the
// action stays done. It reports whether there was such an action.
func (a *Actuator) CancelRestore(why string) bool {
	act := a.flight
	if act == nil || act.phase != draining {
		return false
	}
	a.e.DrainKV(false)
	act.phase = idle
	a.stack = append(a.stack, act)
	a.flight = nil
	a.e.Note(fmt.Sprintf("keep layers %v at %v: %s", act.layers, act.to, why))
	return true
}

func (a *Actuator) restoreLayers(act *action) {
	act.phase = restoring
	for i, l := range act.layers {
		if err := a.e.SetLayerPrecision(l, act.from[i]); err != nil {
			a.e.Note(fmt.Sprintf("restore of layer %d failed: %v", l, err))
		}
	}
}

// Advance moves the action in flight on, given the state after an iteration.
func (a *Actuator) Advance(info engine.StepInfo) {
	if len(info.Formats) == len(a.cur) {
		copy(a.cur, info.Formats)
	}
	act := a.flight
	if act == nil {
		return
	}
	switch act.phase {
	case swapping:
		if !a.at(act.layers, func(int) quant.Format { return act.to }) {
			return
		}
		if n := a.e.Memory().Attachable(); n > 0 {
			act.blocks, act.phase, act.asked = n, attaching, len(info.Regions)+1
			a.e.AttachKV(n)
			return
		}
		a.done(act)
	case attaching:
		if len(info.Regions) != act.asked {
			act.blocks = 0 // the attach was refused (it is logged); the action holds no region
		}
		a.done(act)
	case draining:
		if last := info.Regions[len(info.Regions)-1]; last.Draining && last.Used == 0 {
			act.phase, act.asked = detaching, len(info.Regions)-1
			a.e.DetachKV()
		}
	case detaching:
		if len(info.Regions) == act.asked {
			a.restoreLayers(act)
		} else {
			act.phase = draining // refused (logged): try again once the region is empty
		}
	case restoring:
		if a.at(act.layers, func(i int) quant.Format { return act.from[i] }) {
			a.flight = nil
		}
	}
}

// at reports whether the steps run every one of layers in want(i).
func (a *Actuator) at(layers []int, want func(i int) quant.Format) bool {
	for i, l := range layers {
		if a.cur[l] != want(i) {
			return false
		}
	}
	return true
}

func (a *Actuator) done(act *action) {
	act.phase = idle
	a.stack = append(a.stack, act)
	a.flight = nil
}

// TopBlocks is the size of the region the next restore would detach (0 without one).
func (a *Actuator) TopBlocks() int {
	if len(a.stack) == 0 {
		return 0
	}
	return a.stack[len(a.stack)-1].blocks
}
