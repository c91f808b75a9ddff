// Package morph is MorphServe's control loop over the engine: a Serving Monitor that windows the engine's
// per-iteration signals, policies that decide when to change the model's shape, and an Actuator that carries a
// decision out — a LayerSwapper that moves decoder layers between full precision and INT8/INT4 in the swap order,
// and a KVResizer that turns the bytes a swap frees into a KV region of whole blocks and gives a region back (last
// attached first, drained until empty) before its layers are restored. Requests in flight keep their KV and go on
// decoding across every change (token-level, state-preserving).
//
// # Policies
//
// A policy is named on the command line as name[:params]:
//
//	fp16                   every layer in the model's stored precision, all the time
//	static:int8|int4       every layer quantized from the start (the freed bytes are KV from the start)
//	selective:N[:int8|int4] the first N layers of the swap order quantized from the start (Table 5's baseline,
//	                       and what an offline mixed-precision plan such as LLM-PQ amounts to)
//	morph:MODE[:k=v...]    MorphServe: swap under pressure, restore when it subsides; MODE is accuracy, default or
//	                       performance, and k=v overrides a mode's parameter (names as in Params' json tags),
//	                       e.g. morph:default:persistence=1 or morph:default:tiers=int8,int4
//	morph:predictive[:k=v] beyond the paper: swap ahead of a forecast rise in KV demand, restore as soon as the
//	                       forecast fits the pool without the last region (see Predictor, decidePredictive)
//	morph:slo[:ttft=2s...] beyond the paper: the fewest quantized layers for which the predicted TTFT of the
//	                       queue meets the SLO (see Controller.decideSLO)
//
// # The modes
//
// The paper publishes one example threshold (KV usage over 85%, queueing delay over 100 ms), says that adaptation
// fires only after pressure persists over several iterations, and that performance mode swaps eagerly while
// accuracy mode swaps conservatively. Everything else is ours:
//
//	parameter                   accuracy  default  performance  why
//	kv usage trigger (mean)     0.95      0.85     0.75         the paper's 85% for default; ±10 points per mode
//	queueing delay trigger      500 ms    100 ms   50 ms        the paper's 100 ms; a quarter of a 2 s TTFT SLO for accuracy
//	blocked prefill trigger     yes       yes      yes          the head of the queue cannot get its blocks
//	persistence (iterations)    8         4        2            "several consecutive iterations"
//	layers per action (most)    2         4        8            sized by the blocks the queue lacks, at most this
//	cap (share of layers)       1/2       all      all          accuracy keeps half the model at full precision
//	restore persistence         4         8        16           restore slower than swap, eager modes the slowest
//	restore hold                2 s       5 s      10 s         calm must also last this long: a lull between
//	                                                            bursts shorter than this keeps the layers quantized
//	restore margin (free share) 0.30      0.30     0.30         free blocks left after detaching the last region
//	window (iterations)         8         8        8            the monitor's smoothing of KV usage
//
// Swapping is also what a prefill that cannot be admitted triggers, before preemption would: the number of layers
// in an action is the blocks the waiting queue lacks over the blocks one layer frees, rounded up, at least one and
// at most the mode's layers per action. A restore starts only when, for the restore persistence and the restore hold
// both, the queue has been empty and the free blocks left after the last region is gone would still be the
// margin's share of the pool; it drains that region, detaches it once empty, then restores its layers. Pressure
// while a region drains cancels the restore. One action is in flight at a time.
//
// Tiers: by default a layer goes full -> int4 (the paper's runs); tiers=int8,int4 takes every layer (up to the cap)
// to int8 first and then on to int4, and restores in the reverse order.
package morph

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Params are a morph mode's parameters (the package doc's table).
type Params struct {
	Usage              float64        `json:"usage"`               // mean KV usage over the window that counts as pressure
	Delay              time.Duration  `json:"delay"`               // oldest queueing delay that counts as pressure
	Persistence        int            `json:"persistence"`         // consecutive iterations of pressure before a swap
	LayersPerAction    int            `json:"layers_per_action"`   // most layers one action swaps
	Cap                float64        `json:"cap"`                 // share of the layers that may be quantized
	RestorePersistence int            `json:"restore_persistence"` // consecutive calm iterations before a restore
	RestoreMargin      float64        `json:"restore_margin"`      // free share of the pool left after detaching
	RestoreHold        time.Duration  `json:"restore_hold"`        // how long the calm must also have lasted
	Window             int            `json:"window"`              // iterations the monitor averages KV usage over
	Tiers              []quant.Format `json:"tiers"`               // formats a layer goes through, from full precision on
	// The predictive mode's forecast (see Predictor).
	Horizon time.Duration `json:"horizon"` // how far ahead the demand is forecast
	Bin     time.Duration `json:"bin"`     // the demand's peak is taken over bins this long
	Alpha   float64       `json:"alpha"`   // Holt's smoothing of the peak's level (morph:slo: of its prefill rate)
	Beta    float64       `json:"beta"`    // and of its trend
	// The slo mode's target (see decideSLO).
	TTFT   time.Duration `json:"ttft_slo"` // the TTFT SLO the quantized layers are chosen to meet
	Margin float64       `json:"margin"`   // the share of the SLO the predicted TTFT is held under
}

