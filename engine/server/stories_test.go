package server

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model/modeltest"
	"github.com/morphlab/morphlab/internal/datadir"
)

// TestStories260K serves the real stories260K with its tok512 tokenizer: a greedy completion of "Once upon a
// time" is the start of llama2.c's own greedy output (stories260K_expected_t0_n200.txt), and a stop string "."
// ends it at the first sentence. Its twin on generated data is TestCompletion.
func TestStories260K(t *testing.T) {
	m, vocab := modeltest.Stories260K(t)
	expected, err := os.ReadFile(datadir.ForTest(t, "models/stories260K_expected_t0_n200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 128}, BlockSize: 16, MaxBatchedTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(x, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: "stories260K", Vocab: vocab, Engine: eng, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, s).url
	const prompt = "Once upon a time"
	got, reason, u := complete(t, ts, `{"model": "stories260K", "prompt": "`+prompt+`", "max_tokens": 100, "temperature": 0}`, false)
	if !strings.HasPrefix(string(expected), prompt+got) || reason != "length" || u.CompletionTokens != 100 || len(got) < 200 {
		t.Errorf("completion %q (%s, %+v), want 100 tokens continuing %q as llama2.c does: %.300q", got, reason, u, prompt, expected)
	}
	first := strings.Index(string(expected), ".")
	got, reason, _ = complete(t, ts, `{"model": "stories260K", "prompt": "`+prompt+`", "max_tokens": 100, "temperature": 0, "stop": ".", "stream": true}`, true)
	if want := string(expected[len(prompt):first]); got != want || reason != "stop" {
		t.Errorf("with stop \".\": %q (%s), want %q (stop)", got, reason, want)
	}
}
