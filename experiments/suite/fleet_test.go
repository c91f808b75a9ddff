package suite

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/datadir"
)

// TestSmallest: the search finds the fewest replicas that meet the SLO with few runs from any hint, and the most
// it may try, without a run, when none does.
func TestSmallest(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {2, 1}, {3, 1}, {7, 1}, {33, 1}, {64, 1}, {65, 1}, {7, 7}, {7, 6}, {7, 8}, {1, 5}, {40, 64}, {65, 64}, {5, 99}} {
		need, hint := c[0], c[1]
		runs := 0
		n, r, err := smallest(hint, fleetMax, func(n int, whole bool) (*results.Run, error) {
			runs++
			if n < need && !whole {
				return nil, nil // a run stopped once it missed
			}
			v := 0.0
			if n < need {
				v = 0.5
			}
			return &results.Run{Aggregates: results.Aggregates{SLOViolationRate: v}}, nil
		}, studyGoal.meets)
		want := min(need, fleetMax)
		if err != nil || n != want || (need <= fleetMax) != studyGoal.meets(r) || (need > fleetMax) != (r == nil) || runs > 14 {
			t.Errorf("need %d from %d: got %d after %d runs (meets %v), want %d", need, hint, n, runs, studyGoal.meets(r), want)
		}
	}
}

// TestFleetStudy runs the study on three minutes of each trace for one setup at the real rate and two delays: every
// strategy's fleet is found (a fixed one once, an autoscaled one a delay, from a floor no larger than its policy's
// fixed fleet), a fixed fleet one replica smaller misses the SLO, the costs add up, and the files are written.
func TestFleetStudy(t *testing.T) {
	data, _ := datadir.Dir()
	out := t.TempDir()
	delays := []time.Duration{30 * time.Second, 2 * time.Minute}
	rep, err := FleetStudy(context.Background(), FleetOptions{Out: out, Data: data, Setups: PaperSetups[1:2], Rates: []float64{1}, Hours: 0.05, Delays: delays})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (5 + 5*len(delays)); len(rep.Cells) != want {
		t.Fatalf("%d cells, want 2 traces x (5 fixed strategies + 5 autoscaled x %d delays)", len(rep.Cells), len(delays))
	}
	if len(rep.Premise) != 2*len(delays) {
		t.Errorf("%d premise runs, want 2 strategies x %d delays", len(rep.Premise), len(delays))
	}
	for _, c := range rep.Cells {
		if !c.Meets || c.Replicas < 1 || c.Cost <= 0 || math.Abs(c.Cost-c.run.Fleet.Cost) > 1e-12 {
			t.Errorf("%+v: want a fleet that meets the SLO at a cost", *c)
			continue
		}
		policy, controller := splitStrategy(c.Strategy)
		if fixed := rep.cell(c.Setup, c.Workload, c.Rate, policy, 0); controller != "" && (fixed == nil || c.Replicas > fixed.Replicas) {
			t.Errorf("%s on %s: a floor of %d replicas, above its policy's fixed fleet %+v", c.Strategy, c.Workload, c.Replicas, fixed)
		}
		if c.Target == 0 && c.Replicas > 1 {
			f, err := fleetFor(PaperSetups[1], c.Strategy, c.Replicas-1, "", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			r, err := f.Replay(context.Background(), studyTrace(t, data, c.Workload, PaperSetups[1]), deploy.ReplayOptions{SLO: SLO})
			if err != nil {
				t.Fatal(err)
			}
			if studyGoal.meets(r) {
				t.Errorf("%s on %s: %d replicas meet the SLO too, the study chose %d", c.Strategy, c.Workload, c.Replicas-1, c.Replicas)
			}
		}
	}
	for _, d := range delays {
		if v := rep.Means(d)["fp16+hpa"]; v.Cost != 1 || v.Loss != 0 || v.Cells != 2 {
			t.Errorf("fp16+hpa relative to itself at %v: %+v", d, v)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "fleet.md"))
	if err != nil || !strings.Contains(string(md), "| fp16+hpa ") || !strings.Contains(string(md), "| 1.00x ") ||
		!strings.Contains(string(md), "## Provisioning delay 2m0s") || !strings.Contains(string(md), "## The morph-aware controller at a 2m0s delay") {
		t.Errorf("fleet.md: %v\n%s", err, md)
	}
	for _, f := range []string{"fleet.json", "cost-vs-quality-30s.png", "cost-vs-quality-2m0s.svg", "premise.png",
		"llama-2-7b-l4/azure-conv-hour-1x/morph_default/results.json", "llama-2-7b-l4/azure-code-hour-1x/fp16+hpa-2m0s/fleet.svg",
		"llama-2-7b-l4/azure-code-hour-1x/morph_compute+morph-aware-30s/results.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
}

// studyTrace is the study's trace of a workload for a setup, three minutes at the real rate.
func studyTrace(t *testing.T, data, workload string, s Setup) *trace.Trace {
	wls, err := fleetWorkloads(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wls {
		if w.Name == workload {
			tr, err := trace.Window(w.Trace, 0, 3600*0.05)
			if err != nil {
				t.Fatal(err)
			}
			if tr, err = trace.Clip(tr, trace.Limits{Prompt: s.MaxPrompt, Output: s.MaxOutput}); err != nil {
				t.Fatal(err)
			}
			return tr
		}
	}
	t.Fatalf("no workload %s", workload)
	return nil
}

// TestWriteAboveInt4: the cells where a morph-aware strategy costs over 1% more than static:int4 are listed (one
// within it is not), each with its fixed fleet's size, and counted among them those whose fixed fleet is larger
// than static:int4's.
func TestWriteAboveInt4(t *testing.T) {
	cell := func(workload, strategy string, delay time.Duration, replicas, peak int, cost float64) *FleetCell {
		return &FleetCell{Setup: "s", Workload: workload, Rate: 1, Strategy: strategy, Delay: delay, Meets: true, Replicas: replicas,
			PeakReplicas: peak, Cost: cost}
	}
	r := &FleetReport{Cells: []*FleetCell{
		cell("a", "static:int4", 0, 3, 3, 3), cell("a", "morph:default", 0, 4, 4, 4), cell("a", "morph:default+morph-aware", verdictDelay, 4, 4, 4),
		cell("d", "static:int4", 0, 3, 3, 3), cell("d", "morph:default", 0, 3, 3, 3.02), cell("d", "morph:default+morph-aware", verdictDelay, 3, 3, 3.02),
		cell("b", "static:int4", 0, 3, 3, 3), cell("b", "morph:default", 0, 3, 3, 3), cell("b", "morph:default+morph-aware", verdictDelay, 2, 5, 3.5),
		cell("c", "static:int4", 0, 5, 5, 5), cell("c", "morph:default", 0, 5, 5, 5), cell("c", "morph:default+morph-aware", verdictDelay, 4, 6, 4.5),
	}}
	var b strings.Builder
	r.writeAboveInt4(&b, "morph:default+morph-aware")
	want := "  It costs over 1% more than static:int4 in 2 cells, in 1 of them because the fixed morph:default fleet itself needs more replicas " +
		"than static:int4's (its swaps, made under pressure, lag load that a fleet quantized from the start serves): " +
		"s a 1x: $4.00 (4-4 replicas; the fixed morph:default fleet 4) against static:int4's 3 at $3.00; " +
		"s b 1x: $3.50 (2-5 replicas; the fixed morph:default fleet 3) against static:int4's 3 at $3.00.\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
