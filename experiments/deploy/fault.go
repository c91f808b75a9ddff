package deploy

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/kv"
	"github.com/morphlab/morphlab/experiments/results"
)

// Fault kills one of a fleet's replicas and starts it again: at At its process dies (an iteration it began before
// At completes first), the requests in it lost or sent on as the fleet's Failover says, and Down later it is
// started again (a fresh instance: empty KV, every layer at its policy's start), serving once it has come up.
type Fault struct {
	Replica int           // its index in Fleet.Replicas
	At      time.Duration // when it dies
	Down    time.Duration // from its death to its restart, at least Failover.Detect
}

// Failover is what the proxy in front of a fleet does about a replica that dies, modelled on HAProxy with health
// checks (option httpchk), retry-on conn-failure empty-response and option redispatch:
//   - the proxy marks the dead replica down Detect after its death (the checks' interval times their fall
//     count); until then the router may still pick it (it shows no requests, their connections closed, which
//     draws least-outstanding as it draws HAProxy's leastconn), and a request sent there finds the connection
//     refused and goes to the router again at once without that replica (a retry with redispatch);
//   - a request in the replica when it dies is lost, its client reading an error, when its response had begun
//     (Response says when that is); one whose response had not begun is sent on the same way, keeping its
//     arrival, so that its latencies count the time lost;
//   - a restarted replica serves again Restart after its restart (its model's load, then the checks' interval
//     times their rise count).
//
// A request that finds no other replica serving fails, as HAProxy answers 503. Zero durations are instants.
type Failover struct {
	Detect   time.Duration
	Restart  time.Duration
	Response ResponseStart
}

// ResponseStart is when a replica's response to a request begins: a proxy can send a request on to another
// replica only while no byte of its response has come back.
type ResponseStart int

const (
	// ResponseAtAdmission: the response's headers go out as the replica's engine takes the request in, at its
	// first iteration boundary after the request reached it, as morphlab serve sends them: of a dead replica's
	// requests, those that reached it during its last iteration are sent on.
	ResponseAtAdmission ResponseStart = iota
	// ResponseAtFirstToken: the headers go out with the first token: the requests of a dead replica that have
	// none are sent on.
	ResponseAtFirstToken
)

var responseNames = [...]string{"admission", "first-token"}

func (s ResponseStart) String() string {
	if s >= 0 && int(s) < len(responseNames) {
		return responseNames[s]
	}
	return fmt.Sprintf("ResponseStart(%d)", int(s))
}

// ParseResponseStart reads "admission" or "first-token".
func ParseResponseStart(s string) (ResponseStart, error) {
	if i := slices.Index(responseNames[:], s); i >= 0 {
		return ResponseStart(i), nil
	}
	return 0, fmt.Errorf("response start %q, want admission or first-token", s)
}

// ParseFaults reads faults written REPLICA@AT+DOWN, comma-separated, such as "1@60s+30s" (replica 1 dies 60 s
// into the run and is started again 30 s later).
func ParseFaults(s string) ([]Fault, error) {
	var faults []Fault
	for part := range strings.SplitSeq(s, ",") {
		replica, times, ok1 := strings.Cut(part, "@")
		at, down, ok2 := strings.Cut(times, "+")
		i, err1 := strconv.Atoi(replica)
		a, err2 := time.ParseDuration(at)
		d, err3 := time.ParseDuration(down)
		if !ok1 || !ok2 || errors.Join(err1, err2, err3) != nil {
			return nil, fmt.Errorf("fault %q, want REPLICA@AT+DOWN such as 1@60s+30s", part)
		}
		faults = append(faults, Fault{Replica: i, At: a, Down: d})
	}
	return faults, nil
}

// checkFaults says what is wrong with the fleet's faults, naming the fault, or returns nil.
func (f Fleet) checkFaults() error {
	o := f.Failover
	if o.Detect < 0 || o.Restart < 0 || o.Response < ResponseAtAdmission || o.Response > ResponseAtFirstToken {
		return fmt.Errorf("deploy: failover detect %v, restart %v, response %v: want durations of 0 or more and a known response start", o.Detect, o.Restart, o.Response)
	}
	back := map[int]time.Duration{} // when each replica serves again after its last fault so far
	for _, ft := range slices.SortedStableFunc(slices.Values(f.Faults), func(a, b Fault) int { return cmp.Compare(a.At, b.At) }) {
		switch {
		case ft.Replica < 0 || ft.Replica >= len(f.Replicas):
			return fmt.Errorf("deploy: fault of replica %d, want one of the %d the fleet starts with", ft.Replica, len(f.Replicas))
		case ft.At < 0 || ft.Down < o.Detect:
			return fmt.Errorf("deploy: fault of replica %d at %v, down %v: want a time of 0 or more, down at least the %v the proxy takes to mark it down",
				ft.Replica, ft.At, ft.Down, o.Detect)
		case ft.At < back[ft.Replica]:
			return fmt.Errorf("deploy: fault of replica %d at %v, before it serves again (%v) after its previous one", ft.Replica, ft.At, back[ft.Replica])
		}
		back[ft.Replica] = ft.At + ft.Down + o.Restart
	}
	return nil
}

