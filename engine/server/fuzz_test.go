package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/http/httpguts"
)

// FuzzParseRequest: the request-body parser never panics; it either answers a one-line 400 (404 model_not_found
// for another model) or returns a request whose values are in range, which prepare then either refuses with a
// 400 naming a field or turns into an engine request the engine accepts. A refusal from a start of the body is
// the whole body's answer (see sameRefusal).
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model": "m", "prompt": "Once upon a time", "max_tokens": 16}`,
		`{"model": "m", "prompt": [1, 2, 3], "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": -3, "stop": ["\n", "The"]}`,
		`{"model": "m", "prompt": ["hi"], "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "x"}`,
		`{"model": "m", "prompt": [[5, 6]], "max_tokens": 1e3, "presence_penalty": 0.0, "logprobs": null}`,
		`{"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 5}`,
		`{"model": "m", "prompt": "x", "max_tokens": 0}`,
		`{"model": "m", "prompt": "x", "stop": "a", "top_k": -1}`,
		`{"model": "m", "prompt": "x", "bogus": {}}`,
		`{"model": 1}`,
		`[]`,
		`{"model": "m", "prompt": [99999]}`,
		`{"model": "m", "prompt": [1.5e1, 2], "max_tokens": 1}`,
		`{"model": "m", "messages": [{"role": "user", "content": ""}, {"role": "usr", "content": ""}]}`,
		`{"model": "m", "messages": [{"role": "user", "content": "` + strings.Repeat("ab", 300) + `"}]}`,
	} {
		f.Add([]byte(seed), strings.Contains(seed, "messages"))
	}
	ts := newTestServer(f, nil)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		body = []byte(strings.ReplaceAll(string(body), `"m"`, `"`+testModel+`"`))
		r, e := parseRequest(body, chat, ts.limits)
		for _, n := range startCuts(len(body)) {
			if early := refusal(body[:n], chat, ts.limits); early != nil && (e == nil || !sameRefusal(*early, *e)) {
				t.Fatalf("the first %d bytes are refused with %+v; the whole body's answer is %+v", n, early, e)
			}
		}
		if e != nil {
			if e.Status != http.StatusBadRequest && (e.Status != http.StatusNotFound || e.Code != "model_not_found" || e.Param != "model") ||
				e.Type != "invalid_request_error" || e.Message == "" || strings.Contains(e.Message, "\n") {
				t.Fatalf("error %+v, want a one-line 400, or 404 model_not_found", e)
			}
			return
		}
		switch {
		case r.Model != testModel || r.Chat != chat || r.MaxTokens < 0:
			t.Fatalf("model %q, chat %v, max_tokens %d", r.Model, r.Chat, r.MaxTokens)
		case r.Temperature < 0 || r.Temperature > 2 || r.TopP <= 0 || r.TopP > 1 || r.TopK < 0:
			t.Fatalf("temperature %g, top_p %g, top_k %d out of range", r.Temperature, r.TopP, r.TopK)
		case len(r.Stop) > maxStops || r.IncludeUsage && !r.Stream:
			t.Fatalf("stop %q, include_usage %v without stream", r.Stop, r.IncludeUsage)
		case r.IsTokens && (chat || len(r.PromptTokens) == 0):
			t.Fatalf("token prompt %v in a chat %v", r.PromptTokens, chat)
		}
		for _, s := range r.Stop {
			if s == "" {
				t.Fatal("an empty stop string passed")
			}
		}
		for _, id := range r.PromptTokens {
			if id < 0 {
				t.Fatalf("prompt token %d", id)
			}
		}
		j, e := ts.prepare(r)
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Param == "" || strings.Contains(e.Message, "\n") {
				t.Fatalf("prepare: %+v, want a one-line 400 naming a field", e)
			}
			return
		}
		ctx, p := ts.geo.Context, len(j.req.Prompt)
		if p < 1 || p >= ctx || j.req.MaxTokens < 1 || p+j.req.MaxTokens > ctx || j.req.Sampling.Validate() != nil {
			t.Fatalf("engine request of %d prompt tokens and %d output tokens (context %d), sampling %+v", p, j.req.MaxTokens, ctx, j.req.Sampling)
		}
		for _, id := range j.req.Prompt {
			if int(id) >= ts.geo.Vocab {
				t.Fatalf("prompt token %d outside the vocabulary of %d", id, ts.geo.Vocab)
			}
		}
	})
}

