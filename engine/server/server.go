// Package server serves an engine over HTTP with OpenAI's API, so that users test it with their own clients and
// read its metrics with Prometheus.
//
// # Endpoints
//
//   - POST /v1/completions and POST /v1/chat/completions, in OpenAI's request and response shapes. Chat messages
//     are rendered with a plain template ("Role: content" lines, then "Assistant:"), since the models served have
//     no chat template of their own. With "stream": true the answer is server-sent events, one "data:" chunk a
//     token (text held back only while it may be the start of a stop string or of a UTF-8 character), a chunk with
//     the finish reason, a usage chunk when stream_options.include_usage is set, and "data: [DONE]".
//   - GET /v1/models lists the one model; GET /health answers 200 while the server takes requests, 503 once it is
//     shutting down or its engine has failed.
//   - GET /metrics: Prometheus metrics under vLLM's names with the morphlab: prefix (see metrics.go):
//     num_requests_running, num_requests_waiting, kv_cache_usage_perc (vLLM's V1 name; a fraction 0..1),
//     num_preemptions_total, time_to_first_token_seconds, inter_token_latency_seconds,
//     request_time_per_output_token_seconds, e2e_request_latency_seconds, request_queue_time_seconds,
//     prompt_tokens_total, generation_tokens_total, request_success_total{finished_reason}, and
//     num_quantized_layers and kv_cache_blocks for the morphing controller's work, and cache_config_info (labels
//     block_size and num_gpu_blocks). The Gateway API Inference Extension's endpoint picker reads a model server's
//     queue, running requests and KV usage from these under the names its flags give: --total-queued-requests-metric
//     morphlab:num_requests_waiting, --total-running-requests-metric morphlab:num_requests_running,
//     --kv-cache-usage-percentage-metric morphlab:kv_cache_usage_perc, --cache-info-metric
//     morphlab:cache_config_info, and --lora-info-metric "" (no LoRA adapters are served).
//
// # Access
//
// With Config.APIKey every request but GET /health and GET /metrics must carry "Authorization: Bearer KEY" (the
// scheme in any case), compared in constant time; anything else is a 401 with WWW-Authenticate: Bearer and the
// code invalid_api_key. /health and /metrics stay open by choice, as in vLLM: load balancers and Prometheus poll
// them, and they tell nothing of what clients sent. A POST body must be Content-Type application/json (415
// otherwise), so that a web page cannot drive the server with a text/plain form post, which browsers send across
// origins without asking first. CORS is off: no answer carries Access-Control-Allow-Origin, so no page of another
// origin can read one, unless Config.AllowedOrigins lists origins, whose preflights (OPTIONS) are then answered
// and whose requests carry the header.
//
// # Limits
//
// A request takes its place in the Config.MaxQueue count once its body begins and keeps it until its first batch,
// so that requests being read and parsed are bounded too, and takes it again while it waits for a batch after a
// preemption, so that the bound holds for all the requests waiting; a client that sends headers and no body holds
// only its connection, no place that others wait for. A 429's Retry-After is how long places were held of late (an
// exponentially weighted mean) over MaxQueue, the time in which one frees on average. A body is at most 4 MiB (413
// beyond, from its Content-Length or while it is read). The body is parsed as a stream, and a prompt that cannot
// fit in the context is refused as soon as that is certain: a text from its length in bytes before it is decoded or
// tokenized (no token spells more bytes than the vocabulary's longest piece, tokenizer.Vocab.MinTokens), token ids
// at the context's count, chat messages from the text the template renders them to as it grows (each message's
// "Role: " and line end count, so that many empty messages are refused as one long one is). A member the server
// does not know is refused when its name is read, before its value; a name longer than 256 bytes in the body (none
// it knows is), and a model's name longer than the served one's could be, are refused from their first characters,
// never decoded in full. Such a refusal that the body's first 64 KiB already make certain is answered from them:
// the rest is read and dropped, never held or parsed, and the connection closes after it. A client has Config.HeaderTimeout (10 s) for its headers and Config.BodyTimeout (30 s) for
// its body, 408 after; a kept-alive connection idle for Config.IdleTimeout (60 s) is closed, and at most
// Config.MaxConnections (1024) are open, the rest waiting to be accepted. Each write of an answer has
// Config.WriteTimeout (60 s, nginx's send_timeout): a client that reads nothing for that long while the
// connection's buffers are full is cut off, its request cancelled, while a stream to a slow client that keeps
// reading runs as long as it takes.
//
// # Parameters
//
// prompt (a string, or an array of token ids, which are used as they are; a text prompt is encoded with BOS),
// messages (chat), max_tokens (max_completion_tokens in chat; default: the context the prompt leaves), temperature
// (default 1; 0 is greedy), top_p, top_k (-1 or 0: all), seed (default: random when sampling; a draw depends only
// on the seed and the token's position, so a seeded request's text does not change with batching or preemption),
// stop (up to 4 strings), n (1 only), stream, stream_options.include_usage, user (ignored), and vLLM's ignore_eos
// (EOS and BOS do not end the request, which then runs to max_tokens or a stop string, as load tests ask). Counts,
// token ids and the seed are whole numbers, written as integers or not (2, 2.0, 2e0), as vLLM reads them; a seed is
// within int64's range, as vLLM's is. Parameters the server does not implement are a 400 naming them, except at
// their no-op values (presence_penalty 0, logprobs null, ...), which clients send by default. Generation ends at
// EOS or BOS (the llama2.c models end a story with BOS), at max_tokens or at the context (finish_reason "length"),
// or at a stop string (finish_reason "stop", the stop string not part of the text). Stop strings are found in the
// text as the client reads it (valid UTF-8: each output byte that starts no character is U+FFFD, as JSON writes it,
// so that stop "\ufffd" matches one), where they may span tokens or sit inside one, by a decoder that runs in the
// engine's loop (engine.Request.StopWhen): the request ends in the step that completes one, its KV blocks freed
// then. Usage counts the prompt's tokens and the tokens generated up to the one that ended the request, a stop
// token included; generation_tokens_total counts the same.
//
// # Errors
//
// Errors are OpenAI's JSON shape, {"error": {"message", "type", "param", "code"}}, with a one-line message naming
// the field or limit at fault: 400 for a malformed body (not JSON, not UTF-8, a duplicate member), a parameter out
// of range, a prompt that leaves no room in the context, a max_tokens below 1 or beyond the context (as vLLM does),
// or a request the KV pool can never hold; 401 without the API key; 404 model_not_found for another model and 404
// for another path; 405 with Allow for another method; 408 for a body not received in time; 413 for a body over 4
// MiB; 415 for a body that is not application/json; 429 with Retry-After when Config.MaxQueue requests are already
// admitted and waiting for a batch (see Limits); 503 while shutting down or after the engine failed; 500 when a
// step fails under a request. A client that disconnects cancels its request (the engine frees its KV blocks at the
// next iteration).
//
// # Lifecycle
//
// New refuses an engine whose KV pool cannot hold a request of the whole context (PoolError), as vLLM refuses to
// start when its KV cache cannot hold max_model_len. Serve runs the engine's loop and the HTTP server until its
// context ends, then stops admitting (the listener closes), lets the running requests finish within Config.Grace
// (engine.Shutdown), cancels what is left, and returns nil. A controller plugs into the engine itself
// (engine.Engine.OnStep) before the server is made.
package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/cors"
	"golang.org/x/net/netutil"
)

