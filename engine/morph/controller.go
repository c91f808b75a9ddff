package morph

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/quant"
)

// Controller is the Morphing Controller: it runs as the engine's per-iteration hook (OnStep), feeds the Monitor,
// records the timeline, and under a Morphing policy has its Rule judge every iteration and carries the verdicts
// out with the Actuator: a swap once pressure has persisted for Control.Persistence iterations, a restore once
// calm has persisted for Control.RestorePersistence iterations and Control.RestoreHold. Under the other policies it
// only records: their layers are set before the engine starts (Policy.Start).
type Controller struct {
	Policy    Policy
	Monitor   *Monitor
	Recorder  *Recorder
	act       *Actuator
	rule      Rule
	control   *Control
	blockSize int
	pressure  int           // consecutive iterations under pressure
	calm      int           // consecutive iterations in which a restore could go ahead
	calmSince time.Duration // when they began
	last      Signals
}

// NewController returns a controller for p acting on e, over a model whose layers are stored in base and swap in
// order. Add its OnStep to e's hooks (e.OnStep(c.OnStep)) before the engine runs. e may be nil for a policy that
// does not morph (the controller then only records). It fails, with one line naming the parameter, for a morphing
// policy that could never swap one of these layers (Check, and a cap that rounds to none of them).
func NewController(e *engine.Engine, p Policy, order []int, base []quant.Format) (*Controller, error) {
	c := &Controller{Policy: p, Monitor: NewMonitor(10 * time.Second), Recorder: NewRecorder(base)}
	if needs := p.Needs(); len(needs) > 1 {
		c.Recorder.TrackPositions(order, needs)
	}
	m, ok := p.(Morphing)
	if !ok {
		return c, nil
	}
	if err := Check(p); err != nil {
		return nil, err
	}
	c.control, c.rule = m.Controls(), m.Rule()
	limit := int(math.Round(c.control.Cap * float64(len(base))))
	switch {
	case limit < 1:
		return nil, fmt.Errorf("policy %s: cap=%g of %d layers quantizes none of them, want cap >= %.3g", label(p), c.control.Cap, len(base),
			0.5/float64(len(base)))
	case c.rule == nil:
		return nil, fmt.Errorf("policy %s: no rule: Rule returned nil", label(p))
	}
	c.act = NewActuator(e, order, base, c.control.Tiers, limit)
	c.blockSize = e.Geometry().BlockSize
	return c, nil
}

// Actuator is the controller's actuator (nil unless the policy morphs).
func (c *Controller) Actuator() *Actuator { return c.act }

// Swaps is the number of swap actions begun.
func (c *Controller) Swaps() int {
	if c.act == nil {
		return 0
	}
	return c.act.Swaps
}

// Last is the last signals the monitor reported.
func (c *Controller) Last() Signals { return c.last }

// OnStep is the engine hook.
func (c *Controller) OnStep(info engine.StepInfo) {
	quantized := c.Recorder.Observe(info)
	s := c.Monitor.Observe(info, quantized)
	c.last = s
	if c.act == nil {
		return
	}
	c.act.Advance(info)
	c.carryOut(s, c.rule.Judge(Input{Signals: s, Step: info, Monitor: c.Monitor, Actuator: c.act, BlockSize: c.blockSize}))
}

// carryOut counts pressure and calm iterations and, with no action in flight, swaps the number of layers the
// verdict asks for (within 1 and LayersPerAction) to the format it names, or restores the last action for the
// reasons of its calm. Pressure cancels a restore whose region is still draining.
func (c *Controller) carryOut(s Signals, v Verdict) {
	p := c.control
	if len(v.Pressure) > 0 {
		c.pressure++
		c.calm = 0
		if c.act.Restoring() {
			c.act.CancelRestore(strings.Join(v.Pressure, "; "))
		}
	} else {
		c.pressure = 0
		if len(v.Calm) > 0 {
			if c.calm == 0 {
				c.calmSince = s.Time
			}
			c.calm++
		} else {
			c.calm = 0
		}
	}
	if c.act.Busy() {
		return
	}
	switch {
	case c.pressure >= p.Persistence && c.act.CanSwap(v.To):
		n := 1
		if v.Layers != nil {
			n = v.Layers()
		}
		n = min(max(n, 1), p.LayersPerAction)
		c.act.Swap(n, v.To, fmt.Sprintf("%s (policy %s, %d iterations)", strings.Join(v.Pressure, "; "), c.Policy, c.pressure))
		c.pressure = 0
	case c.calm >= p.RestorePersistence && s.Time-c.calmSince >= p.RestoreHold:
		c.act.Restore(fmt.Sprintf("%s (policy %s, %d iterations)", strings.Join(v.Calm, "; "), c.Policy, c.calm))
		c.calm = 0
	}
}

