// Package loadtest load-tests an OpenAI-compatible server the way vLLM's benchmark_serving does, so that its
// figures compare with vLLM's: requests arrive open-loop (each at its own time, whether or not earlier ones
// have finished), every response is streamed, and the metrics follow vLLM's definitions.
//
// Run is a whole load test: Options say where the requests go (Config), what they are at each rate (a Workload:
// synthetic, or a trace's own), and what to make of them (an SLO for goodput, a knee target, a capacity to
// plan, a plot); the Report it returns is the JSON that 'morphlab loadtest --json' prints and scripts read. With
// Options.Serve something else stands in for the server, such as a simulated deployment: Report.Workload makes a
// report's requests again, and 'morphlab simulate --loadtest' serves them in virtual time.
//
// Underneath, a run of one rate is a list of Requests, each with its arrival time, prompt and maximum output
// tokens. Arrivals draws them as vLLM does (gaps from a gamma distribution: Poisson at burstiness 1, burstier
// below 1), PromptWorkload and LengthWorkload give them prompts, and FromTrace replays a trace's own arrivals and
// lengths instead. Send sends each request at its time to POST /v1/completions (or /v1/chat/completions) with
// stream: true and stream_options.include_usage, and records per request when it was sent, the time to its first
// chunk with a choice (TTFT), the gaps between later such chunks (ITL), the time to the last one (E2EL), and its
// output tokens (the server's usage when given, else the chunks counted). Compute turns the outcomes into
// Metrics; Knee finds the knee of the Latency-RPS curve a sweep of rates draws; PlanCapacity turns the knee into
// instances and cost; Compare sets the knees of several saved sweeps side by side.
//
// Outcomes: a 200 stream that ends with [DONE] after at least one token is completed; a 429 is rejected (its
// Retry-After is recorded but not honoured: the load is open-loop, so retrying later would change the offered
// load, and the rejection is what the measurement reports); any other status, a connection error, an error
// event, a stream cut before [DONE] and a timeout are failures.
//
// A run is bounded: it sends exactly the requests given, each at most once, only to the URL given (no
// redirects followed, no proxy from the environment), each limited by Config.Timeout, and the whole run ends at
// the last arrival plus Config.Timeout; requests not finished by then are failures.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/morphlab/morphlab/internal/openai"
)

// Request is one request of a load test.
type Request struct {
	Arrival time.Duration // when it is due, from the start of the run
	Prompt  openai.Prompt
	// PromptTokens is the prompt's length when the client knows it (token-id prompts, traces), else 0; the
	// server's usage, when it reports one, takes precedence.
	PromptTokens int
	MaxTokens    int // max_tokens of the request
}

// Config says where and how to send a run's requests.
type Config struct {
	URL            string        // the server's root, such as http://127.0.0.1:8000
	Model          string        // the model field of every request
	Chat           bool          // POST /v1/chat/completions with the prompt as one user message, instead of /v1/completions
	MaxConcurrency int           // requests in flight at most; 0 for no limit. A request waits for a slot before it is sent
	Timeout        time.Duration // per request, and the drain after the last arrival; 0 means DefaultTimeout
	Client         *http.Client  // nil for one that follows no redirects and uses no proxy
	// IgnoreEOS sends vLLM's ignore_eos with every request, so that each one generates its max tokens (what
	// vLLM's benchmark_serving --ignore-eos does); the server must know the parameter.
	IgnoreEOS bool
	// APIKey, when set, is sent with every request as Authorization: Bearer APIKey.
	APIKey string
	// Progress, when set, is called after each request ends with the count ended so far and the total, one call
	// at a time (for a progress bar).
	Progress func(done, total int)
	// ServerHeader, when set, names a response header that each outcome records (Outcome.Server): a proxy's
	// name for the replica that served, such as HAProxy's "http-response set-header X-Served-By %s".
	ServerHeader string
}

// DefaultTimeout is the per-request limit when Config.Timeout is 0.
const DefaultTimeout = 5 * time.Minute

// Status is how a request ended.
type Status string

const (
	Completed Status = "completed"
	Rejected  Status = "rejected" // 429
	Failed    Status = "failed"
)

