package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/quant"
)

// TestCostModelJSON: the operators come out under Vidur's names, in a layer's order, with the catalog cost
// model's times.
func TestCostModelJSON(t *testing.T) {
	code, stdout, stderr := runCLI("costmodel", "--model", "llama-2-7b", "--device", "a100", "--tokens", "256", "--dtype", "int8", "--context", "1024", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out costModelOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range out.Ops {
		names = append(names, op.Op)
	}
	want := []string{"emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_prefill", "attn_decode", "attn_post_proj", "add",
		"post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "norm", "lm_head"}
	if !slices.Equal(names, want) {
		t.Fatalf("ops %v, want %v", names, want)
	}
	m, _ := catalog.ModelByName("llama-2-7b")
	hw, _ := catalog.HardwareByName("a100")
	cm, err := costmodel.New(m.Config, hw, catalog.Params(), model.KVF16, quant.F16)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := cm.OpTime(costmodel.OpUpProj, 256, quant.Int8)
	if out.Ops[9].Seconds != up.Seconds || out.Format != "int8" || out.Device != "a100" || out.Context != 1024 || !(out.PrefillStepSeconds > 0 && out.DecodeStepSeconds > 0) {
		t.Fatalf("output %+v: want mlp_up_proj %g s", out, up.Seconds)
	}
	code, stdout, _ = runCLI("costmodel", "--model", "llama-2-7b", "--device", "a40", "--tokens", "1")
	if code != 0 || !strings.Contains(stdout, "attn_pre_proj") || !strings.Contains(stdout, "× 32 layers") {
		t.Fatalf("table: exit %d\n%s", code, stdout)
	}
}

func TestCostModelUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--model", "llama-2-7b", "--device", "a100"},
		{"--model", "gpt", "--device", "a100", "--tokens", "1"},
		{"--model", "llama-2-7b", "--device", "tpu", "--tokens", "1"},
		{"--model", "llama-2-7b", "--device", "a100", "--tokens", "1", "--dtype", "q8_0"},
		{"--model", "llama-2-7b", "--device", "a100", "--tokens", "8", "--context", "4"},
		{"--model", "llama-2-7b", "--device", "a100", "--tokens", "8", "--kv-cache-dtype", "f8"},
	} {
		code, _, stderr := runCLI(append([]string{"costmodel"}, args...)...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "morphlab costmodel: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
}

// TestCalibrate times stories260K's shape over the default grid (13 steps in each of 3 layer configurations) and
// checks the file the simulator reads.
func TestCalibrate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cpu.json")
	code, stdout, stderr := runCLI("calibrate", "--model", "stories260K", "--formats", "f32,int4", "--reps", "1", "--clock", "cpu", "--out", out)
	if code != 0 || !strings.Contains(stdout, "int4 a layer-token") || !strings.Contains(stdout, "cpu clock") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	c, err := costmodel.LoadCalibration(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := model.ShapeByName("stories260K")
	if err := c.Check(cfg, []quant.Format{quant.F32, quant.Int4}); err != nil {
		t.Fatal(err)
	}
	if c.Steps != 39 || c.KV != "f32" || c.Model != "stories260K" || c.Clock != "cpu" || !(c.MAPE >= 0 && c.MAPE < 1000) {
		t.Fatalf("calibration %+v: want %d steps", c, 39)
	}
	for _, args := range [][]string{
		{"--model", "stories260K"},
		{"--model", "stories260K", "--out", out, "--formats", "f33"},
		{"--model", "stories260K", "--out", out, "--reps", "0"},
		{"--model", "stories260K", "--out", out, "--clock", "gpu"},
	} {
		if code, _, stderr := runCLI(append([]string{"calibrate"}, args...)...); code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
	if code, _, stderr := runCLI("calibrate", "--model", filepath.Join(t.TempDir(), "none.bin"), "--out", out); code != 1 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("a missing checkpoint: exit %d, stderr %q; want 1 and one line", code, stderr)
	}
}
