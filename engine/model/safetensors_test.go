package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hfPermute is Hugging Face's convert_llama_weights_to_hf.py permute, written as its tensor expression reads:
// w.view(heads, headDim/2, 2, in).transpose(1, 2).reshape(rows, in). It maps consecutive-pair rows to HF's
// rotate-half rows.
func hfPermute(t *Tensor, heads int) *Tensor {
	rows := t.Shape[0]
	rowBytes := len(t.Data) / rows
	half := rows / heads / 2
	out := make([]byte, len(t.Data))
	for h := 0; h < heads; h++ { // view index [h][a][b] with a < half, b < 2; transposed index [h][b][a]
		for a := 0; a < half; a++ {
			for b := 0; b < 2; b++ {
				src := (h*half+a)*2 + b
				dst := (h*2+b)*half + a
				copy(out[dst*rowBytes:], t.Data[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return &Tensor{Name: t.Name, Type: t.Type, Shape: t.Shape, Data: out}
}

// toHF renames a checkpoint's tensors to Hugging Face names and applies HF's Q/K permutation.
func toHF(ck *Checkpoint) map[string]*Tensor {
	c := ck.Config
	out := map[string]*Tensor{"model.embed_tokens.weight": ck.Tensors[TokenEmbd], "model.norm.weight": ck.Tensors[OutputNorm]}
	if o, ok := ck.Tensors[Output]; ok {
		out["lm_head.weight"] = o
	}
	for l := 0; l < c.NLayers; l++ {
		for hf, part := range hfLayerParts {
			t := ck.Tensors[LayerTensor(l, part)]
			switch part {
			case AttnQ:
				t = hfPermute(t, c.NHeads)
			case AttnK:
				t = hfPermute(t, c.NKVHeads)
			}
			out[fmt.Sprintf("model.layers.%d.%s.weight", l, hf)] = t
		}
	}
	out["model.layers.0.self_attn.rotary_emb.inv_freq"] = NewF32Tensor("inv", []int{8}, make([]float32, 8))
	return out
}

var hfDtypes = map[TensorType]string{F32: "F32", F16: "F16", BF16: "BF16"}

// encodeSafetensors lays tensors out as a safetensors file, in name order, header padded to 8 bytes.
func encodeSafetensors(tensors map[string]*Tensor) []byte {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var body []byte
	for _, n := range names {
		t := tensors[n]
		header[n] = map[string]any{"dtype": hfDtypes[t.Type], "shape": t.Shape,
			"data_offsets": []int{len(body), len(body) + len(t.Data)}}
		body = append(body, t.Data...)
	}
	h, _ := json.Marshal(header)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), body...)
}

func hfConfigJSON(c Config) []byte {
	b, _ := json.Marshal(map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_act": "silu",
		"hidden_size": c.Dim, "intermediate_size": c.HiddenDim, "num_hidden_layers": c.NLayers,
		"num_attention_heads": c.NHeads, "num_key_value_heads": c.NKVHeads, "vocab_size": c.VocabSize,
		"max_position_embeddings": c.SeqLen, "rope_theta": c.RopeTheta, "rms_norm_eps": c.NormEps,
		"tie_word_embeddings": c.TiedEmbeddings, "rope_scaling": nil, "torch_dtype": "float32",
	})
	return b
}

func writeHFDir(t *testing.T, ck *Checkpoint) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), hfConfigJSON(ck.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), encodeSafetensors(toHF(ck)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSafetensorsRoundTrip(t *testing.T) {
	for _, tied := range []bool{true, false} {
		ck := randomCheckpoint(tinyConfig(tied), 13)
		// Two tensors in 16-bit types (random bits: loading keeps bytes and permutes whole rows).
		for i, part := range []string{AttnQ, AttnK} {
			old := ck.Tensors[LayerTensor(1, part)]
			data := make([]byte, old.Elements()*2)
			for j := range data {
				data[j] = byte(j*7 + i)
			}
			ck.Tensors[old.Name] = &Tensor{Name: old.Name, Type: []TensorType{F16, BF16}[i], Shape: old.Shape, Data: data}
		}
		got, err := LoadSafetensors(writeHFDir(t, ck))
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, ck, got)
		if err := got.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSafetensorsSharded(t *testing.T) {
	ck := randomCheckpoint(tinyConfig(false), 14)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), hfConfigJSON(ck.Config), 0o644)
	shards := []map[string]*Tensor{{}, {}}
	weightMap := map[string]string{}
	for name, tensor := range toHF(ck) {
		i := len(name) % 2
		shards[i][name] = tensor
		weightMap[name] = fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
	}
	for i, s := range shards {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)), encodeSafetensors(s), 0o644)
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644)
	got, err := LoadSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	sameTensors(t, ck, got)
}

