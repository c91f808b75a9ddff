package morph

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/quant"
)

// Control are the parameters, common to every morph mode, with which the Controller turns a rule's verdicts into
// actions: how long pressure or calm must persist, how many layers an action moves, how far quantization may go
// and through which formats.
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

func (c *Control) control() *Control { return c }

// String is the policy's name as parsed.
func (c *Control) String() string { return c.name }

// Needs are the tiers: every layer may go through each.
func (c *Control) Needs() []quant.Format { return c.Tiers }

// Start is full precision: a morphing policy quantizes only under pressure.
func (c *Control) Start(_ []int, base []quant.Format) []quant.Format { return slices.Clone(base) }

func (c *Control) params() []param {
	return []param{
		count("persistence", &c.Persistence),
		count("layers_per_action", &c.LayersPerAction),
		share("cap", &c.Cap),
		count("restore_persistence", &c.RestorePersistence),
		share("restore_margin", &c.RestoreMargin),
		duration("restore_hold", &c.RestoreHold, false),
		tiers("tiers", &c.Tiers),
	}
}

// param is one parameter of a morph mode: its name in k=v overrides and reports, how a value is set (checked
// against its range), and its value as a report shows it.
type param struct {
	name  string
	set   func(v string) error
	value func() any
}

// set applies one k=v override to the parameter of that name.
func set(ps []param, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("parameter %q, want key=value", kv)
	}
	i := slices.IndexFunc(ps, func(p param) bool { return p.name == k })
	if i < 0 {
		return fmt.Errorf("unknown parameter %q", k)
	}
	if err := ps[i].set(v); err != nil {
		return fmt.Errorf("parameter %s=%s: %v", k, v, err)
	}
	return nil
}

// share is a number in [0, 1].
func share(name string, p *float64) param {
	return number(name, p, func(x float64) bool { return x >= 0 && x <= 1 }, "out of [0, 1]")
}

// above1 is a number above 1.
func above1(name string, p *float64) param {
	return number(name, p, func(x float64) bool { return x > 1 }, "want > 1")
}

// number is a number that ok accepts; want says what it takes.
func number(name string, p *float64, ok func(float64) bool, want string) param {
	return param{name, func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err == nil && !ok(x) {
			err = fmt.Errorf("%s", want)
		}
		if err == nil {
			*p = x
		}
		return err
	}, func() any { return *p }}
}

// count is an integer of at least 1.
func count(name string, p *int) param {
	return param{name, func(v string) error {
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

// calm is the common restore condition: nothing waits, an action is in force, and with the last one's blocks
// returned the free share of the pool would still be at least RestoreMargin.
func (c Control) calm(s Signals, act *Actuator) bool {
	top := act.TopBlocks()
	return s.Waiting == 0 && act.Actions() > 0 && float64(s.Free-top) >= c.RestoreMargin*float64(s.Total-top)
}

// duration is a Go duration (300ms, 2s), not negative, and above zero when positive.
func duration(name string, p *time.Duration, positive bool) param {
	return param{name, func(v string) error {
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

// tiers is int4, int8 or int8,int4.
func tiers(name string, p *[]quant.Format) param {
	return param{name, func(v string) error {
		var fs []quant.Format
		for _, t := range strings.Split(v, ",") {
			f, err := quantFormat(t)
			if err != nil {
				return err
			}
			if len(fs) > 0 && !(fs[len(fs)-1] == quant.Int8 && f == quant.Int4) {
				return fmt.Errorf("tiers %q, want int4, int8 or int8,int4", v)
			}
			fs = append(fs, f)
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
