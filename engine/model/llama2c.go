package model

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// llama2.c checkpoint files (Karpathy's llama2.c, export.py and run.c / runq.c), all little-endian:
//
//	v0 ("legacy"): 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len); a negative
//	    vocab_size means the classifier is not shared with the embedding. Then f32 arrays: token embedding,
//	    attention norms (all layers), wq (all layers), wk, wv, wo, ffn norms, w1, w2, w3, final norm,
//	    freq_cis_real and freq_cis_imag (seq_len*head_dim/2 each; unused, skipped when reading), classifier
//	    if not shared.
//	v1: uint32 magic "ak42" (0x616b3432), int32 version 1, the 7 int32, uint8 shared_classifier, zero padding to
//	    256 bytes. Then f32: attention norms, ffn norms, final norm, token embedding, wq, wk, wv, wo, w1, w2, w3,
//	    classifier if not shared.
//	v2: as v1 with version 2 and an int32 group_size after the flag (at byte 37). Then f32 attention norms, ffn
//	    norms, final norm; then token embedding, wq, wk, wv, wo, w1, w2, w3 (each per layer) and classifier if not
//	    shared as Q8Group tensors: the tensor's int8 values, then its f32 scales.
//
// Weights are PyTorch's [out, in], row-major, which is Tensor's shape order. The Q and K rows are already in the
// consecutive-pair RoPE layout that run.c rotates. The format has no field for rope_theta or norm_eps: they are
// 10000 and 1e-5.

const (
	ak42Magic          = 0x616b3432
	llama2cHeaderBytes = 256
	llama2cRopeTheta   = 10000
	llama2cNormEps     = 1e-5
	freqCisMarker      = "freq_cis" // v0 order entry for the two unused RoPE tables
)

// LoadLlama2c memory-maps and parses a llama2.c checkpoint of version 0, 1 or 2 (see ParseLlama2c).
func LoadLlama2c(path string) (*Checkpoint, error) { return loadFile(path, ParseLlama2c) }

// ParseLlama2c parses a llama2.c checkpoint held in data; name is used in errors. The tensors alias data.
func ParseLlama2c(name string, data []byte) (*Checkpoint, error) {
	if len(data) < 28 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a llama2.c header", name, len(data))
	}
	version, off := 0, 0
	if binary.LittleEndian.Uint32(data) == ak42Magic {
		if len(data) < llama2cHeaderBytes {
			return nil, fmt.Errorf("%s: %d bytes, too short for the 256-byte llama2.c v1/v2 header", name, len(data))
		}
		version = int(int32(binary.LittleEndian.Uint32(data[4:])))
		if version != 1 && version != 2 {
			return nil, fmt.Errorf("%s: llama2.c version %d not supported (want 0, 1 or 2)", name, version)
		}
		off = 8
	}
	h := make([]int, 7)
	for i := range h {
		h[i] = int(int32(binary.LittleEndian.Uint32(data[off+4*i:])))
	}
	cfg := Config{Dim: h[0], HiddenDim: h[1], NLayers: h[2], NHeads: h[3], NKVHeads: h[4], VocabSize: h[5],
		SeqLen: h[6], RopeTheta: llama2cRopeTheta, NormEps: llama2cNormEps}
	groupSize := 0
	if version == 0 {
		cfg.TiedEmbeddings = cfg.VocabSize > 0
		if cfg.VocabSize < 0 {
			cfg.VocabSize = -cfg.VocabSize
		}
	} else {
		cfg.TiedEmbeddings = data[36] != 0
		if version == 2 {
			groupSize = int(int32(binary.LittleEndian.Uint32(data[37:])))
			if groupSize <= 0 {
				return nil, fmt.Errorf("%s: group_size=%d, want > 0", name, groupSize)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Every format stores at least one byte per weight: reject a header that cannot fit before listing tensors.
	if n, ok := cfg.checkedParams(); !ok || n > len(data) {
		return nil, fmt.Errorf("%s: %d bytes cannot hold the %v weights of %d layers x dim %d x hidden %d x vocab %d "+
			"(truncated or corrupt header?)", name, len(data), paramsText(n, ok), cfg.NLayers, cfg.Dim, cfg.HiddenDim,
			cfg.VocabSize)
	}
	ck := &Checkpoint{Config: cfg, Tensors: map[string]*Tensor{}}
	shapes := specShapes(cfg)
	pos := 28
	if version > 0 {
		pos = llama2cHeaderBytes
	}
	for _, e := range llama2cOrder(cfg, version) {
		if e.name == freqCisMarker {
			n, _ := elements(2, cfg.SeqLen, cfg.HeadDim()/2, 4)
			if n > len(data)-pos {
				return nil, fmt.Errorf("%s: freq_cis tables: need %d bytes at offset %d, file has %d", name, n, pos,
					len(data))
			}
			pos += n
			continue
		}
		t := &Tensor{Name: e.name, Type: F32, Shape: shapes[e.name]}
		if e.quant {
			t.Type, t.GroupSize = Q8Group, groupSize
		}
		n, ok := elements(t.Shape...)
		size, err := t.Type.Bytes(n, t.GroupSize)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: tensor %s: shape %v does not fit %v with group size %d", name, e.name,
				t.Shape, t.Type, groupSize)
		}
		if size > len(data)-pos {
			return nil, fmt.Errorf("%s: tensor %s: need %d bytes at offset %d, file has %d (truncated?)", name,
				e.name, size, pos, len(data))
		}
		t.Data = data[pos : pos+size : pos+size]
		pos += size
		ck.Tensors[e.name] = t
	}
	if pos != len(data) {
		return nil, fmt.Errorf("%s: %d bytes after the last tensor (file %d bytes, config needs %d)", name,
			len(data)-pos, len(data), pos)
	}
	if err := ck.Check(name); err != nil {
		return nil, err
	}
	return ck, nil
}

