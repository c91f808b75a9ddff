package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/replay"
	"github.com/morphlab/morphlab/internal/numfmt"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/kernels/probe"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "calibrate", summary: "time the CPU executor over a grid of batches and fit the simulator's CPU step-time model", run: runCalibrate})
}

const calibrateHelp = `
Calibrate times the CPU executor (the real forward pass) over a grid of batch compositions and fits the
simulator's step-time model for this CPU to them by least squares (engine/executor/costmodel.Calibration): a cost a
layer and a layer-token for each weight format, and a layer's cost in steps of few tokens (1, 2-4, 5-8, 9-16
and 17-64: the kernels' loops change with the token count), a cost an attended key in prompt
chunks and in decode, and a cost a sampled row. --model is a shape name ('morphlab synth --shape': stories110M, ...), timed on
seeded synthetic weights, or a checkpoint file. The grid: prompt chunks of 16, 64, 256 and 512 tokens (64 also after
256 cached positions, 128 after 512), decode batches of 1, 4 and 12 sequences at 64 and 384 positions, and one mixed
step (8 decodes beside a 32-token chunk), positions scaled down for a model of a shorter context, each with every layer in each --format and with the first and last
format half and half; each configuration's grid is timed in --reps rounds and each step's fastest time kept
on the wall clock (on a shared machine a burst of other work then spoils one round, not every run of a step),
its median on the CPU clock (what a run's steps, timed alike, see). Six more
steps of other shapes are timed the same way and left out of the fit, to report its error on steps it did not
see. About a minute on stories110M on two cores. The file written (--out) is what the simulator reads for the cpu device.

--clock sets how a step is timed, as 'morphlab run --clock' does: wall (elapsed time) or cpu (the process CPU
time the step used over the kernel threads). A calibration predicts runs on the same clock: wall for runs on
the wall clock of an idle machine, cpu for 'run --clock cpu', which a loaded machine skews less.

--steps fits the model to the steps of real runs instead of timing a grid: steps.jsonl files that 'morphlab run
--steps' wrote (comma-separated), every fifth step held out. Those steps ran as a run runs them (sequences of
every length side by side, KV blocks wherever the pool had them, the engine's own work between steps), which a
grid timed on its own does not reproduce. --model, --kv-type, --threads and --clock then say what the runs were,
for the file.`

// calibrateGrid is one step shape of the grid: decodes sequences at decodeCtx positions beside a prompt chunk of
// chunk tokens ending at chunkCtx positions (either part may be absent).
type calibrateGrid struct {
	decodes, decodeCtx int
	chunk, chunkCtx    int
}

var defaultCalibrateGrid = []calibrateGrid{
	{chunk: 16, chunkCtx: 16}, {chunk: 64, chunkCtx: 64}, {chunk: 64, chunkCtx: 320}, {chunk: 256, chunkCtx: 256},
	{decodes: 1, decodeCtx: 64}, {decodes: 4, decodeCtx: 64}, {decodes: 12, decodeCtx: 64},
	{decodes: 1, decodeCtx: 384}, {decodes: 4, decodeCtx: 384}, {decodes: 12, decodeCtx: 384},
	{decodes: 8, decodeCtx: 128, chunk: 32, chunkCtx: 32},
	// Long chunks: a chunk's attention grows with the square of its length, and only chunks of a few hundred
	// tokens tell that term from the per-token ones (without these, 512-token chunks ran 20% over the fit).
	{chunk: 512, chunkCtx: 512}, {chunk: 128, chunkCtx: 640},
}

// heldOutCalibrateGrid are steps timed with the grid but left out of the fit, to report its error on steps it
// did not see.
var heldOutCalibrateGrid = []calibrateGrid{
	{chunk: 128, chunkCtx: 128}, {decodes: 8, decodeCtx: 256}, {decodes: 2, decodeCtx: 320},
	{decodes: 4, decodeCtx: 96, chunk: 48, chunkCtx: 48}, {chunk: 384, chunkCtx: 384},
	{decodes: 4, decodeCtx: 200, chunk: 256, chunkCtx: 256},
}

const calibrateBlock = 16

// timeStep runs b and returns its work and time.
func timeStep(ex executor.Executor, b *executor.Batch, layers []costmodel.LayerFormat) (costmodel.Sample, error) {
	res, err := ex.Step(b)
	if err != nil {
		return costmodel.Sample{}, err
	}
	var w costmodel.Work
	for _, s := range b.Seqs {
		w.AddSeq(len(s.Tokens), s.SeqLen, s.Sample)
	}
	return costmodel.Sample{Work: w, Layers: layers, Seconds: res.Duration.Seconds()}, nil
}

