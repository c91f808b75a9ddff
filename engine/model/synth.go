package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/splitmix"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/quant"
)

// NamedShape is a Llama shape known by name, for `morphlab synth` and the benchmarks.
type NamedShape struct {
	Name   string
	Config Config
}

// Shapes are the named model shapes: Karpathy's TinyStories models (llama2.c; all share the classifier with the
// embedding) and Meta's Llama 2 and Llama 3 models.
var Shapes = []NamedShape{
	{"stories260K", Config{Dim: 64, HiddenDim: 172, NLayers: 5, NHeads: 8, NKVHeads: 4, VocabSize: 512, SeqLen: 512,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}},
	{"stories15M", Config{Dim: 288, HiddenDim: 768, NLayers: 6, NHeads: 6, NKVHeads: 6, VocabSize: 32000, SeqLen: 256,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}},
	{"stories42M", Config{Dim: 512, HiddenDim: 1376, NLayers: 8, NHeads: 8, NKVHeads: 8, VocabSize: 32000, SeqLen: 1024,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}},
	{"stories110M", Config{Dim: 768, HiddenDim: 2048, NLayers: 12, NHeads: 12, NKVHeads: 12, VocabSize: 32000,
		SeqLen: 1024, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}},
	{"llama2-7b", Config{Dim: 4096, HiddenDim: 11008, NLayers: 32, NHeads: 32, NKVHeads: 32, VocabSize: 32000,
		SeqLen: 4096, RopeTheta: 10000, NormEps: 1e-5}},
	{"llama2-13b", Config{Dim: 5120, HiddenDim: 13824, NLayers: 40, NHeads: 40, NKVHeads: 40, VocabSize: 32000,
		SeqLen: 4096, RopeTheta: 10000, NormEps: 1e-5}},
	{"llama3-8b", Config{Dim: 4096, HiddenDim: 14336, NLayers: 32, NHeads: 32, NKVHeads: 8, VocabSize: 128256,
		SeqLen: 8192, RopeTheta: 500000, NormEps: 1e-5}},
}

// ShapeByName returns the config of the named shape; the error lists the names there are.
func ShapeByName(name string) (Config, error) {
	var names []string
	for _, s := range Shapes {
		if s.Name == name {
			return s.Config, nil
		}
		names = append(names, s.Name)
	}
	return Config{}, fmt.Errorf("unknown shape %q (shapes: %s)", name, strings.Join(names, ", "))
}

// Params is the number of weights the config's tensors hold.
func (c Config) Params() int {
	n := 0
	for _, s := range c.Tensors() {
		e, _ := elements(s.Shape...)
		n += e
	}
	return n
}

// Synthesize returns a checkpoint of cfg's shape with seeded random F32 weights (see SynthesizeAs). It panics if
// cfg is invalid.
func Synthesize(cfg Config, seed uint64) *Checkpoint {
	ck, err := SynthesizeAs(cfg, seed, F32)
	if err != nil {
		panic("model: Synthesize: " + err.Error())
	}
	return ck
}

// synthChunk is the number of elements a synthesis job fills (rounded to whole rows): small enough to spread a
// tensor over threads, large enough that the per-job overhead does not show.
const synthChunk = 1 << 20

// SynthesizeAs returns a checkpoint of cfg's shape with seeded random weights, every matrix (embedding and
// classifier included) stored as typ (F32, F16, BF16, Q8_0 or Q4_0) and the norms as F32. The values are chosen so
// that a forward pass stays in range: each element of a matrix [out, in] is approximately normal (an Irwin–Hall
// sum of four uniforms, bounded at ±3.46σ) with σ = 1/sqrt(in), so a layer keeps its input's scale; norm weights
// are 1 + 0.05·z; the embedding has σ = 1/sqrt(dim), so that tied logits have σ ≈ 1. Its vocabulary is SynthVocab's
// when VocabSize allows one (>= 259), else nil.
//
// Rows are made in chunks of about synthChunk elements, each from its own PCG stream seeded by (seed, tensor name,
// chunk), in parallel on kernels/cpu's pool; quantized types are converted chunk by chunk, so no F32 copy of a
// quantized model is ever held. The bytes depend only on (cfg, seed, typ), and a quantized tensor's bytes are
// exactly the quantization of the F32 tensor the same seed gives.
func SynthesizeAs(cfg Config, seed uint64, typ TensorType) (*Checkpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch typ {
	case F32, F16, BF16, Q8_0, Q4_0:
	default:
		return nil, fmt.Errorf("synthesize: type %v, want F32, F16, BF16, Q8_0 or Q4_0", typ)
	}
	type job struct {
		t        *Tensor
		mean, sd float32
		row0, n  int // first row and row count of the chunk
	}
	ck := &Checkpoint{Config: cfg, Tensors: map[string]*Tensor{}}
	var jobs []job
	for _, s := range cfg.Tensors() {
		rows, cols := 1, s.Shape[len(s.Shape)-1]
		if len(s.Shape) == 2 {
			rows = s.Shape[0]
		}
		t := &Tensor{Name: s.Name, Type: F32, Shape: s.Shape}
		mean, sd := float32(0), float32(1/math.Sqrt(float64(cols)))
		if len(s.Shape) == 1 {
			mean, sd = 1, 0.05
		} else {
			t.Type = typ
		}
		size, err := t.Type.Bytes(rows*cols, 0)
		if err == nil && (t.Type == Q8_0 || t.Type == Q4_0) && cols%quant.BlockSize != 0 {
			err = fmt.Errorf("rows of %d are not whole %d-element blocks", cols, quant.BlockSize)
		}
		if err != nil {
			return nil, fmt.Errorf("synthesize: tensor %s %v as %v: %v", s.Name, s.Shape, t.Type, err)
		}
		t.Data = make([]byte, size)
		ck.Tensors[s.Name] = t
		step := max(1, synthChunk/cols)
		for r := 0; r < rows; r += step {
			jobs = append(jobs, job{t, mean, sd, r, min(step, rows-r)})
		}
	}
	cpu.Parallel(len(jobs), 1, func(lo, hi int) {
		var buf []float32
		for _, j := range jobs[lo:hi] {
			cols := j.t.Shape[len(j.t.Shape)-1]
			n := j.n * cols
			if cap(buf) < n {
				buf = make([]float32, n)
			}
			x := buf[:n]
			fillNormal(x, j.mean, j.sd, rand.NewPCG(seed, streamID(j.t.Name, j.row0)))
			rowBytes, _ := j.t.Type.Bytes(cols, 0)
			encodeRows(j.t.Type, j.t.Data[j.row0*rowBytes:][:j.n*rowBytes], x)
		}
	})
	if cfg.VocabSize >= synthVocabMin {
		v, err := SynthVocab(cfg.VocabSize)
		if err != nil {
			return nil, err
		}
		ck.Vocab = v
	}
	return ck, nil
}

