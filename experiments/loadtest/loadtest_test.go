package loadtest

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

func textRequests(n int, gap time.Duration, maxTokens int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Arrival: time.Duration(i) * gap, Prompt: openai.Prompt{Text: "a b c"}, MaxTokens: maxTokens}
	}
	return reqs
}

// TestKnownDelays runs against a server whose first token comes 100 ms after the request and each further one
// 10 ms later: the measured TTFT and TPOT are within 5% of those. It measures wall time, which the race
// detector's slowdown on a loaded machine skews, so the -short runs (the race run) leave it out.
func TestKnownDelays(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: wall-clock delays are checked in the full run, not under -short (the race detector's run)")
	}
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 100 * time.Millisecond, TokenDelay: 10 * time.Millisecond})
	defer s.Close()
	for _, chat := range []bool{false, true} {
		res, err := Send(context.Background(), Config{URL: s.URL, Model: "m", Chat: chat}, textRequests(8, 50*time.Millisecond, 30))
		if err != nil {
			t.Fatal(err)
		}
		m := Compute(res, metrics.SLO{})
		if m.Completed != 8 || m.TotalOutputTokens != 8*30 || m.TotalInputTokens == 0 {
			t.Fatalf("chat=%v: %d completed, %d output and %d input tokens; want 8, 240 and some: %+v", chat, m.Completed, m.TotalOutputTokens, m.TotalInputTokens, res.Outcomes[0])
		}
		if d := m.TTFT.Median/100 - 1; math.Abs(d) > 0.05 {
			t.Errorf("chat=%v: median TTFT %.2f ms, want 100 ms within 5%%", chat, m.TTFT.Median)
		}
		if d := m.TPOT.Median/10 - 1; math.Abs(d) > 0.05 {
			t.Errorf("chat=%v: median TPOT %.3f ms, want 10 ms within 5%%", chat, m.TPOT.Median)
		}
		t.Logf("chat=%v: median TTFT %.2f ms, TPOT %.3f ms", chat, m.TTFT.Median, m.TPOT.Median)
		if m.ITL.N != 8*29 {
			t.Errorf("chat=%v: %d ITL gaps, want 8*29", chat, m.ITL.N)
		}
	}
}

// TestOutcomes checks how each kind of answer is counted.
func TestOutcomes(t *testing.T) {
	faults := []openaitest.Fault{openaitest.None, openaitest.Reject, openaitest.ServerError, openaitest.Cut, openaitest.ErrorEvent}
	s := openaitest.NewServer(openaitest.Options{Model: "m", Fault: func(n int) openaitest.Fault { return faults[n] }})
	defer s.Close()
	// One request at a time, so that the server's n-th request is the n-th here.
	var progress []int
	cfg := Config{URL: s.URL + "/", Model: "m", MaxConcurrency: 1, Progress: func(done, total int) { progress = append(progress, done, total) }}
	res, err := Send(context.Background(), cfg, textRequests(5, 0, 6))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status Status
		http   int
		err    string
	}{
		{Completed, 200, ""},
		{Rejected, 429, "HTTP 429: the request queue is full"},
		{Failed, 500, "HTTP 500: internal error"},
		{Failed, 200, "unexpected EOF"},
		{Failed, 200, "error event: the engine failed"},
	}
	for i, w := range want {
		o := res.Outcomes[i]
		if o.Status != w.status || o.HTTPStatus != w.http || !strings.Contains(o.Error, w.err) || (w.err == "" && o.Error != "") {
			t.Errorf("request %d (%v): %s %d %q, want %s %d %q", i, faults[i], o.Status, o.HTTPStatus, o.Error, w.status, w.http, w.err)
		}
	}
	if want := []int{1, 5, 2, 5, 3, 5, 4, 5, 5, 5}; !slices.Equal(progress, want) {
		t.Errorf("progress calls %v, want %v", progress, want)
	}
	if res.Outcomes[1].RetryAfter != "1" {
		t.Errorf("429's Retry-After %q, want 1", res.Outcomes[1].RetryAfter)
	}
	if o := res.Outcomes[0]; o.OutputTokens != 6 || o.PromptTokens != 3 || len(o.ITL) != 5 {
		t.Errorf("completed: %d output, %d prompt tokens, %d gaps; want 6, 3, 5", o.OutputTokens, o.PromptTokens, len(o.ITL))
	}
	m := Compute(res, metrics.SLO{})
	if m.Completed != 1 || m.Rejected != 1 || m.Failed != 3 {
		t.Errorf("counts %d completed %d rejected %d failed, want 1, 1, 3", m.Completed, m.Rejected, m.Failed)
	}
}

