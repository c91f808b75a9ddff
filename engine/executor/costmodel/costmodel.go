// Package costmodel predicts how long one engine iteration takes on a device that is not there: a per-operator
// roofline over a Llama decoder's shape, each layer's weight format and the KV cache's element type.
//
// An operator that runs F floating-point operations and moves B bytes at n tokens takes
//
//	max(F / (peak of its dtype × compute efficiency(n)), B / (memory bandwidth × memory efficiency(n)), floor)
//
// where an efficiency is Max·(n/Half)^Shape / (1 + (n/Half)^Shape), or Max where Half is 0, and the floor is
// the operator's shortest time (a kernel launch and its tail). Projections compute at the peak of their weights'
// dtype (tensor cores on a GPU) with an efficiency that grows with the tokens (a small batch leaves tiles
// idle) and stream their weights at a constant one; elementwise operators (norms, RoPE, the activation, residual
// adds) compute at the vector rate, counting a few FLOPs an element, and stream their activations, both at
// constant efficiencies, their small batches being launch-bound (the floor). Efficiencies are per operator class (Params) and are fitted, not guessed: Fit finds
// them from measured operator times (Vidur's A100 profile of Llama-2-7B, see experiments/catalog), and the
// held-out checks there use them unchanged with other models and GPUs, whose only inputs are their datasheet
// peaks.
//
// The operators of one decoder layer are those Vidur profiles, under its names (input_layernorm, attn_pre_proj,
// attn_rope, attn_post_proj, post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add twice), plus
// attention itself (attn_prefill over a prompt chunk's causal keys, attn_decode over each decoding sequence's
// context); per model there are the embedding (emb), the final norm, the classifier (lm_head) over the sampled rows,
// and a fixed per-iteration overhead. Weight bytes follow each layer's format (F16, Int8 with a scale a row,
// Int4 with a scale and zero point a group, as package quant stores them); Int8 layers compute at the INT8 peak
// (W8A8), Int4 layers at the FP16 peak (W4A16 kernels widen the weights in registers).
//
// On this machine's CPU a step's time comes from a Calibration instead: a linear model fitted by `morphlab
// calibrate` to the CPU executor's measured step times.
//
// The package is pure: shapes, hardware and formats in, times out. It depends on no catalog; experiments/catalog
// fills its inputs.
package costmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

// Hardware is a device's ceilings, from its datasheet (GPUs) or from `morphlab probe` (the CPU).
type Hardware struct {
	Name     string
	F16FLOPS float64 // dense FP16/BF16 peak (tensor cores on a GPU), FLOP/s
	Int8OPS  float64 // dense INT8 peak, OP/s
	F32FLOPS float64 // FP32 peak, FLOP/s (what F32 weights compute at)
	// VectorFLOPS is the rate of elementwise arithmetic on activations: FP16 without tensor cores on a GPU,
	// the FMA peak on the CPU.
	VectorFLOPS float64
	Bandwidth   float64 // memory bandwidth, bytes/s
	Memory      int64   // device memory, bytes
	HostLink    float64 // host-to-device bandwidth, bytes/s (what a layer swap's transfer moves over)
	// ActBytes is the size of one activation element: 2 on a GPU (FP16), 4 on the CPU executor (float32).
	ActBytes int
}

// Peak is the compute ceiling for weights in format f: INT8 for Int8 and Q8_0 (W8A8), FP16 for F16, BF16 and the
// 4-bit formats (W4A16), FP32 for F32.
func (h Hardware) Peak(f quant.Format) float64 {
	switch f {
	case quant.Int8, quant.Q8_0:
		return h.Int8OPS
	case quant.F32:
		return h.F32FLOPS
	}
	return h.F16FLOPS
}

// Efficiency is the fraction of a ceiling an operator reaches at n tokens: Max·x/(1+x) with x = (n/Half)^Shape.
// Half 0 means Max at every n.
type Efficiency struct {
	Max   float64 `json:"max"`
	Half  float64 `json:"half"`  // tokens at which the operator reaches half of Max
	Shape float64 `json:"shape"` // how sharply it gets there
}

