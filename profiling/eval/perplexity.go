// Package eval measures a model's quality on text: perplexity (per paragraph, or over a sliding window) and the
// KL divergence of a quantized configuration's next-token distributions from full precision's.
package eval

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
)

// Result is a perplexity measurement: Tokens scored, their mean negative log-likelihood in nats, and
// PPL = exp(NLL).
type Result struct {
	Tokens  int
	NLL     float64
	PPL     float64
	Seconds float64
}

// TokensPerSecond is the scoring rate (tokens fed through the model per second of wall time).
func (r Result) TokensPerSecond() float64 { return float64(r.Tokens) / r.Seconds }

// Paragraphs splits text at blank lines ("\n\n") and returns the non-empty paragraphs without their leading
// white space and trailing newlines. Trailing spaces stay: they are part of the text and tokenize as such. This
// is the split behind SOURCES.md's reference perplexity of stories260K (381,594 scored tokens).
func Paragraphs(text string) []string {
	var out []string
	for _, p := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		if p = strings.TrimRight(strings.TrimLeft(p, " \t\n"), "\n"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// logSoftmaxAt returns log softmax(logits)[target], computed in float64.
func logSoftmaxAt(logits []float32, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return float64(logits[target]) - mx - math.Log(sum)
}

// PerParagraph scores each paragraph on its own: encoded with BOS (and the tokenizer's dummy-prefix space, no
// EOS), fed from position 0 with the true tokens (teacher forcing), each token after the first scored by the
// logits before it. Paragraphs longer than the model's context are cut to it. Paragraphs run in parallel on
// separate sequences; the sums are added in paragraph order, so the result does not depend on scheduling.
func PerParagraph(m *model.Model, vocab *tokenizer.Vocab, paragraphs []string) (Result, error) {
	start := time.Now()
	type part struct {
		nll    float64
		tokens int
	}
	parts := make([]part, len(paragraphs))
	err := parallel(m, len(paragraphs), func(_ int, seq *model.Sequence, j int) error {
		var err error
		parts[j].nll, parts[j].tokens, err = scoreSequence(seq, encode(vocab, paragraphs[j], m.Config.SeqLen))
		return err
	})
	if err != nil {
		return Result{}, err
	}
	var r Result
	var sum float64
	for _, p := range parts {
		sum += p.nll
		r.Tokens += p.tokens
	}
	return finish(r, sum, start)
}

// encode returns text's tokens with BOS, cut to at most limit.
func encode(vocab *tokenizer.Vocab, text string, limit int) []int32 {
	ids := vocab.Encode(text, true, false)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// scoreSequence feeds toks from position 0 and returns the summed NLL of toks[1:] and how many that is.
func scoreSequence(seq *model.Sequence, toks []int32) (float64, int, error) {
	if len(toks) < 2 {
		return 0, 0, nil
	}
	seq.Reset()
	logits, err := seq.Feed(toks[:len(toks)-1], true)
	if err != nil {
		return 0, 0, err
	}
	vocab := len(logits) / (len(toks) - 1)
	var nll float64
	for t := 1; t < len(toks); t++ {
		nll -= logSoftmaxAt(logits[(t-1)*vocab:t*vocab], int(toks[t]))
	}
	return nll, len(toks) - 1, nil
}

func finish(r Result, sum float64, start time.Time) (Result, error) {
	if r.Tokens == 0 {
		return Result{}, fmt.Errorf("no tokens to score")
	}
	r.NLL = sum / float64(r.Tokens)
	r.PPL = math.Exp(r.NLL)
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// SlidingWindow scores the whole text as one token stream (BOS first), the way Hugging Face's strided
// perplexity does: windows of window tokens start every stride tokens; each window is fed from position 0 and
// scores only the tokens that no earlier window scored, so every token after the first is scored once, with up
// to window-stride tokens of context before the first scored one. A window starts at most one token before the
// first token it scores, so that token has context in it: with stride == window (no overlap) each window starts
// one token earlier than a stride after the last. window must fit the model's context.
func SlidingWindow(m *model.Model, vocab *tokenizer.Vocab, text string, window, stride int) (Result, error) {
	if window < 2 || window > m.Config.SeqLen || stride < 1 || stride > window {
		return Result{}, fmt.Errorf("window=%d stride=%d, want 2 <= window <= %d (context) and 1 <= stride <= window", window, stride, m.Config.SeqLen)
	}
	start := time.Now()
	toks := encode(vocab, text, math.MaxInt)
	seq, err := model.NewSequence(m, window)
	if err != nil {
		return Result{}, err
	}
	var r Result
	var sum float64
	scored := 1 // toks[0] (BOS) is never scored
	for begin := 0; scored < len(toks); begin += stride {
		begin = min(begin, scored-1)
		end := min(begin+window, len(toks))
		seq.Reset()
		logits, err := seq.Feed(toks[begin:end-1], true)
		if err != nil {
			return Result{}, err
		}
		v := m.Config.VocabSize
		for t := scored; t < end; t++ {
			sum -= logSoftmaxAt(logits[(t-1-begin)*v:(t-begin)*v], int(toks[t]))
			r.Tokens++
		}
		scored = end
	}
	return finish(r, sum, start)
}
