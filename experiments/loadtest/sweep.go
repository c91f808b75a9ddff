package loadtest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/metrics"
)

// Point is one rate of a sweep: the asked rate and the run's metrics.
type Point struct {
	Rate    float64 `json:"rate"`
	Metrics Metrics `json:"metrics"`
}

// KneeTarget is what the knee of a Latency-RPS curve must meet: the P95 of one latency (ttft, tpot, itl or
// e2el) within a limit.
type KneeTarget struct {
	Metric string        `json:"metric"`
	Limit  time.Duration `json:"limit_ns"`
}

func (k KneeTarget) String() string {
	return "P95 " + strings.ToUpper(k.Metric) + " <= " + k.Limit.String()
}

// ParseKneeTarget parses "metric=limit", such as "e2el=2s" or "ttft=500ms"; a limit without a unit is in
// milliseconds, as vLLM's --goodput takes them.
func ParseKneeTarget(s string) (KneeTarget, error) {
	name, val, ok := strings.Cut(s, "=")
	if !ok {
		return KneeTarget{}, fmt.Errorf("knee %q: want metric=limit, such as e2el=2s", s)
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if !slices.Contains([]string{"ttft", "tpot", "itl", "e2el"}, name) {
		return KneeTarget{}, fmt.Errorf("knee %q: metric %q, want ttft, tpot, itl or e2el", s, name)
	}
	d, err := metrics.ParseLimit(val)
	if err != nil {
		return KneeTarget{}, fmt.Errorf("knee %q: %v", s, err)
	}
	return KneeTarget{Metric: name, Limit: d}, nil
}

// P95 returns the P95 of the target's latency in m, in milliseconds.
func (k KneeTarget) P95(m Metrics) float64 {
	switch k.Metric {
	case "ttft":
		return m.TTFT.P95
	case "tpot":
		return m.TPOT.P95
	case "itl":
		return m.ITL.P95
	}
	return m.E2EL.P95
}

// Meets reports whether a run meets the target: every request completed (none rejected or failed: a server
// that sheds load is past its knee) and the P95 within the limit.
func (k KneeTarget) Meets(m Metrics) bool {
	return m.Completed > 0 && m.Completed == m.Requests && k.P95(m) <= ms(k.Limit)
}

// Knee returns the knee of a Latency-RPS curve under target: the point of the highest rate below the lowest rate
// that misses the target (every point when none misses), in any order; false when the lowest rate misses already
// or there are no points. A noisy curve can meet the target again past a rate that missed it (a run at a higher
// rate that happened to go well); the server did not hold the target up to that rate, so it is not the knee, however
// much it served.
func Knee(points []Point, target KneeTarget) (Point, bool) {
	miss := math.Inf(1)
	for _, p := range points {
		if !target.Meets(p.Metrics) {
			miss = min(miss, p.Rate)
		}
	}
	var knee Point
	found := false
	for _, p := range points {
		if p.Rate < miss && (!found || p.Rate > knee.Rate) {
			knee, found = p, true
		}
	}
	return knee, found
}

// Capacity is what serving a target load takes, from one instance's throughput at the knee.
type Capacity struct {
	TargetRPS       float64 `json:"target_rps"`
	KneeRPS         float64 `json:"knee_rps"`          // one instance's request throughput at the knee
	Instances       int     `json:"instances"`         // ceil(target / knee)
	CostPerInstance float64 `json:"cost_per_instance"` // per hour, as given
	CostPerHour     float64 `json:"cost_per_hour"`     // instances x cost per instance
	// CostPerMillionOutputTokens is the hourly cost over the output tokens an hour of the target load brings
	// (target x the knee's output tokens per request x 3600), per million.
	CostPerMillionOutputTokens float64 `json:"cost_per_million_output_tokens"`
}

// PlanCapacity returns the capacity for targetRPS given the knee's metrics and one instance's hourly cost.
func PlanCapacity(knee Metrics, targetRPS, costPerHour float64) (Capacity, error) {
	if !(targetRPS > 0) || math.IsInf(targetRPS, 0) {
		return Capacity{}, fmt.Errorf("target %v req/s, want a finite rate above 0", targetRPS)
	}
	if !(costPerHour >= 0) || math.IsInf(costPerHour, 0) {
		return Capacity{}, fmt.Errorf("cost per hour %v, want a finite number, 0 or more", costPerHour)
	}
	if knee.RequestThroughput <= 0 || knee.TotalOutputTokens <= 0 {
		return Capacity{}, fmt.Errorf("the knee run completed no output: no throughput to plan with")
	}
	c := Capacity{TargetRPS: targetRPS, KneeRPS: knee.RequestThroughput, CostPerInstance: costPerHour}
	c.Instances = ceil(targetRPS / knee.RequestThroughput)
	c.CostPerHour = float64(c.Instances) * costPerHour
	tokensPerHour := targetRPS * float64(knee.TotalOutputTokens) / float64(knee.Completed) * 3600
	c.CostPerMillionOutputTokens = c.CostPerHour / tokensPerHour * 1e6
	return c, nil
}

// ceil rounds x up, except that an x within rounding error of a whole number is that number (1.1/0.1 is
// 11.000000000000002 in floating point, and needs 11 instances, not 12).
func ceil(x float64) int {
	if r := math.Round(x); math.Abs(x-r) <= 1e-9*math.Max(1, r) {
		return int(r)
	}
	return int(math.Ceil(x))
}