// Config configures a server.
type Config struct {
	// Model is the name the server answers to (the "model" field of a request, /v1/models).
	Model string
	Vocab *tokenizer.Vocab
	// Engine is the engine served, with its hooks (a morphing controller's) already added; the server adds its
	// metrics' hook after them, and runs the engine's loop in Serve.
	Engine *engine.Engine
	// MaxQueue bounds the requests admitted and waiting for a batch, counted from when their body begins until
	// their first batch and from each preemption until they are back in one; a request beyond it is answered
	// 429. 0: no bound.
	MaxQueue int
	// Grace is how long Serve lets running requests finish after its context ends; default 30 s.
	Grace time.Duration
	// Registry holds the metrics that /metrics serves; default: a new registry.
	Registry *prometheus.Registry
	// APIKey, when set, is the key a request must present as "Authorization: Bearer KEY"; without it the request
	// is answered 401. GET /health and GET /metrics need none (load balancers and Prometheus poll them).
	APIKey string
	// AllowedOrigins are the web origins (such as https://app.example.com) whose pages may call the server from
	// a browser (CORS). None by default: no page of another origin may.
	AllowedOrigins []string
	// MaxConnections bounds the open connections; one beyond it waits to be accepted. Default 1024.
	MaxConnections int
	// HeaderTimeout and BodyTimeout bound the time a client takes to send a request's headers and its body;
	// IdleTimeout closes a kept-alive connection that sends no request for that long. Defaults 10 s, 30 s, 60 s.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// WriteTimeout bounds each write of an answer: a client that reads nothing for that long while the
	// connection's buffers are full is cut off and its request cancelled; one that reads, however slowly, is not.
	// Default 60 s (nginx's send_timeout).
	WriteTimeout time.Duration
}

