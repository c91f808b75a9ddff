// Package morph is MorphServe's control loop over the engine: a Serving Monitor that windows the engine's
// per-iteration signals, policies that decide when to change the model's shape, and an Actuator that carries a
// decision out — a LayerSwapper that moves decoder layers between full precision and INT8/INT4 in the swap order,
// and a KVResizer that turns the bytes a swap frees into a KV region of whole blocks and gives a region back (last
// attached first, drained until empty) before its layers are restored. Requests in flight keep their KV and go on
// decoding across every change (token-level, state-preserving).
//
// # Policies
//
// A policy is a value behind the Policy interface: the formats the layers start in and, for a policy that morphs
// (Morphing), a Rule that turns each iteration's Signals into a Verdict (pressure and its reasons, or calm), which
// the Controller turns into swaps and restores with the policy's Control parameters. A policy is named on the
// command line as name[:params] and made by Parse:
//
//	fp16                   every layer in the model's stored precision, all the time
//	static:int8|int4       every layer quantized from the start (the freed bytes are KV from the start)
//	selective:N[:int8|int4] the first N layers of the swap order quantized from the start (Table 5's baseline,
//	                       and what an offline mixed-precision plan such as LLM-PQ amounts to)
//	morph:MODE[:k=v...]    MorphServe: swap under pressure, restore when it subsides; MODE is accuracy, default or
//	                       performance (Reactive), and k=v overrides one of the mode's parameters (the names below),
//	                       e.g. morph:default:persistence=1 or morph:default:tiers=int8,int4
//	morph:predictive[:k=v] beyond the paper: swap ahead of a forecast rise in KV demand, restore as soon as the
//	                       forecast fits the pool without the last region (Predictive)
//	morph:slo[:ttft=2s...] beyond the paper: the fewest quantized layers for which the predicted TTFT of the
//	                       queue meets the SLO (SLO)
//	morph:compute[:k=v]    beyond the paper: memory pressure takes layers to int4, compute pressure (a queue that
//	                       waits for prefill, not for blocks) takes them to int8, which prefills faster (Compute)
//
// A new morph mode is one file (a type embedding Control, with its own parameters, its params list and its Rule)
// and one line in modes.
//
// # The modes
//
// The paper publishes one example threshold (KV usage over 85%, queueing delay over 100 ms), says that adaptation
// fires only after pressure persists over several iterations, and that performance mode swaps eagerly while
// accuracy mode swaps conservatively. Everything else is ours:
//
//	parameter                   accuracy  default  performance  why
//	usage: kv usage trigger     0.95      0.85     0.75         the paper's 85% for default; ±10 points per mode
//	delay: queueing delay       500 ms    100 ms   50 ms        the paper's 100 ms; a quarter of a 2 s TTFT SLO for accuracy
//	blocked prefill trigger     yes       yes      yes          the head of the queue cannot get its blocks
//	persistence (iterations)    8         4        2            "several consecutive iterations"
//	layers_per_action (most)    2         4        8            sized by the blocks the queue lacks, at most this
//	cap (share of layers)       1/2       all      all          accuracy keeps half the model at full precision
//	restore_persistence         4         8        16           restore slower than swap, eager modes the slowest
//	restore_hold                2 s       5 s      10 s         calm must also last this long: a lull between
//	                                                            bursts shorter than this keeps the layers quantized
//	restore_margin (free share) 0.30      0.30     0.30         free blocks left after detaching the last region
//	window (iterations)         8         8        8            the iterations KV usage is averaged over
//
// Swapping is also what a prefill that cannot be admitted triggers, before preemption would: the number of layers
// in an action is the blocks the waiting queue lacks over the blocks one layer frees, rounded up, at least one and
// at most the mode's layers per action. A restore starts only when, for the restore persistence and the restore hold
// both, the queue has been empty and the free blocks left after the last region is gone would still be the
// margin's share of the pool; it drains that region, detaches it once empty, then restores its layers. Pressure
// while a region drains cancels the restore. One action is in flight at a time.
//
// Tiers: by default a layer goes full -> int4 (the paper's runs); tiers=int8,int4 takes every layer (up to the cap)
// to int8 first and then on to int4, and restores in the reverse order. A rule may instead name the tier a swap
// goes to (Verdict.To, as morph:compute does): the swap then takes the first layers of the order that are at full
// precision or at a tier before that one. Restores always undo the last action first.
package morph

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/quant"
)

// A Policy says how a served model's layers are set: the formats they start in and the variants they need. A
// policy that also changes them while serving is Morphing.
type Policy interface {
	// String is the policy's name as parsed, overrides included.
	String() string
	// Needs are the quantized formats whose variants every layer needs prepared.
	Needs() []quant.Format
	// Start returns each layer's format at the start, given the swap order and the layers' full-precision formats.
	Start(order []int, base []quant.Format) []quant.Format
}

// Morphing is a policy that changes the model's shape while it serves: each iteration its Rule judges the
// signals, and the Controller turns the verdicts into swaps and restores as its Control parameters say.
type Morphing interface {
	Policy
	// Rule returns a fresh rule for one run (a rule may keep state from one iteration to the next).
	Rule() Rule
	// control is the parameters that turn verdicts into actions (the policy's embedded Control).
	control() *Control
	// params lists the policy's parameters, its own first: what k=v overrides set and what reports show.
	params() []param
}

// A Rule judges one iteration: the monitor's signals in, a verdict out.
type Rule interface {
	Judge(in Input) Verdict
}

// Input is what a rule judges: the monitor's signals after an iteration, the iteration itself, the monitor (for
// what it windows over time) and the actuator (for what a swap would free and what is done).
type Input struct {
	Signals   Signals
	Step      engine.StepInfo
	Monitor   *Monitor
	Actuator  *Actuator
	BlockSize int // KV block size in tokens
}