// faultStep is one step of a fault: the death, the proxy marking the replica down, or the restart.
type faultStep struct {
	at    time.Duration
	kind  int // faultDie, faultDetect, faultRestart: the order of steps at one time
	fault int // index in the run's record
}

const (
	faultDie = iota
	faultDetect
	faultRestart
)

// planFaults records the fleet's faults and queues their steps in time order.
func (r *fleetRun) planFaults() {
	o := r.f.Failover
	for i, ft := range r.f.Faults {
		r.faults = append(r.faults, results.Fault{Replica: ft.Replica, At: ft.At.Seconds(), Detected: (ft.At + o.Detect).Seconds(),
			Restarted: (ft.At + ft.Down).Seconds(), Serving: (ft.At + ft.Down + o.Restart).Seconds()})
		r.faultSteps = append(r.faultSteps, faultStep{ft.At, faultDie, i}, faultStep{ft.At + o.Detect, faultDetect, i},
			faultStep{ft.At + ft.Down, faultRestart, i})
	}
	slices.SortFunc(r.faultSteps, func(a, b faultStep) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.kind, b.kind), cmp.Compare(a.fault, b.fault))
	})
}

// faultStepDue runs the next step of a fault.
func (r *fleetRun) faultStepDue() error {
	s := r.faultSteps[0]
	r.faultSteps = r.faultSteps[1:]
	ft := r.f.Faults[s.fault]
	rep := r.replicas[ft.Replica]
	switch s.kind {
	case faultDie:
		if rep.state != ReplicaServing || rep.dead {
			return fmt.Errorf("deploy: fault of replica %d at %v: it is %v, want it serving", ft.Replica, ft.At, rep.state)
		}
		return r.die(rep, s.fault, s.at)
	case faultDetect:
		if rep.dead && rep.state == ReplicaServing {
			rep.state = ReplicaFailed
			r.record(s.at)
		}
	case faultRestart:
		if rep.dead && rep.state == ReplicaFailed { // not removed by the autoscaler meanwhile
			rep.past = append(rep.past, rep.in.Controller)
			if err := r.boot(rep, r.f.Replicas[ft.Replica], s.at+r.f.Failover.Restart); err != nil {
				return err
			}
			rep.dead, rep.state = false, ReplicaProvisioning
			r.record(s.at)
		}
	}
	return nil
}

// die kills rep at at: it steps no more (a step it began before at ends first), and each request in it is lost
// or sent on, in the order they arrived.
func (r *fleetRun) die(rep *replica, fault int, at time.Duration) error {
	rep.dead, rep.fault, r.lastDeath = true, fault, fault
	if rep.heapAt >= 0 {
		heap.Remove(&r.steps, rep.heapAt)
	}
	if now := rep.clock.Now(); now < at {
		rep.clock.Advance(at - now)
	}
	iterations := rep.steps
	ids := make([]kv.SeqID, 0, len(rep.live))
	for id := range rep.live {
		ids = append(ids, id)
		rep.in.Engine.Cancel(id)
	}
	slices.SortFunc(ids, func(a, b kv.SeqID) int { return rep.live[a].index - rep.live[b].index })
	if len(ids) > 0 {
		if _, err := rep.in.Engine.Step(); err != nil { // runs the cancellations; nothing is left to compute
			return fmt.Errorf("replica %d: %w", rep.index, err)
		}
	}
	rep.ended = rep.ended[:0]
	now := rep.clock.Now()
	var resend []liveRequest
	for _, id := range ids {
		lr := rep.live[id]
		delete(rep.live, id)
		res := lr.st.Wait()
		begun := iterations > lr.step // taken in by an iteration
		if r.f.Failover.Response == ResponseAtFirstToken {
			begun = len(res.Output) > 0
		}
		if !begun {
			resend = append(resend, lr)
			continue
		}
		res.ID, res.Finish = kv.SeqID(lr.index), engine.FinishError
		res.Err = fmt.Errorf("replica %d died at %v with the response begun", rep.index, now)
		rep.rows = append(rep.rows, r.acc.Requests())
		r.acc.Add(lr.req, res, rep.in.Controller.Recorder.Take(id), false, false)
		rep.info.Requests++
		r.assigned[lr.index] = rep.index
		r.faults[fault].Lost++
	}
	r.record(now)
	for _, lr := range resend {
		r.retries[lr.index]++
		if err := r.dispatch(lr.index, lr.req, now, []*replica{rep}); err != nil {
			return err
		}
	}
	return nil
}

// unserved fails a request that found no replica serving because of a fault (an index in the run's record), as
// HAProxy answers 503.
func (r *fleetRun) unserved(index int, req engine.TimedRequest, at time.Duration, fault int) {
	r.faults[fault].Lost++
	r.acc.Add(req, engine.Result{ID: kv.SeqID(index), Finish: engine.FinishError,
		Err:      fmt.Errorf("no replica serving after replica %d died (the proxy's 503)", r.faults[fault].Replica),
		Timeline: engine.Timeline{Arrival: req.Arrival, Finish: at}}, make([]int32, r.layers+1), false, false)
}