// batch builds the step: block tables laid out one sequence after another.
func (g calibrateGrid) batch() *executor.Batch {
	b := &executor.Batch{}
	next := int32(0)
	table := func(positions int) []int32 {
		t := make([]int32, (positions+calibrateBlock-1)/calibrateBlock)
		for i := range t {
			t[i] = next
			next++
		}
		return t
	}
	for i := range g.decodes {
		b.Seqs = append(b.Seqs, executor.SeqWork{Tokens: []int32{int32(3 + i)}, SeqLen: g.decodeCtx, Table: table(g.decodeCtx), Sample: true})
	}
	if g.chunk > 0 {
		toks := make([]int32, g.chunk)
		for i := range toks {
			toks[i] = int32(3 + i%200)
		}
		b.Seqs = append(b.Seqs, executor.SeqWork{Tokens: toks, SeqLen: g.chunkCtx, Table: table(g.chunkCtx), Sample: true})
	}
	return b
}

// fitContext scales the grid's positions (and chunks) to a model whose context is shorter than the grid's
// longest step, keeping the grid's spread of key counts, so that every step fits and the fit still tells the
// per-key terms from the per-token ones.
func fitContext(grid []calibrateGrid, seqLen int) []calibrateGrid {
	longest := 0
	for _, g := range defaultCalibrateGrid {
		longest = max(longest, g.chunkCtx, g.decodeCtx)
	}
	for _, g := range heldOutCalibrateGrid {
		longest = max(longest, g.chunkCtx, g.decodeCtx)
	}
	if longest <= seqLen {
		return grid
	}
	scale := func(p int) int {
		if p == 0 {
			return 0
		}
		return max(1, p*seqLen/longest)
	}
	out := make([]calibrateGrid, len(grid))
	for i, g := range grid {
		out[i] = calibrateGrid{decodes: g.decodes, decodeCtx: scale(g.decodeCtx), chunkCtx: scale(g.chunkCtx)}
		out[i].chunk = min(scale(g.chunk), out[i].chunkCtx)
	}
	return out
}

func (g calibrateGrid) blocks() int {
	return g.decodes*((g.decodeCtx+calibrateBlock-1)/calibrateBlock) + (g.chunkCtx+calibrateBlock-1)/calibrateBlock
}

