package suite

import (
	"context"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
)

// TestSearch: the knee of the rates search probes is within 1% below the rate where the target starts to miss.
func TestSearch(t *testing.T) {
	for _, limit := range []float64{0.0123, 0.7, 1, 3.7, 500} {
		// A latency that equals the rate (in ms), against a limit of limit ms.
		target := loadtest.KneeTarget{Metric: "ttft", Limit: time.Duration(limit * float64(time.Millisecond))}
		var probed []loadtest.Point
		err := search("x", func(rate float64) (bool, error) {
			p := loadtest.Point{Rate: rate, Metrics: loadtest.Metrics{Requests: 1, Completed: 1, TTFT: loadtest.Summary{P95: rate}}}
			probed = append(probed, p)
			return target.Meets(p.Metrics), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		k, ok := loadtest.Knee(probed, target)
		if !ok || k.Rate > limit || k.Rate < limit/1.01 {
			t.Errorf("limit %g: knee %g (%v), want within 1%% below it", limit, k.Rate, ok)
		}
		if len(probed) > 20 {
			t.Errorf("limit %g: %d probes", limit, len(probed))
		}
	}
	for _, limit := range []float64{1e-4, 5000} {
		if err := search("x", func(rate float64) (bool, error) { return rate <= limit, nil }); err == nil {
			t.Errorf("limit %g: found a capacity outside [0.001, 1024]", limit)
		}
	}
}

// TestCapacity: the 7B deployment's fp16 capacity meets the SLO on the burst's lengths, and 2% more misses it.
func TestCapacity(t *testing.T) {
	s := PaperSetups[1]
	c, err := Capacity(context.Background(), s, DefaultBurstSeed)
	if err != nil {
		t.Fatal(err)
	}
	p95 := func(rate float64) float64 {
		m, err := probe(context.Background(), s, rate, DefaultBurstSeed)
		if err != nil {
			t.Fatal(err)
		}
		return m.TTFT.P95
	}
	slo := 1000 * SLO.TTFT.Seconds()
	if at, over := p95(c), p95(1.02*c); at > slo || over <= slo {
		t.Errorf("capacity %.3f req/s: P95 TTFT %.0f ms there and %.0f ms at 1.02x; want within %.0f and then over", c, at, over, slo)
	}
	t.Logf("capacity %.3f req/s", c)
}
