package morph

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Control are the parameters, common to every morphing policy, with which the Controller turns a rule's verdicts
// into actions: how long pressure or calm must persist, how many layers an action moves, how far quantization may
// go and through which formats. A policy embeds it: the embedded Control gives the policy String, Needs, Start and
// Controls.
type Control struct {
	Persistence        int            // consecutive iterations of pressure before a swap
	LayersPerAction    int            // most layers one action swaps
	Cap                float64        // share of the layers that may be quantized
	RestorePersistence int            // consecutive calm iterations before a restore
	RestoreMargin      float64        // free share of the pool left after detaching the last region
	RestoreHold        time.Duration  // how long the calm must also have lasted
	Tiers              []quant.Format // formats a layer goes through, from full precision on
	name               string         // the policy's name as parsed
}

// Controls returns c itself: the Control of the policy that embeds it.
func (c *Control) Controls() *Control { return c }

// String is the policy's name as parsed (Parse sets it).
func (c *Control) String() string { return c.name }

// Needs are the tiers: every layer may go through each.
func (c *Control) Needs() []quant.Format { return c.Tiers }

// Start is full precision: a morphing policy quantizes only under pressure.
func (c *Control) Start(_ []int, base []quant.Format) []quant.Format { return slices.Clone(base) }

// params are the Control's parameters, which follow a policy's own wherever its parameters are listed.
func (c *Control) params() []Param {
	return []Param{
		Count("persistence", &c.Persistence),
		Count("layers_per_action", &c.LayersPerAction),
		Share("cap", &c.Cap),
		Count("restore_persistence", &c.RestorePersistence),
		Share("restore_margin", &c.RestoreMargin),
		Duration("restore_hold", &c.RestoreHold, false),
		Tiers("tiers", &c.Tiers),
	}
}

// Param is one parameter of a morphing policy: its name in k=v overrides and in reports, how a value given as
// text is checked and set, and its value as a report shows it. Count, Share, Number, Duration and Tiers make one
// over a field of the policy.
type Param struct {
	name  string
	set   func(v string) error
	value func() any
}

// Name is the parameter's name, the k of k=v.
func (p Param) Name() string { return p.name }

// Set checks v and sets the parameter to it; a value out of range leaves the parameter as it was.
func (p Param) Set(v string) error { return p.set(v) }

// Value is the parameter's value as reports show it: a number, a duration as text (300ms), a list of format names.
func (p Param) Value() any { return p.value() }

// allParams lists m's parameters: its own, then its Control's (none without one: Check refuses it).
func allParams(m Morphing) []Param {
	ps := slices.Clone(m.Params())
	if c := m.Controls(); c != nil {
		ps = append(ps, c.params()...)
	}
	return ps
}

// SetParams applies k=v overrides to m's parameters (its own and its Control's), each checked as its Param says.
// The error names the first override that is not key=value, names no parameter, or is out of range.
func SetParams(m Morphing, overrides ...string) error {
	ps := allParams(m)
	for _, kv := range overrides {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("parameter %q, want key=value", kv)
		}
		i := slices.IndexFunc(ps, func(p Param) bool { return p.name == k })
		if i < 0 {
			return fmt.Errorf("unknown parameter %q", k)
		}
		if err := ps[i].Set(v); err != nil {
			return fmt.Errorf("parameter %s=%s: %v", k, v, err)
		}
	}
	return nil
}

// Share is a number in [0, 1].
func Share(name string, p *float64) Param {
	return Number(name, p, func(x float64) bool { return x >= 0 && x <= 1 }, "out of [0, 1]")
}

// above1 is a number above 1.
func above1(name string, p *float64) Param {
	return Number(name, p, func(x float64) bool { return x > 1 }, "want > 1")
}

// Number is a finite number that ok accepts; want says what it takes when ok refuses one ("want > 1").
func Number(name string, p *float64, ok func(float64) bool, want string) Param {
	return Param{name, func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil:
		case math.IsNaN(x) || math.IsInf(x, 0):
			err = fmt.Errorf("want a finite number")
		case !ok(x):
			err = fmt.Errorf("%s", want)
		}
		if err == nil {
			*p = x
		}
		return err
	}, func() any { return *p }}
}

// Count is an integer of at least 1.
func Count(name string, p *int) Param {
	return Param{name, func(v string) error {
		x, err := strconv.Atoi(v)
		if err == nil && x < 1 {
			err = fmt.Errorf("want >= 1")
		}
		if err == nil {
			*p = x
		}
		return err
	}, func() any { return *p }}
}

// calm is the common restore condition, as a verdict's reasons (none: not calm): nothing waits, an action is in
// force, and with the last one's blocks returned the free share of the pool would still be at least RestoreMargin.
func (c Control) calm(s Signals, act *Actuator) []string {
	top := act.TopBlocks()
	free, total := s.Free-top, s.Total-top
	if s.Waiting > 0 || act.Actions() == 0 || float64(free) < c.RestoreMargin*float64(total) {
		return nil
	}
	return []string{"queue empty", fmt.Sprintf("free share %.3f >= %.2f without the last region (%d of %d blocks free, %d in it)",
		float64(free)/float64(total), c.RestoreMargin, free, total, top)}
}

// Duration is a Go duration (300ms, 2s), not negative, and above zero when positive.
func Duration(name string, p *time.Duration, positive bool) Param {
	return Param{name, func(v string) error {
		x, err := time.ParseDuration(v)
		switch {
		case err != nil:
		case x < 0:
			err = fmt.Errorf("want >= 0")
		case positive && x == 0:
			err = fmt.Errorf("want > 0")
		}
		if err == nil {
			*p = x
		}
		return err
	}, func() any { return p.String() }}
}

// Tiers is int4, int8 or int8,int4: the formats a layer goes through.
func Tiers(name string, p *[]quant.Format) Param {
	return Param{name, func(v string) error {
		var fs []quant.Format
		for _, t := range strings.Split(v, ",") {
			f, err := quantFormat(t)
			if err != nil {
				return err
			}
			fs = append(fs, f)
		}
		if !validTiers(fs) {
			return fmt.Errorf("tiers %q, want int4, int8 or int8,int4", v)
		}
		*p = fs
		return nil
	}, func() any {
		names := make([]string, len(*p))
		for i, f := range *p {
			names[i] = f.String()
		}
		return names
	}}
}

// validTiers reports whether fs is int4, int8 or int8,int4.
func validTiers(fs []quant.Format) bool {
	switch len(fs) {
	case 1:
		return fs[0] == quant.Int8 || fs[0] == quant.Int4
	case 2:
		return fs[0] == quant.Int8 && fs[1] == quant.Int4
	}
	return false
}
