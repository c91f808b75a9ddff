// Package failover accounts for a fleet losing a replica: a steady load through HAProxy, one replica killed
// (kill -9) and started again later, and the same run simulated (deploy.Fleet with a Fault), so that the two can
// be set side by side.
//
// A real run is read from three files: the load tester's record of every request (loadtest.Record, with the
// header HAProxy sets naming the server that answered), HAProxy's log (its server state changes and a line a
// request in LogFormat, both timestamped in ISO 8601 as "log stdout format iso" writes them) and the run's
// events (when the replica was killed, when it was started again and when its /health answered). Measure
// accounts for every request (completed, failed with the error the client read, rejected; hung when it ran into
// its timeout), finds which failures were streams cut on the killed replica, checks the proxy's log against the
// client's record, and times the detection (kill to marked down) and the recovery (restart to marked up, to its
// first token, and its share of the requests sent afterwards). Predict reads the same figures off a simulated
// fleet's results; Write sets both in a Markdown table, and Check lists what a run should have met and did not.
package failover

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
)

// LogFormat is the HAProxy log-format of a request line that ReadLog reads: the path, the server, the status,
// the retries (+N when redispatched) and the termination state.
const LogFormat = "request path=%HP server=%s status=%ST retries=%rc term=%tsc"

// ProxyLog is what HAProxy logged during a run.
type ProxyLog struct {
	States   []StateChange
	Requests []ProxyRequest
}

// StateChange is HAProxy marking a server up or down.
type StateChange struct {
	Time   time.Time
	Server string
	Up     bool
}

// ProxyRequest is one request as HAProxy logged it when it ended.
type ProxyRequest struct {
	Path    string
	Server  string // "<NOSRV>" when none took it
	Status  int
	Retries int    // connection retries, redispatches included
	Term    string // termination state: "----" for a normal end; "SD" when the server aborted during the data
}

var (
	stateLine   = regexp.MustCompile(`^(\S+) Server [^/ ]+/(\S+) is (UP|DOWN)\b`)
	requestLine = regexp.MustCompile(`^\S+ request path=(\S*) server=(\S+) status=(-?\d+) retries=\+?(\d+) term=(\S{4})$`)
)

// ReadLog reads HAProxy's log at path: its "Server B/S is UP|DOWN" lines and its request lines in LogFormat,
// each after the timestamp of "log stdout format iso"; other lines are left out.
func ReadLog(path string) (*ProxyLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var l ProxyLog
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := stateLine.FindStringSubmatch(line); m != nil {
			t, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: timestamp %q, want ISO 8601 (log stdout format iso)", path, n, m[1])
			}
			l.States = append(l.States, StateChange{Time: t, Server: m[2], Up: m[3] == "UP"})
			continue
		}
		if _, rest, ok := strings.Cut(line, " "); !ok || !strings.HasPrefix(rest, "request ") {
			continue
		}
		m := requestLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q, want a request line in the log-format %q", path, n, line, LogFormat)
		}
		status, _ := strconv.Atoi(m[3])
		retries, _ := strconv.Atoi(m[4])
		l.Requests = append(l.Requests, ProxyRequest{Path: m[1], Server: m[2], Status: status, Retries: retries, Term: m[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &l, nil
}

// Events are the moments of a run: the replica killed, started again, and answering /health again.
type Events struct {
	Kill, Restart, Up time.Time
}

// ReadEvents reads a run's events at path: lines "kill T", "restart T" and "up T", T in Unix seconds with up to
// nine decimals (date +%s.%N).
func ReadEvents(path string) (Events, error) {
	var ev Events
	b, err := os.ReadFile(path)
	if err != nil {
		return ev, err
	}
	seen := map[string]*time.Time{"kill": &ev.Kill, "restart": &ev.Restart, "up": &ev.Up}
	for n, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		at, ok := seen[name]
		t, err := unixTime(value)
		if !ok || err != nil {
			return ev, fmt.Errorf("%s:%d: %q, want kill, restart or up and a Unix time such as 1700000000.123456789", path, n+1, line)
		}
		*at = t
	}
	for name, t := range seen {
		if t.IsZero() {
			return ev, fmt.Errorf("%s: no %s time", path, name)
		}
	}
	if !ev.Kill.Before(ev.Restart) || ev.Up.Before(ev.Restart) {
		return ev, fmt.Errorf("%s: kill %v, restart %v, up %v: want them in that order", path, ev.Kill, ev.Restart, ev.Up)
	}
	return ev, nil
}

// unixTime reads seconds since the Unix epoch with up to nine decimals, exactly.
func unixTime(s string) (time.Time, error) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 9 || sec <= 0 {
		return time.Time{}, fmt.Errorf("unix time %q", s)
	}
	ns := int64(0)
	if frac != "" {
		if ns, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("unix time %q", s)
		}
	}
	return time.Unix(sec, ns), nil
}