// sameRefusal reports whether a and b are the same answer; the message of malformed JSON quotes the bytes after
// the fault that the decoder has, which a start may cut short.
func sameRefusal(a, b apiError) bool {
	const malformed = "malformed JSON body: "
	if strings.HasPrefix(a.Message, malformed) && strings.HasPrefix(b.Message, malformed) {
		a.Message, b.Message = "", ""
	}
	return a == b
}

// startCuts are the lengths of a body of n bytes whose starts FuzzParseRequest refuses: every one of a short
// body, 64 spread over a long one.
func startCuts(n int) []int {
	k := max(1, min(n, 64))
	cuts := make([]int, k+1)
	for i := range cuts {
		cuts[i] = i * n / k
	}
	return cuts
}

// fuzzKey is the API key of FuzzHTTP's server; "KEY" in an input stands for it, and "m" for the model's name.
const fuzzKey = "sk-fuzz"

// FuzzHTTP sends whole requests (method, path, header lines "Name: value", body) to the handler of a running
// server with a tiny model, an API key and an allowed origin. Nothing panics; every answer is a valid answer of
// its route (a completion or a stream ending with [DONE], the model list, health, metrics, a preflight's 204) or
// OpenAI's JSON error with an error status (and Allow on a 405, WWW-Authenticate on a 401); and once it is
// answered the engine holds no request, no place in the queue is taken and the gauges are back to zero.
//
// The model's context is 64 tokens, so that no completion runs long. One without max_tokens runs to the context,
// which at 512 tokens took 0.4 to 0.6 s; the fuzzer minimizes an input that finds new code by running it once
// for each of the O(n^2) cuts of each of its values, and with such inputs both workers minimized for 10 to 25 s
// at a time, runs its progress lines count only at the end. A prompt too long for the context is a short one too.
func FuzzHTTP(f *testing.F) {
	auth := "Content-Type: application/json\nAuthorization: Bearer KEY"
	for _, s := range []struct{ method, path, header, body string }{
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": "Once upon a time", "max_tokens": 8}`},
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0.8, "seed": 3, "stop": ["a"], "stream": true}`},
		{"POST", "/v1/chat/completions", auth, `{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 6, "stream": true, "stream_options": {"include_usage": true}}`},
		{"POST", "/v1/chat/completions", auth + "\nOrigin: https://a.example", `{"model": "m", "messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]}], "max_tokens": 3}`},
		{"POST", "/v1/completions", "Content-Type: application/json", `{"model": "m", "prompt": "no key"}`},
		{"POST", "/v1/completions", "Content-Type: text/plain\nAuthorization: Bearer KEY", `{"model": "m", "prompt": "hi"}`},
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": "` + strings.Repeat("long ", 60) + `"}`},
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": [1, 2.5], "max_tokens": 1e12}`},
		{"POST", "/v1/completions", auth, `{"model": "gpt-4", "prompt": "hi"}`},
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": "hi", "prompt": "twice"}`},
		{"POST", "/v1/completions", auth, `{"model": "m", "prompt": "hi"`},
		{"PUT", "/v1/completions", auth, ``},
		{"GET", "/v1/models", "Authorization: bearer KEY", ``},
		{"GET", "/v1/models", "Authorization: Bearer wrong", ``},
		{"OPTIONS", "/v1/chat/completions", "Origin: https://a.example\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: authorization", ``},
		{"OPTIONS", "/v1/completions", "Origin: https://b.example\nAccess-Control-Request-Method: POST", ``},
		{"GET", "/health", "", ``},
		{"GET", "/metrics", "", ``},
		{"GET", "/v1/embeddings", auth, ``},
	} {
		f.Add(s.method, s.path, s.header, []byte(s.body))
	}
	ts := newTestServer(f, func(x *testExec, c *testConfig) {
		m, vocab := synthModelContext(f, 64)
		cx, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 256}, BlockSize: 16, MaxBatchedTokens: 64})
		if err != nil {
			f.Fatal(err)
		}
		x.Executor, c.Vocab = cx, vocab
		c.APIKey = fuzzKey
		c.AllowedOrigins = []string{"https://a.example"}
		c.Engine = engine.Options{IdleTick: 2 * time.Millisecond}
	})
	h := ts.Handler()
	f.Fuzz(func(t *testing.T, method, path, header string, body []byte) {
		body = []byte(strings.ReplaceAll(string(body), `"m"`, `"`+testModel+`"`))
		req, err := http.NewRequest(method, "http://server"+path, bytes.NewReader(body))
		if err != nil || req.URL.Host != "server" {
			return // no client sends it
		}
		for _, line := range strings.Split(header, "\n") {
			name, value, ok := strings.Cut(line, ":")
			value = strings.ReplaceAll(strings.TrimSpace(value), "KEY", fuzzKey)
			if ok && httpguts.ValidHeaderFieldName(name) && httpguts.ValidHeaderFieldValue(value) {
				req.Header.Add(name, value)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if err := checkAnswer(req, rec.Result()); err != nil {
			t.Fatalf("%s %s %q %.200q: %v", method, path, header, body, err)
		}
		if ts.queued.Load() != 0 || ts.Engine().Pending() != 0 {
			t.Fatalf("%s %s: after the answer %d places in the queue, %d requests in the engine; want none", method, path, ts.queued.Load(), ts.Engine().Pending())
		}
		waitFor(t, func() bool {
			m := ts.metrics
			return gauge(m.running) == 0 && gauge(m.waiting) == 0 && gauge(m.kvUsage) == 0
		})
	})
}

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	g.Write(&m)
	return m.GetGauge().GetValue()
}