// At is the efficiency at n tokens.
func (e Efficiency) At(n float64) float64 {
	if e.Half == 0 {
		return e.Max
	}
	x := math.Pow(n/e.Half, e.Shape)
	return e.Max * x / (1 + x)
}

// Roofline is one operator class's efficiencies and shortest time.
type Roofline struct {
	Compute Efficiency `json:"compute"`
	Memory  Efficiency `json:"memory"`
	Floor   float64    `json:"floor_s"` // seconds
}

// Time is the roofline time in seconds of an operator running flops operations at peak and moving bytes at
// bandwidth bw, at n tokens. Zero flops or bytes skip that term.
func (r Roofline) Time(flops, peak, bytes, bw, n float64) float64 {
	t := r.Floor
	if flops > 0 {
		t = max(t, flops/(peak*r.Compute.At(n)))
	}
	if bytes > 0 {
		t = max(t, bytes/(bw*r.Memory.At(n)))
	}
	return t
}

// Params are the efficiencies of each operator class and the per-iteration overhead.
type Params struct {
	// Linear covers the projections (attn_pre_proj, attn_post_proj, mlp_up_proj, mlp_down_proj), the classifier,
	// and attention: Vidur's shipped profiles hold no attention times to fit, so attention borrows the GEMMs'
	// efficiencies (FlashAttention-2 reaches 50-73% of an A100's peak in its paper, the range cuBLAS GEMMs reach;
	// paged decode attention streams the cache as a GEMV streams weights).
	Linear Roofline `json:"linear"`
	// The elementwise classes, computing at the vector rate.
	Norm      Roofline `json:"norm"`      // input_layernorm, post_attention_layernorm, the final norm
	RoPE      Roofline `json:"rope"`      // attn_rope
	Act       Roofline `json:"act"`       // mlp_act
	Add       Roofline `json:"add"`       // add
	Embedding Roofline `json:"embedding"` // emb: a gather, only its bytes count
	// Iteration is the fixed cost of one iteration in seconds (scheduling, launches); Vidur's shipped profiles do
	// not measure it, so GPU fits leave it 0.
	Iteration float64 `json:"iteration_s"`
}

// Class is one operator class of Params.
type Class int

// The operator classes.
const (
	ClassLinear Class = iota
	ClassNorm
	ClassRoPE
	ClassAct
	ClassAdd
	ClassEmbedding
	numClasses
)

var classNames = [numClasses]string{"linear", "norm", "rope", "act", "add", "embedding"}

func (c Class) String() string {
	if c < 0 || c >= numClasses {
		return fmt.Sprintf("Class(%d)", int(c))
	}
	return classNames[c]
}

// Roofline returns the class's roofline in p.
func (p *Params) Roofline(c Class) *Roofline {
	switch c {
	case ClassNorm:
		return &p.Norm
	case ClassRoPE:
		return &p.RoPE
	case ClassAct:
		return &p.Act
	case ClassAdd:
		return &p.Add
	case ClassEmbedding:
		return &p.Embedding
	}
	return &p.Linear
}

// Op names, as Vidur's profiles name them where it profiles the operator.
const (
	OpEmbedding    = "emb"
	OpInputNorm    = "input_layernorm"
	OpPreProj      = "attn_pre_proj"
	OpRoPE         = "attn_rope"
	OpAttnPrefill  = "attn_prefill"
	OpAttnDecode   = "attn_decode"
	OpPostProj     = "attn_post_proj"
	OpPostAttnNorm = "post_attention_layernorm"
	OpUpProj       = "mlp_up_proj"
	OpAct          = "mlp_act"
	OpDownProj     = "mlp_down_proj"
	OpAdd          = "add"
	OpFinalNorm    = "norm"
	OpClassifier   = "lm_head"
	OpIteration    = "iteration"
)