// Without usage, output tokens are the chunks counted; the prompt's known length stands for the input.
func TestWithoutUsage(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", OmitUsage: true})
	defer s.Close()
	reqs := []Request{{Prompt: openai.Prompt{Tokens: []int{5, 6, 7, 8}}, PromptTokens: 4, MaxTokens: 7}}
	res, err := Send(context.Background(), Config{URL: s.URL, Model: "m"}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Outcomes[0]; o.Status != Completed || o.OutputTokens != 7 || o.PromptTokens != 4 {
		t.Errorf("outcome %+v, want completed with 7 output and 4 prompt tokens", o)
	}
}

// TestBounded runs against a server that never answers: the run sends each request once, gives up on each after
// the timeout, and ends at the last arrival plus the timeout.
func TestBounded(t *testing.T) {
	var hits atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection only once the body is read
		<-r.Context().Done()
	}))
	defer hang.Close()
	reqs := textRequests(4, 20*time.Millisecond, 5)
	start := time.Now()
	res, err := Send(context.Background(), Config{URL: hang.URL, Model: "m", Timeout: 200 * time.Millisecond}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("run took %v, want about 60ms of arrivals + 200ms", d)
	}
	if hits.Load() != 4 {
		t.Errorf("server saw %d requests, want 4", hits.Load())
	}
	for i, o := range res.Outcomes {
		if o.Status != Failed || !strings.Contains(o.Error, "deadline exceeded") {
			t.Errorf("request %d: %s %q, want failed on the deadline", i, o.Status, o.Error)
		}
	}
}

// TestNoRedirects checks that the client only talks to the URL given: a redirect is a failure and its target
// is never asked.
func TestNoRedirects(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL+"/v1/completions", http.StatusTemporaryRedirect))
	defer redirect.Close()
	res, err := Send(context.Background(), Config{URL: redirect.URL, Model: "m"}, textRequests(2, 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	if elsewhere.Load() != 0 {
		t.Errorf("the redirect's target got %d requests, want 0", elsewhere.Load())
	}
	if o := res.Outcomes[0]; o.Status != Failed || o.HTTPStatus != 307 {
		t.Errorf("outcome %+v, want failed with 307", o)
	}
}

// TestMaxConcurrency holds requests back: with one in flight and each taking 100 ms, four simultaneous arrivals are
// sent 100 ms apart, and the achieved rate is reported as off the asked one.
func TestMaxConcurrency(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 100 * time.Millisecond})
	defer s.Close()
	reqs := textRequests(4, 10*time.Millisecond, 1)
	res, err := Send(context.Background(), Config{URL: s.URL, Model: "m", MaxConcurrency: 1}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(res.Outcomes); i++ {
		if gap := res.Outcomes[i].Sent - res.Outcomes[i-1].Sent; gap < 100*time.Millisecond {
			t.Errorf("request %d sent %v after the previous one, want at least 100ms", i, gap)
		}
	}
	m := Compute(res, metrics.SLO{})
	if m.Completed != 4 || m.RateWarning() == "" {
		t.Errorf("%d completed, warning %q; want 4 and a warning (asked %v, achieved %v)", m.Completed, m.RateWarning(), m.AskedRate, m.ArrivalRate)
	}
}

func TestRunErrors(t *testing.T) {
	ok := textRequests(1, 0, 1)
	for _, c := range []struct {
		cfg  Config
		reqs []Request
		want string
	}{
		{Config{URL: "ftp://x", Model: "m"}, ok, "want a server root"},
		{Config{URL: "http://127.0.0.1:1/v1", Model: "m"}, ok, "want a server root"},
		{Config{URL: "http://127.0.0.1:1"}, ok, "no model"},
		{Config{URL: "http://127.0.0.1:1", Model: "m"}, nil, "no requests"},
		{Config{URL: "http://127.0.0.1:1", Model: "m", MaxConcurrency: -1}, ok, "max concurrency"},
		{Config{URL: "http://127.0.0.1:1", Model: "m"}, []Request{{MaxTokens: 0}}, "request 0: max tokens 0"},
		{Config{URL: "http://127.0.0.1:1", Model: "m"}, []Request{{Arrival: time.Second, MaxTokens: 1}, {MaxTokens: 1}}, "request 1: arrival 0s before"},
		{Config{URL: "http://127.0.0.1:1", Model: "m", Chat: true}, []Request{{Prompt: openai.Prompt{Tokens: []int{1}}, MaxTokens: 1}}, "takes a text prompt"},
	} {
		if _, err := Send(context.Background(), c.cfg, c.reqs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestRequestShape checks what the client sends: the body vLLM's benchmark sends (greedy, streamed, usage asked
// for) to the endpoint, uncompressed.
func TestRequestShape(t *testing.T) {
	type seen struct{ path, body, encoding, accept string }
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, string(b), r.Header.Get("Accept-Encoding"), r.Header.Get("Accept")}
		_ = openai.WriteDone(w)
	}))
	defer srv.Close()
	reqs := []Request{{Prompt: openai.Prompt{Tokens: []int{7, 8}}, MaxTokens: 3}}
	if _, err := Send(context.Background(), Config{URL: srv.URL, Model: "m"}, reqs); err != nil {
		t.Fatal(err)
	}
	reqs[0].Prompt = openai.Prompt{Text: "hi"}
	if _, err := Send(context.Background(), Config{URL: srv.URL, Model: "m", Chat: true}, reqs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []seen{
		{"/v1/completions", `{"model":"m","prompt":[7,8],"max_tokens":3,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, "", "text/event-stream"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, "", "text/event-stream"},
	} {
		if s := <-got; s != want {
			t.Errorf("request %+v\nwant %+v", s, want)
		}
	}
}
