package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/profiling/nvml"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "profile", summary: "rank decoder layers by sensitivity (LIS) and write a swap-order profile", run: runProfile})
}

const profileHelp = `
Profile ranks the model's decoder layers by MorphServe's Layer Importance Score for one quantizer and writes a
JSON profile whose "order" the engine uses as its swap order (quantize order[0] first). The scores are cosines,
averaged over the calibration tokens: LTS (layer output vs input), LRS (layer output at full precision vs with
only that layer quantized) and MDS (final hidden state with the quantized set Q vs Q plus the layer), combined
as LIS = 0.25 LTS + 0.25 LRS + 0.5 MDS (--weights); the layer with the highest LIS is quantized next (1 + L(L+1)/2 forward
passes over the calibration tokens).

Calibration uses the paragraphs of --calib from the start until --calib-tokens tokens (or --calib-paragraphs). With --eval, each order
of --orders (lis, front, back, random; random once per seed 1..--seeds) is scored after 1, 2, 4, ... L layers
(every k with --all-ks) by perplexity and KL divergence from full precision on --eval-paragraphs paragraphs of
--eval, starting after the calibration paragraphs when it is the same file; the table shows PPL by order and k.
--method rtn rounds to nearest; awq (int4) and smoothquant (int8) calibrate on the same tokens. The layers run as
the engine runs them, with the activations quantized to int8 per token (W8A8, W4A8); --weight-only widens the
quantized weights to float32 instead, so the activations stay unquantized (W8A16, W4A16).`

func runProfile(e *env, args []string) error {
	fs := e.flags("--model FILE --format int4|int8 --calib FILE [flags]", profileHelp)
	var j sensitivity.Job
	fs.StringVar(&j.Model, "model", "", "checkpoint: a llama2.c or GGUF `file` (told apart by content), or a safetensors file or folder with config.json")
	fs.StringVar(&j.Tokenizer, "tokenizer", "", "llama2.c tokenizer.bin `file` (GGUF files carry their own vocabulary)")
	fs.IntVar(&j.Threads, "threads", 0, "kernel threads (default GOMAXPROCS)")
	format := fs.String("format", "int4", "quantized `format` to rank the layers in: int4 or int8")
	fs.StringVar(&j.Method, "method", "rtn", "how the quantized variant is made: rtn, awq (int4) or smoothquant (int8)")
	fs.BoolVar(&j.WeightOnly, "weight-only", false, "leave the activations unquantized (W8A16, W4A16) instead of int8 per token")
	fs.StringVar(&j.Calib, "calib", "", "calibration text `file` (paragraphs separated by blank lines)")
	fs.IntVar(&j.CalibTokens, "calib-tokens", 8192, "calibration `tokens` at most")
	fs.IntVar(&j.CalibParagraphs, "calib-paragraphs", 0, "calibration `paragraphs` at most (0: as many as --calib-tokens takes)")
	fs.StringVar(&j.Eval, "eval", "", "evaluation text `file` (none: no curves)")
	fs.IntVar(&j.EvalParagraphs, "eval-paragraphs", 500, "evaluation `paragraphs`")
	fs.IntVar(&j.EvalOffset, "eval-offset", -1, "evaluation paragraphs to skip (default: after the calibration paragraphs when --eval is --calib, else 0)")
	orders := fs.String("orders", "lis,front,back,random", "comma-separated `orders` to evaluate: lis, front, back, random")
	fs.IntVar(&j.Seeds, "seeds", 3, "random orders (seeds 1..`n`)")
	fs.BoolVar(&j.AllKs, "all-ks", false, "evaluate after every number of quantized layers, not only 1, 2, 4, ..., L")
	weights := fs.String("weights", "0.25,0.25,0.5", "LIS `weights` of LTS,LRS,MDS")
	out := fs.String("out", "", "write the profile to `file`")
	asJSON := fs.Bool("json", false, "print the profile as JSON instead of tables")
	plotFile := fs.String("plot", "", "draw the perplexity curves (PPL by quantized layers, one line per order) into `file` (.png, .svg or .pdf); needs --eval")
	var prof profileFlags
	prof.Register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	switch {
	case j.Model == "":
		return usagef("--model is required")
	case j.Calib == "":
		return usagef("--calib is required")
	}
	if *plotFile != "" {
		if j.Eval == "" {
			return usagef("--plot needs --eval: the curves are scored on it")
		}
		if err := checkPlotName(*plotFile); err != nil {
			return err
		}
	}
	f, err := quant.ParseFormat(*format)
	if err != nil || (f != quant.Int4 && f != quant.Int8) {
		return usagef("--format=%q, want int4 or int8", *format)
	}
	j.Format = f
	switch {
	case j.Method == "rtn":
	case j.Method == "awq" && f == quant.Int4, j.Method == "smoothquant" && f == quant.Int8:
	default:
		return usagef("--method=%q with --format=%s, want rtn, awq (int4) or smoothquant (int8)", j.Method, *format)
	}
	if _, err := fmt.Sscanf(*weights, "%g,%g,%g", &j.Weights.LTS, &j.Weights.LRS, &j.Weights.MDS); err != nil || j.Weights == (sensitivity.Weights{}) {
		return usagef("--weights=%q, want three numbers LTS,LRS,MDS, not all zero", *weights)
	}
	j.Orders = strings.Split(*orders, ",")
	for _, o := range j.Orders {
		if !slices.Contains(sensitivity.OrderNames, o) {
			return usagef("--orders: unknown order %q, want some of %s", o, strings.Join(sensitivity.OrderNames, ","))
		}
	}
	if j.CalibTokens < 2 || j.EvalParagraphs < 1 || j.Seeds < 0 {
		return usagef("--calib-tokens, --eval-paragraphs and --seeds must be positive")
	}
	stop, err := prof.start(e.stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stderr, nvml.Probe())
	start := time.Now()
	rankBar, evalBar := newProgress(e.stderr, "ranking"), newProgress(e.stderr, "evaluating")
	j.Progress = rankBar.set
	j.EvalProgress = func(done, total int) {
		rankBar.clear()
		evalBar.set(done, total)
	}
	p, err := sensitivity.RunJob(j)
	rankBar.clear()
	evalBar.clear()
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := stop(); err != nil {
		return err
	}
	if *out != "" {
		if err := p.Save(*out); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "profiled %d layers in %.1fs (%d ranking passes over %d tokens)\n",
		len(p.Layers), elapsed.Seconds(), p.Forwards, p.Calibration.Tokens)
	if *plotFile != "" {
		if err := sensitivity.Plot(*plotFile, p); err != nil {
			return fmt.Errorf("--%v", err)
		}
		fmt.Fprintf(e.stderr, "plot in %s\n", *plotFile)
	}
	if *asJSON {
		return writeJSON(e.stdout, p)
	}
	return sensitivity.WriteTables(e.stdout, p)
}
