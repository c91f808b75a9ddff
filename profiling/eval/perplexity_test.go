package eval

import (
	"math"
	"os"
	"testing"

	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/internal/datadir"
)

// TestStoriesPerParagraph checks the figure SOURCES.md gives for FP32 stories260K on tinystories_val.txt:
// 381,594 scored tokens, perplexity 5.3749.
func TestStoriesPerParagraph(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: scores 380k tokens")
	}
	m, vocab := modeltest.Stories260K(t)
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
