package loadtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

// BenchmarkSend measures the load tester's own floor on this machine: against the fake server answering at once
// with 8 tokens, 200 Poisson arrivals at each rate; it reports the achieved over the asked arrival rate and the
// median TTFT and ITL, which are then the client's and the loopback's overhead alone.
func BenchmarkSend(b *testing.B) {
	s := openaitest.NewServer(openaitest.Options{Model: "m"})
	defer s.Close()
	for _, rate := range []float64{100, 500, 2000} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			at, err := Arrivals(rate, 1, 200, 1)
			if err != nil {
				b.Fatal(err)
			}
			reqs := PromptWorkload(at, []openai.Prompt{{Text: "a b"}}, 8)
			var m Metrics
			for b.Loop() {
				res, err := Send(context.Background(), Config{URL: s.URL, Model: "m"}, reqs)
				if err != nil {
					b.Fatal(err)
				}
				if m = Compute(res, metrics.SLO{}); m.Completed != len(reqs) {
					b.Fatalf("%d of %d completed: %s", m.Completed, len(reqs), m.FirstError)
				}
			}
			b.ReportMetric(m.ArrivalRate/m.AskedRate, "achieved/asked")
			b.ReportMetric(m.TTFT.Median, "ttft-p50-ms")
			b.ReportMetric(m.ITL.Median, "itl-p50-ms")
		})
	}
}