// checkAnswer says what is wrong with resp as the answer to req, or nil.
func checkAnswer(req *http.Request, resp *http.Response) error {
	b, _ := io.ReadAll(resp.Body)
	ct := resp.Header.Get("Content-Type")
	switch {
	case resp.StatusCode == http.StatusNoContent:
		if req.Method != http.MethodOptions || len(b) > 0 {
			return fmt.Errorf("204 with %d bytes to a %s, want only empty answers to preflights", len(b), req.Method)
		}
		return nil
	case resp.StatusCode >= 400:
		var e openai.ErrorResponse
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		switch {
		case ct != "application/json" || dec.Decode(&e) != nil || e.Error.Message == "" || e.Error.Type == "" || strings.Contains(e.Error.Message, "\n"):
			return fmt.Errorf("status %d, %s %.300q: want OpenAI's JSON error with a one-line message", resp.StatusCode, ct, b)
		case resp.StatusCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "":
			return errors.New("405 without Allow")
		case resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != "Bearer":
			return errors.New("401 without WWW-Authenticate: Bearer")
		}
		return nil
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d, want 200, 204 or an error", resp.StatusCode)
	}
	switch path := req.URL.Path; {
	case path == "/metrics":
		if !strings.HasPrefix(ct, "text/plain") || !bytes.Contains(b, []byte("morphlab:num_requests_running")) {
			return fmt.Errorf("/metrics: %s without the metrics", ct)
		}
	case path == "/health":
		if string(b) != "{\"status\":\"ok\"}\n" {
			return fmt.Errorf("/health: %q", b)
		}
	case path == "/v1/models":
		var list openai.ModelList
		if json.Unmarshal(b, &list) != nil || len(list.Data) != 1 || list.Data[0].ID != testModel {
			return fmt.Errorf("/v1/models: %.300q", b)
		}
	case ct == "text/event-stream":
		s := openai.NewStream(bytes.NewReader(b))
		finish := ""
		for {
			c, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("stream: %v", err)
			}
			finish = cmp.Or(c.FinishReason, finish)
		}
		if finish != "stop" && finish != "length" {
			return fmt.Errorf("stream without a finish reason: %.300q", b)
		}
	default:
		var c completion
		if ct != "application/json" || json.Unmarshal(b, &c) != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || c.Usage == nil ||
			c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens || c.Usage.CompletionTokens < 1 {
			return fmt.Errorf("completion %s %.300q", ct, b)
		}
	}
	return nil
}
