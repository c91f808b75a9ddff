package model

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/kernels/probe"
	"github.com/morphlab/morphlab/quant"
	"golang.org/x/perf/benchmath"
)

// Decode and prefill benchmarks on a synthetic model of a named shape, in each layer format:
//
//	go test -run '^$' -bench 'Decode|Prefill' -count 6 ./engine/model/
//
// Decode runs one step for batch sequences that each hold 64 cached tokens (the step rewrites position 64, so
// every iteration costs the same). It reports tok/s and, at batch 1, %bound: tok/s over the memory-bandwidth bound,
// bytes read per token (the active weights, the embedding table excepted when it is not also the classifier)
// against the read bandwidth at that working set, measured by the probe on the same threads right after the
// timed steps (this VM's memory bandwidth drifts by tens of percent over minutes, so a ceiling measured at
// another time would move the ratio more than most changes do).

var benchModels sync.Map // shape name -> *Model with every benchmarked format prepared

var benchFormats = []quant.Format{quant.F32, quant.F16, quant.Int8, quant.Int4, quant.Q8_0, quant.Q4_0}

func benchModel(b *testing.B, shape string) *Model {
	if m, ok := benchModels.Load(shape); ok {
		return m.(*Model)
	}
	cfg, err := ShapeByName(shape)
	if err != nil {
		b.Fatal(err)
	}
	m, err := FromCheckpoint(Synthesize(cfg, 1))
	if err != nil {
		b.Fatal(err)
	}
	for l := range m.Layers {
		for _, f := range benchFormats {
			if _, err := m.AddVariant(l, f); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchModels.Store(shape, m)
	return m
}

func setFormat(b *testing.B, m *Model, f quant.Format) {
	for l := range m.Layers {
		if err := m.SetPrecision(l, f); err != nil {
			b.Fatal(err)
		}
	}
}

// decodeBytes is what one decode step reads from memory for weights: all of them but the embedding table, of
// which it reads one row, unless the table is also the classifier.
func decodeBytes(m *Model) int {
	n := m.WeightBytes()
	if !m.outputIsEmbedding() {
		n -= m.Embedding.Bytes()
	}
	return n
}

// classifierFormats are the classifier formats benchmarked with each layer format: the F32 classifier, and for
// the 8- and 4-bit layers an Int8 one too, as llama2.c's runq has (GGUF's Q8_0 and Q4_0 layers: a classifier of
// their own format, as llama.cpp's quantized files have).
func classifierFormats(f quant.Format) []quant.Format {
	switch f {
	case quant.Int8, quant.Int4:
		return []quant.Format{quant.F32, quant.Int8}
	case quant.Q8_0, quant.Q4_0:
		return []quant.Format{quant.F32, f}
	}
	return []quant.Format{quant.F32}
}

func BenchmarkDecode(b *testing.B) {
	for _, shape := range []string{"stories110M"} {
		for _, f := range benchFormats {
			for _, cf := range classifierFormats(f) {
				for _, batch := range []int{1, 8, 32} {
					b.Run(fmt.Sprintf("shape=%s/format=%v/classifier=%v/batch=%d", shape, f, cf, batch), func(b *testing.B) {
						benchDecode(b, shape, f, cf, batch, KVF32)
					})
				}
			}
		}
	}
}

// BenchmarkF16Cache is BenchmarkDecode's F32-classifier runs over a binary16 KV cache:
//
//	go test -run '^$' -bench F16Cache -count 3 ./engine/model/
func BenchmarkF16Cache(b *testing.B) {
	for _, shape := range []string{"stories110M"} {
		for _, f := range benchFormats {
			for _, batch := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("shape=%s/format=%v/classifier=f32/batch=%d", shape, f, batch), func(b *testing.B) {
					benchDecode(b, shape, f, quant.F32, batch, KVF16)
				})
			}
		}
	}
}

// benchDecode times decode steps of batch sequences that each hold 64 cached tokens, over a cache of type kv.
func benchDecode(b *testing.B, shape string, f, cf quant.Format, batch int, kv KVType) {
	m := benchModel(b, shape)
	setFormat(b, m, f)
	if err := m.SetOutputFormat(cf); err != nil {
		b.Fatal(err)
	}
	defer m.SetOutputFormat(quant.F32)
	step := newDecodeStep(b, m, batch, kv)
	b.SetBytes(int64(decodeBytes(m)))
	b.ResetTimer()
	for b.Loop() {
		step.run(b)
	}
	tokPerSec := float64(batch*b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tokPerSec, "tok/s")
	if batch == 1 {
		b.StopTimer()
		bytes := int64(decodeBytes(m))
		bound := probe.ReadBandwidth(cpu.Threads(), bytes) * 1e9 / float64(bytes)
		b.ReportMetric(100*tokPerSec/bound, "%bound")
	}
}

