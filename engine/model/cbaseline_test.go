package model

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// buildCBaseline compiles testdata/cbaseline/run.c with the system's C compiler, as llama2.c's runomp target
// builds run.c, and returns the binary's path; it skips when there is no compiler with OpenMP.
func buildCBaseline(tb testing.TB) string {
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			tb.Skip("no C compiler (cc or gcc) on PATH")
		}
	}
	bin := filepath.Join(tb.TempDir(), "run")
	out, err := exec.Command(cc, "-Ofast", "-march=native", "-fopenmp", "-o", bin, "testdata/cbaseline/run.c",
		"-lm").CombinedOutput()
	if err != nil {
		tb.Skipf("%s cannot build the C baseline with OpenMP: %v\n%s", cc, err, out)
	}
	return bin
}

// writeLlama2cFile writes ck as a llama2.c checkpoint of the version (and group size, version 2) into dir.
func writeLlama2cFile(tb testing.TB, dir string, ck *Checkpoint, version, groupSize int) string {
	path := filepath.Join(dir, fmt.Sprintf("v%d.bin", version))
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := WriteLlama2c(f, ck, version, groupSize); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestCBaselineLogits checks that the C baseline computes the engine's model: the first step's logits of a
// synthetic model, from the float32 checkpoint within float32 roundings of the engine's, and from the int8-group
// one within its activations' quantization.
func TestCBaselineLogits(t *testing.T) {
	bin := buildCBaseline(t)
	cfg := Config{Dim: 64, HiddenDim: 128, NLayers: 2, NHeads: 4, NKVHeads: 2, VocabSize: 256, SeqLen: 64,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	ck := Synthesize(cfg, 7)
	dir := t.TempDir()
	for _, tc := range []struct {
		version int
		tol     float64 // of the largest logit's magnitude
	}{{0, 1e-5}, {2, 0.02}} {
		path := writeLlama2cFile(t, dir, ck, tc.version, 32)
		loaded, err := LoadLlama2c(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := FromCheckpoint(loaded)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := NewSequence(m, cfg.SeqLen)
		if err != nil {
			t.Fatal(err)
		}
		want, err := seq.Feed([]int32{1}, false)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, path, "1", "logits").Output()
		if err != nil {
			t.Fatalf("v%d: %v", tc.version, err)
		}
		got := strings.Fields(string(out))
		if len(got) != cfg.VocabSize {
			t.Fatalf("v%d: %d logits, want %d", tc.version, len(got), cfg.VocabSize)
		}
		var worst, scale float64
		for i, s := range got {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, math.Abs(v-float64(want[i])))
			scale = max(scale, math.Abs(float64(want[i])))
		}
		if worst > tc.tol*scale {
			t.Errorf("v%d: logits differ from the engine's by up to %.3g, want at most %.3g (%g of %.3g)",
				tc.version, worst, tc.tol*scale, tc.tol, scale)
		}
	}
}

// BenchmarkCBaseline measures the comparison with a plain C implementation with OpenMP on two threads.
// testdata/cbaseline/run.c decodes synthetic stories110M greedily from BOS, written as llama2.c version 0 (F32)
// or version 2 (int8 groups of 64, every matrix, as llama2.c's export.py writes them for runq.c), and reports
// its tok/s over steps 2-128 (64 cached tokens on average); in the same round the engine decodes the same model
// at batch 1, 64 cached tokens, in its steady state (F32 layers against version 0; Int8 layers, W8A8, against
// version 2, with the F32 classifier and with the Int8 one, whose bytes match the C program's). It reports the
// medians over the rounds of each rate and of their ratio (x: engine over C).
//
//	go test -run '^$' -bench CBaseline -benchtime 5x ./engine/model/
func BenchmarkCBaseline(b *testing.B) {
	bin := buildCBaseline(b)
	const steps = 128
	dir := b.TempDir()
	m := benchModel(b, "stories110M")
	ck := Synthesize(m.Config, 1) // benchModel's weights
	v0, v2 := writeLlama2cFile(b, dir, ck, 0, 0), writeLlama2cFile(b, dir, ck, 2, 64)
	for _, tc := range []struct {
		c, file string
		f, cf   quant.Format
	}{{"v0", v0, quant.F32, quant.F32}, {"v2", v2, quant.Int8, quant.F32}, {"v2", v2, quant.Int8, quant.Int8}} {
		b.Run(fmt.Sprintf("c=%s/format=%v/classifier=%v", tc.c, tc.f, tc.cf), func(b *testing.B) {
			setFormat(b, m, tc.f)
			if err := m.SetOutputFormat(tc.cf); err != nil {
				b.Fatal(err)
			}
			defer m.SetOutputFormat(quant.F32)
			one := newDecodeStep(b, m, 1, KVF32)
			// The engine's steps are warmed up after the C program as after the probe (boundWarm): the
			// program's run leaves its own copy of the weights in the L3.
			var ratio, rateC, rateEngine []float64
			for i := 0; b.Loop(); i++ {
				var c, e float64
				if i%2 == 0 {
					c, e = runCBaseline(b, bin, tc.file, steps), one.steadyRate(b, boundWarm, time.Second)
				} else {
					e, c = one.steadyRate(b, boundWarm, time.Second), runCBaseline(b, bin, tc.file, steps)
				}
				ratio, rateC, rateEngine = append(ratio, e/c), append(rateC, c), append(rateEngine, e)
			}
			b.ReportMetric(median(ratio), "x")
			b.ReportMetric(median(rateC), "tok/s-c")
			b.ReportMetric(median(rateEngine), "tok/s-engine")
		})
	}
}

// runCBaseline runs the C baseline on two threads for steps tokens and returns the tok/s it reports.
func runCBaseline(b *testing.B, bin, model string, steps int) float64 {
	cmd := exec.Command(bin, model, strconv.Itoa(steps))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=2")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("C baseline: %v", err)
	}
	_, rate, ok := strings.Cut(string(out), "tok/s ")
	v, err := strconv.ParseFloat(strings.TrimSpace(rate), 64)
	if !ok || err != nil {
		b.Fatalf("C baseline: no rate in its output %q", out)
	}
	return v
}
