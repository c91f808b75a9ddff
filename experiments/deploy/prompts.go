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
	tail  *rand.PCG  // the tokens of no hash id, drawn by rng
	rng   *rand.Rand // draws from tail
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
	ids, tail := rand.NewPCG(0, 0), rand.NewPCG(seed, 0x5eed)
	return &promptSource{tail: tail, rng: rand.New(tail), ids: ids, idRng: rand.New(ids), vocab: vocab, seed: seed, block: block}
}

// request is the next request: r's lengths, arriving at arrival, its prompt drawn from [3, vocab) as Requests
// describes.
func (s *promptSource) request(r trace.Request, arrival time.Duration) engine.TimedRequest {
	p := make([]int32, r.PromptTokens)
	s.fill(p, r.HashIDs, s.rng)
	return engine.TimedRequest{Arrival: arrival, Request: engine.Request{Prompt: p, MaxTokens: r.OutputTokens}}
}

// mark is where the next request's tokens of no hash id start in the source's stream, for again.
func (s *promptSource) mark() []byte {
	b, err := s.tail.MarshalBinary()
	if err != nil {
		panic(err) // a PCG always marshals
	}
	return b
}

// again draws r's prompt again: the tokens request gave it when the stream stood at mark.
func (s *promptSource) again(r trace.Request, mark []byte) []int32 {
	var tail rand.PCG
	if err := tail.UnmarshalBinary(mark); err != nil {
		panic(err) // mark came from a PCG
	}
	p := make([]int32, r.PromptTokens)
	s.fill(p, r.HashIDs, rand.New(&tail))
	return p
}

// fill draws p: a block of tokens for each hash id (the same for the same id), then tokens of no hash id from rng.
func (s *promptSource) fill(p []int32, hashIDs []int64, rng *rand.Rand) {
	n := 0
	for _, id := range hashIDs {
		if n == len(p) {
			break
		}
		s.ids.Seed(s.seed, hashStream(id))
		for end := min(n+s.block, len(p)); n < end; n++ {
			p[n] = int32(3 + s.idRng.IntN(s.vocab-3))
		}
	}
	for ; n < len(p); n++ {
		p[n] = int32(3 + rng.IntN(s.vocab-3))
	}
}
