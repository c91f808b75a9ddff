package executor

import (
	"fmt"
	"slices"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// swapQueue holds the precisions asked for and not yet applied, and books their transfers on the host link as
// SwapCost says: overlapped transfers go one after another in the order asked, each starting no earlier than the
// end of the last step (lastEnd, which the executor keeps up to date).
type swapQueue struct {
	cost    SwapCost
	pending map[int]pendingSwap
	link    time.Duration // when the host link is next free
	lastEnd time.Duration // when the last step ended, on the engine's clock
}

// pendingSwap is a precision asked for and not yet applied.
type pendingSwap struct {
	format   quant.Format
	transfer time.Duration
	ready    time.Duration // overlapped: when its transfer has finished, the step boundary from which it may apply
}

func newSwapQueue(cost SwapCost) swapQueue {
	return swapQueue{cost: cost, pending: map[int]pendingSwap{}}
}

// format is the format layer will run in once its pending swap applies: pending's, or current.
func (q *swapQueue) format(layer int, current quant.Format) quant.Format {
	if p, ok := q.pending[layer]; ok {
		return p.format
	}
	return current
}

// ask queues layer's swap to f, a transfer of bytes, when memory (read with the swap pending) shows the budget
// holding it; otherwise it leaves the queue as it was and says by how much the budget falls short. The returned
// undo puts the queue back as it was before the ask (for an executor whose own placement then refuses it).
func (q *swapQueue) ask(layer int, f quant.Format, bytes int64, memory func() Memory) (undo func(), err error) {
	old, had := q.pending[layer]
	link := q.link
	undo = func() {
		if had {
			q.pending[layer] = old
		} else {
			delete(q.pending, layer)
		}
		q.link = link
	}
	q.pending[layer] = pendingSwap{format: f}
	if mem := memory(); mem.PendingWeights > mem.Budget-mem.KV-mem.Workspace {
		undo()
		return nil, fmt.Errorf("executor: layer %d in %v needs %d bytes more than the budget has free; detach KV first",
			layer, f, mem.PendingWeights-(mem.Budget-mem.KV-mem.Workspace))
	}
	p := pendingSwap{format: f}
	if bw := q.cost.HostLink; bw > 0 {
		p.transfer = time.Duration(float64(bytes) / bw * float64(time.Second))
		if !q.cost.Blocking {
			q.link = max(q.link, q.lastEnd) + p.transfer
			p.ready = q.link
		}
	}
	q.pending[layer] = p
	return undo, nil
}

// due removes the swaps that apply at a step starting at now (an overlapped one once its transfer has finished)
// and returns their layers in order with their transfer time in all. ready, when not nil, holds back the layers
// for which it is false (a device copy not done).
func (q *swapQueue) due(now time.Duration, ready func(layer int) bool) (layers []int, formats []quant.Format, transfer time.Duration) {
	for l, p := range q.pending {
		if p.ready <= now && (ready == nil || ready(l)) {
			layers = append(layers, l)
		}
	}
	slices.Sort(layers)
	for _, l := range layers {
		p := q.pending[l]
		formats = append(formats, p.format)
		transfer += p.transfer
		delete(q.pending, l)
	}
	return layers, formats, transfer
}
