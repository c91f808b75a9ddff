// Package modeltest gives tests the real models of the shared data, loaded and ready to run, or skips the test
// with a one-line reason when the data is absent.
package modeltest

import (
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
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