// Modes are the morph modes' parameters.
var Modes = map[string]Params{
	"accuracy": {Usage: 0.95, Delay: 500 * time.Millisecond, Persistence: 8, LayersPerAction: 2, Cap: 0.5, RestorePersistence: 4, RestoreMargin: 0.3, RestoreHold: 2 * time.Second, Window: 8, Tiers: []quant.Format{quant.Int4}},
	"default":  {Usage: 0.85, Delay: 100 * time.Millisecond, Persistence: 4, LayersPerAction: 4, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.3, RestoreHold: 5 * time.Second, Window: 8, Tiers: []quant.Format{quant.Int4}},
	"predictive": {Usage: 1, Persistence: 2, LayersPerAction: 8, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.1, RestoreHold: time.Second, Window: 8, Tiers: []quant.Format{quant.Int4},
		Horizon: time.Second, Bin: time.Second, Alpha: 0.5, Beta: 0.3},
	"slo": {Usage: 1, Persistence: 2, LayersPerAction: 8, Cap: 1, RestorePersistence: 8, RestoreMargin: 0.3, RestoreHold: 5 * time.Second, Window: 8, Tiers: []quant.Format{quant.Int4},
		Alpha: 0.3, TTFT: 2 * time.Second, Margin: 0.5},
	"performance": {Usage: 0.75, Delay: 50 * time.Millisecond, Persistence: 2, LayersPerAction: 8, Cap: 1, RestorePersistence: 16, RestoreMargin: 0.3, RestoreHold: 10 * time.Second, Window: 8, Tiers: []quant.Format{quant.Int4}},
}

// Spec is a parsed policy name.
type Spec struct {
	Kind   string       // fp16, static, selective or morph
	Format quant.Format // static and selective: the quantized format
	N      int          // selective: layers quantized
	Mode   string       // morph: the mode
	Params Params       // morph: the mode's parameters with the overrides
	name   string
}

// String is the policy's name as parsed.
func (s Spec) String() string { return s.name }

// Parse reads a policy name (see the package doc).
func Parse(name string) (Spec, error) {
	parts := strings.Split(name, ":")
	s := Spec{Kind: parts[0], name: name}
	bad := func(format string, a ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("policy %q: %s", name, fmt.Sprintf(format, a...))
	}
	switch s.Kind {
	case "fp16":
		if len(parts) != 1 {
			return bad("fp16 takes no parameters")
		}
	case "static":
		if len(parts) != 2 {
			return bad("want static:int8 or static:int4")
		}
		f, err := quantFormat(parts[1])
		if err != nil {
			return bad("%v", err)
		}
		s.Format = f
	case "selective":
		if len(parts) < 2 || len(parts) > 3 {
			return bad("want selective:N or selective:N:int8|int4")
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 0 {
			return bad("layer count %q, want an integer >= 0", parts[1])
		}
		s.N, s.Format = n, quant.Int4
		if len(parts) == 3 {
			if s.Format, err = quantFormat(parts[2]); err != nil {
				return bad("%v", err)
			}
		}
	case "morph":
		if len(parts) < 2 {
			return bad("want morph:accuracy, morph:default or morph:performance")
		}
		p, ok := Modes[parts[1]]
		if !ok {
			return bad("mode %q, want accuracy, default, performance, predictive or slo", parts[1])
		}
		s.Mode = parts[1]
		for _, kv := range parts[2:] {
			if err := p.set(kv); err != nil {
				return bad("%v", err)
			}
		}
		s.Params = p
	default:
		return bad("want fp16, static:F, selective:N[:F] or morph:MODE[:k=v...]")
	}
	return s, nil
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

// set applies one k=v override.
func (p *Params) set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("parameter %q, want key=value", kv)
	}
	var err error
	num := func(dst *float64, lo, hi float64) {
		var x float64
		if x, err = strconv.ParseFloat(v, 64); err == nil && (x < lo || x > hi) {
			err = fmt.Errorf("out of [%g, %g]", lo, hi)
		}
		*dst = x
	}
	count := func(dst *int) {
		var x int
		if x, err = strconv.Atoi(v); err == nil && x < 1 {
			err = fmt.Errorf("want >= 1")
		}
		*dst = x
	}
	switch k {
	case "usage":
		num(&p.Usage, 0, 1)
	case "delay":
		p.Delay, err = time.ParseDuration(v)
	case "restore_hold":
		p.RestoreHold, err = time.ParseDuration(v)
	case "horizon":
		p.Horizon, err = time.ParseDuration(v)
	case "bin":
		if p.Bin, err = time.ParseDuration(v); err == nil && p.Bin <= 0 {
			err = fmt.Errorf("want > 0")
		}
	case "alpha":
		num(&p.Alpha, 0, 1)
	case "ttft":
		if p.TTFT, err = time.ParseDuration(v); err == nil && p.TTFT <= 0 {
			err = fmt.Errorf("want > 0")
		}
	case "margin":
		num(&p.Margin, 0, 1)
	case "beta":
		num(&p.Beta, 0, 1)
	case "persistence":
		count(&p.Persistence)
	case "layers_per_action":
		count(&p.LayersPerAction)
	case "cap":
		num(&p.Cap, 0, 1)
	case "restore_persistence":
		count(&p.RestorePersistence)
	case "restore_margin":
		num(&p.RestoreMargin, 0, 1)
	case "window":
		count(&p.Window)
	case "tiers":
		p.Tiers = nil
		for _, t := range strings.Split(v, ",") {
			f, ferr := quantFormat(t)
			if ferr != nil {
				return ferr
			}
			if len(p.Tiers) > 0 && !(p.Tiers[len(p.Tiers)-1] == quant.Int8 && f == quant.Int4) {
				return fmt.Errorf("tiers %q, want int4, int8 or int8,int4", v)
			}
			p.Tiers = append(p.Tiers, f)
		}
	default:
		return fmt.Errorf("unknown parameter %q", k)
	}
	if err != nil {
		return fmt.Errorf("parameter %s=%s: %v", k, v, err)
	}
	return nil
}

