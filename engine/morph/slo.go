package morph

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/quant"
	"gonum.org/v1/gonum/stat"
)

// predictTTFT is the TTFT that the request at the head of the queue and the one at its tail would see with free
// blocks free: each waits for the blocks it needs beyond the free ones to be released (at release blocks per
// second, by the requests running now) and for the prompt tokens ahead of it and its own to be prefilled (at
// prefill tokens per second); the head has already waited OldestWait.
func predictTTFT(s Signals, free int, release, prefill float64) time.Duration {
	if s.Waiting == 0 {
		return 0
	}
	wait := func(blocks, tokens int) float64 {
		t := 0.0
		if short := blocks - free; short > 0 {
			if release <= 0 {
				return math.Inf(1)
			}
			t += float64(short) / release
		}
		if prefill > 0 {
			t += float64(tokens) / prefill
		}
		return t
	}
	headTokens := s.WaitingTokens / s.Waiting
	head := s.OldestWait.Seconds() + wait(s.HeadBlocks, headTokens)
	tail := wait(s.WaitingBlocks, s.WaitingTokens)
	w := math.Max(head, tail)
	if math.IsInf(w, 1) || w > 1e6 {
		return unbounded
	}
	return time.Duration(w * float64(time.Second))
}

// SLO is morph:slo's rule (beyond the paper): with the prefill rate and the block release rate measured on the
// executor as it runs (its own step times are the calibration), it predicts the queue's TTFT (predictTTFT) for each
// number of layers it could quantize further, each adding the blocks a layer frees, and it is pressure when the
// fewest that bring the prediction under Margin of the TTFT SLO are more than none (sloLayers); when none does, the
// fewest that bring the prediction to its shortest: none if more blocks do not shorten it at all (the queue waits
// for compute, not memory: quantizing would cost quality for nothing), all it may if the wait has no bound whatever
// the count (blocks are short and none come back). It is calm once the queue is empty and the pool without the
// last region would keep the restore margin free. There is no threshold on usage or delay: the SLO is the only
// target.
type SLO struct {
	Control
	TTFT      time.Duration // the TTFT SLO the quantized layers are chosen to meet
	Margin    float64       // the share of the SLO the predicted TTFT is held under
	Smoothing float64       // exponential smoothing of the measured prefill rate (the weight of a step)
}

// DefaultSLO is morph:slo's parameters.
var DefaultSLO = SLO{TTFT: 2 * time.Second, Margin: 0.5, Smoothing: 0.3,
	Control: Control{Persistence: 2, LayersPerAction: 8, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.3, RestoreHold: 5 * time.Second,
		Tiers: []quant.Format{quant.Int4}}}

// Params are the mode's own parameters: ttft, margin and prefill_smoothing.
func (p *SLO) Params() []Param {
	return []Param{Duration("ttft", &p.TTFT, true), Share("margin", &p.Margin), Share("prefill_smoothing", &p.Smoothing)}
}

// Rule returns the rule with no rate measured yet.
func (p *SLO) Rule() Rule { return &sloRule{p: p} }

type sloRule struct {
	p       *SLO
	prefill prefillRate // prompt tokens per second, smoothed over the steps that prefill
}

// Judge finds the pressure and calm of one iteration.
func (r *sloRule) Judge(in Input) Verdict {
	p, s, act, info := r.p, in.Signals, in.Actuator, in.Step
	prefill := r.prefill.observe(info, p.Smoothing)
	release := in.Monitor.ReleaseRate(in.BlockSize)
	target := time.Duration(p.Margin * float64(p.TTFT))
	var why []string
	per := act.BlocksPerLayer(NextTier)
	predict := func(j int) time.Duration { return predictTTFT(s, s.Free+int(float64(j)*per), release, prefill) }
	need := sloLayers(predict, act.Headroom(), target)
	if need > 0 {
		why = append(why, fmt.Sprintf("predicted TTFT %v > %v (%.0f%% of the %v SLO): %d more layers for %v",
			shown(predict(0)), target, 100*p.Margin, p.TTFT, need, shown(predict(need))))
	}
	v := Verdict{Pressure: why, Calm: p.calm(s, act)}
	if len(why) > 0 {
		v.Layers = func() int { return need }
	}
	return v
}

// sloLayers is how many more layers morph:slo quantizes, of the left it may, given predict(j), the predicted TTFT
// with j more: none when the prediction is within target already; else the fewest whose prediction is; when none
// is, the fewest that bring the prediction to its shortest (more blocks stop helping once the queue waits only for
// compute), none when no j shortens it, and all of them when it has no bound whatever the count (blocks are short
// and none come back).
func sloLayers(predict func(j int) time.Duration, left int, target time.Duration) int {
	none := predict(0)
	if none <= target {
		return 0
	}
	best, at := none, 0
	for j := 1; j <= left; j++ {
		t := predict(j)
		if t <= target {
			return j
		}
		if t < best {
			best, at = t, j
		}
	}
	if best == unbounded {
		return left
	}
	return at
}

// unbounded is predictTTFT's answer when the wait has no end in sight.
const unbounded = time.Duration(math.MaxInt64)

func shown(d time.Duration) string {
	if d == unbounded {
		return "unbounded"
	}
	return d.Round(time.Millisecond).String()
}

// prefillRate is prompt tokens per second, smoothed over the steps that prefill.
type prefillRate float64

// observe counts a step's prefill, if it had one, and returns the rate.
func (r *prefillRate) observe(info engine.StepInfo, smoothing float64) float64 {
	if info.PrefillTokens > 0 && info.Duration > 0 {
		*r = prefillRate(smoothed(float64(*r), float64(info.PrefillTokens)/info.Duration.Seconds(), smoothing))
	}
	return float64(*r)
}

// meanWindow is the mean of the last values added.
type meanWindow []float64

// add adds v, keeps the last n values and returns their mean.
func (w *meanWindow) add(v float64, n int) float64 {
	*w = append(*w, v)
	if len(*w) > n {
		*w = (*w)[len(*w)-n:]
	}
	return stat.Mean(*w, nil)
}

func smoothed(old, x, a float64) float64 {
	if old == 0 {
		return x
	}
	return a*x + (1-a)*old
}
