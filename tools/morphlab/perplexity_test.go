package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPerplexityWindowFlags runs --mode window with stride == window (which once panicked) and checks that
// strides outside 1..window and windows past the context are one-line usage errors.
func TestPerplexityWindowFlags(t *testing.T) {
	dir := t.TempDir()
	src, text := filepath.Join(dir, "s.gguf"), filepath.Join(dir, "t.txt")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", src); code != 0 {
		t.Fatalf("synth: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(text, []byte(strings.Repeat("the cat sat on the mat. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("perplexity", "--model", src, "--text", text, "--mode", "window", "--window", "32",
		"--stride", "32", "--json")
	if code != 0 || !strings.Contains(stdout, `"tokens"`) {
		t.Fatalf("perplexity --window 32 --stride 32: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--window", "32", "--stride", "33"}, "--window=32 --stride=33, want"},
		{[]string{"--window", "32", "--stride", "-1"}, "--window=32 --stride=-1, want"},
		{[]string{"--window", "513"}, "want 2 <= window <= 512 (the model's context)"},
		{[]string{"--window", "1"}, "want 2 <= window <= 512 (the model's context)"},
	} {
		args := append([]string{"perplexity", "--model", src, "--text", text, "--mode", "window"}, tc.args...)
		code, stdout, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("morphlab %s: exit %d, stderr %q, stdout %q; want exit 2 and one line containing %q",
				strings.Join(args, " "), code, stderr, stdout, tc.want)
		}
	}
}