func paramsText(n int, ok bool) string {
	if !ok {
		return "over 2^50"
	}
	return fmt.Sprint(n)
}

type llama2cEntry struct {
	name  string
	quant bool // Q8Group in v2
}

// llama2cOrder lists the tensors of a llama2.c file of the given version in file order.
func llama2cOrder(cfg Config, version int) []llama2cEntry {
	var order []llama2cEntry
	add := func(quant bool, names ...string) {
		for _, n := range names {
			order = append(order, llama2cEntry{n, quant && version == 2})
		}
	}
	layers := func(quant bool, parts ...string) {
		for _, p := range parts {
			for l := 0; l < cfg.NLayers; l++ {
				add(quant, LayerTensor(l, p))
			}
		}
	}
	if version == 0 {
		add(false, TokenEmbd)
		layers(false, AttnNorm, AttnQ, AttnK, AttnV, AttnOutput, FFNNorm, FFNGate, FFNDown, FFNUp)
		add(false, OutputNorm, freqCisMarker)
	} else {
		layers(false, AttnNorm, FFNNorm)
		add(false, OutputNorm)
		add(true, TokenEmbd)
		layers(true, AttnQ, AttnK, AttnV, AttnOutput, FFNGate, FFNDown, FFNUp)
	}
	if !cfg.TiedEmbeddings {
		add(true, Output)
	}
	return order
}

func specShapes(cfg Config) map[string][]int {
	m := map[string][]int{}
	for _, s := range cfg.Tensors() {
		m[s.Name] = s.Shape
	}
	return m
}

