//go:build cuda

package executor

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

// The benchmarks below run Llama-2-7B's shape (seeded f16 weights, an int4 variant of every layer) on GPU 0:
// step times for prefill and decode, the copy time of a layer's swap each way, and what a swap's copy, overlapped
// with decoding, adds to the decode steps.

var (
	benchOnce sync.Once
	benchM    *model.Model
	benchErr  error
	benchExec *CUDA
)

// benchExecutor is one executor over the 7B model, made once: a pool of 8,448 blocks of 16 (66 GiB: a
// 4,096-token prompt's 256 blocks and 128 sequences of 1,024 tokens), 4,096 tokens a step, swaps overlapped.
func benchExecutor(b *testing.B) *CUDA {
	benchOnce.Do(func() {
		cfg, err := model.ShapeByName("llama2-7b")
		if err != nil {
			benchErr = err
			return
		}
		ck, err := model.SynthesizeAs(cfg, 1, model.F16)
		if err != nil {
			benchErr = err
			return
		}
		if benchM, benchErr = model.FromCheckpoint(ck); benchErr != nil {
			return
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		errs := make([]error, cfg.NLayers)
		for l := range cfg.NLayers {
			wg.Go(func() {
				sem <- struct{}{}
				_, errs[l] = benchM.AddVariant(l, quant.Int4)
				<-sem
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				benchErr = err
				return
			}
		}
		benchExec, benchErr = NewCUDA(gpuDevice(b), benchM, CUDAOptions{Pool: Pool{Blocks: 8448}, BlockSize: 16, MaxBatchedTokens: 4096,
			Overlap: true})
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchExec
}

// seqBlocks is a table of the blocks from first on that n tokens need.
func seqBlocks(first, n int) []int32 {
	t := make([]int32, (n+15)/16)
	for i := range t {
		t[i] = int32(first + i)
	}
	return t
}

func stepOK(b *testing.B, e *CUDA, batch *Batch) Result {
	r, err := e.Step(batch)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// decodeSeqs is n sequences decoding at context positions, each on its own 64 blocks after the first 256.
func decodeSeqs(n, context int) *Batch {
	b := &Batch{}
	for i := range n {
		b.Seqs = append(b.Seqs, SeqWork{Tokens: []int32{int32(3 + i)}, SeqLen: context, Table: seqBlocks(256+64*i, context), Sample: true})
	}
	return b
}

// BenchmarkCUDAStep: one step of a whole prompt (FlashAttention-2) or of a decode batch at 1,024 tokens of
// context (paged attention over blocks of garbage: the time does not depend on what they hold).
func BenchmarkCUDAStep(b *testing.B) {
	e := benchExecutor(b)
	for _, n := range []int{512, 1024, 2048, 4096} {
		b.Run(fmt.Sprintf("prefill=%d", n), func(b *testing.B) {
			batch := &Batch{Seqs: []SeqWork{{Tokens: tokens(n, 1), SeqLen: n, Table: seqBlocks(0, n), Sample: true}}}
			for b.Loop() {
				stepOK(b, e, batch)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
	for _, n := range []int{1, 8, 32, 64, 128} {
		b.Run(fmt.Sprintf("decode=%d/context=1024", n), func(b *testing.B) {
			batch := decodeSeqs(n, 1024)
			for b.Loop() {
				stepOK(b, e, batch)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkCUDASwap swaps a layer to int4 and back, decoding one sequence until each applies, and reports the
// copies' device times (ms) and rates (GB/s over the host link).
func BenchmarkCUDASwap(b *testing.B) {
	e := benchExecutor(b)
	batch := decodeSeqs(1, 1024)
	var toInt4, toF16 []time.Duration
	l := 0
	swap := func(f quant.Format) time.Duration {
		if err := e.SetLayerPrecision(l, f); err != nil {
			b.Fatal(err)
		}
		for range 1000 {
			if r := stepOK(b, e, batch); slices.Contains(r.Swapped, l) {
				return r.SwapTime
			}
		}
		b.Fatalf("layer %d's swap to %v did not apply in 1,000 steps", l, f)
		return 0
	}
	for b.Loop() {
		toInt4 = append(toInt4, swap(quant.Int4))
		toF16 = append(toF16, swap(quant.F16))
		l = (l + 1) % len(e.vars)
	}
	lb := e.LayerBytes()[0]
	b.ReportMetric(float64(median(toInt4).Microseconds())/1e3, "int4-ms")
	b.ReportMetric(float64(median(toF16).Microseconds())/1e3, "f16-ms")
	b.ReportMetric(float64(lb[quant.Int4])/median(toInt4).Seconds()/1e9, "int4-GB/s")
	b.ReportMetric(float64(lb[quant.F16])/median(toF16).Seconds()/1e9, "f16-GB/s")
}

// BenchmarkCUDADecodeOverlap decodes 64 sequences at 1,024 tokens of context and reports the median step time
// with nothing in flight, with a layer's int4 copy asked for just before (the copy overlaps the step), and the
// step that applies it (which moves the staged part into place), and what the two add to two plain steps.
func BenchmarkCUDADecodeOverlap(b *testing.B) {
	e := benchExecutor(b)
	batch := decodeSeqs(64, 1024)
	var base, during, apply []time.Duration
	l := 0
	for b.Loop() {
		base = append(base, stepOK(b, e, batch).Duration)
		if err := e.SetLayerPrecision(l, quant.Int4); err != nil {
			b.Fatal(err)
		}
		r := stepOK(b, e, batch)
		during = append(during, r.Duration)
		if slices.Contains(r.Swapped, l) { // the copy was done by this step's start: no step of its own applies it
			apply = append(apply, base[len(base)-1])
		} else {
			for !slices.Contains(r.Swapped, l) {
				r = stepOK(b, e, batch)
			}
			apply = append(apply, r.Duration)
		}
		if err := e.SetLayerPrecision(l, quant.F16); err != nil {
			b.Fatal(err)
		}
		for r = stepOK(b, e, batch); !slices.Contains(r.Swapped, l); r = stepOK(b, e, batch) {
		}
		l = (l + 1) % len(e.vars)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	b.ReportMetric(ms(median(base)), "base-ms")
	b.ReportMetric(ms(median(during)), "copy-step-ms")
	b.ReportMetric(ms(median(apply)), "apply-step-ms")
	b.ReportMetric(ms(median(during)+median(apply)-2*median(base)), "added-ms")
}
