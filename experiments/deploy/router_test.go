package deploy

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/experiments/trace"
)

// builtinRouters are the routers the package registers.
var builtinRouters = []string{"least-kv", "least-outstanding", "morph-aware", "round-robin"}

// The tests' own router and metric, registered as an outside package would register them.
func init() {
	RegisterRouter("test-last", func() Router { return lastRouter{} })
	RegisterRouter("test-record", func() Router { return &recordRouter{} })
	RegisterScaleMetric("test-ten", func() ScaleMetric { return constMetric(10) })
}

// lastRouter sends every request to the last serving replica.
type lastRouter struct{}

func (lastRouter) Route(_ engine.TimedRequest, replicas []ReplicaView) int { return len(replicas) - 1 }

// viewAt is what a router saw of a replica when a request arrived.
type viewAt struct {
	index, outstanding, waiting, waitingTokens, waitingBlocks, free, quantized, blocks int
	usage                                                                              float64
	state                                                                              ReplicaState
}

// recordRouter sends every request to the first replica and records what it saw of the replicas; the records of
// the last run that made one are in recorded.
type recordRouter struct{ saw [][]viewAt }

var recorded *recordRouter

func (r *recordRouter) Route(req engine.TimedRequest, replicas []ReplicaView) int {
	recorded = r
	var seen []viewAt
	for _, v := range replicas {
		seen = append(seen, viewAt{index: v.Index(), outstanding: v.Outstanding(), waiting: v.Waiting(), waitingTokens: v.WaitingTokens(),
			waitingBlocks: v.WaitingBlocks(), free: v.FreeBlocks(), quantized: v.Quantized(), blocks: v.Blocks(len(req.Prompt)),
			usage: v.KVUsage(), state: v.State()})
	}
	r.saw = append(r.saw, seen)
	return 0
}

// constMetric measures the same value whatever the replicas.
type constMetric float64

func (m constMetric) Measure([]ReplicaView) float64 { return float64(m) }

// TestRouterRegistry: the names are listed sorted, the built-ins and the registered ones (the tests' and the
// examples'); an unknown name is an error that lists them, from NewRouter, from a fleet's Replay and from
// --router; a name registered twice, empty or without a constructor panics.
func TestRouterRegistry(t *testing.T) {
	want := RouterNames()
	if !slices.IsSorted(want) || !containsAll(want, append(slices.Clone(builtinRouters), "test-last", "test-record")) {
		t.Errorf("RouterNames() = %v, want them sorted, the built-ins %v and the tests' among them", want, builtinRouters)
	}
	msg := `router "random", want one of ` + strings.Join(want, ", ")
	if _, err := NewRouter("random"); err == nil || err.Error() != "deploy: "+msg {
		t.Errorf("NewRouter(random): %v, want %q", err, msg)
	}
	tr := &trace.Trace{Requests: []trace.Request{{Arrival: 0, PromptTokens: 100, OutputTokens: 10}}}
	if _, err := (Fleet{Router: "random", Replicas: []Deployment{sim7b(t, "fp16", 300)}}).Replay(context.Background(), tr, ReplayOptions{}); err == nil ||
		err.Error() != "deploy: "+msg {
		t.Errorf("a fleet with an unknown router: %v, want %q", err, msg)
	}
	if _, _, err := fleetFlags(t, "--replicas", "2", "--router", "random"); err == nil || err.Error() != "--"+msg {
		t.Errorf("--router random: %v, want %q", err, "--"+msg)
	}
	for name, newRouter := range map[string]func() Router{"round-robin": func() Router { return lastRouter{} }, "": func() Router { return lastRouter{} }, "x": nil} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterRouter(%q, constructor %v) did not panic", name, newRouter != nil)
				}
			}()
			RegisterRouter(name, newRouter)
		}()
	}
	if got := RouterNames(); !slices.Equal(got, want) {
		t.Errorf("after the refused registrations, RouterNames() = %v, want %v", got, want)
	}
}

