package deploy

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Autoscale is a target-tracking autoscaler, as Kubernetes' HorizontalPodAutoscaler computes it with its default
// behaviour: every Interval it wants ceil(serving × metric / Target) replicas (no change within 10% of the
// target; the Controller may hold that count back), within Min and Max, and adds at most the larger of 4 and as many as are up (doubling) at a time; a
// replica asked for serves Delay later (provisioning and loading the model) and costs from the moment it is
// asked for; replicas are removed only when the wanted count has stayed lower for CoolDown (the highest count
// wanted over that window is kept), the least loaded first, each once its requests have finished.
type Autoscale struct {
	// Template is the replica added.
	Template Deployment
	// Metric names the registered ScaleMetric (RegisterScaleMetric) held at Target: outstanding (requests in a
	// replica, running or waiting), waiting (requests waiting for their first step) or kv (the share of KV
	// blocks in use), each averaged over the serving replicas, or one registered from outside.
	Metric   string
	Target   float64
	Min, Max int
	// Controller names the registered Scaler (RegisterScaler) that turns the metric into the replicas wanted: hpa
	// (the HPA's rule, the default) or morph-aware (the HPA's rule, scaling out only for load the replicas'
	// morphing cannot absorb and in only over replicas restored with no queue), or one registered from outside.
	Controller string
	// MaxWait is how long a request may wait for its first step before the morph-aware controller counts its
	// replica's queue as one morphing does not absorb (default 1 s, half the fleet study's P95 TTFT bound).
	MaxWait time.Duration
	// Interval is how often it evaluates (default 15 s, the HPA's sync period); Delay the time from asking for a
	// replica to its serving (default 2 minutes); CoolDown the scale-down stabilization (default 300 s, the HPA's).
	Interval, Delay, CoolDown time.Duration
}

// The autoscaler's defaults.
const (
	DefaultScaleInterval = 15 * time.Second
	DefaultScaleDelay    = 2 * time.Minute
	DefaultCoolDown      = 300 * time.Second
	DefaultMaxWait       = time.Second
	scaleTolerance       = 0.1
)

// A ScaleMetric is the figure the autoscaler holds at its target, computed over the serving replicas at each
// evaluation. A fleet's Replay makes its own from the registered constructor (RegisterScaleMetric), so a metric
// may keep state over one run, such as a moving average.
type ScaleMetric interface {
	// Measure returns the metric's value per replica (the HPA's average value, which the autoscaler compares
	// with its target) over replicas, the serving ones, of which there is at least one.
	Measure(replicas []ReplicaView) float64
}

var scaleMetrics = registry[ScaleMetric]{kind: "autoscale metric"}

// RegisterScaleMetric makes an autoscale metric known by name to Autoscale.Metric and --autoscale: newMetric
// makes one for each run. It panics when the name is empty or taken, or newMetric is nil.
func RegisterScaleMetric(name string, newMetric func() ScaleMetric) {
	scaleMetrics.register(name, newMetric)
}

// NewScaleMetric returns a new autoscale metric of the name, or an error naming the registered metrics.
func NewScaleMetric(name string) (ScaleMetric, error) { return scaleMetrics.lookup(name) }

// ScaleMetricNames are the registered autoscale metrics' names, sorted.
func ScaleMetricNames() []string { return scaleMetrics.names() }

// The built-in metrics: each the mean of a replica's figure over the serving replicas.
func init() {
	RegisterScaleMetric("outstanding", func() ScaleMetric { return meanOf(ReplicaView.Outstanding) })
	RegisterScaleMetric("waiting", func() ScaleMetric { return meanOf(ReplicaView.Waiting) })
	RegisterScaleMetric("kv", func() ScaleMetric { return meanMetric(ReplicaView.KVUsage) })
}

// meanMetric is the mean of a figure over the replicas.
type meanMetric func(ReplicaView) float64

func (m meanMetric) Measure(replicas []ReplicaView) float64 {
	sum := 0.0
	for _, v := range replicas {
		sum += m(v)
	}
	return sum / float64(len(replicas))
}

// meanOf is the mean of a count over the replicas.
func meanOf(count func(ReplicaView) int) meanMetric {
	return func(v ReplicaView) float64 { return float64(count(v)) }
}

// A Scaler is the autoscaler's rule: at each evaluation, the replicas the fleet wants. The fleet then keeps the
// count within Min and Max, adds at most the larger of 4 and as many as are up at a time, and removes replicas
// only once the count wanted has stayed lower for the cool-down. A fleet's Replay makes its own from the
// registered constructor (RegisterScaler).
type Scaler interface {
	// Want returns the replicas wanted, given the autoscaler, its metric's value per replica and the serving
	// replicas (at least one).
	Want(a *Autoscale, metric float64, serving []ReplicaView) int
}

var scalers = registry[Scaler]{kind: "autoscale controller"}

// RegisterScaler makes an autoscale controller known by name to Autoscale.Controller and --autoscale-controller:
// newScaler makes one for each run. It panics when the name is empty or taken, or newScaler is nil.
func RegisterScaler(name string, newScaler func() Scaler) { scalers.register(name, newScaler) }

// NewScaler returns a new autoscale controller of the name, or an error naming the registered ones.
func NewScaler(name string) (Scaler, error) { return scalers.lookup(name) }

// ScalerNames are the registered autoscale controllers' names, sorted.
func ScalerNames() []string { return scalers.names() }

func init() {
	RegisterScaler("hpa", func() Scaler { return hpa{} })
	RegisterScaler("morph-aware", func() Scaler { return morphAwareScaler{} })
}

