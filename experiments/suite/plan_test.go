package suite

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/trace"
)

// TestCheapest plans Llama-2-7B for three minutes of Poisson traffic over two devices, three policies and the HPA:
// the winner meets the spec and is the cheapest candidate that does; replaying its fleet gives the cost, violations
// and P95 TTFT the plan states; its fixed fleet one replica smaller misses; static:int4 is pruned for its quality
// loss, and the winner's replica has a Latency-RPS curve whose knee gives the capacity method's count.
func TestCheapest(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the plan in -short mode")
	}
	tr, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: 6}, Duration: 180,
		Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 600, Sigma: 0.8}, Output: trace.LogNormal{Median: 120, Sigma: 0.8}}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Cheapest(context.Background(), PlanSpec{Trace: tr, Model: "llama-2-7b", Devices: []string{"h200", "l4"},
		Policies: []string{"fp16", "static:int4", "static:int8"}, Controllers: []string{"hpa"}, MaxLoss: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	w := p.Winner
	if w == nil || !w.Meets || w.Loss > 0.01 || w.Violations > 0.01 || w.P95TTFT > 2000 {
		t.Fatalf("winner %+v", w)
	}
	if p.Candidates[0].Device != "h200" {
		t.Errorf("first candidate on %s, want the larger device h200 first", p.Candidates[0].Device)
	}
	for _, c := range p.Candidates {
		if c.Meets && beats(c.USDPerHour, w.USDPerHour) {
			t.Errorf("%s, %s meets at $%.2f/h, cheaper than the winner's $%.2f/h", c.name(), c.fleet(), c.USDPerHour, w.USDPerHour)
		}
		if c.Policy == "static:int4" && !strings.Contains(c.Pruned, "quality loss") {
			t.Errorf("%s: %q, want pruned for its quality loss", c.name(), c.Pruned)
		}
	}
	s := Setup{Name: w.Device, Model: "llama-2-7b", Device: w.Device}
	f, err := fleetFor(s, w.Policy, w.Replicas, w.Controller, w.Target, p.Spec.Delay)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Replay(context.Background(), tr, deploy.ReplayOptions{SLO: p.Spec.SLO})
	if err != nil {
		t.Fatal(err)
	}
	if r.Fleet.Cost != w.Cost || r.Aggregates.SLOViolationRate != w.Violations || r.Aggregates.TTFT.P95 != w.P95TTFT {
		t.Errorf("the winner replayed: $%v, %v violations, P95 TTFT %v ms; the plan says $%v, %v, %v", r.Fleet.Cost, r.Aggregates.SLOViolationRate,
			r.Aggregates.TTFT.P95, w.Cost, w.Violations, w.P95TTFT)
	}
	if w.Controller == "" && w.Replicas > 1 {
		gl := goal{p.Spec.SLO, p.Spec.MaxViolations, p.Spec.MaxP95}
		fewer, err := simFleet(context.Background(), gl, s, w.Policy, w.Replicas-1, 0, "", 0, tr, true)
		if err != nil || gl.meets(fewer) {
			t.Errorf("%d replicas of the winner meet too (%v)", w.Replicas-1, err)
		}
	}
	if len(p.Curve) < 3 || p.Capacity.Instances < 1 || p.Capacity.KneeRPS <= 0 {
		t.Errorf("curve of %d points, capacity %+v", len(p.Curve), p.Capacity)
	}
	var md bytes.Buffer
	if err := p.WriteSummary(&md); err != nil || !strings.Contains(md.String(), "| winner") || !strings.Contains(md.String(), "capacity method") {
		t.Errorf("plan.md: %v\n%s", err, md.String())
	}
}