// Outcome is what happened to one request, with its stream timings.
type Outcome struct {
	Status       Status          `json:"status"`
	HTTPStatus   int             `json:"http_status,omitempty"`
	Error        string          `json:"error,omitempty"`
	RetryAfter   string          `json:"retry_after,omitempty"` // of a 429
	Sent         time.Duration   `json:"sent_ns"`               // when the request went out, from the start of the run (-1 if never)
	TTFT         time.Duration   `json:"ttft_ns"`               // from sending to the first chunk with a choice
	ITL          []time.Duration `json:"itl_ns"`                // gaps between successive chunks with a choice
	Latency      time.Duration   `json:"e2el_ns"`               // from sending to the last chunk with a choice
	OutputTokens int             `json:"output_tokens"`         // usage.completion_tokens, else the chunks with a choice
	PromptTokens int             `json:"prompt_tokens"`         // usage.prompt_tokens, else Request.PromptTokens
	Ended        time.Duration   `json:"ended_ns"`              // when it ended (completed, failed or timed out), from the start of the run (-1 if never sent)
	Server       string          `json:"server,omitempty"`      // the response's Config.ServerHeader
}

// Result is a run: its requests' outcomes (in the order of the requests) and its duration, from the start to
// the end of the last response, as vLLM's benchmark_duration; Start is when it started on the wall clock.
type Result struct {
	Requests []Request `json:"-"`
	Outcomes []Outcome `json:"outcomes"`
	Duration time.Duration
	Start    time.Time `json:"start"`
}

// CheckURL checks that u is an http(s) server root, such as http://127.0.0.1:8000, and returns it without a
// trailing slash.
func CheckURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("url %q: %v", u, err)
	}
	if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" || p.User != nil {
		return "", fmt.Errorf("url %q: want a server root such as http://127.0.0.1:8000", u)
	}
	return strings.TrimSuffix(u, "/"), nil
}

// newClient returns an HTTP client for one server: no proxy, no redirects (a 3xx is answered as it is, and
// counts as a failure), and enough idle connections for every request in flight.
func newClient(conns int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DisableCompression:  true, // a compressed stream would arrive in bursts and blur the timings
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Send sends reqs (sorted by arrival) as the config says and returns their outcomes. It returns an error only
// for a bad config or request list; what happens to requests is in their outcomes. Cancelling ctx ends the run
// early, with the unfinished requests failed.
func Send(ctx context.Context, cfg Config, reqs []Request) (*Result, error) {
	base, err := CheckURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("no model: every request names one")
	}
	if cfg.MaxConcurrency < 0 {
		return nil, fmt.Errorf("max concurrency %d, want 0 (no limit) or more", cfg.MaxConcurrency)
	}
	if len(reqs) == 0 {
		return nil, errors.New("no requests to send")
	}
	for i, r := range reqs {
		switch {
		case r.Arrival < 0:
			return nil, fmt.Errorf("request %d: arrival %v is negative", i, r.Arrival)
		case i > 0 && r.Arrival < reqs[i-1].Arrival:
			return nil, fmt.Errorf("request %d: arrival %v before the previous one's %v, want them sorted", i, r.Arrival, reqs[i-1].Arrival)
		case r.MaxTokens < 1:
			return nil, fmt.Errorf("request %d: max tokens %d, want at least 1", i, r.MaxTokens)
		case cfg.Chat && r.Prompt.Tokens != nil:
			return nil, fmt.Errorf("request %d: a chat request takes a text prompt, not token ids", i)
		}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	client := cfg.Client
	if client == nil {
		conns := cfg.MaxConcurrency
		if conns == 0 {
			conns = min(len(reqs), 1024)
		}
		client = newClient(conns)
		defer client.CloseIdleConnections()
	}
	endpoint := base + "/v1/completions"
	if cfg.Chat {
		endpoint = base + "/v1/chat/completions"
	}

	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		if bodies[i], err = requestBody(cfg, r); err != nil {
			return nil, fmt.Errorf("request %d: %v", i, err)
		}
	}
	res := &Result{Requests: reqs, Outcomes: make([]Outcome, len(reqs))}
	for i := range res.Outcomes {
		res.Outcomes[i] = Outcome{Status: Failed, Error: "not sent before the run ended", Sent: -1, Ended: -1}
	}
	start := time.Now()
	res.Start = start
	ctx, cancel := context.WithDeadline(ctx, start.Add(reqs[len(reqs)-1].Arrival+timeout))
	defer cancel()
	var slots chan struct{}
	if cfg.MaxConcurrency > 0 {
		slots = make(chan struct{}, cfg.MaxConcurrency)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		nDone  int
		report = func() {
			if cfg.Progress != nil {
				mu.Lock()
				nDone++
				cfg.Progress(nDone, len(reqs))
				mu.Unlock()
			}
		}
	)
dispatch:
	for i, r := range reqs {
		if !sleepUntil(ctx, start.Add(r.Arrival)) {
			break
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				break dispatch
			}
		}
		wg.Go(func() {
			if slots != nil {
				defer func() { <-slots }()
			}
			res.Outcomes[i] = sendRequest(ctx, client, endpoint, cfg.APIKey, cfg.ServerHeader, bodies[i], r, start, timeout)
			res.Outcomes[i].Ended = time.Since(start)
			report()
		})
	}
	wg.Wait()
	res.Duration = time.Since(start)
	return res, nil
}

