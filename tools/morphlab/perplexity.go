package main

import (
	"fmt"
	"os"

	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
	"github.com/morphlab/morphlab/profiling/eval"
)

func init() {
	register(&command{name: "perplexity", summary: "measure a model's perplexity on a text file", run: runPerplexity})
}

const perplexityHelp = `
Perplexity scores a text file with the model. --mode paragraph scores each blank-line-separated paragraph on its
own (BOS, teacher forcing from position 0, cut to the context), the way SOURCES.md's reference figure for
stories260K was made. --mode window scores the whole text as one stream in windows of --window tokens that
start every --stride tokens, each scoring only tokens no earlier window scored (Hugging Face's strided
perplexity). It reports the perplexity, the mean negative log-likelihood (nats), the tokens scored and tokens/s.`

func runPerplexity(e *env, args []string) error {
	fs := e.flags("--model FILE --text FILE [flags]", perplexityHelp)
	var mf modelFlags
	mf.register(fs)
	textPath := fs.String("text", "", "text `file` to score")
	mode := fs.String("mode", "paragraph", "paragraph or window")
	window := fs.Int("window", 0, "window `tokens` (default: the model's context)")
	stride := fs.Int("stride", 0, "window stride in `tokens` (default: half the window)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	var prof profileFlags
	prof.Register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *textPath == "" {
		return usagef("--text is required")
	}
	if *mode != "paragraph" && *mode != "window" {
		return usagef("--mode=%q, want paragraph or window", *mode)
	}
	if *window < 0 || *stride < 0 || (*window > 0 && *stride > *window) {
		return usagef("--window=%d --stride=%d, want a window of at least 2 tokens and a stride in 1..window", *window, *stride)
	}
	text, err := os.ReadFile(*textPath)
	if err != nil {
		return err
	}
	m, vocab, err := mf.load()
	if err != nil {
		return err
	}
	stop, err := prof.start(e.stderr)
	if err != nil {
		return err
	}
	var r eval.Result
	if *mode == "paragraph" {
		r, err = eval.PerParagraph(m, vocab, eval.Paragraphs(string(text)))
	} else {
		w := *window
		if w == 0 {
			w = m.Config.SeqLen
		}
		s := *stride
		if s == 0 {
			s = max(1, w/2)
		}
		if w < 2 || w > m.Config.SeqLen || s > w {
			return usagef("--window=%d --stride=%d, want 2 <= window <= %d (the model's context) and 1 <= stride <= window", w, s, m.Config.SeqLen)
		}
		r, err = eval.SlidingWindow(m, vocab, string(text), w, s)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", *textPath, err)
	}
	if err := stop(); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"mode": *mode, "tokens": r.Tokens, "nll": r.NLL, "ppl": r.PPL,
			"seconds": r.Seconds, "tokens_per_second": r.TokensPerSecond()})
	}
	return mdtable.Write(e.stdout, []string{"mode", "tokens", "NLL", "PPL", "tok/s"}, [][]string{
		{*mode, fmt.Sprint(r.Tokens), fmt.Sprintf("%.6f", r.NLL), fmt.Sprintf("%.4f", r.PPL), numfmt.Figure(r.TokensPerSecond())}})
}