// Point is one iteration of the timeline. A replay keeps one a step, so a point is small: its time in seconds and
// its counts in 32 bits (32 bytes).
type Point struct {
	Seconds   float64 `json:"t"`
	Iter      int32   `json:"iter"`
	Quantized int32   `json:"quantized_layers"`
	KVTotal   int32   `json:"kv_blocks_total"`
	KVUsed    int32   `json:"kv_blocks_used"`
	Waiting   int32   `json:"waiting"`
	Running   int32   `json:"running"`
}

// Recorder keeps the timeline (one point per iteration, and per idle tick where something changed; with Every,
// at most one per Every) and its peaks, and, per request, how many output tokens were generated with how many
// quantized layers. Under a policy with several quantized formats it also counts, for each format, the output
// tokens generated while the layer at each position of the swap order was in it (TrackPositions): the count of
// quantized layers no longer says which formats they were in.
type Recorder struct {
	Timeline []Point
	// Every, when set, keeps at most one timeline point per Every of time (a fleet of many replicas keeps its
	// replicas' timelines short); the peaks are over every iteration all the same.
	Every     time.Duration
	last      time.Duration // the time of the timeline's last point
	peak      Point
	mix       [][]int32 // by request id (an engine numbers its requests from 0)
	base      []quant.Format
	formats   []quant.Format
	order     []int                  // the swap order, when positions are tracked
	positions map[quant.Format][]int // by format, output tokens by swap position
}

// NewRecorder returns a recorder for layers stored in base.
func NewRecorder(base []quant.Format) *Recorder {
	return &Recorder{base: base}
}

// TrackPositions makes the recorder count, for each of formats, the output tokens generated while the layer at
// each position of order was in it.
func (r *Recorder) TrackPositions(order []int, formats []quant.Format) {
	r.order = order
	r.positions = map[quant.Format][]int{}
	for _, f := range formats {
		r.positions[f] = make([]int, len(order))
	}
}

// TokensByPosition is, for each tracked format, the output tokens generated while the layer at each position of
// the swap order was in it; nil unless TrackPositions was called.
func (r *Recorder) TokensByPosition() map[quant.Format][]int { return r.positions }

// Observe records one StepInfo and returns the number of layers not in their stored precision it ran with (for an
// idle tick: the last iteration's).
func (r *Recorder) Observe(info engine.StepInfo) int {
	if len(info.Formats) > 0 {
		r.formats = info.Formats
	}
	q := 0
	for l, f := range r.formats {
		if f != r.base[l] {
			q++
		}
	}
	p := Point{Seconds: info.Time.Seconds(), Iter: int32(info.Iter), Quantized: int32(q), KVTotal: int32(info.Total),
		KVUsed: int32(info.Used), Waiting: int32(info.Waiting), Running: int32(info.Running)}
	r.peak = Point{KVUsed: max(r.peak.KVUsed, p.KVUsed), KVTotal: max(r.peak.KVTotal, p.KVTotal), Quantized: max(r.peak.Quantized, p.Quantized)}
	n := len(r.Timeline)
	if (!info.Idle || n == 0 || !sameState(r.Timeline[n-1], p)) && (r.Every == 0 || n == 0 || info.Time-r.last >= r.Every) {
		r.Timeline = append(r.Timeline, p)
		r.last = info.Time
	}
	sampled := 0
	for _, w := range info.Work {
		if !w.Sample || w.Req < 0 {
			continue
		}
		sampled++
		for int(w.Req) >= len(r.mix) {
			r.mix = append(r.mix, nil)
		}
		m := r.mix[w.Req]
		if m == nil {
			m = make([]int32, len(r.base)+1)
			r.mix[w.Req] = m
		}
		m[q]++
	}
	if r.positions != nil && sampled > 0 && len(r.formats) == len(r.base) {
		for pos, l := range r.order {
			if n, ok := r.positions[r.formats[l]]; ok {
				n[pos] += sampled
			}
		}
	}
	return q
}

func sameState(a, b Point) bool {
	return a.Quantized == b.Quantized && a.KVTotal == b.KVTotal && a.KVUsed == b.KVUsed && a.Waiting == b.Waiting && a.Running == b.Running
}

// Peak is the most KV blocks in use and attached and the most layers quantized at any iteration (its other
// fields are zero).
func (r *Recorder) Peak() Point { return r.peak }

// Layers is the number of decoder layers recorded.
func (r *Recorder) Layers() int { return len(r.base) }

// Take returns Mix(id) and forgets the request: a driver of many requests takes each one's mix as it ends.
func (r *Recorder) Take(id kv.SeqID) []int32 {
	m := r.Mix(id)
	if int(id) >= 0 && int(id) < len(r.mix) {
		r.mix[id] = nil
	}
	return m
}

// Mix returns, for request id, the output tokens generated with k quantized layers at index k.
func (r *Recorder) Mix(id kv.SeqID) []int32 {
	if int(id) >= 0 && int(id) < len(r.mix) && r.mix[id] != nil {
		return r.mix[id]
	}
	return make([]int32, len(r.base)+1)
}
