package failover

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/experiments/results"
)

// sample reads the recorded run in testdata: tools/loadbench/failover.sh at 6 req/s, r2 of three killed 12 s in
// and started again 10 s later (its requests' inter-token gaps left out, which the accounting does not read).
func sample(t *testing.T) (loadtest.Record, *ProxyLog, Events) {
	t.Helper()
	recs, err := loadtest.ReadRecords("testdata/outcomes.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	log, err := ReadLog("testdata/haproxy.log")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := ReadEvents("testdata/events.txt")
	if err != nil {
		t.Fatal(err)
	}
	return recs[0], log, ev
}

// TestMeasureSample: the recorded run's 240 requests are 224 completed and 16 failed, each of those a stream r2
// cut (sent before the kill, answered 200 by r2, ended after it), as many as HAProxy logged aborted by r2; HAProxy
// sent 12 on to another server; it marked r2 down 2.454978201 s after the kill (18:52:46.558463 in its log) and
// up 1.781952329 s after the restart; r2's first token after the restart came 2.214822494 s after it, and it
// served 40 of the 108 requests sent after it was up. Nothing is missed.
func TestMeasureSample(t *testing.T) {
	rec, log, ev := sample(t)
	if len(log.Requests) != 241 || len(log.Generations()) != 240 || len(log.States) != 2 {
		t.Fatalf("log: %d requests (%d to the API), %d state changes", len(log.Requests), len(log.Generations()), len(log.States))
	}
	got, err := Measure(rec, log, ev, "r2")
	if err != nil {
		t.Fatal(err)
	}
	want := Figures{Sent: 240, Completed: 224, Failed: 16, MidStream: 16, Retried: 12, Detection: 2454978201, Up: 1781952329,
		FirstToken: 2214822494, Share: 40.0 / 108}
	if got != want {
		t.Errorf("measured\n%+v, want\n%+v", got, want)
	}
	if bad := Check(rec, log, got, "r2"); bad != nil {
		t.Errorf("the sample missed %q", bad)
	}
}

// TestCheckMisses: a failure elsewhere than on the killed server, a request that ran into its timeout, and a
// request HAProxy did not log are each named.
func TestCheckMisses(t *testing.T) {
	rec, log, ev := sample(t)
	rec.Requests = slices.Clone(rec.Requests)
	// Request 0 completed on r2 long before the kill: failed at its timeout instead, past the kill, it is hung.
	r := &rec.Requests[0]
	r.Status, r.Error, r.Ended = loadtest.Failed, "context deadline exceeded", r.Sent+rec.Timeout
	f, err := Measure(rec, log, ev, "r2")
	if err != nil {
		t.Fatal(err)
	}
	if f.Failed != 17 || f.Other != 1 || f.Hung != 1 || f.MidStream != 16 {
		t.Errorf("figures %+v", f)
	}
	got := strings.Join(Check(rec, log, f, "r2"), "; ")
	for _, want := range []string{"1 requests hung until their timeout", "1 failures other than streams cut on r2"} {
		if !strings.Contains(got, want) {
			t.Errorf("Check: %q, want %q", got, want)
		}
	}
	log.Requests = slices.Delete(slices.Clone(log.Requests), 1, 2) // the first request to the API
	if got := Check(rec, log, f, "r2"); !slices.Contains(got, "HAProxy logged 239 requests, the load tester sent 240") {
		t.Errorf("Check: %q", got)
	}
	if _, err := Measure(rec, log, Events{Kill: ev.Kill, Restart: ev.Restart.Add(time.Hour), Up: ev.Up.Add(time.Hour)}, "r2"); err == nil ||
		!strings.Contains(err.Error(), "no r2 marked up after the restart") {
		t.Errorf("a restart after the last UP: %v", err)
	}
}

// TestReadErrors: a request line not in LogFormat and a bad event name the file and line.
func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "haproxy.log")
	os.WriteFile(bad, []byte("2026-12-07T18:52:32.088640+00:00 Proxy fleet started.\n2026-12-07T18:52:34.144688+00:00 request 10.0.0.1 GET /\n"), 0o644)
	if _, err := ReadLog(bad); err == nil || !strings.Contains(err.Error(), "haproxy.log:2:") || !strings.Contains(err.Error(), LogFormat) {
		t.Errorf("ReadLog: %v", err)
	}
	events := filepath.Join(dir, "events.txt")
	for _, c := range []struct{ text, want string }{
		{"kill 1796669564.103484799\nrestart 1796669574.1\nup x\n", "events.txt:3:"},
		{"kill 1796669564.1\nup 1796669574.2\n", "no restart time"},
		{"kill 1796669564.1\nrestart 1796669554.1\nup 1796669574.2\n", "want them in that order"},
	} {
		os.WriteFile(events, []byte(c.text), 0o644)
		if _, err := ReadEvents(events); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadEvents(%q): %v, want %q", c.text, err, c.want)
		}
	}
}

// TestPredict: the figures of a simulated run come from its fault's record and its requests: the lost and the
// resent as the fault counts them, the detection and the recovery from its times, the first token the replica
// gave after its restart, its share of those that arrived once it served again, and the requests a client would
// have given up on.
func TestPredict(t *testing.T) {
	req := func(arrival, ttft, e2el float64, output int, finish string) results.Request {
		return results.Request{Arrival: arrival, TTFT: ttft, E2EL: e2el, Output: output, Finish: finish}
	}
	run := &results.Run{
		Aggregates: results.Aggregates{Metrics: loadtest.Metrics{Completed: 5, Failed: 2}},
		Requests: []results.Request{
			req(1, 100, 5000, 50, "error"),    // lost on 1 at its death
			req(2, 100, 1000, 50, "length"),   // on 0
			req(9, 2000, 3000, 50, "length"),  // on 1 after its restart: first token at 11 s
			req(10, 500, 40000, 50, "length"), // on 0, over the timeout
			req(12, 100, 900, 50, "length"),   // on 1
			req(13, 100, 900, 50, "length"),   // on 0
			req(14, 0, 0, 0, "error"),         // turned away
		},
		Fleet: &results.Fleet{Assigned: []int{1, 0, 1, 0, 1, 0, -1},
			Faults: []results.Fault{{Replica: 1, At: 3, Detected: 5, Restarted: 8, Serving: 10.5, Lost: 1, Resent: 4}}},
	}
	got, err := Predict(run, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := Figures{Sent: 7, Completed: 5, Failed: 2, MidStream: 1, Other: 1, Retried: 4, Hung: 1, Detection: 2 * time.Second,
		Up: 2500 * time.Millisecond, FirstToken: 3 * time.Second, Share: 0.5}
	if got != want {
		t.Errorf("predicted\n%+v, want\n%+v", got, want)
	}
	var b bytes.Buffer
	if err := Write(&b, want, got); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| detection: kill to marked down (s)       | 2.000    | 2.000     |", "| its share of the requests after (%)      | 50.00    | 50.00     |"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("table without %q:\n%s", row, b.String())
		}
	}
}