// LayerOps are the per-layer operators Vidur profiles, in the order a layer runs them (add runs twice a layer).
var LayerOps = []string{OpInputNorm, OpPreProj, OpRoPE, OpPostProj, OpAdd, OpPostAttnNorm, OpUpProj, OpAct, OpDownProj}

// OpClass is the class an operator's efficiencies come from; ok is false for a name that is none of the ops.
func OpClass(op string) (c Class, ok bool) {
	switch op {
	case OpPreProj, OpPostProj, OpUpProj, OpDownProj, OpClassifier, OpAttnPrefill, OpAttnDecode:
		return ClassLinear, true
	case OpInputNorm, OpPostAttnNorm, OpFinalNorm:
		return ClassNorm, true
	case OpRoPE:
		return ClassRoPE, true
	case OpAct:
		return ClassAct, true
	case OpAdd:
		return ClassAdd, true
	case OpEmbedding:
		return ClassEmbedding, true
	}
	return 0, false
}

// MatrixBytes is the storage of a weight matrix [rows, cols] in format f, as quant.Matrix.Bytes counts it for a
// matrix that model.AddVariant makes (Int4 with model.Int4Group's group for quant.DefaultGroup).
func MatrixBytes(rows, cols int, f quant.Format) int64 {
	r, c := int64(rows), int64(cols)
	switch f {
	case quant.F32:
		return 4 * r * c
	case quant.F16, quant.BF16:
		return 2 * r * c
	case quant.Int8:
		return r*c + 4*r
	case quant.Q8_0:
		return r * c / quant.BlockSize * quant.Q8_0BlockBytes
	case quant.Q4_0:
		return r * c / quant.BlockSize * quant.Q4_0BlockBytes
	case quant.Int4:
		g, err := model.Int4Group(cols, quant.DefaultGroup)
		if err != nil {
			g = cols
		}
		return r*c/2 + 5*r*c/int64(g) // packed nibbles; a float32 scale and a uint8 zero point a group
	}
	return 2 * r * c
}

// LayerBytes is one decoder layer's weight bytes in format f: its seven matrices and its two float32 norms, as
// model.LayerWeights.Bytes counts them.
func LayerBytes(cfg model.Config, f quant.Format) int64 {
	d, kv, h := cfg.Dim, cfg.KVDim(), cfg.HiddenDim
	return MatrixBytes(d, d, f) + 2*MatrixBytes(kv, d, f) + MatrixBytes(d, d, f) +
		2*MatrixBytes(h, d, f) + MatrixBytes(d, h, f) + 8*int64(d)
}

// OuterBytes is the weight bytes outside the decoder layers with the embedding and classifier in format f (F32
// or F16) and the final norm in float32: the embedding, the final norm, and the classifier unless it is the
// embedding table (tied, F32), as model.Model.WeightBytes counts them.
func OuterBytes(cfg model.Config, f quant.Format) int64 {
	emb := int64(cfg.VocabSize) * int64(cfg.Dim)
	if f == quant.F32 {
		emb *= 4
	} else {
		emb *= 2
	}
	n := emb + 4*int64(cfg.Dim)
	if !cfg.TiedEmbeddings || f != quant.F32 {
		n += MatrixBytes(cfg.VocabSize, cfg.Dim, f)
	}
	return n
}

// Work is one iteration's work in the aggregates its cost depends on.
type Work struct {
	Tokens  int `json:"tokens"`  // tokens fed
	Sampled int `json:"sampled"` // sequences whose next token is sampled (rows of logits)
	// Prompt chunks (sequences fed more than one token): their tokens, the causal keys those tokens attend
	// (a chunk of q tokens ending at position L attends q·L − q(q−1)/2 keys) and the cache positions they read.
	PrefillTokens  int   `json:"prefill_tokens"`
	PrefillKeys    int64 `json:"prefill_keys"`
	PrefillContext int64 `json:"prefill_context"`
	// Decoding sequences (fed one token): how many and the keys they attend (their lengths, summed).
	DecodeSeqs int   `json:"decode_seqs"`
	DecodeKeys int64 `json:"decode_keys"`
}

