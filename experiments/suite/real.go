package suite

import (
	"context"
	"fmt"
	"io"
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

// Sensitivity profiles stories260K's layers with the real weights in the data directory, on the TinyStories
// validation text (WikiText-2's test set when that is missing): INT4 (RTN) with every order, and INT8 (RTN) along
// its LIS order twice, as the engine runs it (W8A8: activations int8 per token) and weight-only (W8A16: the same
// int8 weights, float activations). It returns the profiler's tables for summary.md — Tables 2, 3 and 8 on our
// real model, then the INT8 curves beside INT4's — and writes the profiles and their plots under dir. Without the
// data it returns a note saying what is missing.
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	job := sensitivity.Job{Model: model, Tokenizer: tok, Format: quant.Int4, Method: "rtn",
		Calib: text, CalibParagraphs: 100, CalibTokens: 10000, Eval: text, EvalParagraphs: 150, EvalOffset: -1,
		Orders: []string{"lis", "front", "back", "random"}, Seeds: 3, AllKs: true}
	profile := func(j sensitivity.Job, name string) (*sensitivity.Profile, error) {
		p, err := sensitivity.RunJob(j)
		if err != nil {
			return nil, err
		}
		if err := p.Save(filepath.Join(dir, "profile-"+name+".json")); err != nil {
			return nil, err
		}
		return p, sensitivity.Plot(filepath.Join(dir, "curves-"+name+".png"), p)
	}
	int4, err := profile(job, "int4-rtn")
	if err != nil {
		return "", err
	}
	job.Format, job.Orders, job.Seeds = quant.Int8, []string{"lis"}, 0
	w8a8, err := profile(job, "int8-rtn")
	if err != nil {
		return "", err
	}
	job.WeightOnly = true
	w8a16, err := profile(job, "int8-rtn-weight-only")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Layer sensitivity of stories260K (Tables 2, 3 and 8 on our real model)\n\n"+
		"Perplexity on %s after the first k layers of each order are quantized to INT4 (RTN); the additivity rows are "+
		"Table 2's: a layer's added perplexity alone and after the layers before it in the LIS order. Profile: "+
		"`sensitivity/profile-int4-rtn.json`, plot `sensitivity/curves-int4-rtn.png`.\n\n```\n", filepath.Base(text))
	if err := sensitivity.WriteTables(&b, int4); err != nil {
		return "", err
	}
	b.WriteString("```\n")
	fmt.Fprintf(&b, "\n### INT8 beside INT4 on stories260K, measured\n\n"+
		"Perplexity (KL from full precision, nats a token) after the first k layers of each format's own LIS order are "+
		"quantized, RTN, on the same %d tokens: INT4 as the engine runs it (W4A8), INT8 as the engine runs it (W8A8, "+
		"activations int8 per token) and weight-only (W8A16, the same int8 weights with float activations). Profiles "+
		"`sensitivity/profile-int8-rtn.json`, `sensitivity/profile-int8-rtn-weight-only.json`.\n\n", int4.Baseline.Tokens)
	if err := writeFormats(&b, []string{"INT4 (W4A8)", "INT8 (W8A8)", "INT8 (W8A16)"}, []*sensitivity.Profile{int4, w8a8, w8a16}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeFormats writes each profile's LIS curve side by side, a row for each k, from full precision.
func writeFormats(b io.Writer, names []string, ps []*sensitivity.Profile) error {
	t := newTable(b, append([]any{"k"}, anys(names)...)...)
	row := []any{"0"}
	for _, p := range ps {
		row = append(row, fmt.Sprintf("%.4f", p.Baseline.PPL))
	}
	if err := t.Append(row...); err != nil {
		return err
	}
	lis := func(p *sensitivity.Profile) sensitivity.OrderEval {
		for _, o := range p.Orders {
			if o.Name == "lis" {
				return o
			}
		}
		return sensitivity.OrderEval{}
	}
	for i, pt := range lis(ps[0]).Curve {
		row := []any{fmt.Sprint(pt.K)}
		for _, p := range ps {
			c := lis(p).Curve[i]
			row = append(row, fmt.Sprintf("%.4f (%.4f)", c.PPL, c.KL))
		}
		if err := t.Append(row...); err != nil {
			return err
		}
	}
	row = []any{"order"}
	for _, p := range ps {
		row = append(row, fmt.Sprint(p.Order))
	}
	if err := t.Append(row...); err != nil {
		return err
	}
	return t.Render()
}
