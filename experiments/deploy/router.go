package deploy

import (
	"cmp"
	"slices"

	"github.com/morphlab/morphlab/engine"
)

// Routers are the routers a fleet knows.
var Routers = []string{"round-robin", "least-outstanding", "least-kv", "morph-aware"}

// pick is the router: the serving replica the request goes to.
func (r *fleetRun) pick(req engine.TimedRequest) *replica {
	cands := r.cands[:0]
	for _, rep := range r.replicas {
		if rep.state == serving {
			cands = append(cands, rep)
		}
	}
	r.cands = cands
	switch r.f.Router {
	case "least-outstanding":
		return slices.MinFunc(cands, func(a, b *replica) int { return len(a.live) - len(b.live) })
	case "least-kv":
		return slices.MinFunc(cands, func(a, b *replica) int {
			if c := cmp.Compare(a.kvUsage(), b.kvUsage()); c != 0 {
				return c
			}
			return len(a.live) - len(b.live)
		})
	case "morph-aware":
		return slices.MinFunc(cands, func(a, b *replica) int {
			ra, rb := morphRank(a, req), morphRank(b, req)
			if ra != rb {
				return ra - rb
			}
			return len(a.live) - len(b.live)
		})
	}
	rep := cands[r.rr%len(cands)]
	r.rr++
	return rep
}

// morphRank orders replicas for the morph-aware router: 0 for one whose free blocks hold the request's prompt
// beside the prompts already waiting there and whose layers are all at full precision, 1 for one with the room but
// quantized layers, 2 for one without the room at full precision, 3 for the rest. A replica that has not stepped
// yet has every attached block free.
func morphRank(rep *replica, req engine.TimedRequest) int {
	s := rep.in.Controller.Last()
	free := s.Free
	if s.Total == 0 {
		free = rep.in.Engine.Memory().Blocks
	}
	rank := 0
	if free < rep.blocks(len(req.Prompt))+s.WaitingBlocks+rep.routed {
		rank += 2
	}
	if s.Quantized > 0 {
		rank++
	}
	return rank
}