func runCalibrate(e *env, args []string) error {
	fs := e.flags("--model M --out FILE [flags]", calibrateHelp)
	modelFlag := fs.String("model", "", "`shape` name (synthetic weights) or checkpoint file")
	formats := fs.String("format", "f32,int8,int4", "comma-separated layer `formats` to time (f32, f16, int8, int4, q8_0, q4_0)")
	kvFlag := fs.String("kv-type", "f32", "KV cache `type`: f32, f16 or int8")
	out := fs.String("out", "", "write the calibration JSON to `file`")
	reps := fs.Int("reps", 3, "timed `rounds` over the grid, the fastest time of each step kept")
	threads := fs.Int("threads", 0, "kernel threads (default GOMAXPROCS)")
	clock := fs.String("clock", "wall", "`clock` a step is timed by: wall or cpu (CPU time over the threads)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	stepFiles := fs.String("steps", "", "fit the steps.jsonl `files` of real runs (comma-separated) instead of timing a grid")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *modelFlag == "" || *out == "" {
		return usagef("--model and --out are required")
	}
	if *reps < 1 {
		return usagef("--reps=%d, want at least 1", *reps)
	}
	if *clock != "wall" && *clock != "cpu" {
		return usagef("--clock %q, want wall or cpu", *clock)
	}
	var fmts []quant.Format
	for _, name := range strings.Split(*formats, ",") {
		f, err := quant.ParseFormat(strings.TrimSpace(name))
		if err != nil {
			return usagef("--format: %v", err)
		}
		if f == quant.BF16 {
			return usagef("--format: no CPU kernel runs bf16 weights")
		}
		if !slices.Contains(fmts, f) {
			fmts = append(fmts, f)
		}
	}
	kv, err := model.ParseKVType(*kvFlag)
	if err != nil {
		return usagef("--kv-type: %v", err)
	}
	cpu.SetThreads(*threads)
	if *stepFiles != "" {
		return calibrateFromSteps(e, strings.Split(*stepFiles, ","), *modelFlag, kv, *clock, *out, *asJSON)
	}
	m, name, err := calibrationModel(*modelFlag)
	if err != nil {
		return err
	}
	for l := range m.Layers {
		for _, f := range fmts {
			if _, err := m.AddVariant(l, f); err != nil {
				return err
			}
		}
	}
	grid := fitContext(defaultCalibrateGrid, m.Config.SeqLen)
	heldOutGrid := fitContext(heldOutCalibrateGrid, m.Config.SeqLen)
	maxTokens, maxBlocks := 0, 0
	for _, g := range append(slices.Clone(grid), heldOutGrid...) {
		maxTokens = max(maxTokens, g.decodes+g.chunk)
		maxBlocks = max(maxBlocks, g.blocks())
	}
	var full int64
	for _, l := range m.Layers {
		full = max(full, int64(l.Variants[l.Base].Bytes()))
	}
	budget := int64(m.WeightBytes()) + int64(len(m.Layers))*full + executor.WorkspaceBytes(m.Config, maxTokens) +
		int64(maxBlocks)*int64(kv.BytesPerBlock(m.Config, calibrateBlock))
	ex, err := executor.NewCPU(m, executor.CPUOptions{Budget: budget, BlockSize: calibrateBlock, MaxBatchedTokens: maxTokens, Blocks: maxBlocks, KVType: kv})
	if err != nil {
		return err
	}
	var timed executor.Executor = ex
	if *clock == "cpu" {
		timed = replay.CPUTimed{Executor: ex, Threads: cpu.Threads()}
	}

	// Layer configurations: every layer in each format, then the first and last half and half (a morphed
	// model's state, which checks that layer costs add up).
	configs := [][]quant.Format{}
	n := len(m.Layers)
	for _, f := range fmts {
		configs = append(configs, slices.Repeat([]quant.Format{f}, n))
	}
	if len(fmts) > 1 {
		mixed := slices.Repeat([]quant.Format{fmts[0]}, n)
		for l := n / 2; l < n; l++ {
			mixed[l] = fmts[len(fmts)-1]
		}
		configs = append(configs, mixed)
	}
	bar := newProgress(e.stderr, "calibrate")
	start := time.Now()
	// Each configuration's steps are timed in --reps rounds over its whole grid, keeping each step's fastest
	// time: on a shared machine a burst of other work then spoils one round of a step, not all of its runs.
	all := append(slices.Clone(grid), heldOutGrid...)
	done, total := 0, len(configs)*len(all)*(*reps)
	var samples, heldOut []costmodel.Sample
	for _, formats := range configs {
		for l, f := range formats {
			if err := ex.SetLayerPrecision(l, f); err != nil {
				return err
			}
		}
		if _, err := ex.Step(all[0].batch()); err != nil { // warm-up, and applies the swaps
			return err
		}
		rounds := make([][]costmodel.Sample, len(all))
		for range *reps {
			for i, g := range all {
				s, err := timeStep(timed, g.batch(), costmodel.CountFormats(formats))
				if err != nil {
					return err
				}
				rounds[i] = append(rounds[i], s)
				done++
				bar.set(done, total)
			}
		}
		best := make([]costmodel.Sample, len(all))
		for i, r := range rounds {
			best[i] = keptTime(r, *clock)
		}
		samples = append(samples, best[:len(grid)]...)
		heldOut = append(heldOut, best[len(grid):]...)
	}
	bar.clear()
	c, err := costmodel.FitCalibration(samples, n)
	if err != nil {
		return err
	}
	c.HeldOutSteps, c.HeldOutMAPE = len(heldOut), heldOutError(c, heldOut, n)
	c.Machine = probe.CPUModel()
	c.Model, c.Config, c.KV, c.Threads, c.Clock = name, m.Config, kv.String(), cpu.Threads(), *clock
	if err := c.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "timed %d steps in %s; wrote %s\n", done, time.Since(start).Round(time.Second), *out)
	return reportCalibration(e, c, name, *asJSON)
}

// calibrateFromSteps fits the calibration to the steps of real runs (steps.jsonl files), holding every fifth out.
func calibrateFromSteps(e *env, files []string, modelArg string, kv model.KVType, clock, out string, asJSON bool) error {
	var cfg model.Config
	if shape, err := model.ShapeByName(modelArg); err == nil {
		cfg = shape
	} else {
		ck, err := loadCalibrationCheckpoint(modelArg)
		if err != nil {
			return err
		}
		cfg = ck.Config
		ck.Close()
	}
	var samples, heldOut []costmodel.Sample
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		steps, err := costmodel.ReadSteps(f, path, cfg.NLayers)
		f.Close()
		if err != nil {
			return err
		}
		for i, s := range steps {
			if i%5 == 4 {
				heldOut = append(heldOut, s)
			} else {
				samples = append(samples, s)
			}
		}
	}
	c, err := costmodel.FitCalibration(samples, cfg.NLayers)
	if err != nil {
		return err
	}
	c.HeldOutSteps, c.HeldOutMAPE = len(heldOut), heldOutError(c, heldOut, cfg.NLayers)
	c.Machine = probe.CPUModel()
	c.Model, c.Config, c.KV, c.Threads, c.Clock = modelArg, cfg, kv.String(), cpu.Threads(), clock
	if err := c.Save(out); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "fitted %d steps of %d runs; wrote %s\n", len(samples)+len(heldOut), len(files), out)
	return reportCalibration(e, c, modelArg, asJSON)
}

