package openaitest

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

var created = regexp.MustCompile(`"created":\d+`)

// The exact bytes of streams are the reference for servers: one JSON object per data line, a blank line after
// each, usage null until the final usage chunk (choices empty), then [DONE].
func TestStreamWire(t *testing.T) {
	s := NewServer(Options{Model: "m"})
	defer s.Close()
	cases := []struct{ path, body, want string }{
		{"/v1/completions", `{"model":"m","prompt":"a b c","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
			`data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":" t0","logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":" t1","logprobs":null,"finish_reason":"length"}],"usage":null}

data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}

data: [DONE]

`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`,
			`data: {"id":"cmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":" t0"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"cmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" t1"},"logprobs":null,"finish_reason":"length"}],"usage":null}

data: [DONE]

`},
	}
	for _, c := range cases {
		resp, body := post(t, s.URL+c.path, c.body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("%s: status %d, content type %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := created.ReplaceAllString(body, `"created":0`); got != c.want {
			t.Errorf("%s: stream\n%s\nwant\n%s", c.path, got, c.want)
		}
	}
}

func TestNonStreamed(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	_, body := post(t, s.URL+"/v1/completions", `{"model":"fake","prompt":[5,6],"max_tokens":3}`)
	want := `{"id":"cmpl-0","object":"text_completion","created":0,"model":"fake","choices":[{"index":0,"text":" t0 t1 t2","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}` + "\n"
	if got := created.ReplaceAllString(body, `"created":0`); got != want {
		t.Errorf("completion\n%s\nwant\n%s", got, want)
	}
	_, body = post(t, s.URL+"/v1/chat/completions", `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
	want = `{"id":"cmpl-1","object":"chat.completion","created":0,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":" t0"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}` + "\n"
	if got := created.ReplaceAllString(body, `"created":0`); got != want {
		t.Errorf("chat completion\n%s\nwant\n%s", got, want)
	}
}

func TestErrors(t *testing.T) {
	s := NewServer(Options{Model: "m", Fault: func(n int) Fault { return []Fault{Reject, ServerError}[n%2] }})
	defer s.Close()
	cases := []struct {
		body   string
		status int
		typ    string
		param  any
	}{
		{`{"model":"m","prompt":"x","best_of":2}`, 400, "invalid_request_error", "best_of"},
		{`{"model":"m","prompt":"x"`, 400, "invalid_request_error", nil},
		{`{"model":"m","prompt":"x","max_tokens":"many"}`, 400, "invalid_request_error", "max_tokens"},
		{`{"model":"other","prompt":"x"}`, 404, "invalid_request_error", "model"},
		{`{"model":"m","prompt":"x","max_tokens":0}`, 400, "invalid_request_error", "max_tokens"},
		{`{"model":"m","prompt":"x","n":2}`, 400, "invalid_request_error", "n"},
		{`{"model":"m","prompt":""}`, 400, "invalid_request_error", "prompt"},
		{`{"model":"m","prompt":"x"}`, 429, "rate_limit_error", nil},
		{`{"model":"m","prompt":"x"}`, 500, "server_error", nil},
	}
	for _, c := range cases {
		resp, body := post(t, s.URL+"/v1/completions", c.body)
		var e struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("%s: body %q is not an error JSON: %v", c.body, body, err)
		}
		if resp.StatusCode != c.status || e.Error["type"] != c.typ || e.Error["param"] != c.param || e.Error["message"] == "" {
			t.Errorf("%s: %d %v, want %d type %s param %v", c.body, resp.StatusCode, e.Error, c.status, c.typ, c.param)
		}
		if c.status == 404 && e.Error["code"] != "model_not_found" {
			t.Errorf("another model: code %v, want model_not_found", e.Error["code"])
		}
		if c.status == 429 && resp.Header.Get("Retry-After") != "1" {
			t.Errorf("429 without Retry-After: %v", resp.Header)
		}
	}
	if s.Requests() != 2 {
		t.Errorf("%d generation requests counted, want 2 (bad requests are not counted)", s.Requests())
	}
}

func TestModelsHealth(t *testing.T) {
	s := NewServer(Options{Model: "m"})
	defer s.Close()
	resp, err := http.Get(s.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"morphlab"}]}` + "\n"; string(b) != want {
		t.Errorf("models %s, want %s", b, want)
	}
	resp, err = http.Get(s.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("health: %v %v", resp, err)
	}
}

func TestFaultsInStream(t *testing.T) {
	s := NewServer(Options{Fault: func(n int) Fault { return []Fault{Cut, ErrorEvent}[n] }})
	defer s.Close()
	resp, err := http.Post(s.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"fake","prompt":"x","max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || strings.Contains(string(b), "[DONE]") || strings.Count(string(b), "data: ") != 2 {
		t.Errorf("cut stream: read %q, %v; want 2 chunks then an unexpected EOF", b, err)
	}
	_, body := post(t, s.URL+"/v1/completions", `{"model":"fake","prompt":"x","max_tokens":4,"stream":true}`)
	if !strings.Contains(body, `data: {"error":{"message":"the engine failed","type":"server_error","param":null,"code":null}}`) ||
		!strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("error event stream %q", body)
	}
}

func TestDelays(t *testing.T) {
	s := NewServer(Options{TTFT: 50 * time.Millisecond, TokenDelay: 10 * time.Millisecond})
	defer s.Close()
	start := time.Now()
	post(t, s.URL+"/v1/completions", `{"model":"fake","prompt":"x","max_tokens":6}`)
	// The last of 6 tokens is due at 50 + 5*10 ms; a timer never fires early.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("non-streamed answer after %v, want at least 100ms", d)
	}
}
