package model

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unsafe"

	"github.com/morphlab/morphlab/engine/tokenizer"
)

// TensorType is how a tensor's elements are stored in Tensor.Data.
type TensorType int

// The storage types. The block layouts are GGUF's (ggml's), little-endian:
//
//	F32      4 bytes per element
//	F16      2 bytes per element, IEEE binary16
//	BF16     2 bytes per element, the top half of an F32
//	Q8_0     blocks of 32 elements along a row: f16 scale d, then 32 int8 q; x = d*q (34 bytes per 32)
//	Q4_0     blocks of 32 elements along a row: f16 scale d, then 16 bytes; byte j holds element j in its low
//	         nibble and element j+16 in its high nibble; x = d*(nibble-8) (18 bytes per 32)
//	Q8Group  llama2.c v2 ("ak42" version 2): all n int8 values of the tensor, then n/GroupSize f32 scales, one
//	         per consecutive group of GroupSize elements; x = scale*q
const (
	F32 TensorType = iota
	F16
	BF16
	Q8_0
	Q4_0
	Q8Group
)

var typeNames = [...]string{F32: "F32", F16: "F16", BF16: "BF16", Q8_0: "Q8_0", Q4_0: "Q4_0", Q8Group: "Q8Group"}

func (t TensorType) String() string {
	if t >= 0 && int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("TensorType(%d)", int(t))
}

// BlockSize is the number of elements that share one scale: 1 for the float types, 32 for Q8_0 and Q4_0, and
// groupSize for Q8Group.
func (t TensorType) BlockSize(groupSize int) int {
	switch t {
	case Q8_0, Q4_0:
		return 32
	case Q8Group:
		return groupSize
	}
	return 1
}

// Bytes returns the storage size of n elements, or an error when n is not a whole number of blocks (or the type
// or group size is unknown).
func (t TensorType) Bytes(n, groupSize int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("negative element count %d", n)
	}
	bs := t.BlockSize(groupSize)
	if bs <= 0 {
		return 0, fmt.Errorf("%v group size %d, want > 0", t, groupSize)
	}
	if n%bs != 0 {
		return 0, fmt.Errorf("%d elements is not a whole number of %v blocks of %d", n, t, bs)
	}
	switch t {
	case F32:
		return 4 * n, nil
	case F16, BF16:
		return 2 * n, nil
	case Q8_0:
		return n / 32 * 34, nil
	case Q4_0:
		return n / 32 * 18, nil
	case Q8Group:
		return n + 4*(n/bs), nil
	}
	return 0, fmt.Errorf("unknown tensor type %v", t)
}

// Tensor is one named array of weights.
//
// SHAPE ORDER: Shape is ROW-MAJOR (numpy/PyTorch order): the LAST dimension varies fastest in Data. A linear
// layer's weight is {out, in}: row o holds the in weights of output o, so y[o] = sum_i W[o*in+i] x[i]. The
// embedding is {vocab, dim}. Norm weights are {dim}. GGUF lists dimensions the other way round (ne[0] is the
// fastest); the GGUF reader and writer reverse them. Quantized blocks run along the last dimension.
type Tensor struct {
	Name      string
	Type      TensorType
	Shape     []int
	Data      []byte // raw little-endian storage; may be a slice of a memory-mapped file: do not write to it
	GroupSize int    // elements per scale; Q8Group only
}

// Elements is the product of the shape.
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// F32 returns the elements of an F32 tensor. It aliases Data (no copy) when Data is 4-byte aligned, which every
// loader guarantees, and copies otherwise. It panics if the tensor is not F32.
func (t *Tensor) F32() []float32 {
	if t.Type != F32 {
		panic(fmt.Sprintf("model: tensor %s is %v, not F32", t.Name, t.Type))
	}
	return bytesToF32(t.Data)
}

