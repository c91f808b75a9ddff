package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/profiling/sensitivity"
)

// profileText is a small calibration and evaluation text: paragraphs separated by blank lines.
const profileText = "once upon a time there was a cat\n\nthe cat sat on a mat and slept\n\n" +
	"a dog came by and barked at the cat\n\nthey became friends and played all day\n\n" +
	"the sun went down and the stars came out\n\nthe end\n"

// TestProfile profiles a synthetic stories260K-shaped model end to end and checks the table, the file and the
// JSON output agree.
func TestProfile(t *testing.T) {
	dir := t.TempDir()
	src, text, out := filepath.Join(dir, "s.gguf"), filepath.Join(dir, "text.txt"), filepath.Join(dir, "p.json")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", src); code != 0 {
		t.Fatalf("synth: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(text, []byte(profileText), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"profile", "--model", src, "--format", "int8", "--calib", text, "--calib-tokens", "60",
		"--eval", text, "--eval-paragraphs", "3", "--orders", "lis,front,random", "--seeds", "2", "--all-ks", "--out", out}
	code, stdout, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("profile: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"LIS", "k=5", "random (mean of 2)", "near-additivity"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "nvml: ") || !strings.Contains(stderr, "profiled 5 layers") {
		t.Errorf("stderr %q lacks the nvml line or the timing", stderr)
	}
	p, err := sensitivity.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Calibration.Tokens != 60 || p.Calibration.Paragraphs != 3 || p.Evaluation.Offset != 3 || p.Evaluation.Paragraphs != 3 {
		t.Errorf("calibration %+v, evaluation %+v: want 60 tokens from 3 paragraphs, evaluation on the next 3", p.Calibration, *p.Evaluation)
	}
	if p.Weights != sensitivity.DefaultWeights {
		t.Errorf("weights %+v, want the default %+v", p.Weights, sensitivity.DefaultWeights)
	}
	if len(p.Model.SHA256) != 64 || p.Quantizer.Format != "int8" || len(p.Orders) != 4 {
		t.Errorf("model %+v, quantizer %+v, %d orders", p.Model, p.Quantizer, len(p.Orders))
	}
	code, stdout, stderr = runCLI(append(args[:len(args)-2], "--json")...)
	if code != 0 {
		t.Fatalf("profile --json: exit %d, stderr %q", code, stderr)
	}
	var q sensitivity.Profile
	if err := json.Unmarshal([]byte(stdout), &q); err != nil {
		t.Fatal(err)
	}
	a, _ := p.Marshal()
	b, _ := q.Marshal()
	if string(a) != string(b) {
		t.Error("--json output differs from the --out file of the same run")
	}
	if !slices.Equal(q.Order, p.Order) {
		t.Errorf("orders %v and %v", q.Order, p.Order)
	}

	// Weight-only (W8A16): the same layers' int8 weights with float activations score otherwise.
	wo := filepath.Join(dir, "wo.json")
	if code, _, stderr = runCLI(append(args[:len(args)-2], "--weight-only", "--out", wo)...); code != 0 {
		t.Fatalf("profile --weight-only: exit %d, stderr %q", code, stderr)
	}
	w, err := sensitivity.Load(wo)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Quantizer.WeightOnly || p.Quantizer.WeightOnly || w.Orders[1].Curve[4].PPL == p.Orders[1].Curve[4].PPL {
		t.Errorf("weight-only %+v, all layers PPL %v; W8A8 %+v, %v: want the flag and another figure",
			w.Quantizer, w.Orders[1].Curve[4].PPL, p.Quantizer, p.Orders[1].Curve[4].PPL)
	}

	// The plot of every curve.
	svg := filepath.Join(dir, "curves.svg")
	if code, _, stderr = runCLI(append(args[:len(args)-2], "--plot", svg)...); code != 0 {
		t.Fatalf("profile --plot: exit %d, stderr %q", code, stderr)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "random (mean of 2)", "lis [", "perplexity"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q", svg, want)
		}
	}
}

func TestProfileUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"profile", "--model", "m.bin"}, "--calib is required"},
		{[]string{"profile", "--model", "m.bin", "--calib", "c", "--format", "f16"}, "--format"},
		{[]string{"profile", "--model", "m.bin", "--calib", "c", "--format", "int8", "--method", "awq"}, "--method"},
		{[]string{"profile", "--model", "m.bin", "--calib", "c", "--orders", "lis,best"}, "unknown order \"best\""},
		{[]string{"profile", "--model", "m.bin", "--calib", "c", "--weights", "1,2"}, "--weights"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
