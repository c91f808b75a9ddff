package morph_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/quant"
)

// queue is a policy written outside package morph: it quantizes layers while more than N requests wait and
// restores them once the queue is empty. Its embedded Control gives it String, Needs, Start and Controls, and the
// Controller's parameters (persistence, layers per action, cap, tiers, ...).
type queue struct {
	morph.Control
	N int // requests waiting beyond which the model is under pressure
}

// Params are queue's own parameters; its Control's follow them.
func (q *queue) Params() []morph.Param { return []morph.Param{morph.Count("n", &q.N)} }

// Rule returns the rule of one run; this one keeps no state.
func (q *queue) Rule() morph.Rule { return queueRule{q} }

type queueRule struct{ q *queue }

// Judge is pressure while more than N wait, and calm once nothing waits and a swap is in force.
func (r queueRule) Judge(in morph.Input) morph.Verdict {
	s := in.Signals
	switch {
	case s.Waiting > r.q.N:
		return morph.Verdict{Pressure: []string{fmt.Sprintf("%d waiting > %d", s.Waiting, r.q.N)}}
	case s.Waiting == 0 && in.Actuator.Actions() > 0:
		return morph.Verdict{Calm: []string{"queue empty"}}
	}
	return morph.Verdict{}
}

// init registers queue under its name, with its defaults: each Parse makes a fresh one and applies the name's k=v
// overrides to it.
func init() {
	morph.Register("queue", morph.ParseParams(func() morph.Morphing {
		return &queue{N: 8, Control: morph.Control{Persistence: 2, LayersPerAction: 2, Cap: 1, RestorePersistence: 4,
			Tiers: []quant.Format{quant.Int4}}}
	}))
}

// A policy registered from outside parses by its name with k=v overrides of its own parameters and its Control's,
// checked as the built-ins' are; its String is the name as given, and its parameters (what results record) list
// its own first.
func ExampleRegister() {
	p, err := morph.Parse("queue:n=4:persistence=1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p)
	fmt.Println(p.Needs())
	fmt.Println(string(morph.Params(p)))
	for _, bad := range []string{"queue:n=0", "queue:depth=3", "queue:cap=0"} {
		_, err := morph.Parse(bad)
		fmt.Println(err)
	}
	// Output:
	// queue:n=4:persistence=1
	// [int4]
	// {"n":4,"persistence":1,"layers_per_action":2,"cap":1,"restore_persistence":4,"restore_margin":0,"restore_hold":"0s","tiers":["int4"]}
	// policy "queue:n=0": parameter n=0: want >= 1
	// policy "queue:depth=3": unknown parameter "depth"
	// policy "queue:cap=0": cap=0: no layer may be quantized, want a share of the layers above 0
}

// A Controller carries out an outside policy's verdicts as it does the built-ins': here on the sim executor with a
// stories260K-shaped model (5 layers), 30 requests that arrive at once and two more 250 ms apart. While more than
// n wait, the controller swaps a layer each time the pressure has lasted persistence (2) iterations (the rule sets
// no Verdict.Layers: one layer an action); once the queue is empty it restores them, the last swapped first, each
// after restore_persistence (4) calm iterations. A restore's layers go back at the engine's next step: the one
// begun at 13 ms completes with the request at 250 ms, and the last two follow.
func ExampleController() {
	p, err := morph.Parse("queue:n=4")
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := model.ShapeByName("stories260K")
	if err != nil {
		log.Fatal(err)
	}
	hw := costmodel.Hardware{Name: "cpu", F16FLOPS: 460e9, Int8OPS: 1850e9, F32FLOPS: 460e9, VectorFLOPS: 460e9,
		Bandwidth: 33.5e9, Memory: 1 << 34, HostLink: 33.5e9, ActBytes: 4}
	r := costmodel.Roofline{Compute: costmodel.Efficiency{Max: 0.5}, Memory: costmodel.Efficiency{Max: 0.5}, Floor: 1e-6}
	cost, err := costmodel.New(cfg, hw, costmodel.Params{Linear: r, Norm: r, RoPE: r, Act: r, Add: r, Embedding: r}, model.KVF32, quant.F32)
	if err != nil {
		log.Fatal(err)
	}
	x, err := executor.NewSim(executor.SimOptions{Cost: cost, Formats: append([]quant.Format{quant.F32}, p.Needs()...), Outer: quant.F32,
		Pool: executor.Pool{Blocks: 64}, BlockSize: 16, MaxBatchedTokens: 256})
	if err != nil {
		log.Fatal(err)
	}
	e, err := engine.New(x, engine.Options{Clock: &executor.VirtualClock{}})
	if err != nil {
		log.Fatal(err)
	}
	c, err := morph.NewController(e, p, []int{4, 3, 2, 1, 0}, slices.Repeat([]quant.Format{quant.F32}, cfg.NLayers))
	if err != nil {
		log.Fatal(err)
	}
	e.OnStep(c.OnStep)
	var reqs []engine.TimedRequest
	for i := range 32 {
		prompt := make([]int32, 64)
		for j := range prompt {
			prompt[j] = int32(3 + (i*64+j)%500)
		}
		at := time.Duration(max(i-29, 0)) * 250 * time.Millisecond // 30 at once, then one every 250 ms
		reqs = append(reqs, engine.TimedRequest{Arrival: at, Request: engine.Request{Prompt: prompt, MaxTokens: 16}})
	}
	if _, err := e.Replay(context.Background(), reqs); err != nil {
		log.Fatal(err)
	}
	for _, ev := range e.Log() {
		if ev.Kind == engine.Decision {
			fmt.Println(ev.Time.Round(time.Millisecond), ev.Detail)
		}
	}
	tl := c.Recorder.Timeline
	fmt.Printf("%d swap actions; at most %d layers quantized, %d at the end\n", c.Swaps(), c.Recorder.Peak().Quantized, tl[len(tl)-1].Quantized)
	// Output:
	// 2ms swap layers [4] to int4: 22 waiting > 4 (policy queue:n=4, 2 iterations)
	// 4ms swap layers [3] to int4: 15 waiting > 4 (policy queue:n=4, 2 iterations)
	// 5ms swap layers [2] to int4: 14 waiting > 4 (policy queue:n=4, 2 iterations)
	// 6ms swap layers [1] to int4: 13 waiting > 4 (policy queue:n=4, 2 iterations)
	// 6ms swap layers [0] to int4: 11 waiting > 4 (policy queue:n=4, 2 iterations)
	// 12ms restore layers [0] from int4: queue empty (policy queue:n=4, 4 iterations)
	// 13ms restore layers [1] from int4: queue empty (policy queue:n=4, 7 iterations)
	// 13ms restore layers [2] from int4: queue empty (policy queue:n=4, 4 iterations)
	// 250ms restore layers [3] from int4: queue empty (policy queue:n=4, 7 iterations)
	// 251ms restore layers [4] from int4: queue empty (policy queue:n=4, 4 iterations)
	// 5 swap actions; at most 5 layers quantized, 0 at the end
}

// A built-in policy parses as an outside one does: by its registered name, here morph with its mode, and k=v
// overrides.
func ExampleParse() {
	p, err := morph.Parse("morph:default:persistence=2:tiers=int8,int4")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p)
	fmt.Println(p.Needs())
	fmt.Println(string(morph.Params(p)))
	// Output:
	// morph:default:persistence=2:tiers=int8,int4
	// [int8 int4]
	// {"usage":0.85,"delay":"100ms","window":8,"persistence":2,"layers_per_action":4,"cap":1,"restore_persistence":8,"restore_margin":0.3,"restore_hold":"5s","tiers":["int8","int4"]}
}
