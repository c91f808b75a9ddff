package sensitivity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/profiling/eval"
	"github.com/morphlab/morphlab/quant"
)

// Job is a profile as `morphlab profile` and the experiment suite ask for one: a checkpoint and its texts by file,
// the quantizer, and what to evaluate.
type Job struct {
	Model     string // checkpoint file (llama2.c, GGUF or safetensors)
	Tokenizer string // llama2.c tokenizer.bin, for a checkpoint without a vocabulary
	Threads   int    // kernel threads; 0 is GOMAXPROCS
	Format    quant.Format
	Method    string // rtn, awq (int4) or smoothquant (int8)
	// WeightOnly leaves the activations unquantized (W8A16, W4A16): the quantized weights are widened to float32
	// and multiply float activations, as a weight-only kernel computes, instead of running as the engine's kernels
	// run them, with the activations quantized to int8 per token (W8A8, W4A8).
	WeightOnly bool
	// Calib is the calibration text file (paragraphs separated by blank lines), read from its start until
	// CalibTokens tokens, or CalibParagraphs paragraphs when that is set.
	Calib           string
	CalibTokens     int
	CalibParagraphs int
	// Eval is the evaluation text file ("": no curves): EvalParagraphs paragraphs after EvalOffset (-1: after the
	// calibration's when it is the same file, else 0).
	Eval           string
	EvalParagraphs int
	EvalOffset     int
	Orders         []string // of OrderNames
	Seeds          int      // random orders, seeded 1..Seeds
	AllKs          bool
	Weights        Weights // zero: DefaultWeights
	// Progress and EvalProgress, when set, follow the ranking and the evaluation.
	Progress, EvalProgress func(done, total int)
}

// RunJob loads the checkpoint and the texts, prepares every layer's quantized variant as the job's method says,
// and profiles the model (Build).
func RunJob(j Job) (*Profile, error) {
	switch {
	case j.Format != quant.Int4 && j.Format != quant.Int8:
		return nil, fmt.Errorf("sensitivity: format %v, want int4 or int8", j.Format)
	case !(j.Method == "rtn" || j.Method == "awq" && j.Format == quant.Int4 || j.Method == "smoothquant" && j.Format == quant.Int8):
		return nil, fmt.Errorf("sensitivity: method %q with %v, want rtn, awq (int4) or smoothquant (int8)", j.Method, j.Format)
	case j.CalibTokens < 2 || j.Eval != "" && j.EvalParagraphs < 1 || j.Seeds < 0:
		return nil, fmt.Errorf("sensitivity: %d calibration tokens, %d evaluation paragraphs, %d seeds: want at least 2, 1 and 0",
			j.CalibTokens, j.EvalParagraphs, j.Seeds)
	}
	for _, o := range j.Orders {
		if !slices.Contains(OrderNames, o) {
			return nil, fmt.Errorf("sensitivity: order %q, want some of %v", o, OrderNames)
		}
	}
	calibText, err := os.ReadFile(j.Calib)
	if err != nil {
		return nil, err
	}
	var evalText []byte
	if j.Eval != "" {
		if evalText, err = os.ReadFile(j.Eval); err != nil {
			return nil, err
		}
	}
	sum, err := fileSHA256(j.Model)
	if err != nil {
		return nil, err
	}
	m, vocab, err := loadModel(j.Model, j.Tokenizer, j.Threads)
	if err != nil {
		return nil, err
	}
	paras := eval.Paragraphs(string(calibText))
	if j.CalibParagraphs > 0 {
		paras = paras[:min(j.CalibParagraphs, len(paras))]
	}
	calib, used := CalibrationTokens(vocab, paras, j.CalibTokens, m.Config.SeqLen)
	// The group that Dim-wide rows get at the default (W2's wider rows may get a larger one, see Int4Group).
	group, err := model.Int4Group(m.Config.Dim, quant.DefaultGroup)
	if err != nil {
		return nil, err
	}
	if err := prepare(m, j.Format, j.Method, calib, group); err != nil {
		return nil, err
	}
	if j.WeightOnly {
		WidenVariants(m, j.Format)
	}
	spec := Spec{
		Model:        ModelInfo{Name: filepath.Base(j.Model), SHA256: sum},
		Quantizer:    Quantizer{Format: j.Format.String(), Method: j.Method, WeightOnly: j.WeightOnly},
		Calibration:  TextInfo{Name: filepath.Base(j.Calib), Paragraphs: used},
		Calib:        calib,
		Orders:       j.Orders,
		Seeds:        j.Seeds,
		AllKs:        j.AllKs,
		Options:      Options{Weights: j.Weights, Progress: j.Progress},
		EvalProgress: j.EvalProgress,
	}
	if j.Format == quant.Int4 {
		spec.Quantizer.Group = group
	}
	if evalText != nil {
		ep := eval.Paragraphs(string(evalText))
		off := j.EvalOffset
		if off < 0 {
			off = 0
			if same, _ := sameFile(j.Calib, j.Eval); same {
				off = used
			}
		}
		if off+j.EvalParagraphs > len(ep) {
			return nil, fmt.Errorf("%s: %d paragraphs, want %d after skipping %d", j.Eval, len(ep), j.EvalParagraphs, off)
		}
		spec.Eval = ep[off : off+j.EvalParagraphs]
		spec.Evaluation = TextInfo{Name: filepath.Base(j.Eval), Offset: off}
	}
	return Build(m, vocab, spec)
}

// loadModel opens the checkpoint and builds the model in its stored precision (the profile's full precision),
// with its vocabulary or the tokenizer file's.
func loadModel(path, tokenizerPath string, threads int) (*model.Model, *tokenizer.Vocab, error) {
	cpu.SetThreads(threads)
	ck, err := model.Load(path)
	if err != nil {
		return nil, nil, err
	}
	defer ck.Close()
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	vocab := ck.Vocab
	if tokenizerPath != "" {
		if vocab, err = tokenizer.LoadBin(tokenizerPath); err != nil {
			return nil, nil, err
		}
	}
	if vocab == nil {
		return nil, nil, fmt.Errorf("%s has no vocabulary: give a tokenizer file", path)
	}
	if vocab.Len() != m.Config.VocabSize {
		return nil, nil, fmt.Errorf("tokenizer has %d tokens, the model %d", vocab.Len(), m.Config.VocabSize)
	}
	return m, vocab, nil
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

// WidenVariants replaces every layer's f variant with its weights widened to float32 (quant.Matrix.Dequantize):
// the same quantized values, multiplied with float activations by the F32 kernels, which is what a weight-only
// kernel (W8A16, W4A16) computes, up to the order of its float sums.
func WidenVariants(m *model.Model, f quant.Format) {
	for _, layer := range m.Layers {
		v, ok := layer.Variants[f]
		if !ok {
			continue
		}
		w := &model.LayerWeights{AttnNorm: v.AttnNorm, FFNNorm: v.FFNNorm}
		dst := []**quant.Matrix{&w.Wq, &w.Wk, &w.Wv, &w.Wo, &w.W1, &w.W2, &w.W3}
		for i, q := range v.Matrices() {
			*dst[i] = &quant.Matrix{Format: quant.F32, Rows: q.Rows, Cols: q.Cols, F32: q.Dequantize()}
		}
		layer.Variants[f] = w
	}
}

func fileSHA256(path string) (string, error) {
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
