package model

import (
	"fmt"
	"maps"
)

// ConvertLayers returns a copy of ck with the seven weight matrices of the given decoder layers (every layer when
// layers is nil) re-encoded as typ, one of the types a GGUF file holds and a kernel runs on directly: F32, F16,
// BF16, Q8_0 or Q4_0. Each matrix is widened to F32 and encoded anew (Q8_0 and Q4_0 byte for byte as ggml's
// reference quantizers), so converting a quantized matrix to another type compounds the two roundings. The norms,
// the embedding, the classifier and the other layers are shared with ck, which must stay open until the copy has
// been written.
//
// The engine's own Int8 and Int4 layouts (and AWQ and SmoothQuant variants, whose scales are fitted on
// activations) have no file type: the engine builds them after loading (Model.AddVariant, AddInt4Variant,
// AddAWQVariant, AddSmoothQuantVariant).
func ConvertLayers(ck *Checkpoint, typ TensorType, layers []int) (*Checkpoint, error) {
	switch typ {
	case F32, F16, BF16, Q8_0, Q4_0:
	default:
		return nil, fmt.Errorf("convert: type %v, want F32, F16, BF16, Q8_0 or Q4_0", typ)
	}
	cfg := ck.Config
	if layers == nil {
		for l := range cfg.NLayers {
			layers = append(layers, l)
		}
	}
	out := &Checkpoint{Config: cfg, Tensors: maps.Clone(ck.Tensors), Vocab: ck.Vocab}
	for _, l := range layers {
		if l < 0 || l >= cfg.NLayers {
			return nil, fmt.Errorf("convert: layer %d out of range [0, %d)", l, cfg.NLayers)
		}
		for _, part := range LayerParts {
			if part == AttnNorm || part == FFNNorm {
				continue
			}
			name := LayerTensor(l, part)
			src, ok := ck.Tensors[name]
			if !ok {
				return nil, fmt.Errorf("convert: tensor %s missing", name)
			}
			t, err := convertTensor(src, typ)
			if err != nil {
				return nil, fmt.Errorf("convert: tensor %s %v to %v: %w", name, src.Shape, typ, err)
			}
			out.Tensors[name] = t
		}
	}
	return out, nil
}

// convertTensor re-encodes a matrix as typ.
func convertTensor(src *Tensor, typ TensorType) (*Tensor, error) {
	cols := src.Shape[len(src.Shape)-1]
	if (typ == Q8_0 || typ == Q4_0) && cols%32 != 0 {
		return nil, fmt.Errorf("rows of %d are not whole 32-element blocks", cols)
	}
	x, err := tensorF32(src)
	if err != nil {
		return nil, err
	}
	size, err := typ.Bytes(len(x), 0)
	if err != nil {
		return nil, err
	}
	t := &Tensor{Name: src.Name, Type: typ, Shape: append([]int(nil), src.Shape...), Data: make([]byte, size)}
	encodeRows(typ, t.Data, x)
	return t, nil
}

// ConvertClassifier returns a copy of ck whose classifier (output.weight) is re-encoded as typ, as
// ConvertLayers re-encodes a layer's matrices. A checkpoint with tied embeddings gets a classifier of its own,
// made from the token embedding, and is untied; the embedding itself is shared with ck as it is.
func ConvertClassifier(ck *Checkpoint, typ TensorType) (*Checkpoint, error) {
	switch typ {
	case F32, F16, BF16, Q8_0, Q4_0:
	default:
		return nil, fmt.Errorf("convert: classifier type %v, want F32, F16, BF16, Q8_0 or Q4_0", typ)
	}
	out := &Checkpoint{Config: ck.Config, Tensors: maps.Clone(ck.Tensors), Vocab: ck.Vocab}
	name := Output
	if ck.Config.TiedEmbeddings {
		name = TokenEmbd
	}
	src, ok := ck.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("convert: tensor %s missing", name)
	}
	t, err := convertTensor(src, typ)
	if err != nil {
		return nil, fmt.Errorf("convert: classifier %s %v to %v: %w", name, src.Shape, typ, err)
	}
	t.Name = Output
	out.Tensors[Output] = t
	out.Config.TiedEmbeddings = false
	return out, nil
}
