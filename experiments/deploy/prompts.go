package deploy

import (
	"math/rand/v2"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/experiments/trace"
)

// promptSource draws requests' prompt tokens as Requests does, one request at a time, so that a fleet holds only
// the prompts of the requests in flight.
type promptSource struct {
	rng   *rand.Rand // the tokens of no hash id
	ids   *rand.PCG  // reseeded for each hash id's block
	idRng *rand.Rand // draws from ids
	vocab int
	seed  uint64
	block int // the prompt tokens a hash id stands for
}

func newPromptSource(vocab int, seed uint64, block int) *promptSource {
	if vocab <= 3 {
		return nil
	}
	ids := rand.NewPCG(0, 0)
	return &promptSource{rng: rand.New(rand.NewPCG(seed, 0x5eed)), ids: ids, idRng: rand.New(ids), vocab: vocab, seed: seed, block: block}
}

// request is the next request: r's lengths, arriving at arrival, its prompt drawn from [3, vocab) as Requests
// describes.
func (s *promptSource) request(r trace.Request, arrival time.Duration) engine.TimedRequest {
	p := make([]int32, r.PromptTokens)
	n := 0
	for _, id := range r.HashIDs {
		if n == len(p) {
			break
		}
		s.ids.Seed(s.seed, hashStream(id))
		for end := min(n+s.block, len(p)); n < end; n++ {
			p[n] = int32(3 + s.idRng.IntN(s.vocab-3))
		}
	}
	for ; n < len(p); n++ {
		p[n] = int32(3 + s.rng.IntN(s.vocab-3))
	}
	return engine.TimedRequest{Arrival: arrival, Request: engine.Request{Prompt: p, MaxTokens: r.OutputTokens}}
}
