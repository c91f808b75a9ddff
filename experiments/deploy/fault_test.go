package deploy

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// faultTrace is 23 requests over three replicas behind round-robin (request i goes to replica i mod 3 while all
// three serve), each replica running two sequences at most (faultReplica). Replica 1 holds, at 10 s: requests 1
// and 7, decoding since 0 s and 2 s (1,000 tokens each); request 10, taken in at 5 s and waiting for a sequence
// slot (no token); request 13, arrived 0.1 ms before, in the middle of an iteration (not taken in). Request 4
// ended long before. Requests 15-17 arrive while the replica is dead but not yet marked down, 18-19 after, and
// 20-22 once it serves again.
func faultTrace() *trace.Trace {
	var tr trace.Trace
	add := func(at float64, output int) {
		tr.Requests = append(tr.Requests, trace.Request{Arrival: at, PromptTokens: 200, OutputTokens: output})
	}
	for _, at := range []float64{0, 1, 2, 5, 9.9999, 10.5} { // 0-17; replica 1's at 0 s and 2 s are long
		for k := range 3 {
			out := 50
			if k == 1 && (at == 0 || at == 2) {
				out = 1000
			}
			add(at, out)
		}
	}
	add(13, 50)   // 18
	add(13, 50)   // 19
	for range 3 { // 20-22
		add(20, 50)
	}
	return &tr
}

// faultReplica is Llama-2-7B on an L4 in the sim, running two sequences at most.
func faultReplica(t *testing.T) Deployment {
	d := sim7b(t, "fp16", 958)
	d.Scheduler.MaxNumSeqs = 2
	return d
}

