package model

import (
	"os"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
)

// greedyRunC reproduces llama2.c run.c's generation loop with an empty prompt: feed BOS, then each argmax token,
// printing each piece as it follows the previous token, stopping at BOS or after steps forwards, then a newline.
func greedyRunC(t *testing.T, m *Model, vocab *tokenizer.Vocab, steps int) string {
	t.Helper()
	seq, err := NewSequence(m, steps)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	token := int32(vocab.BOS)
	for pos := 0; pos < steps; pos++ {
		logits, err := seq.Feed([]int32{token}, false)
		if err != nil {
			t.Fatal(err)
		}
		next := int32(sample.Argmax(logits))
		if int(next) == vocab.BOS {
			break
		}
		out.Write(vocab.Decode(int(token), int(next)))
		token = next
	}
	out.WriteString("\n")
	return out.String()
}

func loadStories(t *testing.T, file string) *Model {
	t.Helper()
	path := datadir.ForTest(t, "models/"+file)
	var ck *Checkpoint
	var err error
	if strings.HasSuffix(file, ".gguf") {
		ck, err = LoadGGUF(path)
	} else {
		ck, err = LoadLlama2c(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := FromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGreedyMatchesRunC: greedy generation of 200 steps from stories260K prints exactly what llama2.c's run.c
// printed (the golden file in the shared data), from the llama2.c and the GGUF copies of the model.
func TestGreedyMatchesRunC(t *testing.T) {
	want, err := os.ReadFile(datadir.ForTest(t, "models/stories260K_expected_t0_n200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := tokenizer.LoadBin(datadir.ForTest(t, "models/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"stories260K.bin", "stories260K.gguf"} {
		got := greedyRunC(t, loadStories(t, file), vocab, 200)
		if got != string(want) {
			t.Errorf("%s: greedy output differs from run.c's\ngot:  %q\nwant: %q", file, got, want)
		}
	}
}
