package morph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/quant"
)

func init() {
	// Policies whose ParseFunc breaks Parse's contract, for TestRegistry.
	Register("misnamed", func([]string) (Policy, error) { return FP16{}, nil })
	Register("nothing", func([]string) (Policy, error) { return nil, nil })
}

// TestRegistry: the built-ins are registered names like any other; Register refuses a second registration, a name
// with a ':' and a nil ParseFunc; Parse refuses what a ParseFunc makes wrong: no policy, or a policy named other
// than as parsed.
func TestRegistry(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) {
		t.Errorf("Names() %v, want them sorted", names)
	}
	for _, want := range []string{"fp16", "morph", "selective", "static", "misnamed", "nothing"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() %v, want %s among them", names, want)
		}
	}
	_, err := Parse("fp32:x")
	if want := `policy "fp32:x": unknown name "fp32", want one of ` + strings.Join(names, ", "); err == nil || err.Error() != want {
		t.Errorf("unknown name: %v, want %s", err, want)
	}
	for _, c := range []struct {
		name  string
		parse ParseFunc
		want  string
	}{
		{"fp16", parseFP16, `morph: Register called twice for policy "fp16"`},
		{"morph", parseMorph, `morph: Register called twice for policy "morph"`},
		{"a:b", parseFP16, `morph: Register of policy "a:b": a name is not empty and holds no ':'`},
		{"", parseFP16, `morph: Register of policy "": a name is not empty and holds no ':'`},
		{"fresh", nil, `morph: Register of policy "fresh" with a nil ParseFunc`},
	} {
		func() {
			defer func() {
				if r := recover(); r != c.want {
					t.Errorf("Register(%q): panic %v, want %q", c.name, r, c.want)
				}
			}()
			Register(c.name, c.parse)
		}()
	}
	if slices.Contains(Names(), "fresh") {
		t.Error("a refused registration was registered")
	}
	for name, want := range map[string]string{
		"misnamed:x": `policy "misnamed:x": its String is "fp16": a policy's name is the one it was parsed from`,
		"nothing":    `policy "nothing": the parse of nothing made no policy`,
	} {
		if _, err := Parse(name); err == nil || err.Error() != want {
			t.Errorf("Parse(%q): %v, want %s", name, err, want)
		}
	}
}

// stubPolicy is a morphing policy whose rule is a function, for the Controller's contracts.
type stubPolicy struct {
	Control
	judge func(Input) Verdict
}

func (p *stubPolicy) Rule() Rule      { return stubRule(p.judge) }
func (p *stubPolicy) Params() []Param { return nil }

type stubRule func(Input) Verdict

func (r stubRule) Judge(in Input) Verdict { return r(in) }

