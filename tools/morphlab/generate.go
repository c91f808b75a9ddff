package main

import (
	"bufio"
	"fmt"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/sample"
)

func init() {
	register(&command{name: "generate", summary: "generate text from a prompt with a model on the CPU", run: runGenerate})
}

const generateHelp = `
Generate feeds the prompt (with BOS) to the model and samples up to --max-tokens new tokens, printing each as it
comes, as llama2.c's run does. It stops early at EOS, at BOS, or when the text ends with a --stop string.
--temperature 0 is greedy decoding. Speed (prompt and decode tokens/s) goes to stderr.`

// stopList is a repeatable --stop flag.
type stopList []string

func (s *stopList) String() string     { return strings.Join(*s, ",") }
func (s *stopList) Set(v string) error { *s = append(*s, v); return nil }

func runGenerate(e *env, args []string) error {
	fs := e.flags("--model FILE [flags]", generateHelp)
	var mf modelFlags
	mf.register(fs)
	prompt := fs.String("prompt", "", "prompt `text`")
	maxTokens := fs.Int("max-tokens", 256, "generate at most `N` tokens")
	var p sample.Params
	fs.Float64Var(&p.Temperature, "temperature", 1.0, "sampling temperature; 0 is greedy")
	fs.IntVar(&p.TopK, "top-k", 0, "keep the `K` most likely tokens (0: all)")
	fs.Float64Var(&p.TopP, "top-p", 0.9, "nucleus sampling threshold (0 or 1: off)")
	fs.Uint64Var(&p.Seed, "seed", 42, "random seed")
	var stops stopList
	fs.Var(&stops, "stop", "stop when the output ends with `text` (repeatable)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return usagef("%v", err)
	}
	if *maxTokens < 1 {
		return usagef("--max-tokens=%d, want at least 1", *maxTokens)
	}
	m, vocab, err := mf.load()
	if err != nil {
		return err
	}
	ids := vocab.Encode(*prompt, true, false)
	toks := make([]int32, len(ids))
	for i, id := range ids {
		toks[i] = int32(id)
	}
	seq, err := model.NewSequence(m, min(m.Config.SeqLen, len(toks)+*maxTokens))
	if err != nil {
		return err
	}
	if len(toks) >= seq.Capacity() {
		return usagef("the prompt has %d tokens; the model's context is %d", len(toks), m.Config.SeqLen)
	}
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	sampler := sample.New(p)
	start := time.Now()
	logits, err := seq.Feed(toks, false)
	if err != nil {
		return err
	}
	promptTime := time.Since(start)
	var text strings.Builder
	prev, generated := toks[len(toks)-1], 0
	decodeStart := time.Now()
	for generated < *maxTokens && seq.Len() < seq.Capacity() {
		next := int32(sampler.Sample(logits, seq.Len()))
		if int(next) == vocab.EOS || int(next) == vocab.BOS {
			break
		}
		piece := vocab.Decode(int(prev), int(next))
		out.Write(piece)
		out.Flush()
		text.Write(piece)
		generated++
		if endsWithAny(text.String(), stops) {
			break
		}
		if logits, err = seq.Feed([]int32{next}, false); err != nil {
			return err
		}
		prev = next
	}
	fmt.Fprintln(out)
	decodeTime := time.Since(decodeStart)
	fmt.Fprintf(e.stderr, "prompt: %d tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s\n",
		len(toks), float64(len(toks))/promptTime.Seconds(), generated, float64(generated)/decodeTime.Seconds())
	return nil
}

func endsWithAny(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if x != "" && strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}