// MarshalJSON writes the parameters with durations and formats by name.
func (p Params) MarshalJSON() ([]byte, error) {
	type plain Params
	var tiers []string
	for _, t := range p.Tiers {
		tiers = append(tiers, t.String())
	}
	return json.Marshal(struct {
		plain
		Delay       string   `json:"delay"`
		RestoreHold string   `json:"restore_hold"`
		Horizon     string   `json:"horizon,omitempty"`
		Bin         string   `json:"bin,omitempty"`
		TTFT        string   `json:"ttft_slo,omitempty"`
		Tiers       []string `json:"tiers"`
	}{plain(p), p.Delay.String(), p.RestoreHold.String(), durationOrEmpty(p.Horizon), durationOrEmpty(p.Bin), durationOrEmpty(p.TTFT), tiers})
}

func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// Formats returns the formats each of layers layers starts in under the policy, given the swap order and the
// model's stored formats: static and selective quantize from the start, the others start at full precision.
func (s Spec) Formats(order []int, base []quant.Format) []quant.Format {
	out := append([]quant.Format(nil), base...)
	switch s.Kind {
	case "static":
		for l := range out {
			out[l] = s.Format
		}
	case "selective":
		for _, l := range order[:min(s.N, len(order))] {
			out[l] = s.Format
		}
	}
	return out
}

// Needs returns the quantized formats whose variants the policy needs prepared.
func (s Spec) Needs() []quant.Format {
	switch s.Kind {
	case "static", "selective":
		return []quant.Format{s.Format}
	case "morph":
		return s.Params.Tiers
	}
	return nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Params) UnmarshalJSON(b []byte) error {
	type plain Params
	var v struct {
		plain
		Delay       string   `json:"delay"`
		RestoreHold string   `json:"restore_hold"`
		Horizon     string   `json:"horizon"`
		Bin         string   `json:"bin"`
		TTFT        string   `json:"ttft_slo"`
		Tiers       []string `json:"tiers"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Params(v.plain)
	for _, d := range []struct {
		s   string
		dst *time.Duration
	}{{v.Delay, &p.Delay}, {v.RestoreHold, &p.RestoreHold}, {v.Horizon, &p.Horizon}, {v.Bin, &p.Bin}, {v.TTFT, &p.TTFT}} {
		if d.s == "" {
			continue
		}
		x, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("morph params: %v", err)
		}
		*d.dst = x
	}
	p.Tiers = nil
	for _, t := range v.Tiers {
		f, err := quant.ParseFormat(t)
		if err != nil {
			return fmt.Errorf("morph params: %v", err)
		}
		p.Tiers = append(p.Tiers, f)
	}
	return nil
}
