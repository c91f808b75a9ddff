package model

import "fmt"

// Config is the shape of a Llama-architecture decoder: what every loader returns and every writer takes.
type Config struct {
	Dim            int     // model (residual stream) width
	HiddenDim      int     // width of the SwiGLU feed-forward layer
	NLayers        int     // decoder layers
	NHeads         int     // query heads
	NKVHeads       int     // key/value heads (grouped-query attention when < NHeads)
	VocabSize      int     // tokens in the vocabulary and rows of the embedding
	SeqLen         int     // context length the model was trained for
	RopeTheta      float64 // RoPE base frequency (10000 for Llama 2 and llama2.c models)
	NormEps        float32 // RMSNorm epsilon (1e-5 for llama2.c models)
	TiedEmbeddings bool    // the classifier reuses token_embd.weight; output.weight is absent
}

// maxDim bounds every size field so that products of two or three of them cannot overflow an int and hostile
// headers are rejected before anything is allocated.
const maxDim = 1 << 24

// HeadDim is the width of one attention head, Dim / NHeads.
func (c Config) HeadDim() int { return c.Dim / c.NHeads }

// KVDim is the width of the key and value projections, NKVHeads * HeadDim.
func (c Config) KVDim() int { return c.NKVHeads * c.HeadDim() }

// Validate returns an error naming the first field that cannot describe a Llama model, or nil.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"dim", c.Dim}, {"hidden_dim", c.HiddenDim}, {"n_layers", c.NLayers}, {"n_heads", c.NHeads},
		{"n_kv_heads", c.NKVHeads}, {"vocab_size", c.VocabSize}, {"seq_len", c.SeqLen},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("config: %s=%d, want 1..%d", f.name, f.v, maxDim)
		}
	}
	switch {
	case c.Dim%c.NHeads != 0:
		return fmt.Errorf("config: dim=%d is not a multiple of n_heads=%d", c.Dim, c.NHeads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("config: head dim %d (dim/n_heads) is odd; RoPE rotates pairs", c.HeadDim())
	case c.NKVHeads > c.NHeads || c.NHeads%c.NKVHeads != 0:
		return fmt.Errorf("config: n_heads=%d is not a multiple of n_kv_heads=%d", c.NHeads, c.NKVHeads)
	case !(c.RopeTheta > 0):
		return fmt.Errorf("config: rope_theta=%g, want > 0", c.RopeTheta)
	case !(c.NormEps > 0):
		return fmt.Errorf("config: norm_eps=%g, want > 0", c.NormEps)
	}
	return nil
}