// Figures are what a replica-failure run did, measured or simulated.
type Figures struct {
	Sent      int // requests of the run
	Completed int
	Failed    int // with an error the client could read
	Rejected  int // 429
	// Hung are the failed requests that ran into their timeout (or the run's end) instead of ending.
	Hung int
	// MidStream are the failed requests whose stream the killed replica had begun and cut (not hung); Other the
	// rest.
	MidStream, Other int
	// Retried are the requests the proxy sent on to another replica after a refused connection or an empty
	// response.
	Retried int
	// Detection is from the kill to the proxy marking the replica down; Up from the restart to its marking it
	// up again; FirstToken from the restart to the first token the replica streamed after it.
	Detection, Up, FirstToken time.Duration
	// Share is the share of the requests sent after the replica was marked up again that it served.
	Share float64
}

// Measure accounts for a real run: rec, the load tester's record of it (with Outcome.Server naming HAProxy's
// server), log, HAProxy's, and ev, when the server killed was killed and started again.
func Measure(rec loadtest.Record, log *ProxyLog, ev Events, killed string) (Figures, error) {
	f := Figures{Sent: len(rec.Requests), Detection: -1, Up: -1, FirstToken: -1}
	at := func(d time.Duration) time.Time { return rec.Start.Add(d) }
	deadline := rec.Requests[len(rec.Requests)-1].Arrival + rec.Timeout // the run's end (loadtest.Run)
	for _, r := range rec.Requests {
		switch r.Status {
		case loadtest.Completed:
			f.Completed++
			continue
		case loadtest.Rejected:
			f.Rejected++
			continue
		}
		f.Failed++
		hung := r.Sent < 0 || r.Ended-r.Sent >= rec.Timeout || r.Ended >= deadline
		if hung {
			f.Hung++
		}
		if !hung && r.Server == killed && r.HTTPStatus == 200 && at(r.Sent).Before(ev.Kill) && !at(r.Ended).Before(ev.Kill) {
			f.MidStream++
		} else {
			f.Other++
		}
	}
	for _, p := range log.Generations() {
		if p.Retries > 0 {
			f.Retried++
		}
	}
	down, ok := firstState(log, killed, false, ev.Kill)
	if !ok {
		return f, fmt.Errorf("HAProxy's log has no %s marked down after the kill at %v", killed, ev.Kill)
	}
	up, ok := firstState(log, killed, true, ev.Restart)
	if !ok {
		return f, fmt.Errorf("HAProxy's log has no %s marked up after the restart at %v", killed, ev.Restart)
	}
	f.Detection, f.Up = down.Sub(ev.Kill), up.Sub(ev.Restart)
	after, served := 0, 0
	for _, r := range rec.Requests {
		if r.Server == killed && r.Status == loadtest.Completed {
			if first := at(r.Sent + r.TTFT); first.After(ev.Restart) && (f.FirstToken < 0 || first.Sub(ev.Restart) < f.FirstToken) {
				f.FirstToken = first.Sub(ev.Restart)
			}
		}
		if r.Server != "" && at(r.Sent).After(up) {
			after++
			if r.Server == killed {
				served++
			}
		}
	}
	if after > 0 {
		f.Share = float64(served) / float64(after)
	}
	return f, nil
}

// Generations are the requests HAProxy logged to the OpenAI API (/v1/...): the load, without the health checks
// of whoever waited for the proxy to come up.
func (l *ProxyLog) Generations() []ProxyRequest {
	var g []ProxyRequest
	for _, p := range l.Requests {
		if strings.HasPrefix(p.Path, "/v1/") {
			g = append(g, p)
		}
	}
	return g
}

// firstState is when the proxy first marked server up (or down) after t.
func firstState(log *ProxyLog, server string, up bool, t time.Time) (time.Time, bool) {
	for _, s := range log.States {
		if s.Server == server && s.Up == up && s.Time.After(t) {
			return s.Time, true
		}
	}
	return time.Time{}, false
}

