package main

import (
	"fmt"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/internal/flagalias"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	register(&command{name: "costmodel", summary: "print the simulator's predicted time of each operator for a model on a device", run: runCostModel})
}

const costModelHelp = `
Costmodel prints (as a Markdown table, or JSON with --json) the simulator's cost model for one model (--model, from the catalog) on one device (--device):
each operator's predicted time, FLOPs and bytes at --tokens tokens, with the decoder layers' weights in
--dtype, under Vidur's operator names (emb, input_layernorm, attn_pre_proj, attn_rope, attn_post_proj,
post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add), so that a prediction can be held against a
measured profile. Per-layer operators are one layer's; add runs twice a layer. Attention is shown for a prompt
chunk of --tokens tokens ending at --context positions (attn_prefill) and for --tokens sequences decoding at
--context positions each (attn_decode); lm_head is the classifier over --tokens rows. The efficiencies are the
catalog's, fitted to Vidur's A100 profile of Llama-2-7B; on the cpu device they are not what this machine
reaches (its step times come from 'morphlab calibrate').`

// costModelOutput is what --json prints.
type costModelOutput struct {
	Model   string             `json:"model"`
	Device  string             `json:"device"`
	Format  string             `json:"format"`
	KV      string             `json:"kv"`
	Tokens  int                `json:"tokens"`
	Context int                `json:"context"`
	Ops     []costmodel.OpTime `json:"ops"`
	// Step times of one iteration over all layers: the prompt chunk, and the decode batch.
	PrefillStepSeconds float64 `json:"prefill_step_s"`
	DecodeStepSeconds  float64 `json:"decode_step_s"`
}

func runCostModel(e *env, args []string) error {
	fs := e.flags("--model M --device D --tokens N [flags]", costModelHelp)
	modelName := fs.String("model", "", "catalog `model` (llama-2-7b, llama-3-8b, codellama-34b, ...)")
	device := fs.String("device", "", "catalog `device` (l4, a40, a100, h100, h200, cpu)")
	flagalias.Deprecate(fs, "gpu", "device")
	tokens := fs.Int("tokens", 0, "`tokens` in the batch")
	context := fs.Int("context", 0, "cache `positions` attention reads (default: --tokens)")
	format := fs.String("dtype", "f16", "decoder layers' weight `format`: f16, int8 or int4")
	flagalias.Deprecate(fs, "format", "dtype")
	kvFlag := fs.String("kv-cache-dtype", "f16", "KV cache element `type`: f32, f16 or int8")
	flagalias.Deprecate(fs, "kv-type", "kv-cache-dtype")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *modelName == "" || *device == "" || *tokens <= 0 {
		return usagef("--model, --device and --tokens (> 0) are required")
	}
	m, err := catalog.ModelByName(*modelName)
	if err != nil {
		return usagef("--model: %v", err)
	}
	hw, err := catalog.HardwareByName(*device)
	if err != nil {
		return usagef("--device: %v", err)
	}
	f, err := quant.ParseFormat(*format)
	if err != nil || (f != quant.F16 && f != quant.Int8 && f != quant.Int4) {
		return usagef("--dtype %q, want f16, int8 or int4", *format)
	}
	kv, err := model.ParseKVType(*kvFlag)
	if err != nil {
		return usagef("--kv-cache-dtype: %v", err)
	}
	ctx := *context
	if ctx == 0 {
		ctx = *tokens
	}
	if ctx < *tokens || ctx > m.Config.SeqLen {
		return usagef("--context %d, want %d..%d (the tokens to the model's context)", ctx, *tokens, m.Config.SeqLen)
	}
	cm, err := costmodel.New(m.Config, hw, catalog.Params(), kv, quant.F16)
	if err != nil {
		return err
	}
	b := cm.Breakdown(*tokens, ctx, f)
	out := costModelOutput{Model: m.Name, Device: hw.Name, Format: f.String(), KV: kv.String(), Tokens: *tokens, Context: ctx, Ops: b.Ops,
		PrefillStepSeconds: b.Prefill.Seconds(), DecodeStepSeconds: b.Decode.Seconds()}
	if *asJSON {
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "%s on %s, %s layers, %s KV, %d tokens, context %d\n\n", m.Name, hw.Name, f, kv, *tokens, ctx)
	var rows [][]string
	for _, op := range b.Ops {
		per := fmt.Sprintf("%d", op.Count)
		if op.Op != costmodel.OpEmbedding && op.Op != costmodel.OpFinalNorm && op.Op != costmodel.OpClassifier {
			per = fmt.Sprintf("%d × %d layers", op.Count, m.Config.NLayers)
		}
		rows = append(rows, []string{op.Op, numfmt.Figure(op.Seconds * 1e3), numfmt.Figure(op.FLOPs / 1e9), numfmt.Figure(op.Bytes / 1e6), per})
	}
	if err := mdtable.Write(e.stdout, []string{"op", "ms", "GFLOP", "MB", "per step"}, rows); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nstep: prompt chunk %s ms, decode batch %s ms\n", numfmt.Figure(out.PrefillStepSeconds*1e3), numfmt.Figure(out.DecodeStepSeconds*1e3))
	return nil
}