// TestFleetFault: replica 1 of three dies at 10 s (marked down 2 s later, restarted 5 s after its death, serving
// 1 s after that). Every request of the trace has exactly one outcome. Under ResponseAtFirstToken the requests
// lost are exactly those with output on the dying replica (1 and 7), and 10 and 13, in it without a token, are
// sent on to other replicas keeping their arrival; under ResponseAtAdmission 10, taken in, is lost as well and
// only 13 is sent on. Those the router sends to the dead replica before it is marked down are sent on too: the
// round-robin's turn moves on with each retry, so after one retry at the death (ResponseAtAdmission) they are 15
// and 17, after two 17. The replica serves again from 16 s (one of 20-22), the record holds the fault's times
// and counts, and the size over time shows it failed from 12 to 15 s and provisioning until 16 s.
func TestFleetFault(t *testing.T) {
	tr := faultTrace()
	d := faultReplica(t)
	base := Fleet{Router: "round-robin", Replicas: []Deployment{d, d, d}}
	healthy, err := base.Replay(context.Background(), tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range healthy.Requests {
		if r.Finish != "length" || healthy.Fleet.Assigned[i] != i%3 {
			t.Fatalf("without the fault request %d ended %q on replica %d, want length on %d", i, r.Finish, healthy.Fleet.Assigned[i], i%3)
		}
	}
	// What the test relies on: 1 and 7 decode at 10 s, 4 has ended, 10 and 13 have no token by 10 s.
	end := func(i int) float64 { return healthy.Requests[i].Arrival + healthy.Requests[i].E2EL/1000 }
	first := func(i int) float64 { return healthy.Requests[i].Arrival + healthy.Requests[i].TTFT/1000 }
	if !(first(1) < 10 && end(1) > 11 && first(7) < 10 && end(7) > 11 && end(4) < 5 && first(10) > 11 && first(13) > 10) {
		t.Fatalf("healthy run: 1 from %v to %v, 7 from %v to %v, 4 ends %v, 10 starts %v, 13 starts %v",
			first(1), end(1), first(7), end(7), end(4), first(10), first(13))
	}

	for _, c := range []struct {
		response      ResponseStart
		lost, retried []int
	}{
		{ResponseAtFirstToken, []int{1, 7}, []int{10, 13, 17}},
		{ResponseAtAdmission, []int{1, 7, 10}, []int{13, 15, 17}},
	} {
		f := base
		f.Faults = []Fault{{Replica: 1, At: 10 * time.Second, Down: 5 * time.Second}}
		f.Failover = Failover{Detect: 2 * time.Second, Restart: time.Second, Response: c.response}
		r, err := f.Replay(context.Background(), tr, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Requests) != len(tr.Requests) {
			t.Fatalf("%v: %d requests in the results, want %d", c.response, len(r.Requests), len(tr.Requests))
		}
		var lost, retried []int
		for i, q := range r.Requests {
			switch {
			case q.ID != i:
				t.Errorf("%v: row %d is request %d", c.response, i, q.ID)
			case q.Finish == "error":
				lost = append(lost, i)
				if r.Fleet.Assigned[i] != 1 {
					t.Errorf("%v: request %d lost on replica %d", c.response, i, r.Fleet.Assigned[i])
				}
			case q.Finish != "length":
				t.Errorf("%v: request %d ended %q", c.response, i, q.Finish)
			}
			if q.Retries > 0 {
				retried = append(retried, i)
				if q.Retries != 1 || r.Fleet.Assigned[i] == 1 || q.Finish != "length" {
					t.Errorf("%v: request %d retried %d times, served by %d, ended %q", c.response, i, q.Retries, r.Fleet.Assigned[i], q.Finish)
				}
			}
		}
		a := r.Aggregates
		if !slices.Equal(lost, c.lost) || !slices.Equal(retried, c.retried) || a.Completed+a.Failed+a.Rejected != len(tr.Requests) || a.Failed != len(c.lost) {
			t.Errorf("%v: lost %v, retried %v (want %v, %v); %d completed, %d failed, %d rejected", c.response, lost, retried, c.lost, c.retried,
				a.Completed, a.Failed, a.Rejected)
		}
		// The lost end with the replica's last iteration, after 10 s; 10 lost has no token.
		for _, i := range lost {
			if q := r.Requests[i]; (q.Output > 0) != (i != 10) || q.Arrival+q.E2EL/1000 < 10 || q.Arrival+q.E2EL/1000 > 10.5 {
				t.Errorf("%v: request %d lost with %d tokens after %v ms", c.response, i, q.Output, q.E2EL)
			}
		}
		// A request sent on keeps its arrival: 10's TTFT counts the 5 s it waited in the dead replica.
		if q := r.Requests[10]; c.response == ResponseAtFirstToken && !(q.TTFT > 5000 && q.TTFT < 6000) {
			t.Errorf("%v: request 10 sent on at 10 s: TTFT %v ms, want from its arrival at 5 s", c.response, q.TTFT)
		}
		want := []results.Fault{{Replica: 1, At: 10, Detected: 12, Restarted: 15, Serving: 16, Lost: len(c.lost), Resent: len(c.retried)}}
		if !reflect.DeepEqual(r.Fleet.Faults, want) {
			t.Errorf("%v: faults %+v, want %+v", c.response, r.Fleet.Faults, want)
		}
		if back := r.Fleet.Assigned[20:]; !slices.Contains(back, 1) {
			t.Errorf("%v: requests 20-22 (at 20 s) served by replicas %v, want the restarted replica 1 among them", c.response, back)
		}
		for _, p := range r.Fleet.Size {
			failed := p.T >= 12 && p.T < 15
			if (p.Failed == 1) != failed || p.Failed > 1 || p.T >= 15 && p.T < 16 && p.Provisioning != 1 {
				t.Errorf("%v: size at %v s: %+v", c.response, p.T, p)
			}
		}
		// Replica 1 ended 1, 4 and 7, the lost ones among 10-19, and one of 20-22.
		if rep := r.Fleet.Replicas[1]; rep.Requests != len(c.lost)+2 || rep.Aggregates.Failed != len(c.lost) {
			t.Errorf("%v: replica 1 ended %d requests, %d failed", c.response, rep.Requests, rep.Aggregates.Failed)
		}
	}
}

// TestFleetFaultNoneLeft: a replica that dies alone leaves its requests and those that arrive before it serves
// again nowhere to go: each fails (the proxy's 503) and none is lost from the results.
func TestFleetFaultNoneLeft(t *testing.T) {
	tr := faultTrace()
	tr.Requests = slices.Insert(tr.Requests, 20, trace.Request{Arrival: 15.5, PromptTokens: 200, OutputTokens: 50}) // restarted, not serving yet
	f := Fleet{Replicas: []Deployment{sim7b(t, "fp16", 958)}, Faults: []Fault{{Replica: 0, At: 10 * time.Second, Down: 5 * time.Second}},
		Failover: Failover{Detect: 2 * time.Second, Restart: time.Second, Response: ResponseAtFirstToken}}
	r, err := f.Replay(context.Background(), tr, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var failed []int
	for i, q := range r.Requests {
		if q.Finish == "error" {
			failed = append(failed, i)
		}
	}
	// Lost: 1 and 7 (decoding at 10 s). Unserved: 12-14 (in it without a token), 15-17 (routed to it dead),
	// 18-19 (marked down, none left), 20 (restarted, not serving yet). 21-23 arrive after it serves again.
	if want := []int{1, 7, 12, 13, 14, 15, 16, 17, 18, 19, 20}; !slices.Equal(failed, want) || r.Aggregates.Completed != 13 || r.Fleet.Faults[0].Lost != len(want) {
		t.Errorf("failed %v, want %v; %d completed; fault %+v", failed, want, r.Aggregates.Completed, r.Fleet.Faults)
	}
	for _, i := range []int{12, 15, 18, 20} {
		if q := r.Requests[i]; q.Output != 0 || r.Fleet.Assigned[i] != -1 {
			t.Errorf("request %d: %d tokens on replica %d, want none, unassigned", i, q.Output, r.Fleet.Assigned[i])
		}
	}
}

// TestFaultsChecked: faults are read from REPLICA@AT+DOWN and checked, each error naming what is wrong.
func TestFaultsChecked(t *testing.T) {
	got, err := ParseFaults("1@60s+30s,0@2m+1m30s")
	want := []Fault{{1, 60 * time.Second, 30 * time.Second}, {0, 2 * time.Minute, 90 * time.Second}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseFaults: %v, %v", got, err)
	}
	for _, bad := range []string{"1@60s", "x@60s+30s", "1@60+30s", "1"} {
		if _, err := ParseFaults(bad); err == nil || !strings.Contains(err.Error(), "REPLICA@AT+DOWN") {
			t.Errorf("ParseFaults(%q): %v", bad, err)
		}
	}
	d := sim7b(t, "fp16", 300)
	for _, c := range []struct {
		faults   []Fault
		failover Failover
		want     string
	}{
		{[]Fault{{2, time.Second, time.Second}}, Failover{}, "fault of replica 2, want one of the 2"},
		{[]Fault{{0, time.Second, time.Second}}, Failover{Detect: 2 * time.Second}, "down at least the 2s"},
		{[]Fault{{0, 10 * time.Second, 5 * time.Second}, {0, 14 * time.Second, 5 * time.Second}}, Failover{Restart: time.Second}, "before it serves again (16s)"},
		{nil, Failover{Response: 2}, "a known response start"},
	} {
		_, err := (Fleet{Replicas: []Deployment{d, d}, Faults: c.faults, Failover: c.failover}).Replay(context.Background(), faultTrace(), ReplayOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %+v: %v, want %q", c.faults, c.failover, err, c.want)
		}
	}
	if _, err := ParseResponseStart("first-byte"); err == nil || !strings.Contains(err.Error(), "admission or first-token") {
		t.Errorf("ParseResponseStart: %v", err)
	}
}
