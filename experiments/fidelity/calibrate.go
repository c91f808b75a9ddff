package fidelity

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/kernels/probe"
	"github.com/morphlab/morphlab/quant"
)

// gridStep is one step shape of the calibration grid: decodes sequences at decodeCtx positions beside a prompt
// chunk of chunk tokens ending at chunkCtx positions (either part may be absent).
type gridStep struct {
	decodes, decodeCtx int
	chunk, chunkCtx    int
}

// grid is what Calibrate times and fits.
var grid = []gridStep{
	{chunk: 16, chunkCtx: 16}, {chunk: 64, chunkCtx: 64}, {chunk: 64, chunkCtx: 320}, {chunk: 256, chunkCtx: 256},
	{decodes: 1, decodeCtx: 64}, {decodes: 4, decodeCtx: 64}, {decodes: 12, decodeCtx: 64},
	{decodes: 1, decodeCtx: 384}, {decodes: 4, decodeCtx: 384}, {decodes: 12, decodeCtx: 384},
	{decodes: 8, decodeCtx: 128, chunk: 32, chunkCtx: 32},
	// Long chunks: a chunk's attention grows with the square of its length, and only chunks of a few hundred
	// tokens tell that term from the per-token ones (without these, 512-token chunks ran 20% over the fit).
	{chunk: 512, chunkCtx: 512}, {chunk: 128, chunkCtx: 640},
}

// heldOutGrid are steps timed with the grid but left out of the fit, to report its error on steps it did not see.
var heldOutGrid = []gridStep{
	{chunk: 128, chunkCtx: 128}, {decodes: 8, decodeCtx: 256}, {decodes: 2, decodeCtx: 320},
	{decodes: 4, decodeCtx: 96, chunk: 48, chunkCtx: 48}, {chunk: 384, chunkCtx: 384},
	{decodes: 4, decodeCtx: 200, chunk: 256, chunkCtx: 256},
}

// gridBlock is the grid's KV block size in tokens.
const gridBlock = 16

// batch builds the step: block tables laid out one sequence after another.
func (g gridStep) batch() *executor.Batch {
	b := &executor.Batch{}
	next := int32(0)
	table := func(positions int) []int32 {
		t := make([]int32, (positions+gridBlock-1)/gridBlock)
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

func (g gridStep) blocks() int {
	return g.decodes*((g.decodeCtx+gridBlock-1)/gridBlock) + (g.chunkCtx+gridBlock-1)/gridBlock
}

// fitContext scales the steps' positions (and chunks) to a model whose context is shorter than the grid's
// longest step, keeping the grid's spread of key counts, so that every step fits and the fit still tells the
// per-key terms from the per-token ones.
func fitContext(steps []gridStep, seqLen int) []gridStep {
	longest := 0
	for _, g := range slices.Concat(grid, heldOutGrid) {
		longest = max(longest, g.chunkCtx, g.decodeCtx)
	}
	if longest <= seqLen {
		return steps
	}
	scale := func(p int) int {
		if p == 0 {
			return 0
		}
		return max(1, p*seqLen/longest)
	}
	out := make([]gridStep, len(steps))
	for i, g := range steps {
		out[i] = gridStep{decodes: g.decodes, decodeCtx: scale(g.decodeCtx), chunkCtx: scale(g.chunkCtx)}
		out[i].chunk = min(scale(g.chunk), out[i].chunkCtx)
	}
	return out
}

// CalibrateOptions are what Calibrate times.
type CalibrateOptions struct {
	// Formats are the layer formats timed, the full precision first.
	Formats []quant.Format
	// Reps is the rounds over the grid; each step's kept time is its fastest round on the wall clock, its median
	// on the CPU clock (keptTime).
	Reps int
	// Progress, when set, is called after each timed step with the count done and the total.
	Progress func(done, total int)
}

// Calibrate times the CPU executor over a grid of batch compositions and fits the simulator's step-time model
// for this CPU to them by least squares (costmodel.FitCalibration): the deployment's model (its checkpoint or named
// shape with seeded weights), KV type, kernel threads and clock (wall, or cpu: a step's process CPU time over the
// threads; thread: the CPU time of its own thread, on one kernel thread). Each layer configuration — every layer in each format, then the first and last formats half and
// half, a morphed model's state — is timed over the whole grid in Reps rounds: on a shared machine a burst of other
// work then spoils one round of a step, not all of its runs. Six steps of other shapes are timed alike and left
// out of the fit, to report its error on steps it did not see.
func Calibrate(d deploy.Deployment, o CalibrateOptions) (*costmodel.Calibration, error) {
	if len(o.Formats) == 0 || o.Reps < 1 {
		return nil, fmt.Errorf("fidelity: calibrate %d formats in %d rounds, want at least one of each", len(o.Formats), o.Reps)
	}
	d.Executor, d.Policy = "cpu", nil
	l, err := d.Load()
	if err != nil {
		return nil, err
	}
	m := l.Weights
	for i := range m.Layers {
		for _, f := range o.Formats {
			if _, err := m.AddVariant(i, f); err != nil {
				return nil, err
			}
		}
	}
	steps := fitContext(grid, m.Config.SeqLen)
	all := slices.Concat(steps, fitContext(heldOutGrid, m.Config.SeqLen))
	maxTokens, maxBlocks := 0, 0
	for _, g := range all {
		maxTokens = max(maxTokens, g.decodes+g.chunk)
		maxBlocks = max(maxBlocks, g.blocks())
	}
	// The executor starts with every layer in its largest format, so that its pool (the grid's blocks beside
	// those weights and the workspace) holds every configuration timed.
	for i, layer := range m.Layers {
		largest := o.Formats[0]
		for _, f := range o.Formats {
			if layer.Variants[f].Bytes() > layer.Variants[largest].Bytes() {
				largest = f
			}
		}
		if err := m.SetPrecision(i, largest); err != nil {
			return nil, err
		}
	}
	ex, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: maxBlocks}, BlockSize: gridBlock,
		MaxBatchedTokens: maxTokens, KVType: l.KVType})
	if err != nil {
		return nil, err
	}
	clock := l.Deployment.Clock
	var timed executor.Executor = ex
	switch clock {
	case "cpu":
		timed = deploy.CPUTimed{Executor: ex, Threads: cpu.Threads()}
	case "thread":
		timed = deploy.ThreadTimed{Executor: ex}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	n := len(m.Layers)
	configs := [][]quant.Format{}
	for _, f := range o.Formats {
		configs = append(configs, slices.Repeat([]quant.Format{f}, n))
	}
	if len(o.Formats) > 1 {
		mixed := slices.Repeat([]quant.Format{o.Formats[0]}, n)
		for i := n / 2; i < n; i++ {
			mixed[i] = o.Formats[len(o.Formats)-1]
		}
		configs = append(configs, mixed)
	}
	done, total := 0, len(configs)*len(all)*o.Reps
	var samples, heldOut []costmodel.Sample
	for _, formats := range configs {
		for i, f := range formats {
			if err := ex.SetLayerPrecision(i, f); err != nil {
				return nil, err
			}
		}
		if _, err := ex.Step(all[0].batch()); err != nil { // warm-up, and applies the swaps
			return nil, err
		}
		rounds := make([][]costmodel.Sample, len(all))
		for range o.Reps {
			for i, g := range all {
				s, err := timeStep(timed, g.batch(), costmodel.CountFormats(formats))
				if err != nil {
					return nil, err
				}
				rounds[i] = append(rounds[i], s)
				done++
				if o.Progress != nil {
					o.Progress(done, total)
				}
			}
		}
		for i, r := range rounds {
			if i < len(steps) {
				samples = append(samples, keptTime(r, clock))
			} else {
				heldOut = append(heldOut, keptTime(r, clock))
			}
		}
	}
	c, err := costmodel.FitCalibration(samples, n)
	if err != nil {
		return nil, err
	}
	c.HeldOutSteps, c.HeldOutMAPE = len(heldOut), heldOutError(c, heldOut, n)
	describe(c, l)
	return c, nil
}