// heldOutError is the calibration's median absolute percentage error on steps it was not fitted to.
func heldOutError(c *costmodel.Calibration, heldOut []costmodel.Sample, nLayers int) float64 {
	errs := make([]float64, len(heldOut))
	for i, s := range heldOut {
		errs[i] = math.Abs(c.StepTime(s.Work, s.Layers, nLayers).Seconds()/s.Seconds-1) * 100
	}
	return costmodel.Median(errs)
}

// reportCalibration prints the calibration's fit and terms (a table, or JSON).
func reportCalibration(e *env, c *costmodel.Calibration, name string, asJSON bool) error {
	if asJSON {
		return writeJSON(e.stdout, c)
	}
	fmt.Fprintf(e.stdout, "%s on %s (%d threads, %s KV, %s clock): median error %.1f%% over the %d steps fitted, %.1f%% over %d held out\n\n",
		name, c.Machine, c.Threads, c.KV, c.Clock, c.MAPE, c.Steps, c.HeldOutMAPE, c.HeldOutSteps)
	rows := [][]string{}
	for _, ft := range c.Formats {
		rows = append(rows, []string{ft.Format + " a layer", numfmt.Figure(ft.Layer * 1e6)}, []string{ft.Format + " a layer-token", numfmt.Figure(ft.LayerToken * 1e6)})
		low := 1
		for _, b := range ft.Bands {
			tokens := fmt.Sprintf("%d-%d tokens", low, b.UpTo)
			if low == b.UpTo {
				tokens = fmt.Sprintf("%d token", low)
			}
			rows = append(rows, []string{fmt.Sprintf("%s a layer, step of %s", ft.Format, tokens), numfmt.Figure(b.Layer * 1e6)})
			low = b.UpTo + 1
		}
	}
	rows = append(rows, []string{"a prompt key a layer", numfmt.Figure(c.PrefillKey * 1e6)},
		[]string{"a decode key a layer", numfmt.Figure(c.DecodeKey * 1e6)}, []string{"a sampled row", numfmt.Figure(c.Sampled * 1e6)})
	t := markdownTable(e.stdout, "term", "µs")
	if err := t.Bulk(rows); err != nil {
		return err
	}
	return t.Render()
}

// keptTime is the time kept of a step's rounds: on the wall clock the fastest, since other work on the machine
// only ever adds to a step's elapsed time; on the CPU clock the median, since a run's steps, timed the same way,
// spread as the rounds do (the cache and memory bandwidth other jobs share slow a step's CPU time, up and down
// from round to round), so the fastest round would be a time the run's steps seldom see.
func keptTime(rounds []costmodel.Sample, clock string) costmodel.Sample {
	if clock == "wall" {
		return slices.MinFunc(rounds, func(a, b costmodel.Sample) int { return cmp.Compare(a.Seconds, b.Seconds) })
	}
	times := make([]float64, len(rounds))
	for i, r := range rounds {
		times[i] = r.Seconds
	}
	s := rounds[0]
	s.Seconds = costmodel.Median(times)
	return s
}

// calibrationModel synthesizes a named shape (seed 1) or loads a checkpoint.
func calibrationModel(arg string) (*model.Model, string, error) {
	if cfg, err := model.ShapeByName(arg); err == nil {
		m, err := model.FromCheckpoint(model.Synthesize(cfg, 1))
		return m, arg, err
	}
	ck, err := loadCalibrationCheckpoint(arg)
	if err != nil {
		return nil, "", err
	}
	defer ck.Close()
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", arg, err)
	}
	return m, arg, nil
}

// loadCalibrationCheckpoint loads --model when it names no shape.
func loadCalibrationCheckpoint(arg string) (*model.Checkpoint, error) {
	ck, err := model.Load(arg)
	if err != nil {
		return nil, fmt.Errorf("--model %s: not a shape name (%v) nor a checkpoint: %v", arg, shapeNames(), err)
	}
	return ck, nil
}

func shapeNames() string {
	var names []string
	for _, s := range model.Shapes {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}
