package morph

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/engine"
)

// sloRates are what morph:slo measures of the executor as it runs: how fast prompt tokens are prefilled and how
// fast running requests give their KV blocks back.
type sloRates struct {
	prefill float64 // prompt tokens per second, smoothed over the steps that prefill
}

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

// decideSLO is morph:slo's rule: with the prefill rate and the block release rate measured on the executor as it
// runs (its own step times are the calibration), it predicts the queue's TTFT (predictTTFT) for each number of
// layers it could quantize further, each adding the blocks a layer frees, and swaps the fewest that bring the
// prediction under Margin of the TTFT SLO (sloLayers). When none does, it swaps the fewest that bring the
// prediction to its shortest: none if more blocks do not shorten it at all (the queue waits for compute, not
// memory: quantizing would cost quality for nothing), all it may if the wait has no bound whatever the count
// (blocks are short and none come back). It restores, last action first, once the queue has been empty and the
// pool without the last region would keep the restore margin free, for the restore persistence and hold. There is
// no threshold on usage or delay: the SLO is the only target.
func (c *Controller) decideSLO(s Signals, info engine.StepInfo) {
	p := c.Spec.Params
	if info.PrefillTokens > 0 && info.Duration > 0 {
		c.rates.prefill = smoothed(c.rates.prefill, float64(info.PrefillTokens)/info.Duration.Seconds(), p.Alpha)
	}
	release := c.Monitor.ReleaseRate(c.blockSize)
	target := time.Duration(p.Margin * float64(p.TTFT))
	var why []string
	per := c.act.BlocksPerLayer()
	predict := func(j int) time.Duration { return predictTTFT(s, s.Free+int(float64(j)*per), release, c.rates.prefill) }
	need := sloLayers(predict, c.act.Headroom(), target)
	if need > 0 {
		why = append(why, fmt.Sprintf("predicted TTFT %v > %v (%.0f%% of the %v SLO): %d more layers for %v",
			shown(predict(0)), target, 100*p.Margin, p.TTFT, need, shown(predict(need))))
	}
	top := c.act.TopBlocks()
	calm := s.Waiting == 0 && c.act.Actions() > 0 && float64(s.Free-top) >= p.RestoreMargin*float64(s.Total-top)
	c.step(s, why, calm, func() int { return need })
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

func smoothed(old, x, a float64) float64 {
	if old == 0 {
		return x
	}
	return a*x + (1-a)*old
}
