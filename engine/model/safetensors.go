package model

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// safetensors (Hugging Face): uint64 little-endian header length N, N bytes of JSON
// {"<name>": {"dtype": "F32", "shape": [out, in], "data_offsets": [begin, end]}, ..., "__metadata__": {...}},
// then the data; offsets are relative to the byte after the header. Shapes are row-major, like Tensor's.

var safetensorsTypes = map[string]TensorType{"F32": F32, "F16": F16, "BF16": BF16}

// ParseSafetensors parses one safetensors file held in data; name is used in errors. It returns the tensors
// under their file names (data aliasing data) and the __metadata__ strings. Dtypes other than F32, F16 and BF16
// are an error naming the tensor.
func ParseSafetensors(name string, data []byte) (map[string]*Tensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("%s: %d bytes, too short for a safetensors header", name, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("%s: safetensors header length %d, but the file has %d bytes", name, n,
			len(data))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &header); err != nil {
		return nil, nil, fmt.Errorf("%s: safetensors header: %v", name, oneLine(err))
	}
	body := data[8+n:]
	tensors := map[string]*Tensor{}
	var meta map[string]string
	for key, raw := range header {
		if key == "__metadata__" {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: safetensors __metadata__: %v", name, oneLine(err))
			}
			continue
		}
		var info struct {
			Dtype       string   `json:"dtype"`
			Shape       []int    `json:"shape"`
			DataOffsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			return nil, nil, fmt.Errorf("%s: safetensors tensor %s: %v", name, key, oneLine(err))
		}
		typ, ok := safetensorsTypes[info.Dtype]
		if !ok {
			return nil, nil, fmt.Errorf("%s: safetensors tensor %s: dtype %q not supported (want F32, F16 or BF16)",
				name, key, info.Dtype)
		}
		count, ok := elements(info.Shape...)
		if !ok {
			return nil, nil, fmt.Errorf("%s: safetensors tensor %s: bad shape %v", name, key, info.Shape)
		}
		size, _ := typ.Bytes(count, 0)
		if len(info.DataOffsets) != 2 || info.DataOffsets[0] > info.DataOffsets[1] ||
			info.DataOffsets[1] > uint64(len(body)) || info.DataOffsets[1]-info.DataOffsets[0] != uint64(size) {
			return nil, nil, fmt.Errorf("%s: safetensors tensor %s: data_offsets %v for %d bytes (%s %v) in a "+
				"%d-byte data section", name, key, info.DataOffsets, size, info.Dtype, info.Shape, len(body))
		}
		b, e := info.DataOffsets[0], info.DataOffsets[1]
		tensors[key] = &Tensor{Name: key, Type: typ, Shape: slices.Clone(info.Shape), Data: body[b:e:e]}
	}
	return tensors, meta, nil
}

// oneLine keeps errors from encoding/json on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// HFConfig is the part of a Hugging Face Llama config.json that describes the model's shape.
type HFConfig struct {
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RopeTheta             float64         `json:"rope_theta"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	HeadDim               int             `json:"head_dim"`
	HiddenAct             string          `json:"hidden_act"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
}