// decodeStep is a decode step of batch sequences that each hold 64 cached tokens: the step rewrites position 64,
// so every run costs the same.
type decodeStep struct {
	m      *Model
	batch  int
	cache  *KVCache
	ws     Workspace
	step   *Batch
	logits []float32
}

// newDecodeStep fills a cache of type kv with batch sequences' 64 tokens and returns their decode step.
func newDecodeStep(b *testing.B, m *Model, batch int, kv KVType) *decodeStep {
	const context = 64
	cfg := m.Config
	blocks := (context + 1 + sequenceBlock - 1) / sequenceBlock
	d := &decodeStep{m: m, batch: batch, cache: NewKVCacheType(cfg, batch*blocks, sequenceBlock, kv),
		logits: make([]float32, batch*cfg.VocabSize)}
	prefill := &Batch{MaxBlocksPerSeq: blocks, QStart: []int32{0}}
	d.step = &Batch{MaxBlocksPerSeq: blocks, QStart: []int32{0}}
	for s := range batch {
		for j := range blocks {
			prefill.BlockTables = append(prefill.BlockTables, int32(s*blocks+j))
		}
		for range context {
			prefill.Tokens = append(prefill.Tokens, int32(s+1))
		}
		prefill.QStart = append(prefill.QStart, int32(len(prefill.Tokens)))
		prefill.SeqLens = append(prefill.SeqLens, context)
		d.step.Tokens = append(d.step.Tokens, int32(s+2))
		d.step.QStart = append(d.step.QStart, int32(s+1))
		d.step.SeqLens = append(d.step.SeqLens, context+1)
	}
	d.step.BlockTables = prefill.BlockTables
	if err := m.Forward(prefill, d.cache, &d.ws, make([]float32, batch*cfg.VocabSize), nil); err != nil {
		b.Fatal(err)
	}
	return d
}

func (d *decodeStep) run(b *testing.B) {
	if err := d.m.Forward(d.step, d.cache, &d.ws, d.logits, nil); err != nil {
		b.Fatal(err)
	}
}

// steadyRate runs steps for warm without timing them, so that the caches hold what a run of these steps keeps
// there, and returns the tokens a second of the steps that follow over at least span (one step at least).
func (d *decodeStep) steadyRate(b *testing.B, warm, span time.Duration) float64 {
	for start := time.Now(); time.Since(start) < warm; {
		d.run(b)
	}
	start := time.Now()
	n := 0
	for n == 0 || time.Since(start) < span {
		d.run(b)
		n++
	}
	return float64(d.batch*n) / time.Since(start).Seconds()
}

// The target benchmarks time each batch size in its steady state, as a server runs it: step after step of the
// same batch. Whatever ran just before leaves the host's L3 holding its own data, and the steps win it back only
// over several passes over their weights: a batch-1 step right after the probe's reading, or right after a
// batch-32 step, takes longer than one in a run of batch-1 steps. Hence the untimed steps before the timed ones;
// their lengths cover a few hundred steps of stories110M.
const (
	boundWarm   = 400 * time.Millisecond // steps after each probe reading, untimed
	scalingWarm = 200 * time.Millisecond // steps of each batch size before its timed ones, untimed
	targetSpan  = 100 * time.Millisecond // timed steps of each batch size in a round
)

// BenchmarkDecodeScaling measures the batch-32 target, batch 32's tok/s over batch 1's, in one process:
// each iteration is a round of batch-1 steps and batch-32 steps, in alternating order, each batch size warmed
// up untimed (scalingWarm) and then timed over targetSpan, and the benchmark reports the median over the rounds
// of each round's ratio (x) and of each rate. This VM's memory rate drifts by tens of percent within minutes,
// which moves separate runs of the two batch sizes apart; within a round both see the same machine.
//
//	go test -run '^$' -bench DecodeScaling -benchtime 20x ./engine/model/
func BenchmarkDecodeScaling(b *testing.B) {
	runDecodeTargets(b, func(b *testing.B, m *Model, kv KVType) {
		one, many := newDecodeStep(b, m, 1, kv), newDecodeStep(b, m, 32, kv)
		var ratio, rate1, rate32 []float64
		for i := 0; b.Loop(); i++ {
			var r1, r32 float64
			if i%2 == 0 {
				r1 = one.steadyRate(b, scalingWarm, targetSpan)
				r32 = many.steadyRate(b, scalingWarm, targetSpan)
			} else {
				r32 = many.steadyRate(b, scalingWarm, targetSpan)
				r1 = one.steadyRate(b, scalingWarm, targetSpan)
			}
			ratio, rate1, rate32 = append(ratio, r32/r1), append(rate1, r1), append(rate32, r32)
		}
		b.ReportMetric(median(ratio), "x")
		b.ReportMetric(median(rate1), "tok/s-batch1")
		b.ReportMetric(median(rate32), "tok/s-batch32")
	})
}

