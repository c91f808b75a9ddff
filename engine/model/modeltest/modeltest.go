// Package modeltest gives tests the real models of the shared data, loaded and ready to run (or skips the test
// with a one-line reason when the data is absent), and the single-sequence reference that served outputs are
// checked against.
package modeltest

import (
	"slices"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/quant"
)

// Stories260K returns Karpathy's TinyStories 260K model (llama2.c file) and its tok512 vocabulary.
func Stories260K(tb testing.TB) (*model.Model, *tokenizer.Vocab) {
	tb.Helper()
	ck, err := model.LoadLlama2c(datadir.ForTest(tb, "models/stories260K.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	defer ck.Close()
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		tb.Fatal(err)
	}
	vocab, err := tokenizer.LoadBin(datadir.ForTest(tb, "models/tok512.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	return m, vocab
}

// RefStep is one step of a request as the engine ran it: the layer precisions of the step and the request's share
// of it (tokens [Start, Start+Tokens), sampled when Sample).
type RefStep struct {
	Formats []quant.Format
	Start   int
	Tokens  int
	Sample  bool
}

// Reference replays one request's steps on a single sequence over m, with each step's layer precisions, and
// returns its greedy output: what the request must have produced if serving it among others, with swaps and
// preemptions, preserved its state. A step that starts before the sequence's length is a recompute after a
// preemption and starts the sequence over.
func Reference(tb testing.TB, m *model.Model, prompt []int32, steps []RefStep) []int32 {
	tb.Helper()
	seq, err := model.NewSequence(m, m.Config.SeqLen)
	if err != nil {
		tb.Fatal(err)
	}
	tokens := slices.Clone(prompt)
	for _, st := range steps {
		for l, f := range st.Formats {
			if err := m.SetPrecision(l, f); err != nil {
				tb.Fatal(err)
			}
		}
		if st.Start < seq.Len() {
			seq.Reset()
		}
		logits, err := seq.Feed(tokens[st.Start:st.Start+st.Tokens], false)
		if err != nil {
			tb.Fatal(err)
		}
		if st.Sample {
			tokens = append(tokens, int32(sample.Argmax(logits)))
		}
	}
	return tokens[len(prompt):]
}

// Synthetic returns a model of the named shape (model.ShapeByName) with seeded random weights and, for every
// layer, the variants in the formats given.
func Synthetic(tb testing.TB, shape string, seed uint64, variants ...quant.Format) *model.Model {
	tb.Helper()
	cfg, err := model.ShapeByName(shape)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.FromCheckpoint(model.Synthesize(cfg, seed))
	if err != nil {
		tb.Fatal(err)
	}
	for l := range m.Layers {
		for _, f := range variants {
			if _, err := m.AddVariant(l, f); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return m
}
