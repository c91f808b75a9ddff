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
// (Morphing), a Rule that turns each iteration's Signals into a Verdict (pressure and its reasons, or calm and its
// reasons), which the Controller turns into swaps and restores with the policy's Control parameters. A policy is
// named on the command line as NAME[:params] and made by Parse, which looks NAME up among the registered policies
// (Names); these are built in:
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
// A policy's String is the name it was parsed from, overrides included: results record it, and Parse reads it
// back to the same policy. Parse checks what it makes (Check): a Control that could never swap a layer is an
// error naming the parameter, not a run that never morphs.
//
// # A policy of your own
//
// The built-in policies are registered with Register as any other is, so a package of your own adds a policy
// without touching this one. A policy that morphs is a type that embeds Control, which gives it String, Needs
// (its tiers), Start (full precision) and Controls (not Control, which the embedded field's name would hide), and
// adds two methods:
//
//	Rule() Rule        a fresh rule for one run, whose Judge turns each iteration's Input into a Verdict:
//	                   the reasons for pressure (with Layers, how many layers a swap moves, nil for one,
//	                   and To, the tier it takes them to) or the reasons for calm, which the swap's and
//	                   the restore's log entries give
//	Params() []Param   its own parameters, made by Count, Share, Number, Duration and Tiers over its fields:
//	                   what k=v overrides set, with the built-ins' checks, and what reports show (morph.Params),
//	                   its Control's parameters after them
//
// Register its name in an init function with a ParseFunc; ParseParams(fresh), fresh returning the policy with its
// defaults, parses NAME[:k=v...] as the morph modes parse theirs. The package's examples show one whole, from its
// Rule to a Controller swapping under it. A policy that does not morph implements Policy alone, and its ParseFunc
// makes it with its String the name it is parsed from. A built-in morph mode is one file of this package (a type
// embedding Control, with its own parameters, its Params and its Rule) and one line in modes.
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
	"sync"

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
// signals, and the Controller turns the verdicts into swaps and restores as its Control parameters say. A type
// that embeds Control has String, Needs, Start and Controls from it and adds Rule and Params (the package doc).
type Morphing interface {
	Policy
	// Rule returns a fresh rule for one run (a rule may keep state from one iteration to the next).
	Rule() Rule
	// Controls returns the parameters that turn verdicts into actions (the policy's embedded Control).
	Controls() *Control
	// Params lists the policy's own parameters, which k=v overrides set and reports show; its Control's follow
	// them wherever parameters are listed, and are not among them.
	Params() []Param
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
	// Control.Persistence iterations starts a swap, whose log entry gives the reasons.
	Pressure []string
	// Calm holds the reasons a restore could go ahead now (none: it could not). Calm without pressure that
	// persists for Control.RestorePersistence iterations and Control.RestoreHold starts one, whose log entry gives
	// the reasons of the iteration that started it.
	Calm []string
	// Layers, set with Pressure and called only when a swap starts, is how many layers it should move (the
	// controller keeps it within 1 and Control.LayersPerAction); nil is one layer.
	Layers func() int
	// To is the format the swap takes its layers to: one of the policy's tiers, for a rule that tells which tier
	// relieves its pressure, or NextTier (the zero value) for the next tier in the policy's order.
	To quant.Format
}

// ParseFunc makes a registered policy, a fresh value each call, from the parameters that follow its name in
// NAME[:p1:p2...] (none: an empty slice).
type ParseFunc func(params []string) (Policy, error)

// registry holds the policies Parse knows, by name.
var registry struct {
	sync.RWMutex
	parse map[string]ParseFunc
}

