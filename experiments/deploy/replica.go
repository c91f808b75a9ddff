package deploy

import (
	"fmt"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/results"
)

// ReplicaState is where a replica of a fleet is in its life.
type ReplicaState int

const (
	// ReplicaProvisioning: asked for by the autoscaler, not serving yet (provisioning and loading the model).
	ReplicaProvisioning ReplicaState = iota
	// ReplicaServing: taking requests.
	ReplicaServing
	// ReplicaDraining: taking no more requests, finishing those it has.
	ReplicaDraining
	// ReplicaStopped: gone, costing nothing more.
	ReplicaStopped
	// ReplicaFailed: dead (Fault) and marked down by the proxy in front, until it is started again. Until the
	// proxy marks it down a dead replica stays serving as far as the router can tell.
	ReplicaFailed
)

func (s ReplicaState) String() string {
	switch s {
	case ReplicaProvisioning:
		return "provisioning"
	case ReplicaServing:
		return "serving"
	case ReplicaDraining:
		return "draining"
	case ReplicaStopped:
		return "stopped"
	case ReplicaFailed:
		return "failed"
	}
	return fmt.Sprintf("ReplicaState(%d)", int(s))
}

// replica is one replica of a running fleet.
type replica struct {
	index  int
	in     *Instance
	clock  *executor.VirtualClock
	state  ReplicaState
	info   results.Replica
	next   time.Duration // when it next steps, while it is in the step heap
	heapAt int           // its index in the step heap, -1 when not in it (only an arrival gives it work)
	ended  []kv.SeqID    // requests that ended in its last step
	// routedBlocks and routedTokens are the KV blocks and tokens of the prompts routed to it since its last
	// step, which its controller's last signals do not count.
	routedBlocks, routedTokens int
	// live are its requests not yet ended: their trace index and stream.
	live map[kv.SeqID]liveRequest
	rows []int // the fleet's result rows of the requests it served
	// ready is when it serves, while provisioning. steps counts its engine's iterations. dead is set from its
	// death (Fault) to its restart, fault is the index of that fault in the run's record, and past are the
	// controllers of the instances it ran before restarts (their swaps and peaks count).
	ready time.Duration
	steps int
	dead  bool
	fault int
	past  []*morph.Controller
}

type liveRequest struct {
	index int
	req   engine.TimedRequest
	st    *engine.Stream
	step  int // the replica's iterations when it arrived there: the next one takes it in
}

// ReplicaView is what a Router or a ScaleMetric sees of a replica of a running fleet, read-only: its state as of
// its last step, with the requests routed to it since counted as waiting. A view is valid during the call it is
// passed to.
type ReplicaView struct{ r *replica }

// Index is the replica's place in the fleet: the order it joined in, its index in results.Fleet.Replicas.
func (v ReplicaView) Index() int { return v.r.index }

// Deployment is what the replica serves, with its defaults filled in.
func (v ReplicaView) Deployment() Deployment { return v.r.in.Deployment }

// State is whether the replica is provisioning, serving, draining, stopped or failed.
func (v ReplicaView) State() ReplicaState { return v.r.state }

// Outstanding is the requests in the replica that have not ended, running or waiting.
func (v ReplicaView) Outstanding() int { return len(v.r.live) }

// Waiting is the requests in the replica not running: those it left waiting at its last step and those routed to
// it since.
func (v ReplicaView) Waiting() int { return max(0, len(v.r.live)-v.r.in.Controller.Last().Running) }

// WaitingTokens is the prompt tokens the waiting requests need prefilled.
func (v ReplicaView) WaitingTokens() int {
	return v.r.in.Controller.Last().WaitingTokens + v.r.routedTokens
}

// WaitingBlocks is the KV blocks the waiting requests need to be admitted.
func (v ReplicaView) WaitingBlocks() int {
	return v.r.in.Controller.Last().WaitingBlocks + v.r.routedBlocks
}

// KVUsage is the share of the replica's attached KV blocks in use at its last step (0 before its first).
func (v ReplicaView) KVUsage() float64 {
	s := v.r.in.Controller.Last()
	if s.Total == 0 {
		return 0
	}
	return float64(s.Used) / float64(s.Total)
}

// FreeBlocks is the replica's free KV blocks at its last step; before its first, every attached block.
func (v ReplicaView) FreeBlocks() int {
	s := v.r.in.Controller.Last()
	if s.Total == 0 {
		return v.r.in.Engine.Memory().Blocks
	}
	return s.Free
}

// Quantized is the replica's decoder layers not at their stored precision at its last step.
func (v ReplicaView) Quantized() int { return v.r.in.Controller.Last().Quantized }

// SwapBlocks is the KV blocks the swaps the replica's policy still allows would free, were they all made (0 for a
// policy that does not morph): what morphing can still add to FreeBlocks.
func (v ReplicaView) SwapBlocks() float64 {
	if act := v.r.in.Controller.Actuator(); act != nil {
		return act.FreeableBlocks()
	}
	return 0
}

// Blocks is the KV blocks that tokens tokens fill on the replica.
func (v ReplicaView) Blocks(tokens int) int {
	bs := v.r.in.Engine.Geometry().BlockSize
	return (tokens + bs - 1) / bs
}

// Signals are the replica's morph controller's signals at its last step (windowed latencies, throughput, the
// queue's oldest wait, ...), which count no request routed to it since.
func (v ReplicaView) Signals() morph.Signals { return v.r.in.Controller.Last() }

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