// Check lists what the real run should have met and did not: every request in HAProxy's log once, none hung,
// no failure but the streams the killed replica cut, and HAProxy counting as many requests cut on it.
func Check(rec loadtest.Record, log *ProxyLog, f Figures, killed string) []string {
	var bad []string
	if n := len(log.Generations()); n != f.Sent {
		bad = append(bad, fmt.Sprintf("HAProxy logged %d requests, the load tester sent %d", n, f.Sent))
	}
	if f.Completed+f.Failed+f.Rejected != f.Sent {
		bad = append(bad, fmt.Sprintf("%d completed, %d failed and %d rejected of %d sent", f.Completed, f.Failed, f.Rejected, f.Sent))
	}
	if f.Hung > 0 {
		bad = append(bad, fmt.Sprintf("%d requests hung until their timeout", f.Hung))
	}
	for i, r := range rec.Requests {
		if r.Status == loadtest.Failed && r.Error == "" {
			bad = append(bad, fmt.Sprintf("request %d failed without an error", i))
		}
	}
	if f.Other > 0 {
		bad = append(bad, fmt.Sprintf("%d failures other than streams cut on %s", f.Other, killed))
	}
	cut := 0
	for _, p := range log.Generations() {
		if p.Server == killed && p.Term[0] == 'S' {
			cut++
		}
	}
	if cut != f.MidStream {
		bad = append(bad, fmt.Sprintf("HAProxy logged %d requests aborted by %s, the load tester %d cut mid-stream", cut, killed, f.MidStream))
	}
	return bad
}

// Predict reads the figures of a simulated replica failure off a fleet's results (deploy.Fleet with one Fault),
// with timeout, the load tester's, for the requests that would have hung.
func Predict(run *results.Run, timeout time.Duration) (Figures, error) {
	if run.Fleet == nil || len(run.Fleet.Faults) != 1 {
		return Figures{}, fmt.Errorf("a fleet's results with one fault, want them")
	}
	ft := run.Fleet.Faults[0]
	a := run.Aggregates
	f := Figures{Sent: len(run.Requests), Completed: a.Completed, Failed: a.Failed, Rejected: a.Rejected, MidStream: ft.Lost,
		Other: a.Failed - ft.Lost, Retried: ft.Resent, FirstToken: -1,
		Detection: seconds(ft.Detected - ft.At), Up: seconds(ft.Serving - ft.Restarted)}
	after, served := 0, 0
	for i, r := range run.Requests {
		on := run.Fleet.Assigned[i]
		if r.E2EL >= float64(timeout.Milliseconds()) { // a client would have given up on it
			f.Hung++
		}
		if first := r.Arrival + r.TTFT/1000; on == ft.Replica && r.Output > 0 && first > ft.Restarted &&
			(f.FirstToken < 0 || seconds(first-ft.Restarted) < f.FirstToken) {
			f.FirstToken = seconds(first - ft.Restarted)
		}
		if r.Arrival >= ft.Serving && on >= 0 {
			after++
			if on == ft.Replica {
				served++
			}
		}
	}
	if after > 0 {
		f.Share = float64(served) / float64(after)
	}
	return f, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Trace is the requests of rec as a trace: each one's arrival, prompt tokens and max tokens, for the simulator to
// serve the same requests.
func Trace(rec loadtest.Record) *trace.Trace {
	t := &trace.Trace{Source: "loadtest record", Format: "loadtest"}
	for _, r := range rec.Requests {
		t.Requests = append(t.Requests, trace.Request{Arrival: r.Arrival.Seconds(), PromptTokens: r.PromptTokens, OutputTokens: r.MaxTokens})
	}
	return t
}

// Write sets the measured and the simulated figures side by side as a Markdown table.
func Write(w io.Writer, measured, simulated Figures) error {
	dur := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return numfmt.Figure(d.Seconds())
	}
	rows := [][]string{}
	add := func(name string, value func(Figures) string) {
		rows = append(rows, []string{name, value(measured), value(simulated)})
	}
	count := func(n func(Figures) int) func(Figures) string {
		return func(f Figures) string { return strconv.Itoa(n(f)) }
	}
	add("sent", count(func(f Figures) int { return f.Sent }))
	add("completed", count(func(f Figures) int { return f.Completed }))
	add("failed", count(func(f Figures) int { return f.Failed }))
	add("  cut mid-stream on the killed replica", count(func(f Figures) int { return f.MidStream }))
	add("  other", count(func(f Figures) int { return f.Other }))
	add("rejected", count(func(f Figures) int { return f.Rejected }))
	add("hung (ran into the timeout)", count(func(f Figures) int { return f.Hung }))
	add("retried on another replica", count(func(f Figures) int { return f.Retried }))
	add("detection: kill to marked down (s)", func(f Figures) string { return dur(f.Detection) })
	add("recovery: restart to marked up (s)", func(f Figures) string { return dur(f.Up) })
	add("recovery: restart to its first token (s)", func(f Figures) string { return dur(f.FirstToken) })
	add("its share of the requests after (%)", func(f Figures) string { return numfmt.Figure(100 * f.Share) })
	return mdtable.Write(w, []string{"", "measured", "simulated"}, rows)
}
