package morph

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/engine"
)

// Predictor forecasts the KV demand of the next Horizon from the arrivals so far, for morph:predictive.
//
// Arrivals are counted in bins of Bin; at the end of each bin, Holt's double exponential smoothing updates the
// arrival rate's level and trend (smoothing factors Alpha and Beta), and the forecast rate is the level plus the
// trend carried Horizon ahead (never below zero). By Little's law the KV demand is the arrival rate times the time
// a request stays times the blocks it holds; with the last two as they are now, the demand Horizon ahead is the
// present demand (blocks in use plus the blocks the queue needs) scaled by the forecast rate over the present
// level. The policy swaps when that would push usage past Usage, sizing the action by the blocks over the line,
// and restores when it fits under Usage in the pool left without the last region (less the restore margin), for
// the restore persistence and hold. The triggers that show pressure already there (a blocked prefill, a
// preemption) also count. No parameter depends on the trace.
type Predictor struct {
	p        Params
	binStart time.Duration
	binCount int
	level    float64 // requests per second
	trend    float64 // requests per second per bin
	bins     int
}

// NewPredictor returns a predictor with the mode's parameters.
func NewPredictor(p Params) *Predictor { return &Predictor{p: p} }

// Observe takes one iteration's arrivals.
func (f *Predictor) Observe(info engine.StepInfo) {
	for info.Time-f.binStart >= f.p.Bin {
		rate := float64(f.binCount) / f.p.Bin.Seconds()
		switch f.bins {
		case 0:
			f.level = rate
		case 1:
			f.trend = rate - f.level
			f.level = rate
		default:
			prev := f.level
			f.level = f.p.Alpha*rate + (1-f.p.Alpha)*(f.level+f.trend)
			f.trend = f.p.Beta*(f.level-prev) + (1-f.p.Beta)*f.trend
		}
		f.bins++
		f.binStart += f.p.Bin
		f.binCount = 0
	}
	f.binCount += info.Arrived
}

// Rate is the forecast arrival rate Horizon ahead, in requests per second.
func (f *Predictor) Rate() float64 {
	return math.Max(0, f.level+f.trend*f.p.Horizon.Seconds()/f.p.Bin.Seconds())
}

// Growth is the forecast rate over the present level (1 until there is a level to compare with).
func (f *Predictor) Growth() float64 {
	if f.level <= 0 {
		return 1
	}
	return f.Rate() / f.level
}

// decidePredictive is morph:predictive's rule (Predictor's doc).
func (c *Controller) decidePredictive(s Signals) {
	p := c.Spec.Params
	present := float64(s.Used + s.WaitingBlocks)
	forecast := present * c.pred.Growth()
	limit := p.Usage * float64(s.Total)
	var why []string
	if d := math.Max(forecast, present); d > limit {
		why = append(why, fmt.Sprintf("demand %.0f blocks (forecast %.0f at %.2f req/s, present %.0f) > %.0f", d, forecast, c.pred.Rate(), present, limit))
	}
	if s.Waiting > 0 && s.HeadBlocks > s.Free {
		why = append(why, fmt.Sprintf("prefill blocked: %d blocks needed, %d free", s.HeadBlocks, s.Free))
	}
	if s.Preempted > 0 {
		why = append(why, fmt.Sprintf("%d preempted", s.Preempted))
	}
	top := c.act.TopBlocks()
	calm := s.Waiting == 0 && c.act.Actions() > 0 && float64(s.Free-top) >= p.RestoreMargin*float64(s.Total-top) &&
		math.Max(forecast, present) <= p.Usage*(1-p.RestoreMargin)*float64(s.Total-top)
	c.step(s, why, calm, func() int {
		per := c.act.BlocksPerLayer()
		if per <= 0 {
			return 1
		}
		return int(math.Ceil((math.Max(forecast, present) - limit) / per))
	})
}