// AddSeq adds one sequence fed tokens tokens whose cache then holds seqLen positions.
func (w *Work) AddSeq(tokens, seqLen int, sample bool) {
	w.Tokens += tokens
	if sample {
		w.Sampled++
	}
	q, l := int64(tokens), int64(seqLen)
	if tokens == 1 {
		w.DecodeSeqs++
		w.DecodeKeys += l
		return
	}
	w.PrefillTokens += tokens
	w.PrefillKeys += q*l - q*(q-1)/2
	w.PrefillContext += l
}

// LayerFormat is a count of decoder layers in one format.
type LayerFormat struct {
	Format quant.Format
	Layers int
}

// OpTime is one operator's predicted time.
type OpTime struct {
	Op      string  `json:"op"`
	Seconds float64 `json:"seconds"`
	FLOPs   float64 `json:"flops"`
	Bytes   float64 `json:"bytes"`
	Count   int     `json:"count"` // times it runs in the step (per layer ops: once a layer, add twice)
}

// Model predicts iteration times for one model on one device. Its caches make it unsafe for concurrent use.
type Model struct {
	Config   model.Config
	Hardware Hardware
	Params   Params
	KV       model.KVType // the cache's element type
	Outer    quant.Format // the embedding's and classifier's format
	// Calibration, when set, replaces the roofline for StepTime (the CPU).
	Calibration *Calibration

	cache map[memoKey][]float64 // times by token count, NaN where not yet known
}

// New returns a cost model of cfg on hw with efficiencies p, a cache of kv elements and the embedding and
// classifier in outer. It fails on an invalid config or a device without ceilings.
func New(cfg model.Config, hw Hardware, p Params, kv model.KVType, outer quant.Format) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !(hw.F16FLOPS > 0 && hw.Int8OPS > 0 && hw.F32FLOPS > 0 && hw.VectorFLOPS > 0 && hw.Bandwidth > 0 && hw.ActBytes > 0) {
		return nil, fmt.Errorf("costmodel: hardware %q: FP16 peak %g, INT8 peak %g, FP32 peak %g, vector rate %g, bandwidth %g, activation bytes %d; want all > 0",
			hw.Name, hw.F16FLOPS, hw.Int8OPS, hw.F32FLOPS, hw.VectorFLOPS, hw.Bandwidth, hw.ActBytes)
	}
	return &Model{Config: cfg, Hardware: hw, Params: p, KV: kv, Outer: outer, cache: map[memoKey][]float64{}}, nil
}

// kvRowBytes is the bytes one token's keys and values take in one layer.
func (m *Model) kvRowBytes() float64 {
	return float64(m.KV.BytesPerBlock(m.Config, 1)) / float64(m.Config.NLayers)
}

// linear is a projection [out, in] over n tokens with weights in f.
func (m *Model) linear(op string, out, in, n int, f quant.Format) OpTime {
	a := float64(m.Hardware.ActBytes)
	flops := 2 * float64(n) * float64(out) * float64(in)
	bytes := float64(MatrixBytes(out, in, f)) + a*float64(n)*float64(in+out)
	t := m.Params.Linear.Time(flops, m.Hardware.Peak(f), bytes, m.Hardware.Bandwidth, float64(n))
	return OpTime{Op: op, Seconds: t, FLOPs: flops, Bytes: bytes, Count: 1}
}

// elementwise is an operator of class c running flops at the vector rate and moving bytes, at n tokens.
func (m *Model) elementwise(op string, c Class, flops, bytes float64, n int) OpTime {
	t := m.Params.Roofline(c).Time(flops, m.Hardware.VectorFLOPS, bytes, m.Hardware.Bandwidth, float64(n))
	return OpTime{Op: op, Seconds: t, FLOPs: flops, Bytes: bytes, Count: 1}
}

