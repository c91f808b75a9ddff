// Package openaitest runs a fake OpenAI-compatible server for tests: POST /v1/completions and
// /v1/chat/completions (streamed or not), GET /v1/models and GET /health, with a first token after a set delay
// and each further token after another, and faults on chosen requests (a 429 with Retry-After, a 500, a stream
// cut before [DONE]). It is the reference for the wire shapes in package openai: what a client must read and a
// server must write.
//
// Its "model" emits the tokens " t0", " t1", ... up to max_tokens (or Options.Tokens when set) and counts a prompt
// as one token per token id or per whitespace-separated word.
package openaitest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/morphlab/morphlab/internal/openai"
)

// Fault is what the server does to one request instead of answering it normally.
type Fault int

const (
	// None answers normally.
	None Fault = iota
	// Reject answers 429 with a rate_limit_error and Retry-After: 1, as a server with a full queue does.
	Reject
	// ServerError answers 500 with a server_error.
	ServerError
	// Cut streams half the tokens and closes the connection without [DONE] (for a non-streamed request it
	// closes the connection without a response).
	Cut
	// ErrorEvent streams half the tokens and then an error event followed by [DONE], as vLLM does when its engine
	// fails mid-request.
	ErrorEvent
)

// Options configure a Server.
type Options struct {
	Model      string        // the one model served; "fake" when empty
	TTFT       time.Duration // from reading the request to the first token
	TokenDelay time.Duration // between tokens; token i is due at TTFT + i*TokenDelay, so delays do not add up
	Tokens     int           // tokens per response; 0 means max_tokens (16 when not given)
	OmitUsage  bool          // never send usage, even when asked: a client must then count chunks
	APIKey     string        // when set, every route but /health answers 401 without Authorization: Bearer APIKey
	// Fault chooses the fault for the n-th generation request (from 0), or none when nil.
	Fault func(n int) Fault
}

// Server is a running fake server. URL is its root, such as http://127.0.0.1:38211.
type Server struct {
	*httptest.Server
	opts      Options
	requests  atomic.Int64 // generation requests received
	ignoreEOS atomic.Int64 // those of them with ignore_eos
}

// NewServer starts a server on a loopback port. Close it when done.
func NewServer(opts Options) *Server {
	if opts.Model == "" {
		opts.Model = "fake"
	}
	s := &Server{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "no route for "+r.Method+" "+r.URL.Path)
	})
	s.Server = httptest.NewServer(s.authorize(mux))
	return s
}

// authorize answers 401 to a request without the API key, as OpenAI does, when the server has one.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIKey != "" && r.URL.Path != "/health" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
			writeError(w, http.StatusUnauthorized, "invalid_request_error", "", "missing or wrong API key")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Requests returns how many generation requests the server has received.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// IgnoredEOS returns how many of them asked for ignore_eos (the fake generates max_tokens tokens either way).
func (s *Server) IgnoredEOS() int { return int(s.ignoreEOS.Load()) }

// generation is what the two endpoints share once their bodies are read.
type generation struct {
	id           string
	promptTokens int
	maxTokens    int
	stream       bool
	usage        bool
	start        time.Time
	fault        Fault
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req openai.CompletionRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.IgnoreEOS {
		s.ignoreEOS.Add(1)
	}
	if req.Prompt.Tokens == nil && req.Prompt.Text == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "prompt", "prompt is empty")
		return
	}
	g, ok := s.begin(w, start, req.Model, req.MaxTokens, req.N, req.Stream, req.StreamOptions)
	if !ok {
		return
	}
	g.promptTokens = len(req.Prompt.Tokens) + len(strings.Fields(req.Prompt.Text))
	if !g.stream {
		text := s.waitAll(r, g)
		if text == nil {
			return
		}
		stop := "length"
		writeJSON(w, http.StatusOK, openai.Completion{
			ID: g.id, Object: "text_completion", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.CompletionChoice{{Text: strings.Join(text, ""), FinishReason: &stop}},
			Usage:   &openai.Usage{PromptTokens: g.promptTokens, CompletionTokens: len(text), TotalTokens: g.promptTokens + len(text)},
		})
		return
	}
	s.stream(w, r, g, func(tok string, finish *string) any {
		return openai.Completion{ID: g.id, Object: "text_completion", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.CompletionChoice{{Text: tok, FinishReason: finish}}}
	}, func(u *openai.Usage) any {
		return openai.Completion{ID: g.id, Object: "text_completion", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.CompletionChoice{}, Usage: u}
	})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req openai.ChatRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.IgnoreEOS {
		s.ignoreEOS.Add(1)
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages", "messages is empty")
		return
	}
	g, ok := s.begin(w, start, req.Model, req.MaxTokens, req.N, req.Stream, req.StreamOptions)
	if !ok {
		return
	}
	for _, m := range req.Messages {
		g.promptTokens += len(strings.Fields(m.Role + ": " + m.Content))
	}
	if !g.stream {
		text := s.waitAll(r, g)
		if text == nil {
			return
		}
		stop := "length"
		writeJSON(w, http.StatusOK, openai.ChatCompletion{
			ID: g.id, Object: "chat.completion", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.ChatChoice{{Message: openai.Message{Role: "assistant", Content: strings.Join(text, "")}, FinishReason: &stop}},
			Usage:   &openai.Usage{PromptTokens: g.promptTokens, CompletionTokens: len(text), TotalTokens: g.promptTokens + len(text)},
		})
		return
	}
	first := true
	s.stream(w, r, g, func(tok string, finish *string) any {
		d := openai.Delta{Content: tok}
		if first {
			d.Role, first = "assistant", false
		}
		return openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.ChatChunkChoice{{Delta: d, FinishReason: finish}}}
	}, func(u *openai.Usage) any {
		return openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.start.Unix(), Model: s.opts.Model,
			Choices: []openai.ChatChunkChoice{}, Usage: u}
	})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, openai.ModelList{Object: "list", Data: []openai.Model{{ID: s.opts.Model, Object: "model", OwnedBy: "morphlab"}}})
}

