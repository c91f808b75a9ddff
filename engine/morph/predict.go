package morph

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Predictor forecasts the peak KV demand (blocks in use plus the blocks the waiting queue needs) Horizon ahead, for
// morph:predictive.
//
// The demand's peak is taken over bins of Bin; at the end of each bin, Holt's double exponential smoothing updates
// the peak's level and trend (smoothing factors Alpha and Beta), and the forecast is the level plus the trend
// carried Horizon ahead from the bin's middle, never below zero. The demand is a stock that arrivals fill and
// finishing requests drain, so its trend is the net of both and far steadier than the arrival rate's; the peak, not
// the mean, is what the pool must hold.
type Predictor struct {
	p        *Predictive
	binStart time.Duration
	peak     float64 // the demand's peak over the bin so far
	seen     bool    // whether the bin has had an iteration
	level    float64 // blocks
	trend    float64 // blocks per bin
	bins     int
}

// NewPredictor returns a predictor with the mode's parameters.
func NewPredictor(p *Predictive) *Predictor { return &Predictor{p: p} }

// Observe takes the demand after the iteration that ended at t.
func (f *Predictor) Observe(t time.Duration, demand float64) {
	for t-f.binStart >= f.p.Bin {
		if f.seen {
			switch f.bins {
			case 0:
				f.level = f.peak
			case 1:
				f.trend = f.peak - f.level
				f.level = f.peak
			default:
				prev := f.level
				f.level = f.p.Alpha*f.peak + (1-f.p.Alpha)*(f.level+f.trend)
				f.trend = f.p.Beta*(f.level-prev) + (1-f.p.Beta)*f.trend
			}
			f.bins++
		}
		f.binStart += f.p.Bin
		f.peak, f.seen = 0, false
	}
	f.peak = math.Max(f.peak, demand)
	f.seen = true
}

// Forecast is the demand forecast Horizon ahead, in blocks (0 until a bin has ended).
func (f *Predictor) Forecast() float64 {
	if f.bins == 0 {
		return 0
	}
	ahead := (f.p.Horizon + f.p.Bin/2).Seconds() / f.p.Bin.Seconds()
	return math.Max(0, f.level+f.trend*ahead)
}

// Predictive is morph:predictive's rule (beyond the paper). The demand is the larger of the present one (blocks in
// use plus the blocks the waiting queue needs) and the Predictor's forecast. It is pressure when the demand exceeds
// Usage of the pool (1: the pool itself), the layers sized by the blocks over that line, and also on the triggers
// that show pressure already there (a blocked prefill, a preemption); a queue that waits for compute alone, with
// its blocks in the pool, is no reason. It is calm once the queue is empty and the demand would leave
// RestoreMargin of the pool free without the last region: the forecast, which sees a rise coming, stands in for
// most of the long hold of the reactive modes.
//
// Its parameters (DefaultPredictive) are the same for every trace: demand over the whole pool, a 1 s horizon and
// 1 s bins, Holt's alpha 0.5 and beta 0.3, a 10% restore margin, 8 calm iterations and 1 s of hold. They were
// chosen on the experiment suite's workloads and checked on bursts the choice never saw (BENCHMARKS.md); a longer
// horizon swaps earlier and costs quality there.
type Predictive struct {
	Control
	Usage   float64       // share of the pool the demand may fill before it is pressure
	Horizon time.Duration // how far ahead the demand is forecast
	Bin     time.Duration // the demand's peak is taken over bins this long
	Alpha   float64       // Holt's smoothing of the peak's level
	Beta    float64       // and of its trend
}

// DefaultPredictive is morph:predictive's parameters.
var DefaultPredictive = Predictive{Usage: 1, Horizon: time.Second, Bin: time.Second, Alpha: 0.5, Beta: 0.3,
	Control: Control{Persistence: 2, LayersPerAction: 8, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.1, RestoreHold: time.Second,
		Tiers: []quant.Format{quant.Int4}}}

// Params are the mode's own parameters: usage, horizon, bin, alpha and beta.
func (p *Predictive) Params() []Param {
	return []Param{Share("usage", &p.Usage), Duration("horizon", &p.Horizon, false), Duration("bin", &p.Bin, true),
		Share("alpha", &p.Alpha), Share("beta", &p.Beta)}
}

// Rule returns the rule with a fresh forecast.
func (p *Predictive) Rule() Rule { return &predictiveRule{p: p, f: NewPredictor(p)} }

type predictiveRule struct {
	p *Predictive
	f *Predictor
}

// Judge finds the pressure and calm of one iteration.
func (j *predictiveRule) Judge(in Input) Verdict {
	p, s, act := j.p, in.Signals, in.Actuator
	present := float64(s.Used + s.WaitingBlocks)
	j.f.Observe(s.Time, present)
	forecast := j.f.Forecast()
	demand := math.Max(present, forecast)
	limit := p.Usage * float64(s.Total)
	var why []string
	if demand > limit {
		why = append(why, fmt.Sprintf("demand %.0f blocks (present %.0f, forecast %.0f) > %.0f", demand, present, forecast, limit))
	}
	why = append(why, memoryShort(s)...)
	v := Verdict{Pressure: why}
	top := act.TopBlocks()
	if fits := (1 - p.RestoreMargin) * float64(s.Total-top); s.Waiting == 0 && act.Actions() > 0 && demand <= fits {
		v.Calm = []string{"queue empty", fmt.Sprintf("demand %.0f blocks (present %.0f, forecast %.0f) <= %.0f, the pool without the last region less the %.2f margin",
			demand, present, forecast, fits, p.RestoreMargin)}
	}
	if len(why) > 0 {
		v.Layers = func() int {
			per := act.BlocksPerLayer(NextTier)
			if per <= 0 {
				return 1
			}
			return int(math.Ceil((demand - limit) / per))
		}
	}
	return v
}
