package sensitivity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

// BenchmarkProfile times Rank (the 1 + L(L+1)/2 forward passes of the greedy LIS order) in Int4 on synthetic
// models of the stories260K and stories110M shapes, over calibration sequences of 128 random tokens. It reports
// the forward passes, the seconds each takes and calibration tokens run per second; the time of a profile is passes × seconds/pass, so it grows as
// L² times the cost of one pass (itself linear in L), i.e. L³ in the layer count at a fixed width.
func BenchmarkProfile(b *testing.B) {
	for _, c := range []struct {
		shape  string
		tokens int
	}{{"stories260K", 2048}, {"stories110M", 256}} {
		b.Run(fmt.Sprintf("model=%s/tokens=%d", c.shape, c.tokens), func(b *testing.B) {
			cfg, err := model.ShapeByName(c.shape)
			if err != nil {
				b.Fatal(err)
			}
			m, err := model.FromCheckpoint(model.Synthesize(cfg, 1))
			if err != nil {
				b.Fatal(err)
			}
			for l := range m.Layers {
				if _, err := m.AddVariant(l, quant.Int4); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var calib [][]int32
			for range c.tokens / 128 {
				s := make([]int32, 128)
				for i := range s {
					s[i] = rng.Int32N(int32(cfg.VocabSize))
				}
				calib = append(calib, s)
			}
			b.ResetTimer()
			var passes int
			for b.Loop() {
				r, err := Rank(m, quant.Int4, calib, Options{})
				if err != nil {
					b.Fatal(err)
				}
				passes = r.Forwards
			}
			b.ReportMetric(float64(passes), "passes")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(passes), "s/pass")
			b.ReportMetric(float64(passes*c.tokens)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