// TestUnpermuteRoPEScores checks the meaning of the re-ordering, not only that it inverts hfPermute: attention
// scores q·k after HF's rotate-half RoPE on HF's q_proj/k_proj equal the scores after consecutive-pair RoPE
// (run.c's) on the loaded weights, for every head pair (with GQA) and several positions.
func TestUnpermuteRoPEScores(t *testing.T) {
	c := tinyConfig(true)
	ck := randomCheckpoint(c, 15)
	hf := toHF(ck)
	loaded, err := LoadSafetensors(writeHFDir(t, ck))
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	r := rand.New(rand.NewPCG(16, 17))
	x := make([]float64, c.Dim)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	hd := c.HeadDim()
	matvec := func(w []float32) []float64 {
		y := make([]float64, len(w)/c.Dim)
		for o := range y {
			for i, xi := range x {
				y[o] += float64(w[o*c.Dim+i]) * xi
			}
		}
		return y
	}
	angle := func(pos, i int) float64 { return float64(pos) * math.Pow(c.RopeTheta, -2*float64(i)/float64(hd)) }
	rotateHalf := func(v []float64, pos int) []float64 {
		out := slices.Clone(v)
		for h := 0; h < len(v)/hd; h++ {
			for i := 0; i < hd/2; i++ {
				a, b := v[h*hd+i], v[h*hd+hd/2+i]
				cos, sin := math.Cos(angle(pos, i)), math.Sin(angle(pos, i))
				out[h*hd+i], out[h*hd+hd/2+i] = a*cos-b*sin, b*cos+a*sin
			}
		}
		return out
	}
	pairs := func(v []float64, pos int) []float64 {
		out := slices.Clone(v)
		for h := 0; h < len(v)/hd; h++ {
			for i := 0; i < hd/2; i++ {
				a, b := v[h*hd+2*i], v[h*hd+2*i+1]
				cos, sin := math.Cos(angle(pos, i)), math.Sin(angle(pos, i))
				out[h*hd+2*i], out[h*hd+2*i+1] = a*cos-b*sin, a*sin+b*cos
			}
		}
		return out
	}
	dot := func(q, k []float64, h int) float64 {
		kh := h / (c.NHeads / c.NKVHeads)
		var s float64
		for i := 0; i < hd; i++ {
			s += q[h*hd+i] * k[kh*hd+i]
		}
		return s
	}
	for l := 0; l < c.NLayers; l++ {
		qHF := matvec(hf[fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", l)].F32())
		kHF := matvec(hf[fmt.Sprintf("model.layers.%d.self_attn.k_proj.weight", l)].F32())
		q := matvec(loaded.Tensors[LayerTensor(l, AttnQ)].F32())
		k := matvec(loaded.Tensors[LayerTensor(l, AttnK)].F32())
		for _, pos := range [][2]int{{0, 0}, {5, 2}, {31, 17}} {
			a, b := rotateHalf(qHF, pos[0]), rotateHalf(kHF, pos[1])
			p, s := pairs(q, pos[0]), pairs(k, pos[1])
			for h := 0; h < c.NHeads; h++ {
				want, got := dot(a, b, h), dot(p, s, h)
				if math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
					t.Fatalf("layer %d head %d positions %v: score %g, HF %g", l, h, pos, got, want)
				}
			}
		}
	}
}

func TestSafetensorsErrors(t *testing.T) {
	ck := randomCheckpoint(tinyConfig(false), 18)
	good := encodeSafetensors(toHF(ck))
	hlen := binary.LittleEndian.Uint64(good)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", good[:5], "m.safetensors: 5 bytes, too short"},
		{"header length", binary.LittleEndian.AppendUint64(nil, 1<<40), "header length 1099511627776"},
		{"json", append(binary.LittleEndian.AppendUint64(nil, 2), "{x"...), "m.safetensors: safetensors header:"},
		{"dtype", bytes.Replace(good, []byte(`"dtype":"F32","shape":[64]`), []byte(`"dtype":"I64","shape":[64]`), 1),
			`dtype "I64" not supported`},
		{"offsets", bytes.Replace(good, []byte(`"data_offsets":[0,`), []byte(`"data_offsets":[4,`), 1),
			"m.safetensors: safetensors tensor lm_head.weight: data_offsets [4 20480]"},
		{"truncated", good[:8+hlen+100], "data_offsets"},
	} {
		_, _, err := ParseSafetensors("m.safetensors", c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line containing %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name, json, want string
	}{
		{"rope scaling", `{"hidden_size":64,"rope_scaling":{"rope_type":"llama3"}}`, "rope_scaling"},
		{"model type", `{"model_type":"mistral"}`, `model_type "mistral"`},
		{"heads", `{"hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":5,` +
			`"vocab_size":80,"max_position_embeddings":32}`, "dim=64 is not a multiple of n_heads=5"},
		{"head dim", `{"hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,` +
			`"vocab_size":80,"max_position_embeddings":32,"head_dim":32}`, "head_dim 32"},
	} {
		_, err := ParseHFConfig("config.json", []byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// A tensor whose shape disagrees with config.json, and a missing tensor.
	dir := writeHFDir(t, ck)
	cfg := ck.Config
	cfg.HiddenDim = 128
	os.WriteFile(filepath.Join(dir, "config.json"), hfConfigJSON(cfg), 0o644)
	if _, err := LoadSafetensors(dir); err == nil || !strings.Contains(err.Error(), "blk.0.ffn_gate.weight: shape [96 64], want [128 64]") {
		t.Errorf("shape mismatch: %v", err)
	}
	hf := toHF(ck)
	delete(hf, "model.layers.1.mlp.up_proj.weight")
	os.WriteFile(filepath.Join(dir, "config.json"), hfConfigJSON(ck.Config), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), encodeSafetensors(hf), 0o644)
	if _, err := LoadSafetensors(dir); err == nil || !strings.Contains(err.Error(), "tensor blk.1.ffn_up.weight missing") {
		t.Errorf("missing tensor: %v", err)
	}
	os.Remove(filepath.Join(dir, "model.safetensors"))
	if _, err := LoadSafetensors(dir); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("no weights: %v", err)
	}
}

func TestCanonicalHFName(t *testing.T) {
	for in, want := range map[string]string{
		"model.embed_tokens.weight":                    TokenEmbd,
		"lm_head.weight":                               Output,
		"model.layers.12.self_attn.o_proj.weight":      "blk.12.attn_output.weight",
		"model.layers.3.mlp.down_proj.weight":          "blk.3.ffn_down.weight",
		"model.layers.03.mlp.down_proj.weight":         "",
		"model.layers.1.self_attn.rotary_emb.inv_freq": "",
		"model.layers.x.mlp.up_proj.weight":            "",
	} {
		if got := canonicalHFName(in); got != want {
			t.Errorf("canonicalHFName(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseSafetensors(f *testing.F) {
	cfg := Config{Dim: 8, HiddenDim: 12, NLayers: 1, NHeads: 2, NKVHeads: 1, VocabSize: 6, SeqLen: 4,
		RopeTheta: 10000, NormEps: 1e-5}
	f.Add(encodeSafetensors(toHF(randomCheckpoint(cfg, 19))))
	f.Add(encodeSafetensors(map[string]*Tensor{"x": {Type: BF16, Shape: []int{2}, Data: []byte{1, 2, 3, 4}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		tensors, _, err := ParseSafetensors("fuzz", data)
		if err != nil {
			return
		}
		for name, x := range tensors {
			if want, err := x.Type.Bytes(x.Elements(), 0); err != nil || want != len(x.Data) {
				t.Fatalf("tensor %s: %d bytes for %v %v", name, len(x.Data), x.Type, x.Shape)
			}
		}
	})
}
