package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/morphlab/morphlab/engine/tokenizer"
)

// GGUF (ggml's model file, versions 2 and 3), little-endian:
//
//	"GGUF" uint32 version, uint64 tensor_count, uint64 kv_count
//	kv_count × { string key, uint32 value_type, value }          string = uint64 length + bytes
//	tensor_count × { string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml_type, uint64 offset }
//	zero padding to general.alignment (default 32), then the tensor data; offset is relative to its start
//	and a multiple of the alignment.
//
// ne[0] is the fastest-varying dimension, the reverse of Tensor.Shape. An array value is uint32 element type,
// uint64 count, elements.

const ggufMagic = 0x46554747 // "GGUF"

// GGUFType is a metadata value type.
type GGUFType uint32

// The metadata value types.
const (
	GGUFUint8 GGUFType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

// GGUFKV is one metadata entry. Value holds the Go type of the GGUF type: uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64, float64; an array is a slice of one of those ([]uint8, []string,
// ...), and an array of arrays is []any whose elements are such slices.
type GGUFKV struct {
	Key   string
	Value any
}

// GGUFTensorInfo is a tensor as a GGUF file lists it; Tensor holds its data (aliasing the file) and its
// row-major shape.
type GGUFTensorInfo struct {
	Tensor   *Tensor
	GGMLType uint32
	Offset   uint64 // from the start of the data section
}

// GGUFFile is a parsed GGUF file.
type GGUFFile struct {
	Version    uint32
	Metadata   []GGUFKV
	Tensors    []GGUFTensorInfo
	Alignment  int
	DataOffset int // where the data section starts in the file
}

// Get returns the value of a metadata key.
func (g *GGUFFile) Get(key string) (any, bool) {
	for _, kv := range g.Metadata {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// ggml tensor type ids for the types morphlab reads, and names of some others for error messages.
var (
	ggmlTypes = map[uint32]TensorType{0: F32, 1: F16, 2: Q4_0, 8: Q8_0, 30: BF16}
	ggmlIDs   = map[TensorType]uint32{F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, BF16: 30}
	ggmlNames = map[uint32]string{3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K",
		13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL",
		21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M"}
)

const (
	ggufMaxDims  = 4  // GGML_MAX_DIMS
	ggufMaxDepth = 16 // nesting limit for arrays of arrays
)

// ggufReader is a bounds-checked cursor over the file; every length is checked against the bytes left before
// anything is allocated, so a hostile header cannot make it allocate more than the file's size.
type ggufReader struct {
	data []byte
	off  int
}

var errShort = errors.New("unexpected end of file")

func (r *ggufReader) need(n uint64) error {
	if n > uint64(len(r.data)-r.off) {
		return errShort
	}
	return nil
}

func (r *ggufReader) bytes(n uint64) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, err
	}
	b := r.data[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

func (r *ggufReader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *ggufReader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *ggufReader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	return string(b), err
}

// ggufScalarSize is the encoded size of a scalar type, or 0 for strings, arrays and unknown types.
func ggufScalarSize(t GGUFType) int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

func (r *ggufReader) scalar(t GGUFType) (any, error) {
	b, err := r.bytes(uint64(ggufScalarSize(t)))
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch t {
	case GGUFUint8:
		return b[0], nil
	case GGUFInt8:
		return int8(b[0]), nil
	case GGUFBool:
		if b[0] > 1 {
			return nil, fmt.Errorf("bool value %d", b[0])
		}
		return b[0] == 1, nil
	case GGUFUint16:
		return le.Uint16(b), nil
	case GGUFInt16:
		return int16(le.Uint16(b)), nil
	case GGUFUint32:
		return le.Uint32(b), nil
	case GGUFInt32:
		return int32(le.Uint32(b)), nil
	case GGUFFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case GGUFUint64:
		return le.Uint64(b), nil
	case GGUFInt64:
		return int64(le.Uint64(b)), nil
	case GGUFFloat64:
		return math.Float64frombits(le.Uint64(b)), nil
	}
	return nil, fmt.Errorf("unknown value type %d", t)
}

func (r *ggufReader) value(t GGUFType, depth int) (any, error) {
	switch t {
	case GGUFString:
		return r.str()
	case GGUFArray:
		return r.array(depth + 1)
	}
	if ggufScalarSize(t) == 0 {
		return nil, fmt.Errorf("unknown value type %d", t)
	}
	return r.scalar(t)
}

func (r *ggufReader) array(depth int) (any, error) {
	if depth > ggufMaxDepth {
		return nil, fmt.Errorf("arrays nested deeper than %d", ggufMaxDepth)
	}
	et, err := r.u32()
	if err != nil {
		return nil, err
	}
	n, err := r.u64()
	if err != nil {
		return nil, err
	}
	minSize := uint64(ggufScalarSize(GGUFType(et)))
	switch GGUFType(et) {
	case GGUFString:
		minSize = 8
	case GGUFArray:
		minSize = 12
	}
	if minSize == 0 {
		return nil, fmt.Errorf("array of unknown value type %d", et)
	}
	if n > uint64(len(r.data)-r.off)/minSize {
		return nil, fmt.Errorf("array of %d values does not fit in the %d bytes left", n, len(r.data)-r.off)
	}
	switch GGUFType(et) {
	case GGUFUint8:
		return readArray[uint8](r, n, GGUFType(et))
	case GGUFInt8:
		return readArray[int8](r, n, GGUFType(et))
	case GGUFUint16:
		return readArray[uint16](r, n, GGUFType(et))
	case GGUFInt16:
		return readArray[int16](r, n, GGUFType(et))
	case GGUFUint32:
		return readArray[uint32](r, n, GGUFType(et))
	case GGUFInt32:
		return readArray[int32](r, n, GGUFType(et))
	case GGUFFloat32:
		return readArray[float32](r, n, GGUFType(et))
	case GGUFBool:
		return readArray[bool](r, n, GGUFType(et))
	case GGUFUint64:
		return readArray[uint64](r, n, GGUFType(et))
	case GGUFInt64:
		return readArray[int64](r, n, GGUFType(et))
	case GGUFFloat64:
		return readArray[float64](r, n, GGUFType(et))
	case GGUFString:
		out := make([]string, n)
		for i := range out {
			if out[i], err = r.str(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	out := make([]any, n)
	for i := range out {
		if out[i], err = r.array(depth); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readArray[T any](r *ggufReader, n uint64, t GGUFType) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		v, err := r.scalar(t)
		if err != nil {
			return nil, err
		}
		out[i] = v.(T)
	}
	return out, nil
}

// ParseGGUF parses the GGUF file in data; name is used in errors. Tensor data aliases data. Tensors of ggml
// types other than F32, F16, BF16, Q8_0 and Q4_0 are an error naming the tensor.
func ParseGGUF(name string, data []byte) (*GGUFFile, error) {
	r := &ggufReader{data: data}
	fail := func(what string, err error) error {
		return fmt.Errorf("%s: gguf %s: %v (at byte %d)", name, what, err, r.off)
	}
	magic, err := r.u32()
	if err != nil {
		return nil, fail("header", err)
	}
	if magic != ggufMagic {
		return nil, fmt.Errorf("%s: not a GGUF file (magic %#08x, want %#08x \"GGUF\")", name, magic, ggufMagic)
	}
	g := &GGUFFile{Alignment: 32}
	if g.Version, err = r.u32(); err != nil {
		return nil, fail("header", err)
	}
	if g.Version != 2 && g.Version != 3 {
		return nil, fmt.Errorf("%s: GGUF version %d not supported (want 2 or 3)", name, g.Version)
	}
	nTensors, err := r.u64()
	if err != nil {
		return nil, fail("header", err)
	}
	nKV, err := r.u64()
	if err != nil {
		return nil, fail("header", err)
	}
	left := uint64(len(data) - r.off)
	if nKV > left/12 || nTensors > left/24 {
		return nil, fmt.Errorf("%s: gguf header: %d metadata entries and %d tensors cannot fit in %d bytes", name,
			nKV, nTensors, len(data))
	}
	g.Metadata = make([]GGUFKV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		key, err := r.str()
		if err != nil {
			return nil, fail(fmt.Sprintf("metadata entry %d key", i), err)
		}
		t, err := r.u32()
		if err != nil {
			return nil, fail("metadata "+key, err)
		}
		v, err := r.value(GGUFType(t), 0)
		if err != nil {
			return nil, fail("metadata "+key, err)
		}
		g.Metadata = append(g.Metadata, GGUFKV{key, v})
	}
	if v, ok := g.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%s: gguf metadata general.alignment=%v (%T), want a power of two uint32", name, v, v)
		}
		g.Alignment = int(a)
	}
	g.Tensors = make([]GGUFTensorInfo, 0, nTensors)
	seen := map[string]bool{}
	for i := uint64(0); i < nTensors; i++ {
		tname, err := r.str()
		if err != nil {
			return nil, fail(fmt.Sprintf("tensor %d name", i), err)
		}
		if seen[tname] {
			return nil, fmt.Errorf("%s: gguf tensor %s listed twice", name, tname)
		}
		seen[tname] = true
		info, err := readTensorInfo(r, tname)
		if err != nil {
			return nil, fmt.Errorf("%s: gguf tensor %s: %v", name, tname, err)
		}
		g.Tensors = append(g.Tensors, info)
	}
	g.DataOffset = alignUp(r.off, g.Alignment)
	if g.DataOffset > len(data) {
		return nil, fmt.Errorf("%s: gguf data section at byte %d is past the end of the file (%d bytes)", name,
			g.DataOffset, len(data))
	}
	section := data[g.DataOffset:]
	for _, info := range g.Tensors {
		t := info.Tensor
		size, err := t.Type.Bytes(t.Elements(), 0)
		if err != nil {
			return nil, fmt.Errorf("%s: gguf tensor %s: shape %v: %v", name, t.Name, t.Shape, err)
		}
		if info.Offset%uint64(g.Alignment) != 0 {
			return nil, fmt.Errorf("%s: gguf tensor %s: offset %d is not a multiple of the alignment %d", name,
				t.Name, info.Offset, g.Alignment)
		}
		if info.Offset > uint64(len(section)) || uint64(size) > uint64(len(section))-info.Offset {
			return nil, fmt.Errorf("%s: gguf tensor %s: %d bytes at data offset %d, but the data section has %d "+
				"(truncated?)", name, t.Name, size, info.Offset, len(section))
		}
		t.Data = section[info.Offset : info.Offset+uint64(size) : info.Offset+uint64(size)]
	}
	return g, nil
}

func readTensorInfo(r *ggufReader, name string) (GGUFTensorInfo, error) {
	nd, err := r.u32()
	if err != nil {
		return GGUFTensorInfo{}, err
	}
	if nd == 0 || nd > ggufMaxDims {
		return GGUFTensorInfo{}, fmt.Errorf("%d dimensions, want 1..%d", nd, ggufMaxDims)
	}
	shape := make([]int, nd)
	for i := range shape {
		ne, err := r.u64()
		if err != nil {
			return GGUFTensorInfo{}, err
		}
		if ne == 0 || ne > maxElements {
			return GGUFTensorInfo{}, fmt.Errorf("dimension %d is %d", i, ne)
		}
		shape[int(nd)-1-i] = int(ne) // GGUF lists the fastest dimension first; Shape lists it last
	}
	if _, ok := elements(shape...); !ok {
		return GGUFTensorInfo{}, fmt.Errorf("shape %v has more than 2^50 elements", shape)
	}
	gt, err := r.u32()
	if err != nil {
		return GGUFTensorInfo{}, err
	}
	typ, ok := ggmlTypes[gt]
	if !ok {
		tn := ggmlNames[gt]
		if tn == "" {
			tn = "unknown"
		}
		return GGUFTensorInfo{}, fmt.Errorf("ggml type %d (%s) not supported (want F32, F16, BF16, Q8_0 or Q4_0)",
			gt, tn)
	}
	off, err := r.u64()
	if err != nil {
		return GGUFTensorInfo{}, err
	}
	if (typ == Q8_0 || typ == Q4_0) && shape[nd-1]%32 != 0 {
		return GGUFTensorInfo{}, fmt.Errorf("%v rows of %d are not whole 32-element blocks", typ, shape[nd-1])
	}
	return GGUFTensorInfo{Tensor: &Tensor{Name: name, Type: typ, Shape: shape}, GGMLType: gt, Offset: off}, nil
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// LoadGGUF memory-maps and parses a GGUF llama checkpoint (see ParseGGUFCheckpoint).
func LoadGGUF(path string) (*Checkpoint, error) { return loadFile(path, ParseGGUFCheckpoint) }

// ParseGGUFCheckpoint parses a GGUF file of the llama architecture: the config from the llama.* metadata, the
// tensors under their GGUF names (which are the canonical names), and the vocabulary from tokenizer.ggml.* when
// the tokenizer is SentencePiece ("llama"); other tokenizers (e.g. "gpt2" BPE) leave Vocab nil. Q and K are
// taken as stored: llama.cpp's converter already put them in the consecutive-pair RoPE layout.
func ParseGGUFCheckpoint(name string, data []byte) (*Checkpoint, error) {
	g, err := ParseGGUF(name, data)
	if err != nil {
		return nil, err
	}
	cfg, err := g.llamaConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ck := &Checkpoint{Config: cfg, Tensors: map[string]*Tensor{}}
	for _, info := range g.Tensors {
		ck.Tensors[info.Tensor.Name] = info.Tensor
	}
	_, hasOutput := ck.Tensors[Output]
	ck.Config.TiedEmbeddings = !hasOutput
	if e, ok := ck.Tensors[TokenEmbd]; ok && len(e.Shape) == 2 && ck.Config.VocabSize == 0 {
		ck.Config.VocabSize = e.Shape[0]
	}
	if ck.Vocab, err = g.vocab(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if ck.Vocab != nil && ck.Config.VocabSize == 0 {
		ck.Config.VocabSize = ck.Vocab.Len()
	}
	if ck.Vocab != nil && ck.Vocab.Len() != ck.Config.VocabSize {
		return nil, fmt.Errorf("%s: gguf metadata tokenizer.ggml.tokens has %d tokens, the model %d", name,
			ck.Vocab.Len(), ck.Config.VocabSize)
	}
	if err := ck.Check(name); err != nil {
		return nil, err
	}
	return ck, nil
}

// metaInt returns an integer metadata value of any integer type; ok is false when the key is absent.
func (g *GGUFFile) metaInt(key string) (int, bool, error) {
	v, ok := g.Get(key)
	if !ok {
		return 0, false, nil
	}
	var n int64
	switch x := v.(type) {
	case uint8:
		n = int64(x)
	case int8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case int16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case int32:
		n = int64(x)
	case uint64:
		if x > math.MaxInt32 {
			return 0, true, fmt.Errorf("gguf metadata %s=%d is out of range", key, x)
		}
		n = int64(x)
	case int64:
		n = x
	default:
		return 0, true, fmt.Errorf("gguf metadata %s is %T, want an integer", key, v)
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, true, fmt.Errorf("gguf metadata %s=%d is out of range", key, n)
	}
	return int(n), true, nil
}

func (g *GGUFFile) metaFloat(key string) (float64, bool, error) {
	v, ok := g.Get(key)
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float32:
		return float64(x), true, nil
	case float64:
		return x, true, nil
	}
	return 0, true, fmt.Errorf("gguf metadata %s is %T, want a float", key, v)
}

// llamaConfig reads the llama.* keys. vocab_size may stay 0 here: it then comes from the embedding or vocab.
func (g *GGUFFile) llamaConfig() (Config, error) {
	arch, _ := g.Get("general.architecture")
	if arch != "llama" {
		return Config{}, fmt.Errorf("gguf metadata general.architecture=%v, want \"llama\"", arch)
	}
	cfg := Config{RopeTheta: 10000, NormEps: 1e-5}
	ints := []struct {
		key      string
		dst      *int
		required bool
	}{
		{"llama.embedding_length", &cfg.Dim, true},
		{"llama.feed_forward_length", &cfg.HiddenDim, true},
		{"llama.block_count", &cfg.NLayers, true},
		{"llama.attention.head_count", &cfg.NHeads, true},
		{"llama.attention.head_count_kv", &cfg.NKVHeads, false},
		{"llama.context_length", &cfg.SeqLen, true},
		{"llama.vocab_size", &cfg.VocabSize, false},
	}
	for _, f := range ints {
		v, ok, err := g.metaInt(f.key)
		if err != nil {
			return cfg, err
		}
		if !ok && f.required {
			return cfg, fmt.Errorf("gguf metadata %s missing", f.key)
		}
		if ok {
			*f.dst = v
		}
	}
	if cfg.NKVHeads == 0 {
		cfg.NKVHeads = cfg.NHeads
	}
	if v, ok, err := g.metaFloat("llama.rope.freq_base"); err != nil {
		return cfg, err
	} else if ok {
		cfg.RopeTheta = v
	}
	if v, ok, err := g.metaFloat("llama.attention.layer_norm_rms_epsilon"); err != nil {
		return cfg, err
	} else if ok {
		cfg.NormEps = float32(v)
	}
	if rd, ok, err := g.metaInt("llama.rope.dimension_count"); err != nil {
		return cfg, err
	} else if ok && cfg.NHeads > 0 && rd != cfg.Dim/cfg.NHeads {
		return cfg, fmt.Errorf("gguf metadata llama.rope.dimension_count=%d, want the head dim %d (partial RoPE "+
			"is not supported)", rd, cfg.Dim/cfg.NHeads)
	}
	return cfg, nil
}

// vocab builds the SentencePiece vocabulary from tokenizer.ggml.*, or returns nil when there is none or it is not
// a SentencePiece ("llama") tokenizer.
func (g *GGUFFile) vocab() (*tokenizer.Vocab, error) {
	model, _ := g.Get("tokenizer.ggml.model")
	tv, ok := g.Get("tokenizer.ggml.tokens")
	if model != "llama" || !ok {
		return nil, nil
	}
	tokens, ok := tv.([]string)
	if !ok {
		return nil, fmt.Errorf("gguf metadata tokenizer.ggml.tokens is %T, want an array of strings", tv)
	}
	scores := make([]float32, len(tokens))
	if sv, ok := g.Get("tokenizer.ggml.scores"); ok {
		s, ok := sv.([]float32)
		if !ok || len(s) != len(tokens) {
			return nil, fmt.Errorf("gguf metadata tokenizer.ggml.scores: %T of length %d, want %d float32", sv,
				lenOf(sv), len(tokens))
		}
		scores = s
	}
	var types []tokenizer.TokenType
	if tv, ok := g.Get("tokenizer.ggml.token_type"); ok {
		raw, ok := tv.([]int32)
		if !ok || len(raw) != len(tokens) {
			return nil, fmt.Errorf("gguf metadata tokenizer.ggml.token_type: %T of length %d, want %d int32", tv,
				lenOf(tv), len(tokens))
		}
		types = make([]tokenizer.TokenType, len(raw))
		for i, t := range raw {
			types[i] = tokenizer.TokenType(t)
		}
	}
	ids := map[string]int{"bos": 1, "eos": 2, "unknown": 0}
	for k := range ids {
		v, ok, err := g.metaInt("tokenizer.ggml." + k + "_token_id")
		if err != nil {
			return nil, err
		}
		if ok {
			ids[k] = v
		}
	}
	v, err := tokenizer.NewSentencePiece(tokens, scores, types, ids["bos"], ids["eos"], ids["unknown"])
	if err != nil {
		return nil, fmt.Errorf("gguf metadata: %w", err)
	}
	if ap, ok := g.Get("tokenizer.ggml.add_space_prefix"); ok {
		b, ok := ap.(bool)
		if !ok {
			return nil, fmt.Errorf("gguf metadata tokenizer.ggml.add_space_prefix is %T, want bool", ap)
		}
		v.AddDummyPrefix = b
	}
	return v, nil
}

func lenOf(v any) int {
	switch x := v.(type) {
	case []float32:
		return len(x)
	case []int32:
		return len(x)
	}
	return -1
}

// WriteGGUF writes ck as a GGUF v3 llama file that ParseGGUFCheckpoint and llama.cpp read: llama.* metadata from
// the config, the vocabulary (if any) as tokenizer.ggml.* with spaces written as '▁' and control pieces without
// llama2.c's surrounding newlines (so llama.cpp recognises "</s>" as end of generation), and the tensors (the
// required ones in Config.Tensors order, then any others by name) aligned to 32 bytes. Q8Group tensors have no
// GGUF type and are an error.
func WriteGGUF(w io.Writer, ck *Checkpoint) error {
	const name = "gguf writer"
	if err := ck.Check(name); err != nil {
		return err
	}
	c := ck.Config
	meta := []GGUFKV{
		{"general.architecture", "llama"},
		{"general.name", "morphlab"},
		{"llama.context_length", uint32(c.SeqLen)},
		{"llama.embedding_length", uint32(c.Dim)},
		{"llama.block_count", uint32(c.NLayers)},
		{"llama.feed_forward_length", uint32(c.HiddenDim)},
		{"llama.rope.dimension_count", uint32(c.HeadDim())},
		{"llama.attention.head_count", uint32(c.NHeads)},
		{"llama.attention.head_count_kv", uint32(c.NKVHeads)},
		{"llama.attention.layer_norm_rms_epsilon", c.NormEps},
		{"llama.rope.freq_base", float32(c.RopeTheta)},
		{"llama.vocab_size", uint32(c.VocabSize)},
	}
	if float64(float32(c.RopeTheta)) != c.RopeTheta {
		meta[10].Value = c.RopeTheta // keep a theta that float32 cannot hold exactly
	}
	if v := ck.Vocab; v != nil {
		tokens := make([]string, v.Len())
		types := make([]int32, v.Len())
		for i, p := range v.Pieces {
			if v.Types[i] == tokenizer.Control {
				p = strings.Trim(p, "\n") // llama2.c's tokenizer.bin spells BOS and EOS "\n<s>\n" and "\n</s>\n"
			}
			tokens[i] = strings.ReplaceAll(p, " ", "\u2581")
			types[i] = int32(v.Types[i])
		}
		meta = append(meta,
			GGUFKV{"tokenizer.ggml.model", "llama"},
			GGUFKV{"tokenizer.ggml.tokens", tokens},
			GGUFKV{"tokenizer.ggml.scores", slices.Clone(v.Scores)},
			GGUFKV{"tokenizer.ggml.token_type", types},
			GGUFKV{"tokenizer.ggml.add_space_prefix", v.AddDummyPrefix})
		for _, id := range []struct {
			key string
			id  int
		}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}} {
			if id.id >= 0 {
				meta = append(meta, GGUFKV{"tokenizer.ggml." + id.key + "_token_id", uint32(id.id)})
			}
		}
	}
	var tensors []*Tensor
	done := map[string]bool{}
	for _, s := range c.Tensors() {
		tensors = append(tensors, ck.Tensors[s.Name])
		done[s.Name] = true
	}
	var extra []string
	for n := range ck.Tensors {
		if !done[n] {
			extra = append(extra, n)
		}
	}
	slices.Sort(extra)
	for _, n := range extra {
		tensors = append(tensors, ck.Tensors[n])
	}
	return WriteGGUFFile(w, meta, tensors)
}

// WriteGGUFFile writes a GGUF v3 file with the given metadata (Go types as in GGUFKV) and tensors, aligning the
// tensor data to general.alignment if meta sets it (a uint32 power of two), else to 32 bytes.
func WriteGGUFFile(w io.Writer, meta []GGUFKV, tensors []*Tensor) error {
	align := 32
	for _, kv := range meta {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf writer: general.alignment=%v (%T), want a power of two uint32", kv.Value, kv.Value)
			}
			align = int(a)
		}
	}
	var hw ggufWriter
	hw.u32(ggufMagic)
	hw.u32(3)
	hw.u64(uint64(len(tensors)))
	hw.u64(uint64(len(meta)))
	for _, kv := range meta {
		hw.str(kv.Key)
		if err := hw.typedValue(kv.Value, 0); err != nil {
			return fmt.Errorf("gguf writer: metadata %s: %v", kv.Key, err)
		}
	}
	offset := 0
	for _, t := range tensors {
		id, ok := ggmlIDs[t.Type]
		if !ok {
			return fmt.Errorf("gguf writer: tensor %s: type %v has no GGUF equivalent", t.Name, t.Type)
		}
		if len(t.Shape) == 0 || len(t.Shape) > ggufMaxDims {
			return fmt.Errorf("gguf writer: tensor %s: %d dimensions, want 1..%d", t.Name, len(t.Shape), ggufMaxDims)
		}
		if want, err := t.Type.Bytes(t.Elements(), 0); err != nil || want != len(t.Data) {
			return fmt.Errorf("gguf writer: tensor %s: %d data bytes for %v %v", t.Name, len(t.Data), t.Type, t.Shape)
		}
		hw.str(t.Name)
		hw.u32(uint32(len(t.Shape)))
		for i := len(t.Shape) - 1; i >= 0; i-- {
			hw.u64(uint64(t.Shape[i]))
		}
		hw.u32(id)
		hw.u64(uint64(offset))
		offset = alignUp(offset+len(t.Data), align)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.Write(hw.b)
	var zeros [256]byte
	pad := func(n int) {
		for n > 0 {
			k := min(n, len(zeros))
			bw.Write(zeros[:k])
			n -= k
		}
	}
	pad(alignUp(len(hw.b), align) - len(hw.b))
	for _, t := range tensors {
		bw.Write(t.Data)
		pad(alignUp(len(t.Data), align) - len(t.Data))
	}
	return bw.Flush()
}

type ggufWriter struct{ b []byte }

func (w *ggufWriter) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *ggufWriter) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *ggufWriter) str(s string) { w.u64(uint64(len(s))); w.b = append(w.b, s...) }

// typedValue writes a value's type and then the value.
func (w *ggufWriter) typedValue(v any, depth int) error {
	t, err := ggufTypeOf(v)
	if err != nil {
		return err
	}
	w.u32(uint32(t))
	return w.value(v, depth)
}

func ggufTypeOf(v any) (GGUFType, error) {
	switch v.(type) {
	case uint8:
		return GGUFUint8, nil
	case int8:
		return GGUFInt8, nil
	case uint16:
		return GGUFUint16, nil
	case int16:
		return GGUFInt16, nil
	case uint32:
		return GGUFUint32, nil
	case int32:
		return GGUFInt32, nil
	case float32:
		return GGUFFloat32, nil
	case bool:
		return GGUFBool, nil
	case string:
		return GGUFString, nil
	case uint64:
		return GGUFUint64, nil
	case int64:
		return GGUFInt64, nil
	case float64:
		return GGUFFloat64, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64,
		[]float64, []any:
		return GGUFArray, nil
	}
	return 0, fmt.Errorf("value of Go type %T has no GGUF type", v)
}

func (w *ggufWriter) value(v any, depth int) error {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		w.b = append(w.b, x)
	case int8:
		w.b = append(w.b, byte(x))
	case bool:
		if x {
			w.b = append(w.b, 1)
		} else {
			w.b = append(w.b, 0)
		}
	case uint16:
		w.b = le.AppendUint16(w.b, x)
	case int16:
		w.b = le.AppendUint16(w.b, uint16(x))
	case uint32:
		w.u32(x)
	case int32:
		w.u32(uint32(x))
	case float32:
		w.u32(math.Float32bits(x))
	case uint64:
		w.u64(x)
	case int64:
		w.u64(uint64(x))
	case float64:
		w.u64(math.Float64bits(x))
	case string:
		w.str(x)
	case []any:
		if depth >= ggufMaxDepth {
			return fmt.Errorf("arrays nested deeper than %d", ggufMaxDepth)
		}
		w.u32(uint32(GGUFArray))
		w.u64(uint64(len(x)))
		for _, e := range x {
			if t, err := ggufTypeOf(e); err != nil || t != GGUFArray {
				return fmt.Errorf("array of arrays holds %T", e)
			}
			if err := w.value(e, depth+1); err != nil {
				return err
			}
		}
	default:
		return w.scalarArray(v)
	}
	return nil
}

func (w *ggufWriter) scalarArray(v any) error {
	switch x := v.(type) {
	case []uint8:
		return writeArray(w, GGUFUint8, x)
	case []int8:
		return writeArray(w, GGUFInt8, x)
	case []uint16:
		return writeArray(w, GGUFUint16, x)
	case []int16:
		return writeArray(w, GGUFInt16, x)
	case []uint32:
		return writeArray(w, GGUFUint32, x)
	case []int32:
		return writeArray(w, GGUFInt32, x)
	case []float32:
		return writeArray(w, GGUFFloat32, x)
	case []bool:
		return writeArray(w, GGUFBool, x)
	case []string:
		return writeArray(w, GGUFString, x)
	case []uint64:
		return writeArray(w, GGUFUint64, x)
	case []int64:
		return writeArray(w, GGUFInt64, x)
	case []float64:
		return writeArray(w, GGUFFloat64, x)
	}
	return fmt.Errorf("value of Go type %T has no GGUF type", v)
}

func writeArray[T any](w *ggufWriter, t GGUFType, xs []T) error {
	w.u32(uint32(t))
	w.u64(uint64(len(xs)))
	for _, x := range xs {
		if err := w.value(x, 0); err != nil {
			return err
		}
	}
	return nil
}