// PoolError is New's error for a KV pool that cannot hold a request of the whole context, which would then be
// refused when it came (vLLM, too, refuses to start when its KV cache cannot hold max_model_len).
type PoolError struct {
	Blocks, BlockSize int // the pool
	Tokens            int // the longest request it holds (engine.Engine.MaxRequestTokens)
	Context           int // the model's context in tokens
}

func (e *PoolError) Error() string {
	return fmt.Sprintf("server: the KV pool of %d blocks of %d tokens holds requests of at most %d tokens, less than the model's context of %d tokens",
		e.Blocks, e.BlockSize, e.Tokens, e.Context)
}

// maxBody bounds a request body (OpenAI's and vLLM's answer to a larger one is 413).
const maxBody = 4 << 20

// Server is an OpenAI-compatible HTTP front end of an engine.
type Server struct {
	cfg     Config
	eng     *engine.Engine
	geo     executor.Geometry
	limits  limits
	metrics *metrics
	handler http.Handler
	ends    []int32 // tokens that end every request: EOS and BOS

	queued  atomic.Int64 // requests admitted and waiting for a batch, from when their body begins (MaxQueue's count)
	holds   holdTime     // how long they hold their places
	closing atomic.Bool
	nextID  atomic.Uint64
	failMu  sync.Mutex
	failed  error // the engine loop's error
}

// New builds the server in front of cfg.Engine.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Model == "":
		return nil, errors.New("server: Config.Model is empty, want the name clients ask for")
	case cfg.Vocab == nil || cfg.Engine == nil:
		return nil, errors.New("server: Config.Vocab and Config.Engine are required")
	case cfg.MaxQueue < 0 || cfg.Grace < 0 || cfg.MaxConnections < 0 || cfg.HeaderTimeout < 0 || cfg.BodyTimeout < 0 || cfg.IdleTimeout < 0 || cfg.WriteTimeout < 0:
		return nil, fmt.Errorf("server: MaxQueue %d, Grace %v, MaxConnections %d, HeaderTimeout %v, BodyTimeout %v, IdleTimeout %v, WriteTimeout %v: want none negative",
			cfg.MaxQueue, cfg.Grace, cfg.MaxConnections, cfg.HeaderTimeout, cfg.BodyTimeout, cfg.IdleTimeout, cfg.WriteTimeout)
	}
	geo := cfg.Engine.Geometry()
	if cfg.Vocab.Len() != geo.Vocab {
		return nil, fmt.Errorf("server: the tokenizer has %d tokens, the model %d", cfg.Vocab.Len(), geo.Vocab)
	}
	if n := cfg.Engine.MaxRequestTokens(); n < geo.Context {
		return nil, &PoolError{Blocks: cfg.Engine.Memory().Blocks, BlockSize: geo.BlockSize, Tokens: n, Context: geo.Context}
	}
	for d, def := range map[*time.Duration]time.Duration{&cfg.Grace: 30 * time.Second, &cfg.HeaderTimeout: 10 * time.Second,
		&cfg.BodyTimeout: 30 * time.Second, &cfg.IdleTimeout: 60 * time.Second, &cfg.WriteTimeout: 60 * time.Second} {
		if *d == 0 {
			*d = def
		}
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 1024
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, geo: geo, limits: limits{model: cfg.Model, context: geo.Context, vocab: cfg.Vocab},
		metrics: newMetrics(cfg.Registry, cfg.Model, geo.BlockSize, cfg.Engine.Memory().Blocks)}
	v := cfg.Vocab
	for _, id := range []int{v.EOS, v.BOS} {
		if id >= 0 {
			s.ends = append(s.ends, int32(id))
		}
	}
	s.eng = cfg.Engine
	s.eng.OnStep(s.metrics.step)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", s.complete(false))
	mux.HandleFunc("/v1/chat/completions", s.complete(true))
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/health", s.health)
	metrics := promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, r, http.MethodGet)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: fmt.Sprintf("no endpoint %s %s (endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)", clip(r.Method), clip(r.URL.Path))})
	})
	// A CONNECT to a host (a proxy's request) has no path for the mux to route, which would answer it in plain text.
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect && r.URL.Path == "" {
			methodNotAllowed(w, r, "GET, POST")
			return
		}
		mux.ServeHTTP(w, r)
	})
	if cfg.APIKey != "" {
		s.handler = authorize(s.handler, cfg.APIKey)
	}
	if len(cfg.AllowedOrigins) > 0 { // outside authorize: a browser's preflight carries no credentials
		s.handler = cors.New(cors.Options{AllowedOrigins: cfg.AllowedOrigins, AllowedMethods: []string{http.MethodGet, http.MethodPost},
			AllowedHeaders: []string{"Authorization", "Content-Type"}, MaxAge: 600}).Handler(s.handler)
	}
	s.handler = s.deadlines(s.handler)
	return s, nil
}