// TestFleetOutsideRouter: a router registered from outside the package runs under its name (every request on
// the last replica), and the results name it.
func TestFleetOutsideRouter(t *testing.T) {
	tr := burst(t, 40, 300, 50)
	d := sim7b(t, "fp16", 300)
	r, err := (Fleet{Router: "test-last", Replicas: []Deployment{d, d, d}}).Replay(context.Background(), tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	per := []int{r.Fleet.Replicas[0].Requests, r.Fleet.Replicas[1].Requests, r.Fleet.Replicas[2].Requests}
	if r.Fleet.Router != "test-last" || !slices.Equal(per, []int{0, 0, 40}) || r.Aggregates.Completed != 40 {
		t.Errorf("router %q, requests per replica %v, %d completed; want test-last, [0 0 40], 40", r.Fleet.Router, per, r.Aggregates.Completed)
	}
}

// TestReplicaView: what a router sees of the replicas as requests arrive together at time 0 (nothing has stepped:
// the requests routed count as waiting, their prompt tokens and blocks with them, and every attached block is
// free), then after the first replica has run them.
func TestReplicaView(t *testing.T) {
	tr := &trace.Trace{}
	for range 3 {
		tr.Requests = append(tr.Requests, trace.Request{Arrival: 0, PromptTokens: 100, OutputTokens: 400})
	}
	tr.Requests = append(tr.Requests, trace.Request{Arrival: 5, PromptTokens: 20, OutputTokens: 10})
	d := sim7b(t, "fp16", 300)
	if _, err := (Fleet{Router: "test-record", Replicas: []Deployment{d, d}}).Replay(context.Background(), tr, ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	idle := viewAt{index: 1, free: 300, blocks: 7, state: ReplicaServing}
	var want [][]viewAt
	for k := range 3 { // 100 tokens fill 7 blocks of 16; the second replica gets none
		want = append(want, []viewAt{{index: 0, outstanding: k, waiting: k, waitingTokens: 100 * k, waitingBlocks: 7 * k, free: 300, blocks: 7,
			state: ReplicaServing}, idle})
	}
	got := recorded.saw
	if len(got) != 4 {
		t.Fatalf("the router was called %d times, want 4", len(got))
	}
	if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) || !slices.Equal(got[2], want[2]) {
		t.Errorf("at 0 s the router saw %+v, want %+v", got[:3], want)
	}
	// At 5 s the three run, their prompts' blocks and the tokens made since in use, none waits, and the second
	// replica has still not stepped; the request arriving needs 2 blocks for its 20 tokens.
	at5 := got[3][0]
	idle.blocks = 2
	if at5.outstanding != 3 || at5.waiting != 0 || at5.waitingTokens != 0 || at5.waitingBlocks != 0 || at5.free >= 300-3*7 ||
		at5.usage != float64(300-at5.free)/300 || at5.blocks != 2 || got[3][1] != idle {
		t.Errorf("at 5 s the router saw %+v", got[3])
	}
}

// TestScaleMetricRegistry: the metrics are listed sorted; an unknown one is an error listing them, from the
// autoscaler and from --autoscale; a metric registered from outside drives the HPA rule (a constant 10 against a
// target of 5 wants twice the replicas serving).
func TestScaleMetricRegistry(t *testing.T) {
	names := ScaleMetricNames()
	if !slices.IsSorted(names) || !containsAll(names, []string{"kv", "outstanding", "test-ten", "waiting"}) {
		t.Errorf("ScaleMetricNames() = %v, want them sorted, kv, outstanding, waiting and the tests' among them", names)
	}
	msg := `autoscale metric "queue", want one of ` + strings.Join(names, ", ")
	d := sim7b(t, "fp16", 300)
	tr := &trace.Trace{Requests: []trace.Request{{Arrival: 0, PromptTokens: 100, OutputTokens: 10}, {Arrival: 100, PromptTokens: 100, OutputTokens: 10}}}
	f := Fleet{Replicas: []Deployment{d}, Autoscale: &Autoscale{Template: d, Metric: "queue", Target: 5, Min: 1, Max: 4}}
	if _, err := f.Replay(context.Background(), tr, ReplayOptions{}); err == nil || err.Error() != "deploy: "+msg {
		t.Errorf("an unknown metric: %v, want %q", err, msg)
	}
	if _, _, err := fleetFlags(t, "--autoscale", "queue=5"); err == nil || err.Error() != "--autoscale: "+msg {
		t.Errorf("--autoscale queue=5: %v, want %q", err, "--autoscale: "+msg)
	}
	f.Autoscale.Metric = "test-ten"
	r, err := f.Replay(context.Background(), tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var asked []float64
	for _, rep := range r.Fleet.Replicas {
		asked = append(asked, rep.Asked)
	}
	// At 15 s one replica measuring 10 against 5 wants 2 and asks for one more; from 30 s that one, provisioning
	// for 2 minutes, counts among the 2 it has, and the run ends with the last request, soon after 100 s.
	if !slices.Equal(asked, []float64{0, 15}) {
		t.Errorf("replicas asked for at %v s, want [0 15]", asked)
	}
}

func containsAll(names, want []string) bool {
	for _, w := range want {
		if !slices.Contains(names, w) {
			return false
		}
	}
	return true
}

// fleetFlags parses fleet flags on a deployment of Llama-2-7B on an L4.
func fleetFlags(t *testing.T, args ...string) (Fleet, bool, error) {
	var f FleetFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return Fleet{}, false, err
	}
	return f.Fleet(sim7b(t, "fp16", 300))
}

// TestFleetFlags: the flags describe the fleet, naming the registered router and metric.
func TestFleetFlags(t *testing.T) {
	f, ok, err := fleetFlags(t, "--replicas", "3", "--router", "test-last", "--autoscale", "test-ten=4", "--max-replicas", "5",
		"--max-queue", "7")
	if err != nil || !ok || len(f.Replicas) != 3 || f.Router != "test-last" || f.Autoscale == nil || f.Autoscale.Metric != "test-ten" ||
		f.Autoscale.Target != 4 || f.Autoscale.Max != 5 || f.Autoscale.Interval != DefaultScaleInterval || f.Admission.MaxQueue != 7 {
		t.Errorf("fleet %+v, %v, %v", f, ok, err)
	}
	if _, ok, err := fleetFlags(t); ok || err != nil {
		t.Errorf("no fleet flags: a fleet %v (%v), want one replica", ok, err)
	}
	var fs flag.FlagSet
	new(FleetFlags).Register(&fs)
	if u := fs.Lookup("router").Usage; !strings.Contains(u, strings.Join(RouterNames(), ", ")) {
		t.Errorf("--router's usage %q does not list the routers", u)
	}
}
