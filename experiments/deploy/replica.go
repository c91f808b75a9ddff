package deploy

import (
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/experiments/results"
)

// replica states.
const (
	provisioning = iota
	serving
	draining
	stopped
)

// replica is one replica of a running fleet.
type replica struct {
	index  int
	in     *Instance
	clock  *executor.VirtualClock
	state  int
	info   results.Replica
	next   time.Duration // when it next steps, while it is in the step heap
	heapAt int           // its index in the step heap, -1 when not in it (only an arrival gives it work)
	ended  []kv.SeqID    // requests that ended in its last step
	// routed is the KV blocks of the prompts routed to it since its last step, which its controller's last
	// signals do not count.
	routed int
	// live are its requests not yet ended: their trace index and stream.
	live map[kv.SeqID]liveRequest
	rows []int // the fleet's result rows of the requests it served
}

type liveRequest struct {
	index int
	req   engine.TimedRequest
	st    *engine.Stream
}

// waiting is the requests in rep not yet running: those submitted since its last step and those it left waiting.
func (rep *replica) waiting() int {
	return max(0, len(rep.live)-rep.in.Controller.Last().Running)
}

// kvUsage is the share of rep's KV blocks in use at its last step.
func (rep *replica) kvUsage() float64 {
	s := rep.in.Controller.Last()
	if s.Total == 0 {
		return 0
	}
	return float64(s.Used) / float64(s.Total)
}

// blocks is the KV blocks that tokens tokens fill on rep.
func (rep *replica) blocks(tokens int) int {
	bs := rep.in.Engine.Geometry().BlockSize
	return (tokens + bs - 1) / bs
}

// stepHeap orders the replicas due to step by their next step, then by index.
type stepHeap []*replica

func (h stepHeap) Len() int { return len(h) }
func (h stepHeap) Less(i, j int) bool {
	if h[i].next != h[j].next {
		return h[i].next < h[j].next
	}
	return h[i].index < h[j].index
}
func (h stepHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *stepHeap) Push(x any) {
	rep := x.(*replica)
	rep.heapAt = len(*h)
	*h = append(*h, rep)
}
func (h *stepHeap) Pop() any {
	old := *h
	rep := old[len(old)-1]
	*h = old[:len(old)-1]
	rep.heapAt = -1
	return rep
}