// authorize answers 401 to a request without "Authorization: Bearer key", but for GET /health and /metrics.
// The header and the key are compared as SHA-256 digests, in constant time: neither the time nor the length of
// the comparison tells a client how much of a guess was right.
func authorize(next http.Handler, key string) http.Handler {
	want := sha256.Sum256([]byte(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 && strings.EqualFold(scheme, "Bearer") {
			next.ServeHTTP(w, r)
			return
		}
		msg := "invalid API key"
		if scheme == "" {
			msg = "missing API key: send it as Authorization: Bearer KEY"
		}
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg})
	})
}

// deadlines gives a request Config.BodyTimeout to arrive in full, and each write of its answer
// Config.WriteTimeout. The handler that reads a body lifts the read deadline once it has (see complete); any
// other request keeps it, so that the server never waits longer than that for a body it does not read.
func (s *Server) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		next.ServeHTTP(&writeDeadline{ResponseWriter: w, rc: rc, timeout: s.cfg.WriteTimeout}, r)
	})
}

// writeDeadline moves the connection's write deadline to timeout from now before each write and flush: a write
// that finds the buffers full fails once the client has read nothing for that long (a deadline on the whole
// answer would cut off a long stream to a client that reads).
type writeDeadline struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *writeDeadline) Write(b []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *writeDeadline) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's other controls.
func (w *writeDeadline) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Engine is the engine the server runs.
func (s *Server) Engine() *engine.Engine { return s.eng }

// Handler is the server's HTTP handler. The engine's loop must be running (Serve runs it) for requests to
// complete.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve runs the engine's loop and answers HTTP on ln until ctx ends; then it stops admitting, lets the requests
// in flight finish within Config.Grace, cancels the rest and returns nil. It returns an error when ln fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if err := s.eng.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			s.failMu.Lock()
			s.failed = err
			s.failMu.Unlock()
		}
	}()
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: s.cfg.HeaderTimeout, IdleTimeout: s.cfg.IdleTimeout}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(netutil.LimitListener(ln, s.cfg.MaxConnections)) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	s.closing.Store(true)
	grace, cancel := context.WithTimeout(context.Background(), s.cfg.Grace)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.eng.Shutdown(grace) }) // a deadline cancels what is left: its error says only that
	// The HTTP server's handlers end once their requests have: give them the grace and a little for their last
	// writes.
	last, cancelLast := context.WithTimeout(context.Background(), s.cfg.Grace+5*time.Second)
	defer cancelLast()
	if hs.Shutdown(last) != nil {
		hs.Close()
	}
	wg.Wait()
	stopRun()
	<-ran
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) engineErr() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

func (s *Server) unavailable() *apiError {
	if err := s.engineErr(); err != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "engine failed: " + err.Error()}
	}
	if s.closing.Load() {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "server is shutting down, not admitting new requests"}
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	if e := s.unavailable(); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		MaxModelLen int    `json:"max_model_len"`
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list",
		"data": []model{{ID: s.cfg.Model, Object: "model", Created: time.Now().Unix(), OwnedBy: "morphlab", MaxModelLen: s.geo.Context}}})
}

// methodNotAllowed answers 405 with the methods allowed.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed string) {
	target := cmp.Or(r.URL.Path, r.RequestURI) // CONNECT's is a host
	w.Header().Set("Allow", allowed)
	writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("%s %s: method not allowed, want %s", clip(r.Method), clip(target), allowed)})
}

// writeJSON answers v as JSON with status, its Content-Length given, so that the answer is whole once it is
// flushed, before the handler returns.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// body is e in OpenAI's error shape: a null param and code when e has none.
func (e *apiError) body() openai.ErrorResponse {
	b := openai.ErrorBody{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		b.Param = &e.Param
	}
	if e.Code != "" {
		b.Code = e.Code
	}
	return openai.ErrorResponse{Error: b}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body())
}