// decode reads a JSON body into v, rejecting unknown fields; on failure it has answered 400.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		param := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			param = strings.Trim(f, `"`)
			writeError(w, http.StatusBadRequest, "invalid_request_error", param, "unsupported field "+param)
			return false
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			param = typeErr.Field
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", param, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

// begin checks what both endpoints share, counts the request and applies the status faults; on failure it has
// answered.
func (s *Server) begin(w http.ResponseWriter, start time.Time, model string, maxTokens, n *int, stream bool, so *openai.StreamOptions) (*generation, bool) {
	if model != s.opts.Model {
		param := "model"
		writeJSON(w, http.StatusNotFound, openai.ErrorResponse{Error: openai.ErrorBody{Type: "invalid_request_error", Param: &param, Code: "model_not_found",
			Message: fmt.Sprintf("model %q is not served (this server serves %q)", model, s.opts.Model)}})
		return nil, false
	}
	if maxTokens != nil && *maxTokens <= 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens", fmt.Sprintf("max_tokens=%d, want at least 1", *maxTokens))
		return nil, false
	}
	if n != nil && *n != 1 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "n", fmt.Sprintf("n=%d, only n=1 is supported", *n))
		return nil, false
	}
	idx := int(s.requests.Add(1)) - 1
	g := &generation{id: "cmpl-" + strconv.Itoa(idx), maxTokens: 16, stream: stream, usage: so != nil && so.IncludeUsage && !s.opts.OmitUsage, start: start}
	if maxTokens != nil {
		g.maxTokens = *maxTokens
	}
	if s.opts.Tokens > 0 {
		g.maxTokens = s.opts.Tokens
	}
	if s.opts.Fault != nil {
		g.fault = s.opts.Fault(idx)
	}
	switch g.fault {
	case Reject:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "", "the request queue is full")
		return nil, false
	case ServerError:
		writeError(w, http.StatusInternalServerError, "server_error", "", "internal error")
		return nil, false
	}
	return g, true
}

// waitAll waits until the last token is due and returns the tokens, or nil when the client went away or the
// fault is a cut (the connection is then closed).
func (s *Server) waitAll(r *http.Request, g *generation) []string {
	if !s.sleepUntil(r, g.due(s.opts, g.maxTokens-1)) {
		return nil
	}
	if g.fault == Cut {
		panic(http.ErrAbortHandler)
	}
	toks := make([]string, g.maxTokens)
	for i := range toks {
		toks[i] = " t" + strconv.Itoa(i)
	}
	return toks
}

// due returns when token i is due.
func (g *generation) due(o Options, i int) time.Time {
	return g.start.Add(o.TTFT + time.Duration(i)*o.TokenDelay)
}

// stream sends the tokens as chunks made by chunk, then the usage chunk made by usageChunk when asked, then
// [DONE], each when due and flushed at once.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, g *generation, chunk func(tok string, finish *string) any, usageChunk func(*openai.Usage) any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i := range g.maxTokens {
		if (g.fault == Cut || g.fault == ErrorEvent) && i == g.maxTokens/2 {
			if g.fault == Cut {
				panic(http.ErrAbortHandler) // net/http closes the connection without ending the chunked body
			}
			_ = openai.WriteEvent(w, openai.ErrorResponse{Error: openai.ErrorBody{Message: "the engine failed", Type: "server_error"}})
			_ = openai.WriteDone(w)
			return
		}
		if !s.sleepUntil(r, g.due(s.opts, i)) {
			return
		}
		var finish *string
		if i == g.maxTokens-1 {
			f := "length"
			finish = &f
		}
		if openai.WriteEvent(w, chunk(" t"+strconv.Itoa(i), finish)) != nil || rc.Flush() != nil {
			return
		}
	}
	if g.usage {
		u := &openai.Usage{PromptTokens: g.promptTokens, CompletionTokens: g.maxTokens, TotalTokens: g.promptTokens + g.maxTokens}
		_ = openai.WriteEvent(w, usageChunk(u))
	}
	_ = openai.WriteDone(w)
	_ = rc.Flush()
}

// sleepUntil waits until t, or returns false when the client goes away first.
func (s *Server) sleepUntil(r *http.Request, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return r.Context().Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with OpenAI's error body; param is the request field at fault, or "" for none (null).
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	body := openai.ErrorBody{Message: msg, Type: typ}
	if param != "" {
		body.Param = &param
	}
	writeJSON(w, status, openai.ErrorResponse{Error: body})
}
