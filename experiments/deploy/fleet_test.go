package deploy

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// sim7b is Llama-2-7B on an L4 in the sim with a small pool, under policy.
func sim7b(t testing.TB, policy string, blocks int) Deployment {
	return Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: KV{Blocks: blocks}, Policy: mustPolicy(t, policy)}
}

// TestFleetRoundRobinExact: round-robin over N identical replicas serves every request with the same TTFT and
// TPOT as N independent replays of the trace split by arrival index mod N (under fp16, and under morph:default and
// morph:compute, whose controllers act on their own replicas' load); each replica's aggregates are its replay's,
// and the fleet's output tokens by swap position are the replays' summed.
func TestFleetRoundRobinExact(t *testing.T) {
	tr := burst(t, 300, 700, 200)
	const n = 3
	slo := metrics.SLO{TTFT: 2 * time.Second}
	for _, policy := range []string{"fp16", "morph:default", "morph:compute"} {
		f := Fleet{Router: "round-robin"}
		for range n {
			f.Replicas = append(f.Replicas, sim7b(t, policy, 300))
		}
		got, err := f.Replay(context.Background(), tr, ReplayOptions{SLO: slo})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Requests) != len(tr.Requests) || got.Fleet == nil || len(got.Fleet.Replicas) != n {
			t.Fatalf("%s: %d requests, fleet %+v", policy, len(got.Requests), got.Fleet)
		}
		swaps := 0
		var positions results.Aggregates
		for k := range n {
			part := *tr
			part.Requests = nil
			for i, r := range tr.Requests {
				if i%n == k {
					part.Requests = append(part.Requests, r)
				}
			}
			in, err := sim7b(t, policy, 300).Build()
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := in.Replay(context.Background(), &part, ReplayOptions{SLO: slo})
			if err != nil {
				t.Fatal(err)
			}
			swaps += want.Aggregates.SwapActions
			if g, w := got.Fleet.Replicas[k].Aggregates, want.Aggregates; !slices.Equal(g.TokensByLayers, w.TokensByLayers) ||
				g.Preemptions != w.Preemptions || g.TTFT != w.TTFT || g.TotalOutputTokens != w.TotalOutputTokens {
				t.Errorf("%s: replica %d's aggregates %+v, alone %+v", policy, k, g, w)
			}
			for f, pos := range want.Aggregates.TokensByPosition {
				if positions.TokensByPosition == nil {
					positions.TokensByPosition = map[string][]int{}
				}
				if positions.TokensByPosition[f] == nil {
					positions.TokensByPosition[f] = make([]int, len(pos))
				}
				for i, c := range pos {
					positions.TokensByPosition[f][i] += c
				}
			}
			for j, w := range want.Requests {
				i := j*n + k
				g := got.Requests[i]
				if g.ID != i || got.Fleet.Assigned[i] != k || g.TTFT != w.TTFT || g.TPOT != w.TPOT || g.Output != w.Output || g.Finish != w.Finish {
					t.Fatalf("%s: request %d on replica %d: %+v, alone %+v", policy, i, got.Fleet.Assigned[i], g, w)
				}
			}
		}
		if policy != "fp16" && (swaps == 0 || got.Aggregates.SwapActions != swaps) {
			t.Errorf("%s: the fleet swapped %d times, its replicas alone %d: the burst should make them swap", policy, got.Aggregates.SwapActions, swaps)
		}
		if !reflect.DeepEqual(got.Aggregates.TokensByPosition, positions.TokensByPosition) || (policy == "morph:compute") != (positions.TokensByPosition != nil) {
			t.Errorf("%s: the fleet's tokens by swap position %v, its replicas' alone %v", policy, got.Aggregates.TokensByPosition, positions.TokensByPosition)
		}
	}
}