// BenchmarkDecodeBound measures the batch-1 target, tok/s over the memory-bandwidth bound, in rounds of
// the probe's read bandwidth at the step's working set followed by batch-1 steps, warmed up untimed (boundWarm:
// the probe reads its own buffer of that size many times) and then timed over targetSpan, and reports the
// medians over the rounds of each round's %bound, of the tok/s and of the probe's GB/s. A single probe reading
// moves by tens of percent from one run to the next on this VM; the rounds give each reading its own steps.
//
//	go test -run '^$' -bench DecodeBound -benchtime 8x ./engine/model/
func BenchmarkDecodeBound(b *testing.B) {
	runDecodeTargets(b, func(b *testing.B, m *Model, kv KVType) {
		one := newDecodeStep(b, m, 1, kv)
		bytes := int64(decodeBytes(m))
		var bound, rate, bw []float64
		for b.Loop() {
			gbps := probe.ReadBandwidth(cpu.Threads(), bytes)
			r := one.steadyRate(b, boundWarm, targetSpan)
			bound, rate, bw = append(bound, 100*r*float64(bytes)/(gbps*1e9)), append(rate, r), append(bw, gbps)
		}
		b.ReportMetric(median(bound), "%bound")
		b.ReportMetric(median(rate), "tok/s")
		b.ReportMetric(median(bw), "probe-GB/s")
	})
}

// runDecodeTargets runs measure as a sub-benchmark for stories110M in every layer format (F32 classifier) over
// every KV cache type.
func runDecodeTargets(b *testing.B, measure func(b *testing.B, m *Model, kv KVType)) {
	for _, f := range benchFormats {
		for _, kv := range []KVType{KVF32, KVF16, KVInt8} {
			b.Run(fmt.Sprintf("shape=stories110M/format=%v/classifier=f32/kv=%v", f, kv), func(b *testing.B) {
				m := benchModel(b, "stories110M")
				setFormat(b, m, f)
				if err := m.SetOutputFormat(quant.F32); err != nil {
					b.Fatal(err)
				}
				measure(b, m, kv)
			})
		}
	}
}

// median returns the median of xs as benchstat takes it (golang.org/x/perf/benchmath: the mean of the middle two
// for an even count); xs is sorted in place.
func median(xs []float64) float64 {
	return benchmath.AssumeNothing.Summary(benchmath.NewSample(xs, &benchmath.DefaultThresholds), 0.95).Center
}

// BenchmarkPrefill feeds a 512-token prompt to a fresh sequence and reports GFLOP/s over the matrix products
// (2 FLOPs per weight per token, classifier for the last token only) and the attention (causal: 2·2·dim·n²/2 per
// layer), and %peak against the probe's f32 FMA peak.
func BenchmarkPrefill(b *testing.B) {
	const tokens = 512
	for _, shape := range []string{"stories110M"} {
		for _, f := range benchFormats {
			b.Run(fmt.Sprintf("shape=%s/format=%v/tokens=%d", shape, f, tokens), func(b *testing.B) {
				m := benchModel(b, shape)
				setFormat(b, m, f)
				cfg := m.Config
				seq, err := NewSequence(m, tokens)
				if err != nil {
					b.Fatal(err)
				}
				toks := make([]int32, tokens)
				for i := range toks {
					toks[i] = int32(i % cfg.VocabSize)
				}
				layerWeights := cfg.Params() - 2*cfg.VocabSize*cfg.Dim - cfg.Dim
				if cfg.TiedEmbeddings {
					layerWeights += cfg.VocabSize * cfg.Dim
				}
				flops := 2*float64(layerWeights)*tokens + 2*float64(cfg.VocabSize*cfg.Dim) +
					float64(cfg.NLayers)*2*float64(cfg.Dim)*tokens*tokens
				b.ResetTimer()
				for b.Loop() {
					seq.Reset()
					if _, err := seq.Feed(toks, false); err != nil {
						b.Fatal(err)
					}
				}
				gflops := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gflops, "GFLOP/s")
				b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tok/s")
				b.ReportMetric(100*gflops/probe.Cached().FMAPeakGFLOPS, "%peak")
			})
		}
	}
}
