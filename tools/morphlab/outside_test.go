package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/quant"
)

// waitQueue is a morph policy written against engine/morph's exported API alone: pressure while more than N
// requests wait, calm once none does.
type waitQueue struct {
	morph.Control
	N int
}

func (q *waitQueue) Params() []morph.Param { return []morph.Param{morph.Count("n", &q.N)} }
func (q *waitQueue) Rule() morph.Rule      { return waitQueueRule{q} }

type waitQueueRule struct{ q *waitQueue }

func (r waitQueueRule) Judge(in morph.Input) morph.Verdict {
	switch s := in.Signals; {
	case s.Waiting > r.q.N:
		return morph.Verdict{Pressure: []string{fmt.Sprintf("%d waiting > %d", s.Waiting, r.q.N)}}
	case s.Waiting == 0 && in.Actuator.Actions() > 0:
		return morph.Verdict{Calm: []string{"nothing waits"}}
	}
	return morph.Verdict{}
}

// fewestWaiting is a fleet router written against experiments/deploy's exported API alone: the serving replica
// with the fewest requests waiting, the first of equals.
type fewestWaiting struct{}

func (fewestWaiting) Route(_ engine.TimedRequest, replicas []deploy.ReplicaView) int {
	best := 0
	for i, v := range replicas {
		if v.Waiting() < replicas[best].Waiting() {
			best = i
		}
	}
	return best
}

func init() {
	morph.Register("outside-queue", morph.ParseParams(func() morph.Morphing {
		return &waitQueue{N: 8, Control: morph.Control{Persistence: 2, LayersPerAction: 4, Cap: 1, RestorePersistence: 8,
			Tiers: []quant.Format{quant.Int4}}}
	}))
	deploy.RegisterRouter("outside-fewest-waiting", func() deploy.Router { return fewestWaiting{} })
}

// TestOutsidePolicyAndRouter: a policy and a router that only this test file defines, registered by name, run
// through deploy.Fleet and through `morphlab simulate --replicas` alike: the same requests per replica and the
// same aggregates, results that name both and record the policy's own parameter, and swaps under the burst.
func TestOutsidePolicyAndRouter(t *testing.T) {
	dir := t.TempDir()
	path := burstFile(t, dir, 300)
	const policy, router = "outside-queue:n=4:persistence=1", "outside-fewest-waiting"

	out := filepath.Join(dir, "cli")
	code, stdout, stderr := runCLI("simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", path, "--kv-blocks", "958",
		"--replicas", "2", "--router", router, "--policy", policy, "--out", out)
	if code != 0 {
		t.Fatalf("simulate: exit %d, %q, %q", code, stdout, stderr)
	}
	cli, err := results.Load(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}

	tr, err := trace.Load(path, trace.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := morph.Parse(policy)
	if err != nil {
		t.Fatal(err)
	}
	d := deploy.Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: deploy.KV{Blocks: 958}, Policy: p}
	lib, err := deploy.Fleet{Router: router, Replicas: []deploy.Deployment{d, d}}.Replay(context.Background(), tr, deploy.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for name, r := range map[string]*results.Run{"simulate": cli, "deploy.Fleet": lib} {
		if r.Meta.Policy != policy || r.Fleet == nil || r.Fleet.Router != router {
			t.Errorf("%s: policy %q, fleet %+v; want %s behind %s", name, r.Meta.Policy, r.Fleet, policy, router)
			continue
		}
		if r.Aggregates.Completed != 300 || r.Aggregates.SwapActions == 0 {
			t.Errorf("%s: %d completed, %d swap actions; want 300, and swaps under the burst", name, r.Aggregates.Completed, r.Aggregates.SwapActions)
		}
		var params map[string]any
		if err := json.Unmarshal(r.Meta.Fleet.Replicas[0].Params, &params); err != nil || params["n"] != 4.0 || params["persistence"] != 1.0 {
			t.Errorf("%s: the replica's recorded parameters %v (%v), want n 4 and persistence 1", name, params, err)
		}
	}
	for i := range lib.Fleet.Replicas {
		if a, b := cli.Fleet.Replicas[i].Requests, lib.Fleet.Replicas[i].Requests; a != b {
			t.Errorf("replica %d: %d requests through simulate, %d through deploy.Fleet", i, a, b)
		}
	}
	if a, b := cli.Aggregates.TTFT, lib.Aggregates.TTFT; a != b {
		t.Errorf("TTFT through simulate %+v, through deploy.Fleet %+v", a, b)
	}
}