// FLOPs an element of the elementwise operators: RMSNorm squares, sums, scales and multiplies by the weight;
// RoPE rotates pairs (4 multiplies and 2 adds a pair); SiLU-and-multiply x·y/(1+exp(−x)) (the exponential
// counted as one); a residual add adds.
const (
	normFLOPs = 4
	ropeFLOPs = 3
	actFLOPs  = 5
	addFLOPs  = 1
)

// LayerOpTimes are the times of one decoder layer's operators apart from attention, in LayerOps' order, at n
// tokens with the layer's weights in f; add counts twice.
func (m *Model) LayerOpTimes(n int, f quant.Format) []OpTime {
	c, a, t := m.Config, float64(m.Hardware.ActBytes), float64(n)
	d, kv, h := float64(c.Dim), float64(c.KVDim()), float64(c.HiddenDim)
	norm := m.elementwise(OpInputNorm, ClassNorm, normFLOPs*t*d, 2*a*t*d+4*d, n)
	post := norm
	post.Op = OpPostAttnNorm
	add := m.elementwise(OpAdd, ClassAdd, addFLOPs*t*d, 3*a*t*d, n)
	add.Count = 2
	return []OpTime{
		norm,
		m.linear(OpPreProj, c.Dim+2*c.KVDim(), c.Dim, n, f),
		m.elementwise(OpRoPE, ClassRoPE, ropeFLOPs*t*(d+kv), 2*a*t*(d+kv), n),
		m.linear(OpPostProj, c.Dim, c.Dim, n, f),
		add,
		post,
		m.linear(OpUpProj, 2*c.HiddenDim, c.Dim, n, f),
		m.elementwise(OpAct, ClassAct, actFLOPs*t*h, 3*a*t*h, n),
		m.linear(OpDownProj, c.Dim, c.HiddenDim, n, f),
	}
}

// AttentionTimes are one layer's attention times for w: prefill over its prompt chunks, decode over its
// decoding sequences (zero when there are none). Both count 4·Dim FLOPs a key (scores and the weighted sum) and
// read the cache positions once.
func (m *Model) AttentionTimes(w Work) (prefill, decode OpTime) {
	c, a := m.Config, float64(m.Hardware.ActBytes)
	d, row := float64(c.Dim), m.kvRowBytes()
	lin := &m.Params.Linear
	prefill.Op, decode.Op = OpAttnPrefill, OpAttnDecode
	if w.PrefillTokens > 0 {
		prefill.FLOPs = 4 * d * float64(w.PrefillKeys)
		prefill.Bytes = row*float64(w.PrefillContext) + 2*a*d*float64(w.PrefillTokens)
		prefill.Seconds = lin.Time(prefill.FLOPs, m.Hardware.F16FLOPS, prefill.Bytes, m.Hardware.Bandwidth, float64(w.PrefillTokens))
		prefill.Count = 1
	}
	if w.DecodeSeqs > 0 {
		decode.FLOPs = 4 * d * float64(w.DecodeKeys)
		decode.Bytes = row*float64(w.DecodeKeys) + 2*a*d*float64(w.DecodeSeqs)
		decode.Seconds = lin.Time(decode.FLOPs, m.Hardware.F16FLOPS, decode.Bytes, m.Hardware.Bandwidth, float64(w.DecodeSeqs))
		decode.Count = 1
	}
	return prefill, decode
}

// OuterOpTimes are the embedding, final norm and classifier times for w.
func (m *Model) OuterOpTimes(w Work) []OpTime {
	c, a := m.Config, float64(m.Hardware.ActBytes)
	d, n := float64(c.Dim), w.Tokens
	out := []OpTime{
		m.elementwise(OpEmbedding, ClassEmbedding, 0, 2*a*float64(n)*d, n),
		m.elementwise(OpFinalNorm, ClassNorm, normFLOPs*float64(n)*d, 2*a*float64(n)*d+4*d, n),
	}
	if w.Sampled > 0 {
		out = append(out, m.linear(OpClassifier, c.VocabSize, c.Dim, w.Sampled, m.Outer))
	}
	return out
}