// Q8Group returns the int8 values and the per-group scales of a Q8Group tensor (aliasing Data when aligned).
// It panics if the tensor is not Q8Group.
func (t *Tensor) Q8Group() (q []int8, scales []float32) {
	if t.Type != Q8Group {
		panic(fmt.Sprintf("model: tensor %s is %v, not Q8Group", t.Name, t.Type))
	}
	n := t.Elements()
	if n == 0 {
		return nil, nil
	}
	q = unsafe.Slice((*int8)(unsafe.Pointer(&t.Data[0])), n)
	return q, bytesToF32(t.Data[n:])
}

// NewF32Tensor makes an F32 tensor holding a copy of data.
func NewF32Tensor(name string, shape []int, data []float32) *Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return &Tensor{Name: name, Type: F32, Shape: append([]int(nil), shape...), Data: b}
}

func bytesToF32(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// Canonical tensor names (GGUF's). Per-layer names are made by LayerTensor.
const (
	TokenEmbd  = "token_embd.weight"
	OutputNorm = "output_norm.weight"
	Output     = "output.weight" // absent when Config.TiedEmbeddings

	AttnNorm   = "attn_norm"
	AttnQ      = "attn_q"
	AttnK      = "attn_k"
	AttnV      = "attn_v"
	AttnOutput = "attn_output"
	FFNNorm    = "ffn_norm"
	FFNGate    = "ffn_gate" // llama2.c w1
	FFNDown    = "ffn_down" // llama2.c w2
	FFNUp      = "ffn_up"   // llama2.c w3
)

// LayerTensor names tensor part (AttnQ, FFNDown, ...) of decoder layer l: "blk.<l>.<part>.weight".
func LayerTensor(l int, part string) string { return fmt.Sprintf("blk.%d.%s.weight", l, part) }

// LayerParts lists the per-layer tensors in llama2.c's order.
var LayerParts = []string{AttnNorm, AttnQ, AttnK, AttnV, AttnOutput, FFNNorm, FFNGate, FFNDown, FFNUp}

// TensorSpec is a tensor name with the row-major shape the config requires of it.
type TensorSpec struct {
	Name  string
	Shape []int
}

// LayerShape is the row-major shape of part in every layer.
func (c Config) LayerShape(part string) []int {
	switch part {
	case AttnNorm, FFNNorm:
		return []int{c.Dim}
	case AttnQ:
		return []int{c.NHeads * c.HeadDim(), c.Dim}
	case AttnK, AttnV:
		return []int{c.KVDim(), c.Dim}
	case AttnOutput:
		return []int{c.Dim, c.NHeads * c.HeadDim()}
	case FFNGate, FFNUp:
		return []int{c.HiddenDim, c.Dim}
	case FFNDown:
		return []int{c.Dim, c.HiddenDim}
	}
	panic("model: unknown layer tensor " + part)
}

// Tensors lists every tensor the config requires, with its shape: token_embd, then each layer's parts in
// llama2.c order, then output_norm and (unless tied) output.
func (c Config) Tensors() []TensorSpec {
	var specs []TensorSpec
	c.eachTensor(func(s TensorSpec) bool {
		specs = append(specs, s)
		return true
	})
	return specs
}

// eachTensor calls fn on the tensors of Tensors in order until fn returns false. Checks use it rather than
// Tensors so that a hostile header claiming millions of layers fails at the first missing tensor instead of
// first building a list of them all.
func (c Config) eachTensor(fn func(TensorSpec) bool) {
	if !fn(TensorSpec{TokenEmbd, []int{c.VocabSize, c.Dim}}) {
		return
	}
	for l := 0; l < c.NLayers; l++ {
		for _, p := range LayerParts {
			if !fn(TensorSpec{LayerTensor(l, p), c.LayerShape(p)}) {
				return
			}
		}
	}
	if fn(TensorSpec{OutputNorm, []int{c.Dim}}) && !c.TiedEmbeddings {
		fn(TensorSpec{Output, []int{c.VocabSize, c.Dim}})
	}
}

// checkedParams is the number of weights the config requires, computed without listing its tensors; ok is false
// if it exceeds 2^50 (no real model; a corrupt header).
func (c Config) checkedParams() (n int, ok bool) {
	q, kv := c.NHeads*c.HeadDim(), c.KVDim()
	layer, ok1 := elements(c.Dim, 2+2*q+2*kv+3*c.HiddenDim)
	layers, ok2 := elements(c.NLayers, layer)
	embed, ok3 := elements(c.VocabSize, c.Dim)
	n = layers + embed + c.Dim
	if !c.TiedEmbeddings {
		n += embed
	}
	return n, ok1 && ok2 && ok3 && n <= maxElements
}

// Checkpoint is a loaded model: its config, its tensors under canonical names, and its vocabulary when the file
// carries one. Tensors may alias a memory-mapped file; they stay valid until Close.
type Checkpoint struct {
	Config  Config
	Tensors map[string]*Tensor
	Vocab   *tokenizer.Vocab // nil when the file has no vocabulary (llama2.c files keep it in tokenizer.bin)
	closer  func() error
}

// Close releases the file mapping behind the tensors, if any. The tensors must not be used afterwards.
func (c *Checkpoint) Close() error {
	if c.closer == nil {
		return nil
	}
	err := c.closer()
	c.closer = nil
	return err
}

// Check verifies that the config is valid and that every tensor it requires is present with the right shape and
// a data length that matches its type. Extra tensors are allowed. Errors name file, tensor, expected and got.
func (c *Checkpoint) Check(file string) error {
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if _, ok := c.Tensors[Output]; ok && c.Config.TiedEmbeddings {
		return fmt.Errorf("%s: tensor %s present but the config says the embeddings are tied", file, Output)
	}
	var err error
	c.Config.eachTensor(func(s TensorSpec) bool {
		t, ok := c.Tensors[s.Name]
		switch {
		case !ok:
			err = fmt.Errorf("%s: tensor %s missing", file, s.Name)
		case !equalShape(t.Shape, s.Shape):
			err = fmt.Errorf("%s: tensor %s: shape %v, want %v", file, s.Name, t.Shape, s.Shape)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	for _, t := range c.Tensors {
		if err := checkData(t); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", file, t.Name, err)
		}
	}
	return nil
}

// checkData verifies that a tensor's blocks fit its rows and that Data holds exactly its elements.
func checkData(t *Tensor) error {
	n, ok := elements(t.Shape...)
	if !ok || n == 0 {
		return fmt.Errorf("bad shape %v", t.Shape)
	}
	if t.Type == Q8_0 || t.Type == Q4_0 {
		if len(t.Shape) == 0 || t.Shape[len(t.Shape)-1]%32 != 0 {
			return fmt.Errorf("%v rows of %v are not whole 32-element blocks", t.Type, t.Shape)
		}
	}
	want, err := t.Type.Bytes(n, t.GroupSize)
	if err != nil {
		return err
	}
	if len(t.Data) != want {
		return fmt.Errorf("%d data bytes, want %d for %v %v", len(t.Data), want, t.Type, t.Shape)
	}
	return nil
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// maxElements bounds a tensor's element count (2^50) so that size arithmetic on hostile headers cannot overflow.
const maxElements = 1 << 50

// elements returns the product of dims, or false if a dim is negative or the product exceeds maxElements.
func elements(dims ...int) (int, bool) {
	n := 1
	for _, d := range dims {
		if d < 0 || (d > 0 && n > maxElements/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// loadFile maps path and parses it with parse; on success the checkpoint owns the mapping (Close releases it).
func loadFile(path string, parse func(name string, data []byte) (*Checkpoint, error)) (*Checkpoint, error) {
	data, release, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	ck, err := parse(path, data)
	if err != nil {
		release()
		return nil, err
	}
	ck.closer = release
	return ck, nil
}

// Load opens a checkpoint of any supported format, chosen by content: a directory or a .safetensors file is a
// Hugging Face safetensors checkpoint (LoadSafetensors), a file starting with "GGUF" is GGUF (LoadGGUF), and any
// other file is llama2.c (LoadLlama2c, which tells versions 1 and 2 by their "ak42" magic).
func Load(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() || strings.HasSuffix(path, ".safetensors") {
		return LoadSafetensors(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err == nil && binary.LittleEndian.Uint32(magic[:]) == ggufMagic {
		return LoadGGUF(path)
	}
	return LoadLlama2c(path)
}
