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
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(w * float64(time.Second))
}

// decideSLO is morph:slo's rule: with the prefill rate and the block release rate measured on the executor as it
// runs (its own step times are the calibration), it predicts the queue's TTFT (predictTTFT) for each number of
// layers it could quantize further, each adding the blocks a layer frees, and swaps the fewest that bring the
// prediction under Margin of the TTFT SLO (all it may when none does). It restores, last action first, once the
// queue has been empty and the pool without the last region would keep the restore margin free, for the restore
// persistence and hold. There is no threshold on usage or delay: the SLO is the only target.
func (c *Controller) decideSLO(s Signals, info engine.StepInfo) {
	p := c.Spec.Params
	if info.PrefillTokens > 0 && info.Duration > 0 {
		c.rates.prefill = smoothed(c.rates.prefill, float64(info.PrefillTokens)/info.Duration.Seconds(), p.Alpha)
	}
	release := c.Monitor.ReleaseRate(c.blockSize)
	target := time.Duration(p.Margin * float64(p.TTFT))
	var why []string
	need := 0
	if pred := predictTTFT(s, s.Free, release, c.rates.prefill); pred > target {
		per := c.act.BlocksPerLayer()
		left := c.act.Headroom()
		need = left
		for j := 1; j <= left; j++ {
			if predictTTFT(s, s.Free+int(float64(j)*per), release, c.rates.prefill) <= target {
				need = j
				break
			}
		}
		why = append(why, fmt.Sprintf("predicted TTFT %v > %v (%.0f%% of the %v SLO): %d more layers", shown(pred), target, 100*p.Margin, p.TTFT, need))
	}
	top := c.act.TopBlocks()
	calm := s.Waiting == 0 && c.act.Actions() > 0 && float64(s.Free-top) >= p.RestoreMargin*float64(s.Total-top)
	c.step(s, why, calm, func() int { return need })
}

func shown(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
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