// job is a request checked against the model and ready for the engine.
type job struct {
	*apiRequest
	id      string
	created int64
	req     engine.Request
}

// prepare checks a parsed request against the served model and turns it into an engine request.
func (s *Server) prepare(r *apiRequest) (*job, *apiError) {
	prompt := r.PromptTokens
	if !r.IsTokens { // a text parseRequest has bounded by the context
		ids := s.cfg.Vocab.Encode(r.PromptText, true, false)
		prompt = make([]int32, len(ids))
		for i, id := range ids {
			prompt[i] = int32(id)
		}
	}
	promptField := "prompt"
	if r.Chat {
		promptField = "messages"
	}
	ctx := s.geo.Context
	switch {
	case len(prompt) == 0:
		return nil, badRequest(promptField, "%s: empty, want at least one token", promptField)
	case len(prompt) >= ctx:
		return nil, s.limits.contextError(promptField, fmt.Sprintf("%d tokens", len(prompt)))
	}
	maxTokens := r.MaxTokens
	if maxTokens == 0 {
		maxTokens = ctx - len(prompt)
	} else if len(prompt)+maxTokens > ctx {
		return nil, badRequest(r.MaxName, "%s=%d with a prompt of %d tokens exceeds the model's context of %d tokens (at most %d)",
			r.MaxName, maxTokens, len(prompt), ctx, ctx-len(prompt))
	}
	var stops []int32
	if !r.IgnoreEOS {
		stops = s.ends
	}
	var stopWhen func(int32) bool
	if len(r.Stop) > 0 { // the loop's own decoder finds the stop strings, so that the request ends in the step
		d := decoder{vocab: s.cfg.Vocab, prev: int(prompt[len(prompt)-1]), stops: r.Stop}
		stopWhen = d.stopped
	}
	p := sample.Params{Temperature: r.Temperature, TopK: r.TopK, TopP: r.TopP, Seed: r.Seed}
	if !r.HasSeed {
		p.Seed = rand.Uint64()
	}
	prefix := "cmpl-"
	if r.Chat {
		prefix = "chatcmpl-"
	}
	return &job{apiRequest: r, id: fmt.Sprintf("%s%x%06x", prefix, rand.Uint32(), s.nextID.Add(1)), created: time.Now().Unix(),
		req: engine.Request{Prompt: prompt, MaxTokens: maxTokens, Stop: stops, StopWhen: stopWhen, Sampling: p}}, nil
}

// admit takes a place in the bounded queue, or answers the 429 of a full one.
func (s *Server) admit() (*place, *apiError) {
	for {
		n := s.queued.Load()
		if s.cfg.MaxQueue > 0 && n >= int64(s.cfg.MaxQueue) {
			wait := s.holds.retryAfter(s.cfg.MaxQueue)
			return nil, &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full", RetryAfter: wait,
				Message: fmt.Sprintf("%d requests are waiting, the most this server queues; retry after %d s", s.cfg.MaxQueue, wait)}
		}
		if s.queued.CompareAndSwap(n, n+1) {
			return &place{s: s, since: time.Now(), held: true}, nil
		}
	}
}

// place is a request's place in the bounded queue, held from when its body begins until its first batch, and
// again from each preemption until it is back in a batch. A preempted request takes its place back even beyond
// MaxQueue (it was admitted): the requests that arrive then are refused until the queue is below it again.
type place struct {
	s     *Server
	since time.Time
	held  bool
}

// reenter takes the place again, if it is not held.
func (p *place) reenter() {
	if !p.held {
		p.held, p.since = true, time.Now()
		p.s.queued.Add(1)
	}
}

// leave gives the place up, if it is held.
func (p *place) leave() {
	if p.held {
		p.held = false
		p.s.queued.Add(-1)
		p.s.holds.add(time.Since(p.since))
	}
}