// ParseHFConfig reads a Llama config.json. Absent fields take LlamaConfig's defaults (num_key_value_heads =
// num_attention_heads, rope_theta 10000, rms_norm_eps 1e-6). Features the engine does not implement
// (rope_scaling, a head_dim other than hidden_size/num_attention_heads, an activation other than SiLU) are errors.
func ParseHFConfig(name string, data []byte) (Config, error) {
	hf := HFConfig{RopeTheta: 10000, RMSNormEps: 1e-6}
	if err := json.Unmarshal(data, &hf); err != nil {
		return Config{}, fmt.Errorf("%s: %v", name, oneLine(err))
	}
	if hf.ModelType != "" && hf.ModelType != "llama" {
		return Config{}, fmt.Errorf("%s: model_type %q, want \"llama\"", name, hf.ModelType)
	}
	if hf.HiddenAct != "" && hf.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("%s: hidden_act %q, want \"silu\"", name, hf.HiddenAct)
	}
	if len(hf.RopeScaling) > 0 && string(hf.RopeScaling) != "null" {
		return Config{}, fmt.Errorf("%s: rope_scaling %s not supported", name, hf.RopeScaling)
	}
	if hf.NumKeyValueHeads == 0 {
		hf.NumKeyValueHeads = hf.NumAttentionHeads
	}
	cfg := Config{Dim: hf.HiddenSize, HiddenDim: hf.IntermediateSize, NLayers: hf.NumHiddenLayers,
		NHeads: hf.NumAttentionHeads, NKVHeads: hf.NumKeyValueHeads, VocabSize: hf.VocabSize,
		SeqLen: hf.MaxPositionEmbeddings, RopeTheta: hf.RopeTheta, NormEps: float32(hf.RMSNormEps),
		TiedEmbeddings: hf.TieWordEmbeddings}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	if hf.HeadDim != 0 && hf.HeadDim != cfg.HeadDim() {
		return Config{}, fmt.Errorf("%s: head_dim %d, want hidden_size/num_attention_heads = %d", name, hf.HeadDim,
			cfg.HeadDim())
	}
	return cfg, nil
}

// hfNames maps the Hugging Face Llama tensor names to the canonical ones; per-layer names use "%d".
var hfNames = map[string]string{
	"model.embed_tokens.weight": TokenEmbd,
	"model.norm.weight":         OutputNorm,
	"lm_head.weight":            Output,
}

var hfLayerParts = map[string]string{
	"input_layernorm":          AttnNorm,
	"self_attn.q_proj":         AttnQ,
	"self_attn.k_proj":         AttnK,
	"self_attn.v_proj":         AttnV,
	"self_attn.o_proj":         AttnOutput,
	"post_attention_layernorm": FFNNorm,
	"mlp.gate_proj":            FFNGate,
	"mlp.down_proj":            FFNDown,
	"mlp.up_proj":              FFNUp,
}

// canonicalHFName returns the canonical name of a Hugging Face Llama tensor name, or "" for names the model
// does not use (such as rotary_emb.inv_freq).
func canonicalHFName(n string) string {
	if c, ok := hfNames[n]; ok {
		return c
	}
	rest, ok := strings.CutPrefix(n, "model.layers.")
	if !ok {
		return ""
	}
	num, part, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	part, hasWeight := strings.CutSuffix(part, ".weight")
	if !ok || err != nil || l < 0 || !hasWeight || hfLayerParts[part] == "" || strconv.Itoa(l) != num {
		return ""
	}
	return LayerTensor(l, hfLayerParts[part])
}

