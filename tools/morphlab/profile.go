package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/profiling/nvml"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
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
--method rtn rounds to nearest; awq (int4) and smoothquant (int8) calibrate on the same tokens.`

func runProfile(e *env, args []string) error {
	fs := e.flags("--model FILE --format int4|int8 --calib FILE [flags]", profileHelp)
	var mf modelFlags
	registerModelOnly(fs, &mf)
	format := fs.String("format", "int4", "quantized `format` to rank the layers in: int4 or int8")
	method := fs.String("method", "rtn", "how the quantized variant is made: rtn, awq (int4) or smoothquant (int8)")
	calibPath := fs.String("calib", "", "calibration text `file` (paragraphs separated by blank lines)")
	calibTokens := fs.Int("calib-tokens", 8192, "calibration `tokens` at most")
	calibParas := fs.Int("calib-paragraphs", 0, "calibration `paragraphs` at most (0: as many as --calib-tokens takes)")
	evalPath := fs.String("eval", "", "evaluation text `file` (none: no curves)")
	evalParas := fs.Int("eval-paragraphs", 500, "evaluation `paragraphs`")
	evalOffset := fs.Int("eval-offset", -1, "evaluation paragraphs to skip (default: after the calibration paragraphs when --eval is --calib, else 0)")
	orders := fs.String("orders", "lis,front,back,random", "comma-separated `orders` to evaluate: lis, front, back, random")
	seeds := fs.Int("seeds", 3, "random orders (seeds 1..`n`)")
	allKs := fs.Bool("all-ks", false, "evaluate after every number of quantized layers, not only 1, 2, 4, ..., L")
	weights := fs.String("weights", "0.25,0.25,0.5", "LIS `weights` of LTS,LRS,MDS")
	out := fs.String("out", "", "write the profile to `file`")
	asJSON := fs.Bool("json", false, "print the profile as JSON instead of tables")
	plotFile := fs.String("plot", "", "draw the perplexity curves (PPL by quantized layers, one line per order) into `file` (.png, .svg or .pdf); needs --eval")
	var prof profileFlags
	prof.register(fs)
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *calibPath == "" {
		return usagef("--calib is required")
	}
	if *plotFile != "" {
		if *evalPath == "" {
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
	switch {
	case *method == "rtn":
	case *method == "awq" && f == quant.Int4, *method == "smoothquant" && f == quant.Int8:
	default:
		return usagef("--method=%q with --format=%s, want rtn, awq (int4) or smoothquant (int8)", *method, *format)
	}
	var w sensitivity.Weights
	if _, err := fmt.Sscanf(*weights, "%g,%g,%g", &w.LTS, &w.LRS, &w.MDS); err != nil || w == (sensitivity.Weights{}) {
		return usagef("--weights=%q, want three numbers LTS,LRS,MDS, not all zero", *weights)
	}
	orderList := strings.Split(*orders, ",")
	for _, o := range orderList {
		if !slices.Contains(sensitivity.OrderNames, o) {
			return usagef("--orders: unknown order %q, want some of %s", o, strings.Join(sensitivity.OrderNames, ","))
		}
	}
	if *calibTokens < 2 || *evalParas < 1 || *seeds < 0 {
		return usagef("--calib-tokens, --eval-paragraphs and --seeds must be positive")
	}
	calibText, err := os.ReadFile(*calibPath)
	if err != nil {
		return err
	}
	var evalText []byte
	if *evalPath != "" {
		if evalText, err = os.ReadFile(*evalPath); err != nil {
			return err
		}
	}
	sum, err := fileSHA256(mf.path)
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
	fmt.Fprintln(e.stderr, nvml.Probe())
	start := time.Now()

	paras := eval.Paragraphs(string(calibText))
	if *calibParas > 0 {
		paras = paras[:min(*calibParas, len(paras))]
	}
	calib, used := sensitivity.CalibrationTokens(vocab, paras, *calibTokens, m.Config.SeqLen)
	// The group that Dim-wide rows get at the default (W2's wider rows may get a larger one, see Int4Group).
	group, err := model.Int4Group(m.Config.Dim, quant.DefaultGroup)
	if err != nil {
		return err
	}
	if err := prepare(m, f, *method, calib, group); err != nil {
		return err
	}
	spec := sensitivity.Spec{
		Model:       sensitivity.ModelInfo{Name: filepath.Base(mf.path), SHA256: sum},
		Quantizer:   sensitivity.Quantizer{Format: f.String(), Method: *method},
		Calibration: sensitivity.TextInfo{Name: filepath.Base(*calibPath), Paragraphs: used},
		Calib:       calib,
		Orders:      orderList,
		Seeds:       *seeds,
		AllKs:       *allKs,
		Options:     sensitivity.Options{Weights: w},
	}
	if f == quant.Int4 {
		spec.Quantizer.Group = group
	}
	if evalText != nil {
		ep := eval.Paragraphs(string(evalText))
		off := *evalOffset
		if off < 0 {
			off = 0
			if same, _ := sameFile(*calibPath, *evalPath); same {
				off = used
			}
		}
		if off+*evalParas > len(ep) {
			return fmt.Errorf("%s: %d paragraphs, want %d after skipping %d", *evalPath, len(ep), *evalParas, off)
		}
		spec.Eval = ep[off : off+*evalParas]
		spec.Evaluation = sensitivity.TextInfo{Name: filepath.Base(*evalPath), Offset: off}
	}
	rankBar, evalBar := newProgress(e.stderr, "ranking"), newProgress(e.stderr, "evaluating")
	spec.Options.Progress = rankBar.set
	spec.EvalProgress = func(done, total int) {
		rankBar.clear()
		evalBar.set(done, total)
	}
	p, err := sensitivity.Build(m, vocab, spec)
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
		len(m.Layers), elapsed.Seconds(), p.Forwards, p.Calibration.Tokens)
	if *plotFile != "" {
		if err := plotCurves(*plotFile, p); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "plot in %s\n", *plotFile)
	}
	if *asJSON {
		return writeJSON(e.stdout, p)
	}
	return profileTables(e.stdout, p)
}

// registerModelOnly registers --model, --tokenizer and --threads (not modelFlags' --format: here the format is
// the quantizer's, and the model loads in its stored precision, which is full precision for the profile).
func registerModelOnly(fs *flag.FlagSet, mf *modelFlags) {
	var all flag.FlagSet
	mf.register(&all)
	for _, name := range []string{"model", "tokenizer", "threads"} {
		fl := all.Lookup(name)
		fs.Var(fl.Value, fl.Name, fl.Usage)
	}
}

// prepare builds every layer's quantized variant in format f by method.
func prepare(m *model.Model, f quant.Format, method string, calib [][]int32, group int) error {
	switch method {
	case "awq":
		return m.AddAWQVariant(calib, group)
	case "smoothquant":
		return m.AddSmoothQuantVariant(calib, 0.5)
	}
	for l := range m.Layers {
		if _, err := m.AddVariant(l, f); err != nil {
			return err
		}
	}
	return nil
}

// profileTables prints the layer scores, then perplexity (and KL) by order and number of quantized layers, with
// the random orders' mean as one row.
func profileTables(w io.Writer, p *sensitivity.Profile) error {
	var rows [][]string
	for _, s := range p.Layers {
		rank := 0
		for i, l := range p.Order {
			if l == s.Layer {
				rank = i + 1
			}
		}
		rows = append(rows, []string{fmt.Sprint(s.Layer), fmt.Sprintf("%.6f", s.LTS), fmt.Sprintf("%.6f", s.LRS),
			fmt.Sprintf("%.6f", s.MDS), fmt.Sprintf("%.6f", s.LIS), fmt.Sprint(rank)})
	}
	if err := writeTable(w, []string{"layer", "LTS", "LRS", "MDS", "LIS", "rank"}, rows); err != nil {
		return err
	}
	if p.Baseline == nil {
		return nil
	}
	fmt.Fprintf(w, "\nPPL (KL nats/token) by quantized layers; full precision PPL %.4f on %d tokens\n", p.Baseline.PPL, p.Baseline.Tokens)
	ks := []string{"order"}
	for _, pt := range p.Orders[0].Curve {
		ks = append(ks, fmt.Sprintf("k=%d", pt.K))
	}
	rows = nil
	for _, c := range curves(p) {
		rows = append(rows, curveRow(c.label, c.points))
	}
	if err := writeTable(w, ks, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nnear-additivity along the LIS order: PPL increase of each layer alone vs added\n")
	rows = nil
	for _, a := range p.Additivity {
		rows = append(rows, []string{fmt.Sprint(a.Layer), fmt.Sprintf("%+.4f", a.Alone), fmt.Sprintf("%+.4f", a.Added)})
	}
	return writeTable(w, []string{"layer", "alone", "added"}, rows)
}

// curve is one line of the perplexity table and plot: an order, or the mean of the random orders.
type curve struct {
	label  string
	points []eval.Point
}

// curves returns the profile's fixed orders, each labelled with its layers, then the mean of its random orders
// (stat.Mean at each k) as one curve.
func curves(p *sensitivity.Profile) []curve {
	var (
		out    []curve
		random []sensitivity.OrderEval
	)
	for _, o := range p.Orders {
		if o.Seed != nil {
			random = append(random, o)
			continue
		}
		out = append(out, curve{o.Name + " " + fmt.Sprint(o.Order), o.Curve})
	}
	if len(random) == 0 {
		return out
	}
	mean := make([]eval.Point, len(random[0].Curve))
	ppl, kl := make([]float64, len(random)), make([]float64, len(random))
	for i := range mean {
		for j, o := range random {
			ppl[j], kl[j] = o.Curve[i].PPL, o.Curve[i].KL
		}
		mean[i].K = random[0].Curve[i].K
		mean[i].PPL, mean[i].KL = stat.Mean(ppl, nil), stat.Mean(kl, nil)
	}
	return append(out, curve{fmt.Sprintf("random (mean of %d)", len(random)), mean})
}

// plotCurves draws perplexity against the number of quantized layers, from full precision at k = 0, one line per
// curve, and saves it to file, whose extension picks the format.
func plotCurves(file string, p *sensitivity.Profile) error {
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("%s %s: perplexity by quantized layers", p.Quantizer.Format, p.Quantizer.Method)
	pl.X.Label.Text = "quantized layers (k)"
	pl.Y.Label.Text = "perplexity"
	pl.Legend.Top = true
	pl.Legend.Left = true
	ticks := []plot.Tick{{Value: 0, Label: "0"}}
	for _, pt := range p.Orders[0].Curve {
		ticks = append(ticks, plot.Tick{Value: float64(pt.K), Label: fmt.Sprint(pt.K)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	var lines []any
	for _, c := range curves(p) {
		xys := plotter.XYs{{X: 0, Y: p.Baseline.PPL}}
		for _, pt := range c.points {
			xys = append(xys, plotter.XY{X: float64(pt.K), Y: pt.PPL})
		}
		lines = append(lines, c.label, xys)
	}
	if err := plotutil.AddLinePoints(pl, lines...); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := pl.Save(7*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("--plot %s: %w", file, err)
	}
	return nil
}

func curveRow(name string, pts []eval.Point) []string {
	row := []string{name}
	for _, pt := range pts {
		row = append(row, fmt.Sprintf("%.4f (%.4f)", pt.PPL, pt.KL))
	}
	return row
}

func fileSHA256(path string) (string, error) {
	if path == "" {
		return "", usagef("--model is required")
	}
	fl, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fl.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fl); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
