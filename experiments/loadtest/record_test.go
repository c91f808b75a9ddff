package loadtest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

// TestRecord: through a proxy that names its server in a response header, every outcome records the header and
// when it ended; Config.Outcomes gets the run's result, and its record (WriteRecord) reads back with each request's
// arrival, max tokens and outcome, the run's start and the timeout. A stream the server cuts is failed with the
// header recorded all the same.
func TestRecord(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", Fault: func(n int) openaitest.Fault {
		if n == 2 {
			return openaitest.Cut
		}
		return openaitest.None
	}})
	defer s.Close()
	target, _ := url.Parse(s.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Set("X-Served-By", "r1")
		return nil
	}
	proxy := httptest.NewServer(rp)
	defer proxy.Close()

	cfg := Config{URL: proxy.URL, Model: "m", MaxConcurrency: 1, ServerHeader: "X-Served-By"}
	reqs := textRequests(4, 10*time.Millisecond, 5)
	res, err := Send(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteRecord(&buf, 2, time.Minute, res); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "outcomes.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Rate != 2 || recs[0].Timeout != time.Minute || !recs[0].Start.Equal(res.Start) || len(recs[0].Requests) != 4 {
		t.Fatalf("records %+v", recs)
	}
	for i, r := range recs[0].Requests {
		wantStatus := Completed
		if i == 2 {
			wantStatus = Failed
		}
		switch {
		case r.Arrival != reqs[i].Arrival || r.MaxTokens != 5:
			t.Errorf("request %d: arrival %v, max tokens %d; want %v, 5", i, r.Arrival, r.MaxTokens, reqs[i].Arrival)
		case r.Status != wantStatus || r.Server != "r1" || r.HTTPStatus != 200:
			t.Errorf("request %d: %s (HTTP %d) from %q, want %s from r1", i, r.Status, r.HTTPStatus, r.Server, wantStatus)
		case !(r.Ended >= r.Sent+r.Latency && r.Sent >= r.Arrival) || r.Ended != res.Outcomes[i].Ended:
			t.Errorf("request %d: sent %v, latency %v, ended %v", i, r.Sent, r.Latency, r.Ended)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, append(buf.Bytes(), "{\"rate\": 1}\n"...), 0o644)
	if _, err := ReadRecords(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:2: a record with its start, timeout and requests") {
		t.Errorf("a record without its start: %v", err)
	}
}
