package deploy

import (
	"cmp"

	"github.com/morphlab/morphlab/engine"
)

// A Router picks the replica each admitted request of a fleet goes to. A fleet's Replay makes its own Router from
// the registered constructor (RegisterRouter), so a Router may keep state over the requests of one run, as
// round-robin keeps its turn.
type Router interface {
	// Route returns the index in replicas of the one that serves req. replicas are the fleet's serving
	// replicas, in the order they joined it, as of req's arrival; there is at least one.
	Route(req engine.TimedRequest, replicas []ReplicaView) int
}

var routers = registry[Router]{kind: "router"}

// RegisterRouter makes a router known by name to Fleet.Router and --router: newRouter makes one for each run. It
// panics when the name is empty or taken, or newRouter is nil, as a second registration is a program's mistake.
func RegisterRouter(name string, newRouter func() Router) { routers.register(name, newRouter) }

// NewRouter returns a new router of the name, or an error naming the registered routers.
func NewRouter(name string) (Router, error) { return routers.lookup(name) }

// RouterNames are the registered routers' names, sorted.
func RouterNames() []string { return routers.names() }

// The built-in routers.
func init() {
	RegisterRouter("round-robin", func() Router { return new(roundRobin) })
	RegisterRouter("least-outstanding", func() Router { return leastOutstanding{} })
	RegisterRouter("least-kv", func() Router { return leastKV{} })
	RegisterRouter("morph-aware", func() Router { return morphAware{} })
}

// roundRobin sends the requests to the serving replicas in turn, so that over N identical replicas that all serve
// from the start, replica k serves every Nth request from the kth.
type roundRobin struct{ turn int }

func (r *roundRobin) Route(_ engine.TimedRequest, replicas []ReplicaView) int {
	i := r.turn % len(replicas)
	r.turn++
	return i
}

// leastOutstanding sends a request to the replica with the fewest requests in it, running or waiting.
type leastOutstanding struct{}

func (leastOutstanding) Route(_ engine.TimedRequest, replicas []ReplicaView) int {
	return argmin(replicas, func(a, b ReplicaView) int { return a.Outstanding() - b.Outstanding() })
}

// leastKV sends a request to the replica with the lowest share of KV blocks in use, then the fewest requests.
type leastKV struct{}

func (leastKV) Route(_ engine.TimedRequest, replicas []ReplicaView) int {
	return argmin(replicas, func(a, b ReplicaView) int {
		if c := cmp.Compare(a.KVUsage(), b.KVUsage()); c != 0 {
			return c
		}
		return a.Outstanding() - b.Outstanding()
	})
}

// morphAware sends a request to a replica whose free blocks hold its prompt, then to one with no layer
// quantized, then to the one with the fewest requests (morphRank).
type morphAware struct{}

func (morphAware) Route(req engine.TimedRequest, replicas []ReplicaView) int {
	return argmin(replicas, func(a, b ReplicaView) int {
		if ra, rb := morphRank(a, req), morphRank(b, req); ra != rb {
			return ra - rb
		}
		return a.Outstanding() - b.Outstanding()
	})
}

// morphRank orders replicas for the morph-aware router: 0 for one whose free blocks hold the request's prompt
// beside the prompts already waiting there and whose layers are all at full precision, 1 for one with the room but
// quantized layers, 2 for one without the room at full precision, 3 for the rest.
func morphRank(v ReplicaView, req engine.TimedRequest) int {
	rank := 0
	if v.FreeBlocks() < v.Blocks(len(req.Prompt))+v.WaitingBlocks() {
		rank += 2
	}
	if v.Quantized() > 0 {
		rank++
	}
	return rank
}

// argmin is the index of the first of replicas that no other orders before it under compare.
func argmin(replicas []ReplicaView, compare func(a, b ReplicaView) int) int {
	best := 0
	for i := 1; i < len(replicas); i++ {
		if compare(replicas[i], replicas[best]) < 0 {
			best = i
		}
	}
	return best
}
