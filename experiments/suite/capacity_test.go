package suite

import (
	"context"
	"testing"
)

func TestSearch(t *testing.T) {
	for _, limit := range []float64{0.0123, 0.7, 1, 3.7, 500} {
		calls := 0
		got, err := search("x", func(rate float64) (bool, error) { calls++; return rate <= limit, nil })
		if err != nil {
			t.Fatal(err)
		}
		if got > limit || got < limit/1.01 {
			t.Errorf("limit %g: search found %g, want within 1%% below it", limit, got)
		}
		if calls > 20 {
			t.Errorf("limit %g: %d probes", limit, calls)
		}
	}
	for _, limit := range []float64{1e-4, 5000} {
		if _, err := search("x", func(rate float64) (bool, error) { return rate <= limit, nil }); err == nil {
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
		v, err := probeP95(context.Background(), s, rate, DefaultBurstSeed)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	slo := 1000 * SLO.TTFT.Seconds()
	if at, over := p95(c), p95(1.02*c); at > slo || over <= slo {
		t.Errorf("capacity %.3f req/s: P95 TTFT %.0f ms there and %.0f ms at 1.02x; want within %.0f and then over", c, at, over, slo)
	}
	t.Logf("capacity %.3f req/s", c)
}