// WriteLlama2c writes ck as a llama2.c checkpoint of version 0, 1 or 2. Versions 0 and 1 need F32 tensors.
// Version 2 keeps the norms in F32 and stores every matrix as Q8Group with groupSize: F32 matrices are quantized
// as export.py does (per group: scale = max|w|/127, q = round-half-even(w/scale), in float32), and Q8Group
// matrices with the same group size are copied unchanged. The format cannot record rope_theta or norm_eps, so
// they must be llama2.c's (10000 and 1e-5).
func WriteLlama2c(w io.Writer, ck *Checkpoint, version, groupSize int) error {
	const name = "llama2.c writer"
	cfg := ck.Config
	if err := ck.Check(name); err != nil {
		return err
	}
	switch {
	case version < 0 || version > 2:
		return fmt.Errorf("%s: version %d not supported (want 0, 1 or 2)", name, version)
	case version == 2 && groupSize <= 0:
		return fmt.Errorf("%s: group size %d, want > 0", name, groupSize)
	case cfg.RopeTheta != llama2cRopeTheta || cfg.NormEps != llama2cNormEps:
		return fmt.Errorf("%s: rope_theta=%g norm_eps=%g, but the format fixes 10000 and 1e-5", name,
			cfg.RopeTheta, cfg.NormEps)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	head := make([]byte, 28)
	vocab := cfg.VocabSize
	if version == 0 && !cfg.TiedEmbeddings {
		vocab = -vocab
	}
	for i, v := range []int{cfg.Dim, cfg.HiddenDim, cfg.NLayers, cfg.NHeads, cfg.NKVHeads, vocab, cfg.SeqLen} {
		binary.LittleEndian.PutUint32(head[4*i:], uint32(int32(v)))
	}
	if version == 0 {
		bw.Write(head)
	} else {
		h := make([]byte, llama2cHeaderBytes)
		binary.LittleEndian.PutUint32(h, ak42Magic)
		binary.LittleEndian.PutUint32(h[4:], uint32(version))
		copy(h[8:], head)
		if cfg.TiedEmbeddings {
			h[36] = 1
		}
		if version == 2 {
			binary.LittleEndian.PutUint32(h[37:], uint32(groupSize))
		}
		bw.Write(h)
	}
	for _, e := range llama2cOrder(cfg, version) {
		if e.name == freqCisMarker {
			writeFreqCis(bw, cfg)
			continue
		}
		t := ck.Tensors[e.name]
		switch {
		case e.quant && t.Type == Q8Group && t.GroupSize == groupSize:
			bw.Write(t.Data)
		case e.quant && t.Type == F32:
			if t.Elements()%groupSize != 0 {
				return fmt.Errorf("%s: tensor %s: %d elements are not whole groups of %d", name, t.Name,
					t.Elements(), groupSize)
			}
			q := QuantizeQ8Group(t.F32(), groupSize)
			bw.Write(q.Data)
		case !e.quant && t.Type == F32:
			bw.Write(t.Data)
		default:
			want := "F32"
			if e.quant {
				want = fmt.Sprintf("F32 or Q8Group with group size %d", groupSize)
			}
			return fmt.Errorf("%s: tensor %s is %v (group size %d), llama2.c v%d needs %s", name, t.Name, t.Type,
				t.GroupSize, version, want)
		}
	}
	return bw.Flush()
}

// writeFreqCis writes v0's two RoPE tables, cos and sin of pos*theta^(-2i/head_dim) for pos < seq_len and
// i < head_dim/2, computed in float32 as llama2.c's model.py does. Readers ignore them; run.c recomputes RoPE.
func writeFreqCis(w io.Writer, cfg Config) {
	half := cfg.HeadDim() / 2
	freqs := make([]float32, half)
	for i := range freqs {
		freqs[i] = float32(1 / math.Pow(cfg.RopeTheta, float64(float32(2*i)/float32(cfg.HeadDim()))))
	}
	b := make([]byte, 4*half)
	for _, f := range []func(float64) float64{math.Cos, math.Sin} {
		for pos := 0; pos < cfg.SeqLen; pos++ {
			for i, fr := range freqs {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(f(float64(float32(pos)*fr)))))
			}
			w.Write(b)
		}
	}
}

// QuantizeQ8Group quantizes w as llama2.c's export.py does, in groups of groupSize consecutive values:
// scale = max|w|/127, q = round-half-even(w/scale) (all in float32; a group of zeros gets scale 0 and q 0).
// The result is a one-dimensional Q8Group tensor; callers set its name and shape. It panics unless groupSize > 0
// divides len(w).
func QuantizeQ8Group(w []float32, groupSize int) *Tensor {
	n := len(w)
	if groupSize <= 0 || n%groupSize != 0 {
		panic(fmt.Sprintf("model: QuantizeQ8Group: %d values in groups of %d", n, groupSize))
	}
	data := make([]byte, n+4*(n/groupSize))
	for g := 0; g < n/groupSize; g++ {
		group := w[g*groupSize : (g+1)*groupSize]
		var wmax float32
		for _, v := range group {
			wmax = max(wmax, float32(math.Abs(float64(v))))
		}
		scale := wmax / 127
		for i, v := range group {
			var q float32
			if scale != 0 {
				q = float32(math.RoundToEven(float64(v / scale)))
			}
			data[g*groupSize+i] = byte(int8(q))
		}
		binary.LittleEndian.PutUint32(data[n+4*g:], math.Float32bits(scale))
	}
	return &Tensor{Type: Q8Group, Shape: []int{n}, Data: data, GroupSize: groupSize}
}