// FitSteps fits the calibration to the steps of real runs (what `morphlab run --steps` writes), holding every
// fifth step of each run out to report the fit's error on steps it did not see. Those steps ran as a run runs
// them (sequences of every length side by side, KV blocks wherever the pool had them, the engine's own work between
// steps), which a grid timed on its own does not reproduce. d is the deployment the runs ran (model, dtype, KV
// type, threads, clock), for the calibration's record.
func FitSteps(d deploy.Deployment, runs ...[]costmodel.Sample) (*costmodel.Calibration, error) {
	d.Executor, d.Policy = "cpu", nil
	l, err := d.Load()
	if err != nil {
		return nil, err
	}
	c, err := fitHeldOut(runs, l.Config.NLayers)
	if err != nil {
		return nil, err
	}
	describe(c, l)
	return c, nil
}

// fitHeldOut fits step times to the steps of runs of a model of nLayers layers, every fifth step of each run held
// out and the fit's error on those recorded.
func fitHeldOut(runs [][]costmodel.Sample, nLayers int) (*costmodel.Calibration, error) {
	var samples, heldOut []costmodel.Sample
	for _, steps := range runs {
		for i, s := range steps {
			if i%5 == 4 {
				heldOut = append(heldOut, s)
			} else {
				samples = append(samples, s)
			}
		}
	}
	c, err := costmodel.FitCalibration(samples, nLayers)
	if err != nil {
		return nil, err
	}
	c.HeldOutSteps, c.HeldOutMAPE = len(heldOut), heldOutError(c, heldOut, nLayers)
	return c, nil
}

// ReadSteps reads the steps.jsonl files of real runs of a model of nLayers layers, one slice of steps a file.
func ReadSteps(nLayers int, paths ...string) ([][]costmodel.Sample, error) {
	var out [][]costmodel.Sample
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		steps, err := costmodel.ReadSteps(f, p, nLayers)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, steps)
	}
	return out, nil
}

// describe records on c what was timed.
func describe(c *costmodel.Calibration, l *deploy.Loaded) {
	c.Machine = probe.CPUModel()
	c.Model, c.Config, c.KV, c.Threads, c.Clock = l.Deployment.Model, l.Config, l.KVType.String(), cpu.Threads(), l.Deployment.Clock
}

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

// heldOutError is the calibration's median absolute percentage error on steps it was not fitted to.
func heldOutError(c *costmodel.Calibration, heldOut []costmodel.Sample, nLayers int) float64 {
	errs := make([]float64, len(heldOut))
	for i, s := range heldOut {
		errs[i] = math.Abs(c.StepTime(s.Work, s.Layers, nLayers).Seconds()/s.Seconds-1) * 100
	}
	return costmodel.Median(errs)
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