// Breakdown is one iteration of n tokens over context cache positions with every decoder layer in one format:
// each operator's time in the order a step runs them (the embedding, a layer's operators with prefill and decode
// attention after the RoPE, the final norm, the classifier over n rows), and the step's time with the n tokens as
// one prompt chunk (Prefill) and as n decoding sequences (Decode).
type Breakdown struct {
	Ops             []OpTime
	Prefill, Decode time.Duration
}

// Breakdown returns the breakdown of n tokens over context positions (at least n) with the layers in f.
func (m *Model) Breakdown(n, context int, f quant.Format) Breakdown {
	var prefill, decode Work
	prefill.AddSeq(n, context, true)
	for range n {
		decode.AddSeq(1, context, true)
	}
	pre, _ := m.AttentionTimes(prefill)
	_, dec := m.AttentionTimes(decode)
	if n == 1 { // a one-token chunk counts as decoding in a Work; its prefill attention is still what it would cost
		pre, _ = m.AttentionTimes(Work{Tokens: 1, PrefillTokens: 1, PrefillKeys: int64(context), PrefillContext: int64(context)})
		pre.Op = OpAttnPrefill
	}
	layer := m.LayerOpTimes(n, f)
	outer := m.OuterOpTimes(Work{Tokens: n, Sampled: n})
	ops := append(outer[:1:1], layer[:3]...)
	ops = append(append(append(ops, pre, dec), layer[3:]...), outer[1:]...)
	layers := []LayerFormat{{Format: f, Layers: m.Config.NLayers}}
	return Breakdown{Ops: ops, Prefill: m.StepTime(prefill, layers), Decode: m.StepTime(decode, layers)}
}

// What the memo caches by token count.
const (
	memoLayer   = iota // one layer without attention, in a format
	memoOuter          // the embedding and the final norm
	memoSampled        // the classifier, by sampled rows
)

type memoKey struct {
	kind int
	f    quant.Format
}

// memo returns the cached time of k at n tokens (or rows), computing it the first time.
func (m *Model) memo(k memoKey, n int) float64 {
	cache := m.cache[k]
	if n < len(cache) && !math.IsNaN(cache[n]) {
		return cache[n]
	}
	if n >= len(cache) {
		grown := make([]float64, max(n+1, 2*len(cache)))
		for i := range grown {
			grown[i] = math.NaN()
		}
		copy(grown, cache)
		cache = grown
		m.cache[k] = cache
	}
	t := 0.0
	switch k.kind {
	case memoLayer:
		for _, op := range m.LayerOpTimes(n, k.f) {
			t += op.Seconds * float64(op.Count)
		}
	case memoOuter:
		for _, op := range m.OuterOpTimes(Work{Tokens: n}) {
			t += op.Seconds
		}
	case memoSampled:
		t = m.linear(OpClassifier, m.Config.VocabSize, m.Config.Dim, n, m.Outer).Seconds
	}
	cache[n] = t
	return t
}

// StepTime is the predicted time of an iteration doing w with the decoder layers in the given formats. With a
// Calibration it is the calibration's prediction.
func (m *Model) StepTime(w Work, layers []LayerFormat) time.Duration {
	if w.Tokens == 0 {
		return 0
	}
	if m.Calibration != nil {
		return m.Calibration.StepTime(w, layers, m.Config.NLayers)
	}
	t := m.Params.Iteration + m.memo(memoKey{kind: memoOuter}, w.Tokens)
	if w.Sampled > 0 {
		t += m.memo(memoKey{kind: memoSampled}, w.Sampled)
	}
	total := 0
	for _, lf := range layers {
		t += float64(lf.Layers) * m.memo(memoKey{memoLayer, lf.Format}, w.Tokens)
		total += lf.Layers
	}
	pre, dec := m.AttentionTimes(w)
	t += float64(total) * (pre.Seconds + dec.Seconds)
	return time.Duration(t * 1e9)
}