// hpa is the HPA's rule: ceil(serving × metric / target), no change within 10% of the target.
type hpa struct{}

func (hpa) Want(a *Autoscale, metric float64, serving []ReplicaView) int {
	n := len(serving)
	if ratio := metric / a.Target; math.Abs(ratio-1) > scaleTolerance {
		return int(math.Ceil(float64(n) * ratio))
	}
	return n
}

// morphAwareScaler scales out only for load that morphing cannot absorb: it takes the HPA's count when that is
// more than the serving replicas only if some replica's load is beyond its morphing (absorbs): short of compute,
// or a queue beyond its swaps; and otherwise holds. Load short of memory, whose queue the replica's free KV blocks
// and the blocks its policy's allowed swaps would free can admit, is what morphing exists for; scaling out on it
// pays for a replica that arrives, a delay later, after the swaps have absorbed the burst. It scales in over the
// replicas sitting restored (no layer quantized) with no queue only, so that a replica still morphed, whose burst
// is not over, stays. The morph-aware router, sending requests to full-precision replicas with room first, lets
// the morphed replicas restore first once new ones come up.
type morphAwareScaler struct{}

func (morphAwareScaler) Want(a *Autoscale, metric float64, serving []ReplicaView) int {
	n := len(serving)
	want := hpa{}.Want(a, metric, serving)
	switch {
	case want > n:
		for _, v := range serving {
			if !absorbs(v, a.MaxWait) {
				return want
			}
		}
		return n
	case want < n:
		idle := 0
		for _, v := range serving {
			if v.Quantized() == 0 && v.Waiting() == 0 {
				idle++
			}
		}
		return max(want, n-idle)
	}
	return want
}

// memoryBound is the KV usage from which a replica's load counts as short of memory, the default mode's pressure
// (morph.ReactiveModes).
const memoryBound = 0.85

// absorbs reports whether the replica's morphing absorbs its load: the load is short of memory, not of compute (the
// replica has layers swapped, its KV usage is memoryBound or more, or its queue needs more blocks than are free),
// and the queue, if any, fits in its free KV blocks with those its allowed swaps would free, the oldest having
// waited less than maxWait. A replica at full precision with room for its queue and KV to spare is short of
// compute, which morphing does not add; and a queue that waited maxWait is one the swaps did not keep up with.
func absorbs(v ReplicaView, maxWait time.Duration) bool {
	if v.Quantized() == 0 && v.WaitingBlocks() <= v.FreeBlocks() && v.KVUsage() < memoryBound {
		return false
	}
	if v.Waiting() == 0 {
		return true
	}
	return float64(v.WaitingBlocks()) <= float64(v.FreeBlocks())+v.SwapBlocks() && v.Signals().OldestWait < maxWait
}

type wantedAt struct {
	t time.Duration
	n int
}

func (a *Autoscale) defaults(start int) error {
	if a.Interval == 0 {
		a.Interval = DefaultScaleInterval
	}
	if a.Delay == 0 {
		a.Delay = DefaultScaleDelay
	}
	if a.CoolDown == 0 {
		a.CoolDown = DefaultCoolDown
	}
	if a.Controller == "" {
		a.Controller = "hpa"
	}
	if a.MaxWait == 0 {
		a.MaxWait = DefaultMaxWait
	}
	if _, err := NewScaleMetric(a.Metric); err != nil {
		return err
	}
	if _, err := NewScaler(a.Controller); err != nil {
		return err
	}
	switch {
	case !(a.Target > 0):
		return fmt.Errorf("deploy: autoscale target %g, want above 0", a.Target)
	case a.Min < 1 || a.Max < a.Min || start < a.Min || start > a.Max:
		return fmt.Errorf("deploy: autoscale between %d and %d replicas starting from %d, want 1 <= min <= start <= max", a.Min, a.Max, start)
	case a.Interval < 0 || a.Delay < 0 || a.CoolDown < 0 || a.MaxWait < 0:
		return fmt.Errorf("deploy: autoscale interval %v, delay %v, cool-down %v, max wait %v: want none negative", a.Interval, a.Delay, a.CoolDown, a.MaxWait)
	}
	return nil
}

// scale is one autoscaler evaluation at now.
func (r *fleetRun) scale(now time.Duration) error {
	a := r.f.Autoscale
	serving := r.serving()
	live := make([]*replica, len(serving))
	for i, v := range serving {
		live[i] = v.r
	}
	pending := 0
	for _, rep := range r.replicas {
		if rep.state == ReplicaProvisioning {
			pending++
		}
	}
	if len(live) == 0 {
		return fmt.Errorf("deploy: no replica serving at %v for the autoscaler to measure", now)
	}
	want := min(max(r.scaler.Want(a, r.metric.Measure(serving), serving), a.Min), a.Max)
	r.wanted = append(r.wanted, wantedAt{now, want})
	for len(r.wanted) > 0 && now-r.wanted[0].t > a.CoolDown {
		r.wanted = r.wanted[1:]
	}
	switch have := len(live) + pending; {
	case want > have:
		for range min(want-have, max(4, have)) {
			if _, err := r.add(a.Template, now, now+a.Delay); err != nil {
				return err
			}
		}
	case want < len(live):
		keep := want
		for _, w := range r.wanted {
			keep = max(keep, w.n)
		}
		slices.SortStableFunc(live, func(x, y *replica) int { return len(x.live) - len(y.live) })
		for _, rep := range live[:max(0, len(live)-keep)] {
			rep.state = ReplicaDraining
			if len(rep.live) == 0 {
				rep.state = ReplicaStopped
				rep.info.Stopped = now.Seconds()
			}
		}
	}
	r.record(now)
	return nil
}
