package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
)

// TestQuantize synthesizes a model, converts two of its layers to f16 and all of a Q-compatible copy to q8_0,
// and checks the files hold the conversions ConvertLayers makes and run.
func TestQuantize(t *testing.T) {
	dir := t.TempDir()
	src, f16 := filepath.Join(dir, "s.gguf"), filepath.Join(dir, "h.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", src); code != 0 {
		t.Fatalf("synth: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runCLI("quantize", "--model", src, "--out", f16, "--format", "f16", "--layers", "0,3")
	if code != 0 || !strings.Contains(stdout, "2 of 5") {
		t.Fatalf("quantize: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	in, err := model.LoadGGUF(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	want, err := model.ConvertLayers(in, model.F16, []int{0, 3})
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.LoadGGUF(f16)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for name, w := range want.Tensors {
		if g := got.Tensors[name]; g == nil || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("quantized file: tensor %s differs from ConvertLayers's", name)
		}
	}
	if got.Tensors[model.LayerTensor(3, model.AttnQ)].Type != model.F16 || got.Tensors[model.LayerTensor(1, model.AttnQ)].Type != model.F32 {
		t.Error("quantize converted the wrong layers")
	}
	if got.Vocab == nil || got.Vocab.Len() != 512 {
		t.Error("quantize dropped the input's vocabulary")
	}
	code, stdout, stderr = runCLI("generate", "--model", f16, "--prompt", "a", "--max-tokens", "4", "--temperature", "0")
	if code != 0 || stdout == "" || !strings.Contains(stderr, "generated: ") {
		t.Errorf("generate on the quantized file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestQuantizeErrors(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "s.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", src); code != 0 {
		t.Fatalf("synth: exit %d, stderr %q", code, stderr)
	}
	out := filepath.Join(dir, "o.gguf")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--model", src, "--out", out}, 2, "--model, --out and --format are required"},
		{[]string{"--model", src, "--out", out, "--format", "int4"}, 2, `--format="int4", want f32, f16, bf16, q8_0 or q4_0`},
		{[]string{"--model", src, "--out", filepath.Join(dir, "o.bin"), "--format", "f16"}, 2, "want a .gguf file name"},
		{[]string{"--model", src, "--out", out, "--format", "f16", "--layers", "1,x"}, 2, `"x" is not a layer index`},
		{[]string{"--model", src, "--out", out, "--format", "f16", "--layers", "7"}, 1, "layer 7 out of range [0, 5)"},
		{[]string{"--model", src, "--out", out, "--format", "q4_0"}, 1, "blk.0.ffn_down.weight [64 172] to Q4_0"},
		{[]string{"--model", filepath.Join(dir, "none.gguf"), "--out", out, "--format", "f16"}, 1, "none.gguf"},
		{[]string{"--model", src, "--out", out, "--format", "f16", "--classifier-format", "int8"}, 2, `--classifier-format="int8", want f32, f16, bf16, q8_0 or q4_0`},
	} {
		code, stdout, stderr := runCLI(append([]string{"quantize"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("morphlab quantize %s: exit %d, stderr %q, stdout %q; want exit %d and one line containing %q",
				strings.Join(tc.args, " "), code, stderr, stdout, tc.code, tc.want)
		}
	}
}

// TestQuantizeClassifier converts a tied model's layers and classifier to q8_0 and checks that the file holds the
// classifier ConvertClassifier makes, untied, and that generate runs on it.
func TestQuantizeClassifier(t *testing.T) {
	dir := t.TempDir()
	src, q8 := filepath.Join(dir, "s.gguf"), filepath.Join(dir, "q.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories15M", "--out", src); code != 0 {
		t.Fatalf("synth: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runCLI("quantize", "--model", src, "--out", q8, "--format", "q8_0", "--classifier-format", "q8_0")
	if code != 0 || !strings.Contains(stdout, "q8_0") {
		t.Fatalf("quantize: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	in, err := model.LoadGGUF(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	want, err := model.ConvertClassifier(in, model.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.LoadGGUF(q8)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	w, g := want.Tensors[model.Output], got.Tensors[model.Output]
	if g == nil || g.Type != model.Q8_0 || !bytes.Equal(g.Data, w.Data) || got.Config.TiedEmbeddings {
		t.Fatalf("quantized file: classifier differs from ConvertClassifier's, or the file is still tied")
	}
	code, stdout, stderr = runCLI("generate", "--model", q8, "--prompt", "a", "--max-tokens", "4", "--temperature", "0")
	if code != 0 || stdout == "" || !strings.Contains(stderr, "generated: ") {
		t.Errorf("generate on the quantized file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