// replayStub replays 20 requests of 100 tokens, all at once, under p on 8 layers front to back, and returns the
// controller's decisions as logged.
func replayStub(t *testing.T, p Policy) []string {
	t.Helper()
	e, err := engine.New(newMemExec(8, 100, 0), engine.Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(e, p, frontToBack(8), slices.Repeat([]quant.Format{quant.F16}, 8))
	if err != nil {
		t.Fatal(err)
	}
	e.OnStep(c.OnStep)
	rng := rand.New(rand.NewPCG(1, 1))
	var reqs []engine.TimedRequest
	for range 20 {
		reqs = append(reqs, engine.TimedRequest{Request: engine.Request{Prompt: prompt(rng, 100, 1000), MaxTokens: 10}})
	}
	if _, err := e.Replay(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	var decisions []string
	for _, ev := range e.Log() {
		if ev.Kind == engine.Decision {
			decisions = append(decisions, ev.Detail)
		}
	}
	return decisions
}

// TestVerdictContracts: a verdict's pressure without Layers swaps one layer; the restore's log entry gives the
// reasons of the rule's calm.
func TestVerdictContracts(t *testing.T) {
	p := &stubPolicy{Control: Control{Persistence: 1, LayersPerAction: 4, Cap: 1, RestorePersistence: 2, Tiers: []quant.Format{quant.Int4}, name: "stub"},
		judge: func(in Input) Verdict {
			s, act := in.Signals, in.Actuator
			switch {
			case s.Waiting > 0 && act.Actions() == 0:
				return Verdict{Pressure: []string{fmt.Sprintf("%d waiting", s.Waiting)}}
			case s.Running == 0 && act.Actions() > 0:
				return Verdict{Calm: []string{"nothing runs", fmt.Sprintf("%d blocks used", s.Used)}}
			}
			return Verdict{}
		}}
	// The first step prefills five prompts and the start of a sixth (512 tokens): 14 wait.
	want := []string{
		"swap layers [0] to int4: 14 waiting (policy stub, 1 iterations)",
		"restore layers [0] from int4: nothing runs; 0 blocks used (policy stub, 2 iterations)",
	}
	if got := replayStub(t, p); !slices.Equal(got, want) {
		t.Errorf("decisions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCannotSwap: a Control that could never swap a layer, or would restore without calm, is an error naming the
// parameter, from Parse, Check and NewController alike; NewController also refuses a cap that rounds to no layer
// of the model.
func TestCannotSwap(t *testing.T) {
	valid := Control{Persistence: 1, LayersPerAction: 1, Cap: 1, RestorePersistence: 1, Tiers: []quant.Format{quant.Int4}}
	for _, c := range []struct {
		change func(*Control)
		want   string
	}{
		{func(c *Control) { *c = Control{} }, "persistence=0: pressure would never start a swap, want >= 1"},
		{func(c *Control) { c.LayersPerAction = 0 }, "layers_per_action=0: a swap would move no layer, want >= 1"},
		{func(c *Control) { c.Cap = 0 }, "cap=0: no layer may be quantized, want a share of the layers above 0"},
		{func(c *Control) { c.Cap = 1.5 }, "cap=1.5: out of [0, 1]"},
		{func(c *Control) { c.Tiers = nil }, "no tiers: a swap has no format to go to, want tiers int4, int8 or int8,int4"},
		{func(c *Control) { c.Tiers = []quant.Format{quant.Int4, quant.Int8} }, "tiers [int4 int8]: want int4, int8 or int8,int4"},
		{func(c *Control) { c.RestorePersistence = 0 }, "restore_persistence=0: a restore would start without calm, want >= 1"},
		{func(c *Control) { c.RestoreMargin = -0.1 }, "restore_margin=-0.1: out of [0, 1]"},
		{func(c *Control) { c.RestoreHold = -time.Second }, "restore_hold=-1s: want >= 0"},
	} {
		p := &stubPolicy{Control: valid}
		p.Tiers = slices.Clone(valid.Tiers)
		c.change(&p.Control)
		want := "policy of type *morph.stubPolicy: " + c.want
		if err := Check(p); err == nil || err.Error() != want {
			t.Errorf("Check: %v, want %s", err, want)
		}
		if _, err := NewController(nil, p, frontToBack(8), slices.Repeat([]quant.Format{quant.F16}, 8)); err == nil || err.Error() != want {
			t.Errorf("NewController: %v, want %s", err, want)
		}
	}
	if err := Check(&stubPolicy{Control: valid}); err != nil {
		t.Errorf("a valid Control: %v", err)
	}
	if _, err := Parse("morph:default:cap=0"); err == nil || err.Error() != `policy "morph:default:cap=0": cap=0: no layer may be quantized, want a share of the layers above 0` {
		t.Errorf("Parse with cap=0: %v", err)
	}
	p, err := Parse("morph:default:cap=0.05")
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(newMemExec(8, 100, 0), engine.Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewController(e, p, frontToBack(8), slices.Repeat([]quant.Format{quant.F16}, 8))
	if want := `policy "morph:default:cap=0.05": cap=0.05 of 8 layers quantizes none of them, want cap >= 0.0625`; err == nil || err.Error() != want {
		t.Errorf("cap rounding to no layer: %v, want %s", err, want)
	}
}

// TestCalmReasons: the built-in rules' restores give the reasons of their calm: the reactive modes, morph:slo and
// morph:compute the empty queue and the free share without the last region, morph:predictive the forecast.
func TestCalmReasons(t *testing.T) {
	reqs := burstTrace(rand.New(rand.NewPCG(4, 4)), 30, 2*time.Second, 20*time.Second, 250, 60)
	base := slices.Repeat([]quant.Format{quant.F16}, 8)
	for policy, want := range map[string]*regexp.Regexp{
		"morph:default": regexp.MustCompile(`^restore layers \[\d( \d)*\] from int4: queue empty; free share (0\.\d+|1\.000) >= 0\.30 without the last region ` +
			`\((\d+) of (\d+) blocks free, \d+ in it\) \(policy morph:default, \d+ iterations\)$`),
		"morph:slo:ttft=1s": regexp.MustCompile(`^restore layers .* from int4: queue empty; free share .* >= 0\.30 without the last region .* \(policy morph:slo:ttft=1s, \d+ iterations\)$`),
		"morph:compute":     regexp.MustCompile(`^restore layers .* from int[48]: queue empty; free share .* >= 0\.30 without the last region .* \(policy morph:compute, \d+ iterations\)$`),
		"morph:predictive": regexp.MustCompile(`^restore layers \[\d( \d)*\] from int4: queue empty; demand \d+ blocks \(present \d+, forecast \d+\) <= \d+, ` +
			`the pool without the last region less the 0\.10 margin \(policy morph:predictive, \d+ iterations\)$`),
	} {
		_, _, e := run(t, newMemExec(8, 100, 0), policy, reqs, base, nil)
		restores := 0
		for _, ev := range e.Log() {
			if ev.Kind != engine.Decision || !strings.HasPrefix(ev.Detail, "restore") {
				continue
			}
			restores++
			if !want.MatchString(ev.Detail) {
				t.Errorf("%s: %q, want it to match %s", policy, ev.Detail, want)
			}
		}
		if restores == 0 {
			t.Errorf("%s restored nothing: the test needs restores", policy)
		}
	}
}