// unpermuteRoPE reorders the rows of a Hugging Face q_proj or k_proj weight ({heads*headDim, in}) from HF's
// rotate-half layout, where head h's rotation pairs are rows (h*headDim+i, h*headDim+headDim/2+i), to the
// consecutive-pair layout (rows h*headDim+2i and h*headDim+2i+1) that run.c and GGUF use:
//
//	out row h*headDim + 2i + half = in row h*headDim + half*headDim/2 + i,  for i < headDim/2, half in {0, 1}
//
// It is the inverse of the permutation in HF's convert_llama_weights_to_hf.py and the same map as llama.cpp's
// convert_hf_to_gguf.py permute. The result is a new tensor; t is not changed.
func unpermuteRoPE(t *Tensor, heads int) *Tensor {
	rows := t.Shape[0]
	rowBytes := len(t.Data) / rows
	headDim := rows / heads
	out := make([]byte, len(t.Data))
	for h := 0; h < heads; h++ {
		for i := 0; i < headDim/2; i++ {
			for half := 0; half < 2; half++ {
				dst := h*headDim + 2*i + half
				src := h*headDim + half*headDim/2 + i
				copy(out[dst*rowBytes:(dst+1)*rowBytes], t.Data[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return &Tensor{Name: t.Name, Type: t.Type, Shape: slices.Clone(t.Shape), Data: out}
}

// LoadSafetensors loads a Hugging Face Llama checkpoint: path is a directory holding config.json and either
// model.safetensors or model.safetensors.index.json with its shards, or a .safetensors file with config.json
// beside it. Files are memory-mapped; tensors are renamed to the canonical names, and q_proj and k_proj are
// re-ordered from HF's rotate-half RoPE layout to the consecutive-pair layout (those two are copies; the rest
// alias the mapping). The vocabulary is not read (Vocab is nil).
func LoadSafetensors(path string) (*Checkpoint, error) {
	dir, files := path, []string(nil)
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.IsDir() {
		dir, files = filepath.Dir(path), []string{path}
	}
	cfgPath := filepath.Join(dir, "config.json")
	cfgData, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseHFConfig(cfgPath, cfgData)
	if err != nil {
		return nil, err
	}
	if files == nil {
		if files, err = safetensorsFiles(dir); err != nil {
			return nil, err
		}
	}
	ck := &Checkpoint{Config: cfg, Tensors: map[string]*Tensor{}}
	var releases []func() error
	ck.closer = func() error {
		var errs []error
		for _, r := range releases {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	}
	for _, f := range files {
		data, release, err := mapFile(f)
		if err != nil {
			ck.Close()
			return nil, err
		}
		releases = append(releases, release)
		if err := addHFTensors(ck, f, data); err != nil {
			ck.Close()
			return nil, err
		}
	}
	if cfg.TiedEmbeddings {
		delete(ck.Tensors, Output) // some tied checkpoints still store lm_head; the embedding is used
	}
	if err := ck.Check(dir); err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// safetensorsFiles lists the safetensors files of a model directory: model.safetensors, or the distinct shards
// named in model.safetensors.index.json's weight_map, in sorted order.
func safetensorsFiles(dir string) ([]string, error) {
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return []string{single}, nil
	}
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	data, err := os.ReadFile(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no model.safetensors or model.safetensors.index.json", dir)
	} else if err != nil {
		return nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("%s: %v", indexPath, oneLine(err))
	}
	var files []string
	for _, f := range index.WeightMap {
		if f != filepath.Base(f) {
			return nil, fmt.Errorf("%s: shard %q is not a file name in the model directory", indexPath, f)
		}
		files = append(files, filepath.Join(dir, f))
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// addHFTensors parses one safetensors file and adds its Llama tensors to ck under canonical names.
func addHFTensors(ck *Checkpoint, file string, data []byte) error {
	tensors, _, err := ParseSafetensors(file, data)
	if err != nil {
		return err
	}
	for hfName, t := range tensors {
		name := canonicalHFName(hfName)
		if name == "" {
			continue
		}
		if _, dup := ck.Tensors[name]; dup {
			return fmt.Errorf("%s: tensor %s appears twice", file, hfName)
		}
		t.Name = name
		if l, part, ok := parseLayerTensor(name); ok && (part == AttnQ || part == AttnK) {
			want := ck.Config.LayerShape(part)
			if l >= ck.Config.NLayers || !equalShape(t.Shape, want) {
				return fmt.Errorf("%s: tensor %s: shape %v, want %v", file, hfName, t.Shape, want)
			}
			heads := ck.Config.NHeads
			if part == AttnK {
				heads = ck.Config.NKVHeads
			}
			t = unpermuteRoPE(t, heads)
		}
		ck.Tensors[name] = t
	}
	return nil
}

// parseLayerTensor splits "blk.<l>.<part>.weight".
func parseLayerTensor(name string) (layer int, part string, ok bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, "", false
	}
	num, part, ok := strings.Cut(strings.TrimSuffix(rest, ".weight"), ".")
	l, err := strconv.Atoi(num)
	return l, part, ok && err == nil
}
