package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/morphlab/morphlab/internal/openai"
)

// Arrivals returns n arrival times at rate requests per second, drawn as vLLM's benchmark_serving draws them:
// the first request at 0, then gaps from a gamma distribution with shape burstiness and scale
// 1/(rate*burstiness), whose mean is 1/rate (burstiness 1 is a Poisson process; below 1 is burstier, above
// smoother). The gaps are then scaled so that the n-1 gaps span exactly (n-1)/rate. Current vLLM rescales its
// cumulative delays in the same spirit (so that its n requests span n/rate), to close the 1-2% gap that one
// seed's draws leave from the asked rate; the schedule then has exactly the asked rate, and a shortfall in the
// achieved rate is the client's or the server's. The same seed gives the same arrivals.
func Arrivals(rate, burstiness float64, n int, seed uint64) ([]time.Duration, error) {
	switch {
	case !(rate > 0) || math.IsInf(rate, 1):
		return nil, fmt.Errorf("rate %v, want a finite number of requests per second above 0", rate)
	case !(burstiness > 0) || math.IsInf(burstiness, 1):
		return nil, fmt.Errorf("burstiness %v, want a finite number above 0 (1 is Poisson)", burstiness)
	case n < 1:
		return nil, fmt.Errorf("%d requests, want at least 1", n)
	}
	gap := distuv.Gamma{Alpha: burstiness, Beta: rate * burstiness, Src: rand.NewPCG(seed, 0x6c6f6164)}
	at := make([]float64, n)
	for i := 1; i < n; i++ {
		at[i] = at[i-1] + gap.Rand()
	}
	scale := 1.0
	if last := at[n-1]; last > 0 {
		scale = float64(n-1) / rate / last
	}
	out := make([]time.Duration, n)
	for i, t := range at {
		out[i] = time.Duration(t * scale * float64(time.Second))
	}
	return out, nil
}

// PromptWorkload pairs arrivals with prompts (taken in turn, from the first again when there are fewer prompts than
// arrivals) and gives every request maxTokens. A token-id prompt's length is its requests' PromptTokens.
func PromptWorkload(arrivals []time.Duration, prompts []openai.Prompt, maxTokens int) []Request {
	reqs := make([]Request, len(arrivals))
	for i, at := range arrivals {
		p := prompts[i%len(prompts)]
		reqs[i] = Request{Arrival: at, Prompt: p, PromptTokens: len(p.Tokens), MaxTokens: maxTokens}
	}
	return reqs
}

// SyntheticPrompts returns n prompts of exactly tokens token ids each, drawn uniformly from [3, vocab) with a
// seed (ids 0-2 are unk, bos and eos in Llama vocabularies). Token-id prompts give exact input lengths whatever the
// server's tokenizer, as vLLM's random dataset does; vocab should not exceed the served model's.
func SyntheticPrompts(n, tokens, vocab int, seed uint64) ([]openai.Prompt, error) {
	if n < 1 || tokens < 1 {
		return nil, fmt.Errorf("%d prompts of %d tokens, want at least 1 of at least 1", n, tokens)
	}
	if vocab < 4 {
		return nil, fmt.Errorf("vocabulary of %d, want at least 4 (ids 0-2 are special)", vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0x70726f6d))
	ps := make([]openai.Prompt, n)
	for i := range ps {
		ps[i] = openai.Prompt{Tokens: randomTokens(rng, tokens, vocab)}
	}
	return ps, nil
}

// randomTokens returns n token ids drawn uniformly from [3, vocab).
func randomTokens(rng *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for j := range ids {
		ids[j] = 3 + rng.IntN(vocab-3)
	}
	return ids
}

// RandomLengths returns n prompt and n output lengths as vLLM's random dataset draws them with
// --random-range-ratio: each uniform over the integers from int(length x (1 - ratio)) to int(length x (1 + ratio)),
// seeded. Ratio 0 gives every request exactly the given lengths; ratio must be below 1, so that no length is 0.
func RandomLengths(n, promptTokens, outputTokens int, ratio float64, seed uint64) (prompt, output []int, err error) {
	switch {
	case n < 1:
		return nil, nil, fmt.Errorf("%d requests, want at least 1", n)
	case promptTokens < 1 || outputTokens < 1:
		return nil, nil, fmt.Errorf("%d prompt and %d output tokens, want at least 1 of each", promptTokens, outputTokens)
	case !(ratio >= 0 && ratio < 1):
		return nil, nil, fmt.Errorf("range ratio %v, want 0 or more and below 1", ratio)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6c656e73))
	draw := func(length int) int {
		lo, hi := int(float64(length)*(1-ratio)), int(float64(length)*(1+ratio))
		return max(1, lo+rng.IntN(hi-lo+1))
	}
	prompt, output = make([]int, n), make([]int, n)
	for i := range n {
		prompt[i], output[i] = draw(promptTokens), draw(outputTokens)
	}
	return prompt, output, nil
}

// LengthWorkload returns requests at the given arrivals whose prompts are random token ids of the given lengths
// (drawn from [3, vocab) with a seed) and whose max tokens are the given output lengths: what a trace of request
// lengths (Azure, Mooncake) replays as. The three slices have one entry per request.
func LengthWorkload(arrivals []time.Duration, promptTokens, outputTokens []int, vocab int, seed uint64) ([]Request, error) {
	if len(promptTokens) != len(arrivals) || len(outputTokens) != len(arrivals) {
		return nil, fmt.Errorf("%d arrivals, %d prompt lengths and %d output lengths, want one of each per request", len(arrivals), len(promptTokens), len(outputTokens))
	}
	if vocab < 4 {
		return nil, fmt.Errorf("vocabulary of %d, want at least 4 (ids 0-2 are special)", vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0x70726f6d))
	reqs := make([]Request, len(arrivals))
	for i, at := range arrivals {
		if promptTokens[i] < 1 || outputTokens[i] < 1 {
			return nil, fmt.Errorf("request %d: %d prompt and %d output tokens, want at least 1 of each", i, promptTokens[i], outputTokens[i])
		}
		ids := randomTokens(rng, promptTokens[i], vocab)
		reqs[i] = Request{Arrival: at, Prompt: openai.Prompt{Tokens: ids}, PromptTokens: len(ids), MaxTokens: outputTokens[i]}
	}
	return reqs, nil
}

// LoadPrompts reads text prompts from a file: JSON Lines with the prompt in turns[0] (MT-Bench and Vicuna bench
// question files) or in a "prompt" or "text" field, or else one prompt per non-empty line. A JSONL record
// without a prompt is an error naming its line.
func LoadPrompts(path string) ([]openai.Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ps []openai.Prompt
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	line, jsonl := 0, false
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(ps) == 0 && !jsonl && b[0] == '{' {
			jsonl = true
		}
		if !jsonl {
			ps = append(ps, openai.Prompt{Text: string(b)})
			continue
		}
		var rec struct {
			Turns  []string `json:"turns"`
			Prompt string   `json:"prompt"`
			Text   string   `json:"text"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON record: %v", path, line, err)
		}
		text := rec.Prompt
		if len(rec.Turns) > 0 {
			text = rec.Turns[0]
		}
		if text == "" {
			text = rec.Text
		}
		if strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("%s:%d: no prompt: want a non-empty turns[0], prompt or text field", path, line)
		}
		ps = append(ps, openai.Prompt{Text: text})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(ps) == 0 {
		return nil, errors.New(path + ": no prompts")
	}
	return ps, nil
}