// TestFleetRouters: every built-in router serves every request of a burst over a heterogeneous fleet (an fp16 and
// a morph:default replica), giving each replica some, and the fleet's results name the router, its meta both
// policies and the pools summed.
func TestFleetRouters(t *testing.T) {
	tr := burst(t, 200, 700, 200)
	for _, router := range builtinRouters {
		f := Fleet{Router: router, Replicas: []Deployment{sim7b(t, "fp16", 300), sim7b(t, "morph:default", 300)}}
		r, err := f.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		per := []int{r.Fleet.Replicas[0].Requests, r.Fleet.Replicas[1].Requests}
		if r.Aggregates.Completed != 200 || per[0]+per[1] != 200 || per[0] == 0 || per[1] == 0 {
			t.Errorf("%s: %d completed, per replica %v", router, r.Aggregates.Completed, per)
		}
		if r.Fleet.Router != router || r.Meta.Policy != "fp16+morph:default" || r.Meta.KVBlocksFull != 600 {
			t.Errorf("%s: router %q, meta %+v", router, r.Fleet.Router, r.Meta)
		}
	}
}

// TestFleetMorphAwareSpreads: under a light load the morph-aware router spreads requests over identical replicas,
// those that have not yet served included (every one has room for every prompt and none is quantized), as
// least-outstanding does.
func TestFleetMorphAwareSpreads(t *testing.T) {
	var tr trace.Trace
	for i := range 400 { // 4 requests a second for 100 s
		tr.Requests = append(tr.Requests, trace.Request{Arrival: float64(i) / 4, PromptTokens: 500, OutputTokens: 100})
	}
	d := sim7b(t, "morph:default", 300)
	f := Fleet{Router: "morph-aware", Replicas: []Deployment{d, d, d, d}}
	r, err := f.Replay(context.Background(), &tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, rep := range r.Fleet.Replicas {
		if rep.Requests < 50 {
			t.Errorf("replica %d served %d of 400 requests, want at least 50: %+v", i, rep.Requests, r.Fleet.Replicas)
		}
	}
}

// TestFleetIdleReplica: a replica that serves no request reports none.
func TestFleetIdleReplica(t *testing.T) {
	tr := trace.Trace{Requests: []trace.Request{{Arrival: 0, PromptTokens: 100, OutputTokens: 10}, {Arrival: 1, PromptTokens: 100, OutputTokens: 10}}}
	d := sim7b(t, "fp16", 300)
	r, err := (Fleet{Router: "round-robin", Replicas: []Deployment{d, d, d}}).Replay(context.Background(), &tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := r.Fleet.Replicas[2].Aggregates; r.Fleet.Replicas[2].Requests != 0 || a.Requests != 0 || a.Completed != 0 || a.TotalOutputTokens != 0 {
		t.Errorf("the idle replica: %d requests, aggregates of %d requests, %d completed, %d output tokens; want none",
			r.Fleet.Replicas[2].Requests, a.Requests, a.Completed, a.TotalOutputTokens)
	}
}

// TestFleetAdmission: a token bucket turns away the requests past its rate and burst, a queue cap those that
// find it full, each with its reason; the turned-away count as SLO violations and are assigned no replica.
func TestFleetAdmission(t *testing.T) {
	var tr trace.Trace
	for i := range 100 { // 100 requests in one second
		tr.Requests = append(tr.Requests, trace.Request{Arrival: float64(i) / 100, PromptTokens: 100, OutputTokens: 50})
	}
	f := Fleet{Replicas: []Deployment{sim7b(t, "fp16", 958)}, Admission: Admission{Rate: 10, Burst: 20}}
	r, err := f.Replay(context.Background(), &tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	// The bucket starts full (20) and refills 10 a second: over the second of arrivals 20 + 9.9 pass.
	admitted := r.Aggregates.Completed
	rej := r.Fleet.Rejections["rate limited: 10 requests a second, bursts of 20"]
	if admitted != 29 || rej != 71 || r.Aggregates.SLOViolations < 71 || r.Fleet.Assigned[99] != -1 || r.Fleet.Assigned[0] != 0 {
		t.Errorf("token bucket: %d admitted, %d turned away (%v), %d violations", admitted, rej, r.Fleet.Rejections, r.Aggregates.SLOViolations)
	}
	q := Fleet{Replicas: []Deployment{sim7b(t, "fp16", 30)}, Admission: Admission{MaxQueue: 5}}
	rq, err := q.Replay(context.Background(), &tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for why, c := range rq.Fleet.Rejections {
		if !strings.HasPrefix(why, "queue full: ") || !strings.HasSuffix(why, " requests waiting, the limit is 5") {
			t.Errorf("reason %q", why)
		}
		n += c
	}
	if n == 0 || rq.Aggregates.Completed+n != 100 {
		t.Errorf("queue cap: %d turned away, %d completed of 100", n, rq.Aggregates.Completed)
	}
	if err := (Fleet{Replicas: f.Replicas, Admission: Admission{Rate: 5}}).Admission.check(); err == nil {
		t.Error("a rate without a burst was accepted")
	}
}

// TestFleetAutoscale: under a load that doubles for a while, the autoscaler asks for replicas, which serve only
// after the delay and cost from the moment they are asked for, and removes them once the load has stayed low for
// the cool-down; replica-hours and cost add up from the replicas' times and prices.
func TestFleetAutoscale(t *testing.T) {
	var tr trace.Trace
	at := 0.0
	for at < 900 {
		rate := 1.0
		if at > 120 && at < 360 {
			rate = 12
		}
		at += 1 / rate
		tr.Requests = append(tr.Requests, trace.Request{Arrival: at, PromptTokens: 300, OutputTokens: 150})
	}
	f := Fleet{Router: "least-outstanding", Replicas: []Deployment{sim7b(t, "fp16", 958)},
		Autoscale: &Autoscale{Template: sim7b(t, "fp16", 958), Metric: "outstanding", Target: 16, Min: 1, Max: 6, Delay: time.Minute, CoolDown: 2 * time.Minute}}
	r, err := f.Replay(context.Background(), &tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	fl := r.Fleet
	if len(fl.Replicas) < 2 {
		t.Fatalf("%d replicas: the burst should have made it scale up", len(fl.Replicas))
	}
	hours, cost, peak := 0.0, 0.0, 0
	for i, rep := range fl.Replicas {
		if i > 0 && (rep.Ready-rep.Asked != 60 || rep.Asked < 120 || rep.Stopped > 900+60) {
			t.Errorf("replica %d asked at %v, ready %v, stopped %v: want ready a minute after asked, asked in the burst", i, rep.Asked, rep.Ready, rep.Stopped)
		}
		hours += (rep.Stopped - rep.Asked) / 3600
		cost += (rep.Stopped - rep.Asked) / 3600 * 0.8048
	}
	for _, p := range fl.Size {
		peak = max(peak, p.Serving)
	}
	last := fl.Size[len(fl.Size)-1]
	if math.Abs(fl.ReplicaHours-hours) > 1e-9 || math.Abs(fl.Cost-cost) > 1e-9 || peak < 2 || last.Serving != 0 {
		t.Errorf("replica-hours %v (want %v), cost %v (want %v), peak %d serving, last %+v", fl.ReplicaHours, hours, fl.Cost, cost, peak, last)
	}
	scaledDown := false
	for _, rep := range fl.Replicas[1:] {
		scaledDown = scaledDown || rep.Stopped < 800
	}
	if !scaledDown || r.Aggregates.Completed != len(tr.Requests) {
		t.Errorf("no replica removed before the end, or %d of %d completed", r.Aggregates.Completed, len(tr.Requests))
	}
	if want := fl.Cost / (float64(r.Aggregates.TotalOutputTokens) / 1e6); math.Abs(fl.CostPerMillionTokens-want) > 1e-9 {
		t.Errorf("cost per million tokens %v, want %v", fl.CostPerMillionTokens, want)
	}
}

// BenchmarkFleet is the fleet simulator's cost, run with GOMAXPROCS=1: 4 replicas of Llama-2-7B on an A100
// (least-outstanding router, morph:default) over the 1-hour Azure conversation trace at 4x its rate
// (replicas=4), and 64 replicas over a million synthetic requests (replicas=64: on/off arrivals at 400 req/s on
// average, prompts of 50-900 tokens, outputs of 20-400). It reports the CPU seconds a run took, simulated requests
// per second and the peak resident set of the process (VmHWM). Without the data the first runs a generated trace
// of as many requests.
func BenchmarkFleet(b *testing.B) {
	azure := func() *trace.Trace {
		tr, err := trace.TimeScale(azureHour(b), 0.25)
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	million := func() *trace.Trace {
		tr, err := trace.Generate(trace.Spec{Process: trace.OnOff{OnRate: 600, OffRate: 200, OnMean: 30, OffMean: 30},
			Lengths: trace.Independent{Prompt: trace.Uniform{Min: 50, Max: 900}, Output: trace.Uniform{Min: 20, Max: 400}}, N: 1_000_000}, 3)
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	for _, c := range []struct {
		replicas int
		trace    func() *trace.Trace
	}{{4, azure}, {64, million}} {
		b.Run(fmt.Sprintf("replicas=%d", c.replicas), func(b *testing.B) {
			tr := c.trace()
			f := Fleet{Router: "least-outstanding"}
			for range c.replicas {
				f.Replicas = append(f.Replicas, Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100", Policy: mustPolicy(b, "morph:default"),
					Scheduler: Scheduler{MaxBatchedTokens: 2048}})
			}
			cpu0 := ProcessCPU()
			for range b.N {
				r, err := f.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
				if err != nil || r.Aggregates.Completed != len(tr.Requests) {
					b.Fatalf("%v, %d of %d completed", err, r.Aggregates.Completed, len(tr.Requests))
				}
			}
			b.ReportMetric((ProcessCPU()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(peakRSS())/(1<<20), "MiB-peak-rss")
		})
	}
}

// peakRSS is the process's peak resident set (VmHWM in /proc/self/status), 0 where there is none.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// TestFleetSize: a fixed fleet's size over time is sampled every 10 s of virtual time, in time order, serving
// all its replicas until the run ends, and the samples catch the requests waiting in a burst and running after it.
func TestFleetSize(t *testing.T) {
	tr := burst(t, 300, 700, 200)
	d := sim7b(t, "fp16", 300)
	r, err := (Fleet{Router: "least-outstanding", Replicas: []Deployment{d, d}}).Replay(context.Background(), tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	size := r.Fleet.Size
	end := size[len(size)-1]
	if size[0].T != 0 || end.Serving != 0 || end.Waiting+end.Running != 0 {
		t.Fatalf("size from %+v to %+v, want from 0 s to the end with none serving", size[0], end)
	}
	waited, ran := false, false
	for i, p := range size[:len(size)-1] {
		if want := 10 * float64(i); p.T != want || p.Serving != 2 || p.Provisioning+p.Draining != 0 {
			t.Errorf("point %d: %+v, want 2 serving at %v s", i, p, want)
		}
		waited, ran = waited || p.Waiting > 0, ran || p.Running > 0
	}
	if end.T <= size[len(size)-2].T || end.T > size[len(size)-2].T+10 || !waited || !ran {
		t.Errorf("the last point %+v after %+v; requests waiting at some sample %v, running %v", end, size[len(size)-2], waited, ran)
	}
}

// TestFleetMorphAwareController: one morph:default replica of 300 blocks under 0.2 requests a second with a
// 30-second burst. A burst of 4 a second is one its swaps absorb (the queue fits in its free blocks and those the
// swaps free, and waits less than a second): the HPA rule, held at 4 outstanding requests a replica, asks for
// three more replicas, the morph-aware controller for none, and both serve every request within the SLO. A burst
// of 12 a second is beyond the swaps: both ask for the same replicas at the same time. So is a burst of 40 short
// requests a second, which leaves the KV blocks mostly free: the replica is short of compute, which swaps do not
// add.
func TestFleetMorphAwareController(t *testing.T) {
	burstOf := func(rate float64, prompt, output int) *trace.Trace {
		var tr trace.Trace
		at := 0.0
		for at < 400 {
			r := 0.2
			if at > 60 && at < 90 {
				r = rate
			}
			at += 1 / r
			tr.Requests = append(tr.Requests, trace.Request{Arrival: at, PromptTokens: prompt, OutputTokens: output})
		}
		return &tr
	}
	run := func(tr *trace.Trace, controller string) *results.Run {
		t.Helper()
		f := Fleet{Router: "morph-aware", Replicas: []Deployment{sim7b(t, "morph:default", 300)},
			Autoscale: &Autoscale{Template: sim7b(t, "morph:default", 300), Metric: "outstanding", Target: 4, Min: 1, Max: 4,
				Delay: time.Minute, CoolDown: 2 * time.Minute, Controller: controller}}
		r, err := f.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	asked := func(r *results.Run) []float64 {
		var out []float64
		for _, rep := range r.Fleet.Replicas[1:] {
			out = append(out, rep.Asked)
		}
		return out
	}
	absorbed := burstOf(4, 200, 100)
	hpaRun, morphRun := run(absorbed, "hpa"), run(absorbed, "morph-aware")
	if len(hpaRun.Fleet.Replicas) != 4 || len(morphRun.Fleet.Replicas) != 1 || morphRun.Aggregates.SwapActions == 0 ||
		hpaRun.Aggregates.SLOViolationRate != 0 || morphRun.Aggregates.SLOViolationRate != 0 || morphRun.Fleet.Cost >= hpaRun.Fleet.Cost {
		t.Errorf("an absorbed burst: hpa %d replicas ($%.3f, %.3f violations), morph-aware %d ($%.3f, %.3f violations, %d swaps); want 4 and 1, none violated",
			len(hpaRun.Fleet.Replicas), hpaRun.Fleet.Cost, hpaRun.Aggregates.SLOViolationRate, len(morphRun.Fleet.Replicas), morphRun.Fleet.Cost,
			morphRun.Aggregates.SLOViolationRate, morphRun.Aggregates.SwapActions)
	}
	for _, c := range []struct {
		name string
		tr   *trace.Trace
	}{{"a burst beyond the swaps", burstOf(12, 200, 100)}, {"a burst short of compute", burstOf(40, 20, 20)}} {
		hpaRun, morphRun = run(c.tr, "hpa"), run(c.tr, "morph-aware")
		if got, want := asked(morphRun), asked(hpaRun); len(want) != 3 || !slices.Equal(got, want) {
			t.Errorf("%s: morph-aware asked for replicas at %v, hpa at %v; want the same three", c.name, got, want)
		}
	}
}

// TestScalerFlag: --autoscale-controller names a registered controller, which the fleet's autoscaler takes.
func TestScalerFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		want    string
		wantErr string
	}{
		{[]string{"--autoscale", "outstanding=4"}, "hpa", ""},
		{[]string{"--autoscale", "outstanding=4", "--autoscale-controller", "morph-aware"}, "morph-aware", ""},
		{[]string{"--autoscale", "outstanding=4", "--autoscale-controller", "hpx"}, "", `--autoscale-controller: autoscale controller "hpx", want one of hpa, morph-aware`},
	} {
		var ff FleetFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		ff.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		f, _, err := ff.Fleet(sim7b(t, "morph:default", 300))
		switch {
		case c.wantErr != "":
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
			}
		case err != nil || f.Autoscale == nil || f.Autoscale.Controller != c.want || f.Autoscale.MaxWait != DefaultMaxWait:
			t.Errorf("%v: %+v, %v; want controller %s", c.args, f.Autoscale, err, c.want)
		}
	}
}

// TestFleetStopAfterViolations: a replay told to stop after as many violations as the whole run has finishes with
// the same results; told to stop after one fewer, it ends with ErrSLOMissed (so the count is the results' own).
func TestFleetStopAfterViolations(t *testing.T) {
	tr := burst(t, 300, 700, 200)
	f := Fleet{Router: "least-outstanding", Replicas: []Deployment{sim7b(t, "fp16", 120), sim7b(t, "fp16", 120)}, Admission: Admission{MaxQueue: 30}}
	o := ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}}
	whole, err := f.Replay(context.Background(), tr, o)
	if err != nil {
		t.Fatal(err)
	}
	v := whole.Aggregates.SLOViolations
	if v < 2 || len(whole.Fleet.Rejections) == 0 {
		t.Fatalf("%d violations, rejections %v: want an overloaded fleet that turns some away", v, whole.Fleet.Rejections)
	}
	o.StopAfterViolations = v
	if r, err := f.Replay(context.Background(), tr, o); err != nil || !reflect.DeepEqual(r.Aggregates, whole.Aggregates) {
		t.Errorf("stopping after %d: %v, or other aggregates", v, err)
	}
	o.StopAfterViolations = v - 1
	if _, err := f.Replay(context.Background(), tr, o); err != ErrSLOMissed {
		t.Errorf("stopping after %d of %d violations: %v, want ErrSLOMissed", v-1, v, err)
	}
}