// streamID derives a PCG stream from a tensor name and a chunk's first row (FNV-1a, then a splitmix64 finish).
func streamID(name string, row int) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return splitmix.Mix(h ^ uint64(row)*splitmix.Gamma)
}

// fillNormal sets x[i] = mean + sd·z with z approximately standard normal: the sum of the four 16-bit uniforms
// of one PCG output, centred and scaled to unit variance (Irwin–Hall with n = 4).
func fillNormal(x []float32, mean, sd float32, src *rand.PCG) {
	const centre = 4 * 65535 / 2.0
	k := float32(math.Sqrt(3) / 65536) // 1/σ of the sum: σ² = 4·(65536²-1)/12 ≈ 65536²/3
	for i := range x {
		u := src.Uint64()
		s := float32(u&0xffff) + float32(u>>16&0xffff) + float32(u>>32&0xffff) + float32(u>>48)
		x[i] = mean + sd*((s-centre)*k)
	}
}

// encodeRows stores the float32 values x as typ into dst (little-endian; whole blocks along rows).
func encodeRows(typ TensorType, dst []byte, x []float32) {
	switch typ {
	case F32:
		for i, v := range x {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16, BF16:
		h := make([]uint16, len(x))
		if typ == F16 {
			half.F32ToF16Slice(h, x)
		} else {
			half.F32ToBF16Slice(h, x)
		}
		for i, v := range h {
			binary.LittleEndian.PutUint16(dst[2*i:], v)
		}
	case Q8_0:
		quant.QuantizeQ8_0(dst, x)
	case Q4_0:
		quant.QuantizeQ4_0(dst, x)
	default:
		panic("model: encodeRows: unsupported type " + typ.String())
	}
}

// synthVocabMin is the smallest vocabulary SynthVocab makes: unk, BOS, EOS and the 256 byte tokens.
const synthVocabMin = 3 + 256

// SynthVocab returns a byte-level SentencePiece-style vocabulary of n tokens for synthetic models: <unk> (0),
// <s> (BOS, 1), </s> (EOS, 2), the 256 byte-fallback tokens <0x00>..<0xFF>, then filler pieces: the printable
// ASCII characters, then strings over space and a..z of length 2, 3, ... (a space only in front), scored so that
// earlier (shorter) pieces rank higher. Every filler piece longer than one character is the concatenation of two
// shorter ones, so BPE merges reach it. Any text encodes (bytes fall back to byte tokens) and decodes back.
func SynthVocab(n int) (*tokenizer.Vocab, error) {
	if n < synthVocabMin {
		return nil, fmt.Errorf("synthetic vocabulary of %d tokens, want at least %d (unk, BOS, EOS and 256 bytes)", n, synthVocabMin)
	}
	pieces := make([]string, 0, n)
	pieces = append(pieces, "<unk>", "<s>", "</s>")
	for b := range 256 {
		pieces = append(pieces, fmt.Sprintf("<0x%02X>", b))
	}
	for c := byte(' '); c <= '~' && len(pieces) < n; c++ {
		pieces = append(pieces, string(c))
	}
	const letters = "abcdefghijklmnopqrstuvwxyz"
	word := []string{""}
	for len(pieces) < n {
		var longer []string
		for _, w := range word {
			for i := range len(letters) {
				longer = append(longer, w+letters[i:i+1])
			}
		}
		word = longer
		for _, prefix := range []string{" ", ""} {
			for _, w := range word {
				if p := prefix + w; len(p) >= 2 && len(pieces) < n {
					pieces = append(pieces, p)
				}
			}
		}
	}
	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i)
	}
	return tokenizer.New(pieces, scores, nil, 1, 2, 0)
}