// Register makes a policy known to Parse by name: Parse("NAME[:p1:p2...]") calls parse with p1, p2, .... The
// built-in policies are registered so too (fp16, static, selective, morph). Register panics when the name is
// empty, holds a ':' or is registered already, or parse is nil: as with database/sql.Register, a registration
// is the program's own, made once at its start (in an init function).
func Register(name string, parse ParseFunc) {
	if name == "" || strings.Contains(name, ":") {
		panic(fmt.Sprintf("morph: Register of policy %q: a name is not empty and holds no ':'", name))
	}
	if parse == nil {
		panic(fmt.Sprintf("morph: Register of policy %q with a nil ParseFunc", name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.parse[name]; dup {
		panic(fmt.Sprintf("morph: Register called twice for policy %q", name))
	}
	if registry.parse == nil {
		registry.parse = map[string]ParseFunc{}
	}
	registry.parse[name] = parse
}

// Names are the names of the registered policies, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Sorted(maps.Keys(registry.parse))
}

// ParseParams is the ParseFunc of a morphing policy whose parameters are k=v overrides alone: each parse makes a
// fresh policy with fresh (the policy with its defaults) and applies the overrides to it (SetParams), so that
// Register(NAME, ParseParams(fresh)) parses NAME:k=v:k=v as the built-in modes parse theirs.
func ParseParams(fresh func() Morphing) ParseFunc {
	return func(params []string) (Policy, error) {
		p := fresh()
		if err := SetParams(p, params...); err != nil {
			return nil, err
		}
		return p, nil
	}
}

func init() {
	Register("fp16", parseFP16)
	Register("static", parseStatic)
	Register("selective", parseSelective)
	Register("morph", parseMorph)
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
	p.Controls().name = "morph:" + name
	return p, nil
}

// Parse reads a policy name, NAME[:p1:p2...] (the package doc): it looks NAME up among the registered policies,
// has its ParseFunc make the policy from p1, p2, ..., names it (a morphing policy's Control takes the name as
// given, overrides included) and checks it (Check). Its errors are one line naming the policy; an unknown name's
// lists the registered ones.
func Parse(name string) (Policy, error) {
	head, rest, hasParams := strings.Cut(name, ":")
	var params []string
	if hasParams {
		params = strings.Split(rest, ":")
	}
	registry.RLock()
	parse, ok := registry.parse[head]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("policy %q: unknown name %q, want one of %s", name, head, strings.Join(Names(), ", "))
	}
	p, err := parse(params)
	if err == nil && p == nil {
		err = fmt.Errorf("the parse of %s made no policy", head)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %q: %v", name, err)
	}
	if m, ok := p.(Morphing); ok && m.Controls() != nil {
		m.Controls().name = name
	}
	if err := Check(p); err != nil {
		return nil, err
	}
	if p.String() != name {
		return nil, fmt.Errorf("policy %q: its String is %q: a policy's name is the one it was parsed from", name, p.String())
	}
	return p, nil
}

func parseFP16(params []string) (Policy, error) {
	if len(params) != 0 {
		return nil, fmt.Errorf("fp16 takes no parameters")
	}
	return FP16{}, nil
}

func parseStatic(params []string) (Policy, error) {
	if len(params) != 1 {
		return nil, fmt.Errorf("want static:int8 or static:int4")
	}
	f, err := quantFormat(params[0])
	if err != nil {
		return nil, err
	}
	return Static{Format: f}, nil
}

func parseSelective(params []string) (Policy, error) {
	if len(params) < 1 || len(params) > 2 {
		return nil, fmt.Errorf("want selective:N or selective:N:int8|int4")
	}
	n, err := strconv.Atoi(params[0])
	if err != nil || n < 0 {
		return nil, fmt.Errorf("layer count %q, want an integer >= 0", params[0])
	}
	s := Selective{N: n, Format: quant.Int4, name: "selective:" + strings.Join(params, ":")}
	if len(params) == 2 {
		if s.Format, err = quantFormat(params[1]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// parseMorph makes morph:MODE[:k=v...]: the mode's policy with the overrides, which a mode with a check of its own
// (morph:compute's tiers) then passes.
func parseMorph(params []string) (Policy, error) {
	if len(params) < 1 {
		return nil, fmt.Errorf("want morph:MODE[:k=v...]")
	}
	p, err := Mode(params[0])
	if err != nil {
		return nil, err
	}
	if err := SetParams(p, params[1:]...); err != nil {
		return nil, err
	}
	if c, ok := p.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Check reports a morphing policy whose Control could never swap a layer, or would restore without calm: a
// parameter out of the range its k=v override takes (persistence, layers_per_action and restore_persistence at
// least 1, cap above 0 and at most 1, restore_margin in [0, 1], restore_hold not negative, tiers int4, int8 or
// int8,int4). The error is one line naming the policy and the parameter. It is nil for a policy that does not
// morph. Parse checks what it makes; NewController checks again, with the model's layers.
func Check(p Policy) error {
	m, ok := p.(Morphing)
	if !ok {
		return nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("policy %s: %s", label(p), fmt.Sprintf(format, a...))
	}
	c := m.Controls()
	switch {
	case c == nil:
		return bad("no Control: Controls returned nil")
	case c.Persistence < 1:
		return bad("persistence=%d: pressure would never start a swap, want >= 1", c.Persistence)
	case c.LayersPerAction < 1:
		return bad("layers_per_action=%d: a swap would move no layer, want >= 1", c.LayersPerAction)
	case !(c.Cap > 0):
		return bad("cap=%g: no layer may be quantized, want a share of the layers above 0", c.Cap)
	case c.Cap > 1:
		return bad("cap=%g: out of [0, 1]", c.Cap)
	case len(c.Tiers) == 0:
		return bad("no tiers: a swap has no format to go to, want tiers int4, int8 or int8,int4")
	case !validTiers(c.Tiers):
		return bad("tiers %v: want int4, int8 or int8,int4", c.Tiers)
	case c.RestorePersistence < 1:
		return bad("restore_persistence=%d: a restore would start without calm, want >= 1", c.RestorePersistence)
	case !(c.RestoreMargin >= 0 && c.RestoreMargin <= 1):
		return bad("restore_margin=%g: out of [0, 1]", c.RestoreMargin)
	case c.RestoreHold < 0:
		return bad("restore_hold=%v: want >= 0", c.RestoreHold)
	}
	return nil
}

// label names a policy in an error: its name, or its type when it has none (it was not parsed).
func label(p Policy) string {
	if s := p.String(); s != "" {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("of type %T", p)
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
	for i, q := range allParams(m) {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(q.name)
		v, err := json.Marshal(q.Value())
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
