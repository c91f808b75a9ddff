package server

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzParseRequest: the request-body parser never panics; it either answers a one-line 400 or returns a request
// whose values are in range, which prepare then either refuses with a 400 naming a field or turns into an engine
// request the engine accepts.
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
		`{"model": "m", "messages": [{"role": "user", "content": "` + strings.Repeat("ab", 300) + `"}]}`,
	} {
		f.Add([]byte(seed), strings.Contains(seed, "messages"))
	}
	ts := newTestServer(f, nil)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		body = []byte(strings.ReplaceAll(string(body), `"m"`, `"`+testModel+`"`))
		r, e := parseRequest(body, chat)
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Message == "" || strings.Contains(e.Message, "\n") {
				t.Fatalf("error %+v, want a one-line 400", e)
			}
			return
		}
		switch {
		case r.Model == "" || r.Chat != chat || r.MaxTokens < 0:
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