func (s *Server) complete(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, http.MethodPost)
			return
		}
		if e := firstErr(jsonContent(r), declaredSize(r), s.unavailable()); e != nil {
			writeError(w, e)
			return
		}
		// The request takes its place once its body begins: a client that sends headers and no body holds a
		// connection for BodyTimeout, but no place that others wait for.
		body := &requestBody{r: http.MaxBytesReader(w, r.Body, maxBody), size: r.ContentLength}
		if err := body.begin(); err != nil {
			writeError(w, s.bodyError(err))
			return
		}
		p, aerr := s.admit()
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		defer p.leave()
		if err := body.read(refuseWithin); err != nil {
			writeError(w, s.bodyError(err))
			return
		}
		if !body.ended {
			if e := refusal(body.buf, chat, s.limits); e != nil {
				// The answer goes out at once. The rest of the body is then read and dropped, holding no place,
				// so that a client that reads only once it has sent it all is not reset before it reads the
				// answer; net/http closes the connection after it.
				writeError(w, e)
				http.NewResponseController(w).Flush()
				p.leave()
				io.Copy(io.Discard, body.r)
				return
			}
		}
		b, err := body.rest()
		if err != nil {
			writeError(w, s.bodyError(err))
			return
		}
		http.NewResponseController(w).SetReadDeadline(time.Time{}) // from now on reads only watch for the client going away
		req, aerr := parseRequest(b, chat, s.limits)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		j, aerr := s.prepare(req)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var out output
		if j.Stream {
			out = &sseOutput{w: w, j: j, model: s.cfg.Model}
		} else {
			out = &jsonOutput{w: w, j: j, model: s.cfg.Model}
		}
		s.generate(r.Context(), j, out, p)
	}
}

// jsonContent refuses a body that does not say it is JSON (a web page may post text/plain to another origin
// without asking it first).
func jsonContent(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if t, _, err := mime.ParseMediaType(ct); err == nil && t == "application/json" {
		return nil
	}
	e := &apiError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Message: fmt.Sprintf("Content-Type: want application/json, got %q", clip(ct))}
	if ct == "" {
		e.Message = "Content-Type: missing, want application/json"
	}
	return e
}

// errBodyTooLarge answers a body over maxBody, declared so or found so while it is read.
var errBodyTooLarge = &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
	Message: fmt.Sprintf("request body over %d bytes (%d MiB), the most this server reads", maxBody, maxBody>>20)}

// declaredSize refuses a body whose Content-Length is over maxBody before reading it.
func declaredSize(r *http.Request) *apiError {
	if r.ContentLength > maxBody {
		return errBodyTooLarge
	}
	return nil
}

// requestBody reads a request's body (at most maxBody bytes, through http.MaxBytesReader) in three parts: its
// first byte, which may be long in coming; its start, from which the request may already be refused; and the
// rest.
type requestBody struct {
	r     io.Reader
	size  int64  // Content-Length, -1 when unknown
	buf   []byte // the body read so far
	ended bool   // buf is the whole body
}

// refuseWithin is how much of a body the server reads before it tries to refuse the request from the start
// alone (see refusal): a hostile body's first error comes within it, and the server then neither holds nor
// parses the megabytes after it. Most requests are whole within it.
const refuseWithin = 64 << 10

// begin waits for the body's first byte, or its end when it is empty.
func (b *requestBody) begin() error { return b.read(1) }

// read reads on until b holds n bytes or the whole body.
func (b *requestBody) read(n int) error {
	if b.ended || len(b.buf) >= n {
		return nil
	}
	b.buf = slices.Grow(b.buf, n-len(b.buf))
	m, err := io.ReadFull(b.r, b.buf[len(b.buf):n])
	b.buf = b.buf[:len(b.buf)+m]
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		b.ended = true
		return nil
	}
	return err
}

// rest reads the rest of the body and returns the whole of it.
func (b *requestBody) rest() ([]byte, error) {
	if b.ended {
		return b.buf, nil
	}
	buf := bytes.NewBuffer(b.buf)
	if b.size > int64(len(b.buf)) {
		buf.Grow(int(b.size) - len(b.buf) + bytes.MinRead) // room to read the end of the body without growing again
	}
	_, err := buf.ReadFrom(b.r)
	return buf.Bytes(), err
}

// bodyError is the answer to an error reading a body: 413 beyond maxBody, 408 after Config.BodyTimeout.
func (s *Server) bodyError(err error) *apiError {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return errBodyTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
			Message: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)}
	}
	return badRequest("", "reading the request body: %v", err)
}

// holdTime is an exponentially weighted mean of how long requests held their places in the queue. With MaxQueue
// places each held that long, one frees every hold/MaxQueue on average (Little's law): what a 429's Retry-After
// says.
type holdTime struct {
	mu   sync.Mutex
	mean time.Duration
	n    int
}

// add counts a place held for d.
func (h *holdTime) add(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.mean = d
	}
	h.mean += (d - h.mean) / 8
	h.n++
}

// retryAfter is the seconds, at least 1, until the next of places frees at the mean hold.
func (h *holdTime) retryAfter(places int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(1, int(math.Round(h.mean.Seconds()/float64(places))))
}
