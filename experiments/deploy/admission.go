package deploy

import (
	"fmt"
	"time"
)

// Admission turns requests away before routing, each with its reason: when MaxQueue requests are already
// waiting for their first step over the whole fleet, or when the token bucket (Rate requests a second on
// average, Burst at once) is empty. Zero values admit everything.
type Admission struct {
	MaxQueue int
	Rate     float64
	Burst    int
}

func (a Admission) check() error {
	if a.MaxQueue < 0 || a.Rate < 0 || a.Burst < 0 || (a.Rate > 0) != (a.Burst > 0) {
		return fmt.Errorf("deploy: admission queue %d, rate %g, burst %d: want none negative, and a rate with a burst",
			a.MaxQueue, a.Rate, a.Burst)
	}
	return nil
}

// admit returns why a request arriving at now is turned away, or "".
func (r *fleetRun) admit(now time.Duration) string {
	a := r.f.Admission
	if a.MaxQueue > 0 {
		waiting := 0
		for _, rep := range r.replicas {
			waiting += ReplicaView{rep}.Waiting()
		}
		if waiting >= a.MaxQueue {
			return fmt.Sprintf("queue full: %d requests waiting, the limit is %d", waiting, a.MaxQueue)
		}
	}
	if a.Rate > 0 {
		r.bucket = min(float64(a.Burst), r.bucket+a.Rate*(now-r.bucketAt).Seconds())
		r.bucketAt = now
		if r.bucket < 1 {
			return fmt.Sprintf("rate limited: %g requests a second, bursts of %d", a.Rate, a.Burst)
		}
		r.bucket--
	}
	return ""
}
