package eval

import (
	"math"
	"os"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
)

func loadStories(t *testing.T) (*model.Model, *tokenizer.Vocab) {
	t.Helper()
	ck, err := model.LoadLlama2c(datadir.ForTest(t, "models/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := tokenizer.LoadBin(datadir.ForTest(t, "models/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return m, vocab
}

// TestStoriesPerParagraph checks the figure SOURCES.md gives for FP32 stories260K on tinystories_val.txt:
// 381,594 scored tokens, perplexity 5.3749.
func TestStoriesPerParagraph(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: scores 380k tokens")
	}
	m, vocab := loadStories(t)
	text, err := os.ReadFile(datadir.ForTest(t, "eval/tinystories_val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := PerParagraph(m, vocab, Paragraphs(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens != 381594 || math.Abs(r.PPL-5.3749) > 0.0005 {
		t.Fatalf("stories260K: %d tokens, NLL %.6f, PPL %.4f; want 381594 tokens, PPL 5.3749 ± 0.0005", r.Tokens, r.NLL, r.PPL)
	}
	t.Logf("stories260K per-paragraph: %d tokens, NLL %.6f, PPL %.4f, %.0f tok/s", r.Tokens, r.NLL, r.PPL, r.TokensPerSecond())
}
