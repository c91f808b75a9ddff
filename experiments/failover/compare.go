package failover

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/deploy"
	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/internal/numfmt"
)

// Run is a replica-failure run of a fleet behind HAProxy, as its files record it, and the fleet that simulates
// it.
type Run struct {
	Outcomes   string   // the load tester's record (loadtest --outcomes), of one rate
	ProxyLog   string   // HAProxy's log
	Events     string   // the kill, restart and up times (ReadEvents)
	Servers    []string // HAProxy's servers, in the order the simulation numbers its replicas
	Killed     string   // the server killed
	Replica    deploy.Deployment
	Router     string        // the simulated fleet's router (least-outstanding is HAProxy's leastconn)
	CheckInter time.Duration // HAProxy's health-check interval (inter)
	CheckFall  int           // failed checks that mark a server down
	CheckRise  int           // passed checks that mark a server up
}

// Comparison is a run accounted for beside its simulation: failover.md's text, the simulated fleet's results, and
// what the run missed (none: every request accounted for, the only failures the streams cut on the killed
// server).
type Comparison struct {
	Markdown  []byte
	Simulated *results.Run
	Missed    []string
}

// Compare accounts for the run (Measure, Check) and simulates the same fleet serving the same requests with one
// Fault at the kill's time and for as long as the server was down, behind a proxy that marks it down after
// CheckInter x CheckFall and has it serve again the measured start-up plus CheckInter x CheckRise after its
// restart.
func Compare(ctx context.Context, r Run) (*Comparison, error) {
	index := slices.Index(r.Servers, r.Killed)
	switch {
	case index < 0:
		return nil, fmt.Errorf("failover: killed server %q is not one of the servers %s", r.Killed, strings.Join(r.Servers, ","))
	case r.CheckInter <= 0 || r.CheckFall < 1 || r.CheckRise < 1:
		return nil, fmt.Errorf("failover: check interval %v, fall %d, rise %d: want an interval above 0 and counts of 1 or more",
			r.CheckInter, r.CheckFall, r.CheckRise)
	}
	recs, err := loadtest.ReadRecords(r.Outcomes)
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 {
		return nil, fmt.Errorf("%s: %d records, want the one of a run at one rate", r.Outcomes, len(recs))
	}
	rec := recs[0]
	log, err := ReadLog(r.ProxyLog)
	if err != nil {
		return nil, err
	}
	ev, err := ReadEvents(r.Events)
	if err != nil {
		return nil, err
	}
	measured, err := Measure(rec, log, ev, r.Killed)
	if err != nil {
		return nil, err
	}

	fault := deploy.Fault{Replica: index, At: ev.Kill.Sub(rec.Start), Down: ev.Restart.Sub(ev.Kill)}
	proxy := deploy.Failover{Detect: time.Duration(r.CheckFall) * r.CheckInter,
		Restart: ev.Up.Sub(ev.Restart) + time.Duration(r.CheckRise)*r.CheckInter}
	fleet := deploy.Fleet{Router: r.Router, Faults: []deploy.Fault{fault}, Failover: proxy}
	for range r.Servers {
		fleet.Replicas = append(fleet.Replicas, r.Replica)
	}
	sim, err := fleet.Replay(ctx, Trace(rec), deploy.ReplayOptions{})
	if err != nil {
		return nil, err
	}
	simulated, err := Predict(sim, rec.Timeout)
	if err != nil {
		return nil, err
	}

	var md bytes.Buffer
	s := func(t time.Duration) string { return numfmt.Figure(t.Seconds()) }
	fmt.Fprintf(&md, "# A fleet of %d replicas behind HAProxy losing %s\n\n", len(r.Servers), r.Killed)
	fmt.Fprintf(&md, "%d requests at %s req/s (timeout %v); %s killed %s s into the load and started again %s s later (up %s s after its\n",
		len(rec.Requests), numfmt.Figure(rec.Rate), rec.Timeout, r.Killed, s(fault.At), s(fault.Down), s(ev.Up.Sub(ev.Restart)))
	fmt.Fprintf(&md, "start); health checks every %v, down after %d failures, up after %d passes. Simulated: %s on %s, %s router,\n",
		r.CheckInter, r.CheckFall, r.CheckRise, filepath.Base(r.Replica.Model), r.Replica.Device, r.Router)
	fmt.Fprintf(&md, "marked down %s s after the kill, serving %s s after the restart.\n\n", s(proxy.Detect), s(proxy.Restart))
	if err := Write(&md, measured, simulated); err != nil {
		return nil, err
	}
	missed := Check(rec, log, measured, r.Killed)
	if len(missed) == 0 {
		fmt.Fprintf(&md, "\nEvery request accounted for; the only failures are the streams cut on %s.\n", r.Killed)
	} else {
		fmt.Fprintf(&md, "\nMissed: %s.\n", strings.Join(missed, "; "))
	}
	return &Comparison{Markdown: md.Bytes(), Simulated: sim, Missed: missed}, nil
}