// Verdict is a rule's judgement of one iteration.
type Verdict struct {
	// Pressure holds the reasons the model is under pressure (none: no pressure). Pressure that persists for
	// Control.Persistence iterations starts a swap.
	Pressure []string
	// Calm reports whether a restore could go ahead now; calm that persists for Control.RestorePersistence
	// iterations and Control.RestoreHold starts one.
	Calm bool
	// Layers, set with Pressure and called only when a swap starts, is how many layers it should move (the
	// controller keeps it within 1 and Control.LayersPerAction).
	Layers func() int
	// To is the format the swap takes its layers to: one of the policy's tiers, for a rule that tells which tier
	// relieves its pressure, or NextTier (the zero value) for the next tier in the policy's order.
	To quant.Format
}

// modes are the morph modes by name, each a fresh policy with its parameters (the package doc's table, and
// Predictive's and SLO's doc).
var modes = map[string]func() Morphing{
	"accuracy":    reactive("accuracy"),
	"default":     reactive("default"),
	"performance": reactive("performance"),
	"predictive":  func() Morphing { p := DefaultPredictive; return &p },
	"slo":         func() Morphing { p := DefaultSLO; return &p },
	"compute":     func() Morphing { p := DefaultCompute; return &p },
}

// Mode returns a morph mode's policy with its parameters as fixed in this package (no overrides), or an error
// naming the modes there are.
func Mode(name string) (Morphing, error) {
	mk, ok := modes[name]
	if !ok {
		names := slices.Sorted(maps.Keys(modes))
		return nil, fmt.Errorf("mode %q, want one of %s", name, strings.Join(names, ", "))
	}
	p := mk()
	p.control().name = "morph:" + name
	return p, nil
}

// Parse reads a policy name (see the package doc).
func Parse(name string) (Policy, error) {
	parts := strings.Split(name, ":")
	bad := func(format string, a ...any) (Policy, error) {
		return nil, fmt.Errorf("policy %q: %s", name, fmt.Sprintf(format, a...))
	}
	switch parts[0] {
	case "fp16":
		if len(parts) != 1 {
			return bad("fp16 takes no parameters")
		}
		return FP16{}, nil
	case "static":
		if len(parts) != 2 {
			return bad("want static:int8 or static:int4")
		}
		f, err := quantFormat(parts[1])
		if err != nil {
			return bad("%v", err)
		}
		return Static{Format: f}, nil
	case "selective":
		if len(parts) < 2 || len(parts) > 3 {
			return bad("want selective:N or selective:N:int8|int4")
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 0 {
			return bad("layer count %q, want an integer >= 0", parts[1])
		}
		s := Selective{N: n, Format: quant.Int4, name: name}
		if len(parts) == 3 {
			if s.Format, err = quantFormat(parts[2]); err != nil {
				return bad("%v", err)
			}
		}
		return s, nil
	case "morph":
		if len(parts) < 2 {
			return bad("want morph:MODE[:k=v...]")
		}
		p, err := Mode(parts[1])
		if err != nil {
			return bad("%v", err)
		}
		for _, kv := range parts[2:] {
			if err := set(p.params(), kv); err != nil {
				return bad("%v", err)
			}
		}
		if c, ok := p.(interface{ check() error }); ok {
			if err := c.check(); err != nil {
				return bad("%v", err)
			}
		}
		p.control().name = name
		return p, nil
	}
	return bad("want fp16, static:F, selective:N[:F] or morph:MODE[:k=v...]")
}

func quantFormat(s string) (quant.Format, error) {
	switch s {
	case "int8":
		return quant.Int8, nil
	case "int4":
		return quant.Int4, nil
	}
	return 0, fmt.Errorf("format %q, want int8 or int4", s)
}

// FP16 keeps every layer in the model's stored precision.
type FP16 struct{}

func (FP16) String() string                                    { return "fp16" }
func (FP16) Needs() []quant.Format                             { return nil }
func (FP16) Start(_ []int, base []quant.Format) []quant.Format { return slices.Clone(base) }

// Static quantizes every layer to Format from the start.
type Static struct{ Format quant.Format }

func (s Static) String() string        { return "static:" + s.Format.String() }
func (s Static) Needs() []quant.Format { return []quant.Format{s.Format} }

// Start is Format for every layer.
func (s Static) Start(_ []int, base []quant.Format) []quant.Format {
	return slices.Repeat([]quant.Format{s.Format}, len(base))
}

// Selective quantizes the first N layers of the swap order to Format from the start.
type Selective struct {
	N      int
	Format quant.Format
	name   string
}

func (s Selective) String() string {
	if s.name != "" {
		return s.name
	}
	return fmt.Sprintf("selective:%d:%v", s.N, s.Format)
}

func (s Selective) Needs() []quant.Format { return []quant.Format{s.Format} }

// Start is Format for the first N layers of order, base for the others.
func (s Selective) Start(order []int, base []quant.Format) []quant.Format {
	out := slices.Clone(base)
	for _, l := range order[:min(s.N, len(order))] {
		out[l] = s.Format
	}
	return out
}

// Params returns a morphing policy's parameters as a JSON object (its own first, then its Control's), with
// durations and formats by name; nil for a policy that does not morph.
func Params(p Policy) json.RawMessage {
	m, ok := p.(Morphing)
	if !ok {
		return nil
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, q := range m.params() {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(q.name)
		v, err := json.Marshal(q.value())
		if err != nil {
			panic(err) // numbers, strings and lists of strings
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return json.RawMessage(b.String())
}
