package catalog

import (
	"strings"
	"testing"
)

const vidurHeader = "time_stats.emb.median,time_stats.input_layernorm.median,time_stats.attn_pre_proj.median,time_stats.attn_rope.median," +
	"time_stats.attn_post_proj.median,time_stats.post_attention_layernorm.median,time_stats.mlp_up_proj.median," +
	"time_stats.mlp_act.median,time_stats.mlp_down_proj.median,time_stats.add.median,n_head,n_kv_head,n_embd,n_expanded_embd," +
	"vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n"

func TestReadVidur(t *testing.T) {
	rows, err := ReadVidur(strings.NewReader(vidurHeader+
		"0.2,0.005,0.065,0.005,0.025,0.004,0.116,0.007,0.06,0.002,32,32,4096,11008,32768,True,1,1\n"), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Tokens != 1 || rows[0].Embd != 4096 || rows[0].Median["mlp_up_proj"] != 0.116 {
		t.Fatalf("rows %+v", rows)
	}
	for name, body := range map[string]string{
		"x.csv:2: num_tokens":     "0.2,0.005,0.065,0.005,0.025,0.004,0.116,0.007,0.06,0.002,32,32,4096,11008,32768,True,x,1\n",
		"x.csv:2: time_stats.add": "0.2,0.005,0.065,0.005,0.025,0.004,0.116,0.007,0.06,-1,32,32,4096,11008,32768,True,1,1\n",
		"x.csv: no profiled rows": "",
		"header has no column":    "SKIP",
		"wrong number of fields":  "1,2\n",
	} {
		in := vidurHeader + body
		if body == "SKIP" {
			in = "a,b\n1,2\n"
		}
		if _, err := ReadVidur(strings.NewReader(in), "x.csv"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%q: error %v, want one naming %q", body, err, name)
		}
	}
}

func FuzzReadVidur(f *testing.F) {
	f.Add(vidurHeader + "0.2,0.005,0.065,0.005,0.025,0.004,0.116,0.007,0.06,0.002,32,32,4096,11008,32768,True,1,1\n")
	f.Add(vidurHeader + "0.2,0.005\n")
	f.Add("n_head\n1\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadVidur(strings.NewReader(in), "f.csv")
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.Tokens <= 0 || len(r.Median) != len(VidurOps) {
				t.Fatalf("accepted row %+v", r)
			}
		}
	})
}

func TestCatalog(t *testing.T) {
	for _, m := range Models {
		if err := m.Config.Validate(); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
	}
	if _, err := ModelByName("gpt-5"); err == nil || !strings.Contains(err.Error(), "llama-2-7b") {
		t.Errorf("unknown model: %v", err)
	}
	a100, err := HardwareByName("a100")
	if err != nil || a100.F16FLOPS != 312e12 || a100.Bandwidth != 2039e9 {
		t.Errorf("a100: %+v, %v", a100, err)
	}
	if _, err := HardwareByName("tpu"); err == nil {
		t.Error("unknown device accepted")
	}
	if p := Params(); !(p.Linear.Compute.Max > 0.5 && p.Linear.Compute.Max < 1) {
		t.Errorf("fitted linear compute efficiency %+v", p.Linear.Compute)
	}
}
