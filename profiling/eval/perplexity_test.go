package eval

import (
	"math"
	"os"
	"strings"
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

// TestSlidingWindowStrides checks that every token after BOS is scored once for strides from 1 to the window,
// and that stride == window, whose windows each start one token before the first one they score, is the same
// measurement as stride == window-1, bit for bit.
func TestSlidingWindowStrides(t *testing.T) {
	m, vocab := klModel(t)
	text := strings.Join(klText, " ")
	toks := len(vocab.Encode(text, true, false))
	const window = 16
	if toks < 3*window {
		t.Fatalf("the text has %d tokens, want at least %d for several windows", toks, 3*window)
	}
	results := map[int]Result{}
	for _, stride := range []int{1, 5, window - 1, window} {
		r, err := SlidingWindow(m, vocab, text, window, stride)
		if err != nil {
			t.Fatalf("stride %d: %v", stride, err)
		}
		if r.Tokens != toks-1 || math.IsNaN(r.NLL) || r.NLL <= 0 {
			t.Fatalf("stride %d: %d tokens, NLL %v; want %d tokens and a positive NLL", stride, r.Tokens, r.NLL, toks-1)
		}
		results[stride] = r
	}
	if a, b := results[window], results[window-1]; a.NLL != b.NLL {
		t.Errorf("stride %d: NLL %v, want stride %d's %v", window, a.NLL, window-1, b.NLL)
	}
	for _, bad := range [][2]int{{window, 0}, {window, window + 1}, {1, 1}, {m.Config.SeqLen + 1, 1}} {
		if _, err := SlidingWindow(m, vocab, text, bad[0], bad[1]); err == nil {
			t.Errorf("window=%d stride=%d: no error", bad[0], bad[1])
		}
	}
}
