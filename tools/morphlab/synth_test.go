package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
)

// TestSynthGGUF synthesizes stories260K's shape to GGUF, checks the file holds exactly SynthesizeAs's tensors and
// vocabulary, and runs generate on it end to end.
func TestSynthGGUF(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.gguf")
	code, stdout, stderr := runCLI("synth", "--shape", "stories260K", "--seed", "3", "--type", "f16", "--out", out)
	if code != 0 || !strings.Contains(stdout, "stories260K") {
		t.Fatalf("synth: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	ck, err := model.LoadGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, _ := model.ShapeByName("stories260K")
	want, err := model.SynthesizeAs(cfg, 3, model.F16)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Config != cfg || len(ck.Tensors) != len(want.Tensors) || ck.Vocab == nil ||
		!slicesEq(ck.Vocab.Pieces, want.Vocab.Pieces) {
		t.Fatalf("synth file: config %+v, %d tensors, vocabulary %v; want %+v, %d tensors and SynthVocab",
			ck.Config, len(ck.Tensors), ck.Vocab != nil, cfg, len(want.Tensors))
	}
	for name, w := range want.Tensors {
		if g := ck.Tensors[name]; g == nil || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("synth file: tensor %s differs from SynthesizeAs's", name)
		}
	}
	code, stdout, stderr = runCLI("generate", "--model", out, "--prompt", "Once upon", "--max-tokens", "8",
		"--temperature", "0")
	if code != 0 || stdout == "" || !strings.Contains(stderr, "generated: ") {
		t.Errorf("generate on the synthetic model: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestSynthBin writes llama2.c v0 and its tokenizer.bin and checks both load back.
func TestSynthBin(t *testing.T) {
	dir := t.TempDir()
	out, tok := filepath.Join(dir, "s.bin"), filepath.Join(dir, "tok.bin")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", out, "--tokenizer-out", tok, "--json"); code != 0 {
		t.Fatalf("synth .bin: exit %d, stderr %q", code, stderr)
	}
	ck, err := model.LoadLlama2c(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, _ := model.ShapeByName("stories260K")
	want := model.Synthesize(cfg, 1)
	for name, w := range want.Tensors {
		if !bytes.Equal(ck.Tensors[name].Data, w.Data) {
			t.Fatalf("tensor %s differs from Synthesize's", name)
		}
	}
	v, err := tokenizer.LoadBin(tok)
	if err != nil || !slicesEq(v.Pieces, want.Vocab.Pieces) {
		t.Fatalf("tokenizer-out: %v, or pieces differ from SynthVocab's", err)
	}
}

func TestSynthErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"synth", "--out", "x.gguf"}, 2, "--shape and --out are required"},
		{[]string{"synth", "--shape", "gpt2", "--out", "x.gguf"}, 2, `unknown shape "gpt2" (shapes: stories260K,`},
		{[]string{"synth", "--shape", "stories260K", "--type", "q5", "--out", "x.gguf"}, 2, `--type="q5", want f32`},
		{[]string{"synth", "--shape", "stories260K", "--type", "f16", "--out", "x.bin"}, 2, "llama2.c .bin files hold f32"},
		{[]string{"synth", "--shape", "stories260K", "--out", "x.txt"}, 2, "want a .gguf or .bin"},
		{[]string{"synth", "--shape", "stories260K", "--type", "q4_0", "--out", filepath.Join(dir, "q.gguf")}, 1,
			"blk.0.ffn_down.weight"},
		{[]string{"synth", "--shape", "llama3-8b", "--type", "q4_0", "--out", filepath.Join(dir, "l3.bin")}, 2,
			"llama2.c .bin files hold f32"},
	} {
		code, stdout, stderr := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("morphlab %s: exit %d, stderr %q, stdout %q; want exit %d and one line containing %q",
				strings.Join(tc.args, " "), code, stderr, stdout, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "q.gguf")); !os.IsNotExist(err) {
		t.Errorf("a failed synth left a file behind (%v)", err)
	}
}

func slicesEq(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
