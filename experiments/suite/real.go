package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/fidelity"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

// RealEngine replays 30 s of Poisson arrivals at 1.5 req/s on the real CPU engine (stories110M's shape, F16 layers
// and KV, 48 KV blocks, one kernel thread, on its thread's CPU-time clock) under fp16 and morph:default, calibrates
// the simulator on this CPU's grid beside them (3 rounds), and simulates the same runs: the short form of the
// fidelity comparison (experiments/fidelity), written under dir.
func RealEngine(ctx context.Context, dir string, progress func(string)) ([]*fidelity.Pair, error) {
	o := fidelity.DefaultOptions()
	o.Rates, o.Duration, o.Calibrate, o.Reps, o.Ballast, o.Progress = []float64{1.5}, 30*time.Second, "grid", 3, false, progress
	r, err := fidelity.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := r.Write(dir, 0.1); err != nil {
		return nil, err
	}
	return r.Pairs, nil
}

// Sensitivity profiles stories260K's layers for INT4 (RTN) on the TinyStories validation text (WikiText-2's test
// set when that is missing) with the real weights in the data directory, and returns the profiler's tables for
// summary.md: Tables 2, 3 and 8 on our real model. It writes the profile and its plot under dir. Without the data
// it returns a note saying what is missing.
func Sensitivity(data, dir string) (string, error) {
	find := func(rel string) string {
		if data == "" {
			return ""
		}
		p := filepath.Join(data, filepath.FromSlash(rel))
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	model, tok := find("models/stories260K.bin"), find("models/tok512.bin")
	text := find("eval/tinystories_val.txt")
	if text == "" {
		text = find("eval/wiki.test.raw")
	}
	if model == "" || tok == "" || text == "" {
		return "## Layer sensitivity (stories260K)\n\nSkipped: stories260K, tok512 and an evaluation text are not in the data directory (`make data` fetches them).\n", nil
	}
	p, err := sensitivity.RunJob(sensitivity.Job{Model: model, Tokenizer: tok, Format: quant.Int4, Method: "rtn",
		Calib: text, CalibParagraphs: 100, CalibTokens: 10000, Eval: text, EvalParagraphs: 150, EvalOffset: -1,
		Orders: []string{"lis", "front", "back", "random"}, Seeds: 3, AllKs: true})
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := p.Save(filepath.Join(dir, "profile-int4-rtn.json")); err != nil {
		return "", err
	}
	if err := sensitivity.Plot(filepath.Join(dir, "curves.png"), p); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Layer sensitivity of stories260K (Tables 2, 3 and 8 on our real model)\n\n"+
		"Perplexity on %s after the first k layers of each order are quantized to INT4 (RTN); the additivity rows are "+
		"Table 2's: a layer's added perplexity alone and after the layers before it in the LIS order. Profile: "+
		"`sensitivity/profile-int4-rtn.json`, plot `sensitivity/curves.png`.\n\n```\n", filepath.Base(text))
	if err := sensitivity.WriteTables(&b, p); err != nil {
		return "", err
	}
	b.WriteString("```\n")
	return b.String(), nil
}