// sleepUntil waits until t and reports whether ctx is still live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// requestBody is the JSON body of r: greedy sampling (temperature 0, as vLLM's benchmark sends), streamed, with
// usage asked for, and ignore_eos when cfg asks for it.
func requestBody(cfg Config, r Request) ([]byte, error) {
	zero := 0.0
	so := &openai.StreamOptions{IncludeUsage: true}
	if cfg.Chat {
		return json.Marshal(openai.ChatRequest{Model: cfg.Model, Messages: []openai.Message{{Role: "user", Content: r.Prompt.Text}},
			MaxTokens: &r.MaxTokens, Temperature: &zero, Stream: true, StreamOptions: so, IgnoreEOS: cfg.IgnoreEOS})
	}
	return json.Marshal(openai.CompletionRequest{Model: cfg.Model, Prompt: r.Prompt, MaxTokens: &r.MaxTokens,
		Temperature: &zero, Stream: true, StreamOptions: so, IgnoreEOS: cfg.IgnoreEOS})
}

// sendRequest sends one request and reads its stream.
func sendRequest(ctx context.Context, client *http.Client, endpoint, apiKey, serverHeader string, body []byte, r Request, start time.Time, timeout time.Duration) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := Outcome{Status: Failed, PromptTokens: r.PromptTokens}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		out.Error = err.Error()
		return out
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	sent := time.Now()
	out.Sent = sent.Sub(start)
	resp, err := client.Do(req)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer resp.Body.Close()
	out.HTTPStatus = resp.StatusCode
	if serverHeader != "" {
		out.Server = resp.Header.Get(serverHeader)
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusTooManyRequests {
			out.Status = Rejected
			out.RetryAfter = resp.Header.Get("Retry-After")
		}
		out.Error = statusError(resp).Error()
		return out
	}

	stream := openai.NewStream(resp.Body)
	var (
		last   time.Time
		chunks int
		usage  *openai.Usage
	)
	for {
		c, err := stream.Next()
		now := time.Now()
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Error = err.Error()
			return out
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		if c.Choices == 0 {
			continue
		}
		if chunks == 0 {
			out.TTFT = now.Sub(sent)
		} else {
			out.ITL = append(out.ITL, now.Sub(last))
		}
		last = now
		chunks++
	}
	if chunks == 0 {
		out.Error = "stream ended without a token"
		return out
	}
	out.Status, out.Error = Completed, ""
	out.Latency = last.Sub(sent)
	out.OutputTokens = chunks
	if usage != nil {
		out.OutputTokens = usage.CompletionTokens
		out.PromptTokens = usage.PromptTokens
	}
	return out
}

// statusError reads an error response into one line: the status and the server's message when the body is
// OpenAI's error JSON.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e openai.ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return &openai.APIError{Status: resp.StatusCode, Body: e.Error}
	}
	return fmt.Errorf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}
