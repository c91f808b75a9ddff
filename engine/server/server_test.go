package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/sample"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/openai"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
)

const testModel = "stories260K-synth"

// testExec wraps the CPU executor: each step sleeps for delay, and waits for gate when gate is set, until
// release.
type testExec struct {
	executor.Executor
	delay time.Duration
	gate  chan struct{}
	once  sync.Once
	fail  atomic.Bool // steps fail from when it is set
}

func (x *testExec) release() {
	if x.gate != nil {
		x.once.Do(func() { close(x.gate) })
	}
}

func (x *testExec) Step(b *executor.Batch) (executor.Result, error) {
	if x.gate != nil {
		<-x.gate
	}
	time.Sleep(x.delay)
	if x.fail.Load() {
		return executor.Result{}, errors.New("device lost")
	}
	return x.Executor.Step(b)
}

// synthModel is stories260K's shape with seeded random weights, and its byte-level synthetic vocabulary.
func synthModel(t testing.TB) (*model.Model, *tokenizer.Vocab) { return synthModelContext(t, 0) }

// synthModelContext is synthModel with a context of n tokens (0: stories260K's 512).
func synthModelContext(t testing.TB, n int) (*model.Model, *tokenizer.Vocab) {
	t.Helper()
	cfg, err := model.ShapeByName("stories260K")
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		cfg.SeqLen = n
	}
	ck := model.Synthesize(cfg, 7)
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	return m, ck.Vocab
}

type testServer struct {
	*Server
	url    string
	x      *testExec
	vocab  *tokenizer.Vocab
	m      *model.Model
	stop   context.CancelFunc
	served chan error
}

// testConfig is what a test may adjust before newTestServer builds the engine and the server: the server's
// config, the engine's options, and a hook the engine calls (before the server's own) with itself.
type testConfig struct {
	Config
	Engine engine.Options
	OnStep func(e *engine.Engine, info engine.StepInfo)
	// Listener, when set, is where the server accepts connections instead of a loopback port.
	Listener net.Listener
}

// newTestServer serves the synthetic model on a loopback port until the test ends; edit adjusts the executor and
// the config first.
func newTestServer(t testing.TB, edit func(*testExec, *testConfig)) *testServer {
	t.Helper()
	m, vocab := synthModel(t)
	cx, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 256}, BlockSize: 16, MaxBatchedTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	x := &testExec{Executor: cx}
	cfg := testConfig{Config: Config{Model: testModel, Vocab: vocab, Grace: 5 * time.Second}}
	if edit != nil {
		edit(x, &cfg)
	}
	eng, err := engine.New(x, cfg.Engine)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OnStep != nil {
		eng.OnStep(func(info engine.StepInfo) { cfg.OnStep(eng, info) })
	}
	cfg.Config.Engine = eng
	s, err := New(cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	ts := startOn(t, s, cfg.Listener)
	ts.x, ts.vocab, ts.m = x, vocab, m
	t.Cleanup(x.release) // before start's cleanup stops the server
	return ts
}

// start serves s on a loopback port until the test ends.
func start(t testing.TB, s *Server) *testServer { return startOn(t, s, nil) }

// startOn serves s on ln, or on a loopback port when ln is nil, until the test ends.
func startOn(t testing.TB, s *Server, ln net.Listener) *testServer {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String(), stop: stop, served: make(chan error, 1)}
	go func() { ts.served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { ts.close(t) })
	return ts
}

// pipeListener accepts the server's ends of in-memory connections (net.Pipe) that Dial makes: a write on one
// waits until the other end reads it, with no socket buffer between, so that a client that stops reading blocks
// the server's next write at once.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.closed) }); return nil }

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the server, waiting until it accepts.
func (l *pipeListener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// close stops the server and waits for Serve to return (once).
func (ts *testServer) close(t testing.TB) {
	ts.stop()
	select {
	case err, ok := <-ts.served:
		if ok && err != nil {
			t.Errorf("Serve: %v", err)
		}
		if ok {
			close(ts.served)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("Serve did not return 20 s after its context ended")
	}
}

func post(t testing.TB, url, body string) (int, http.Header, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, body, "Content-Type", "application/json")
}

// greedy is the reference: the model's greedy continuation of prompt, computed with a plain model.Sequence, up to
// n tokens or the first end token (EOS or BOS, which it includes).
func greedy(t *testing.T, m *model.Model, vocab *tokenizer.Vocab, prompt []int32, n int) []int32 {
	t.Helper()
	return greedyTo(t, m, vocab, prompt, n, false)
}

// greedyTo is greedy, or with ignoreEOS n tokens whatever they are.
func greedyTo(t *testing.T, m *model.Model, vocab *tokenizer.Vocab, prompt []int32, n int, ignoreEOS bool) []int32 {
	t.Helper()
	seq, err := model.NewSequence(m, len(prompt)+n)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := seq.Feed(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < n {
		next := int32(sample.Argmax(logits))
		out = append(out, next)
		if !ignoreEOS && (int(next) == vocab.EOS || int(next) == vocab.BOS) || len(out) == n {
			break
		}
		if logits, err = seq.Feed([]int32{next}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// text decodes output tokens as the server does (end tokens print nothing) and passes the result through JSON,
// which writes each invalid UTF-8 byte as U+FFFD.
func text(vocab *tokenizer.Vocab, prompt, out []int32) string {
	var b []byte
	prev := int(prompt[len(prompt)-1])
	for _, t := range out {
		if vocab.Types[t] != tokenizer.Control {
			b = append(b, vocab.Decode(prev, int(t))...)
		}
		prev = int(t)
	}
	return jsonRoundTrip(string(b))
}

func jsonRoundTrip(s string) string {
	j, _ := json.Marshal(s)
	var back string
	json.Unmarshal(j, &back)
	return back
}

var testPrompt = []int32{1, 300, 301, 302, 303, 304, 305, 306}

func tokenJSON(ids []int32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         *string `json:"text"`
		Message      *struct{ Role, Content string }
		Delta        *struct{ Role, Content *string }
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

// TestCompletion: a greedy completion of a token prompt is the model's greedy continuation, with its usage, and the
// streamed chunks add up to the same text, ending with the finish reason, the usage chunk and [DONE].
func TestCompletion(t *testing.T) {
	ts := newTestServer(t, nil)
	const n = 24
	want := greedy(t, ts.m, ts.vocab, testPrompt, n)
	wantText := text(ts.vocab, testPrompt, want)
	wantReason := "length"
	if len(want) < n {
		wantReason = "stop"
	}
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0}`, testModel, tokenJSON(testPrompt), n)
	code, hdr, b := post(t, ts.url+"/v1/completions", body)
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q: %s", code, hdr.Get("Content-Type"), b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Object != "text_completion" || c.Model != testModel || !strings.HasPrefix(c.ID, "cmpl-") || c.Created == 0 || len(c.Choices) != 1 {
		t.Fatalf("response %s: want a text_completion of model %s with one choice", b, testModel)
	}
	ch := c.Choices[0]
	if ch.Text == nil || *ch.Text != wantText || ch.FinishReason == nil || *ch.FinishReason != wantReason {
		t.Errorf("choice %s, want text %q and finish_reason %s", b, wantText, wantReason)
	}
	if u := c.Usage; u == nil || *u != (openai.Usage{PromptTokens: len(testPrompt), CompletionTokens: len(want), TotalTokens: len(testPrompt) + len(want)}) {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", u, len(testPrompt), len(want))
	}

	stream := strings.Replace(body, "{", `{"stream": true, "stream_options": {"include_usage": true},`, 1)
	chunks := streamChunks(t, ts.url+"/v1/completions", stream)
	var got strings.Builder
	for i, c := range chunks[:len(chunks)-1] {
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].Text == nil || c.Usage != nil {
			t.Fatalf("chunk %d: %+v, want a text_completion chunk with one choice", i, c)
		}
		got.WriteString(*c.Choices[0].Text)
		if fr := c.Choices[0].FinishReason; (fr != nil) != (i == len(chunks)-2) || (fr != nil && *fr != wantReason) {
			t.Errorf("chunk %d of %d: finish_reason %v, want %s on the last chunk before usage only", i, len(chunks), fr, wantReason)
		}
	}
	if got.String() != wantText {
		t.Errorf("streamed text %q, want %q", got.String(), wantText)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage == nil || *last.Usage != *c.Usage {
		t.Errorf("usage chunk %+v, want no choices and usage %+v", last, *c.Usage)
	}
}

// streamChunks posts a streaming request and returns its data chunks, checking the event-stream framing and the
// final [DONE].
func streamChunks(t *testing.T, url, body string) []completion {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(string(raw), "\n\n")
	if len(events) < 2 || events[len(events)-1] != "" || events[len(events)-2] != "data: [DONE]" {
		t.Fatalf("stream %q: want events separated by blank lines ending with data: [DONE]", raw)
	}
	var out []completion
	for _, ev := range events[:len(events)-2] {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("event %q: want one data line", ev)
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		out = append(out, c)
	}
	return out
}

// TestChat: a chat completion is the greedy continuation of the rendered template, in chat's shapes, streamed as
// a role chunk, content chunks and a finish chunk.
func TestChat(t *testing.T) {
	ts := newTestServer(t, nil)
	msgs := `[{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Once upon"}, {"type": "text", "text": " a time"}]}]`
	prompt := ts.vocab.Encode("System: Be brief.\nUser: Once upon a time\nAssistant:", true, false)
	p := make([]int32, len(prompt))
	for i, id := range prompt {
		p[i] = int32(id)
	}
	const n = 16
	want := greedy(t, ts.m, ts.vocab, p, n)
	wantText := text(ts.vocab, p, want)
	body := fmt.Sprintf(`{"model": %q, "messages": %s, "max_completion_tokens": %d, "temperature": 0}`, testModel, msgs, n)
	code, _, b := post(t, ts.url+"/v1/chat/completions", body)
	var c completion
	if err := json.Unmarshal(b, &c); code != 200 || err != nil {
		t.Fatalf("status %d: %s", code, b)
	}
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.Choices) != 1 || c.Choices[0].Message == nil {
		t.Fatalf("response %s: want a chat.completion with one message", b)
	}
	if m := c.Choices[0].Message; m.Role != "assistant" || m.Content != wantText {
		t.Errorf("message %+v, want the assistant's %q", *m, wantText)
	}
	if c.Usage == nil || c.Usage.PromptTokens != len(p) || c.Usage.CompletionTokens != len(want) {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", c.Usage, len(p), len(want))
	}
	chunks := streamChunks(t, ts.url+"/v1/chat/completions", strings.Replace(body, "{", `{"stream": true,`, 1))
	if len(chunks) < 2 {
		t.Fatalf("%d chunks, want a role chunk and a finish chunk at least", len(chunks))
	}
	if d := chunks[0].Choices[0].Delta; d == nil || d.Role == nil || *d.Role != "assistant" {
		t.Errorf("first chunk %+v, want the assistant's role", chunks[0])
	}
	var got strings.Builder
	for _, c := range chunks {
		if c.Object != "chat.completion.chunk" || c.Usage != nil || c.Choices[0].Delta == nil {
			t.Fatalf("chunk %+v, want a chat.completion.chunk with a delta and no usage", c)
		}
		if d := c.Choices[0].Delta; d.Content != nil {
			got.WriteString(*d.Content)
		}
	}
	if got.String() != wantText {
		t.Errorf("streamed %q, want %q", got.String(), wantText)
	}
	if fr := chunks[len(chunks)-1].Choices[0].FinishReason; fr == nil || *fr != *c.Choices[0].FinishReason {
		t.Errorf("last chunk's finish_reason %v, want %s", fr, *c.Choices[0].FinishReason)
	}
}

// TestStopStrings: a stop string ends the text just before it, whether it spans tokens or is one token's text,
// with finish_reason stop and the tokens produced up to it counted.
func TestStopStrings(t *testing.T) {
	ts := newTestServer(t, nil)
	const n = 40
	out := greedy(t, ts.m, ts.vocab, testPrompt, n)
	// Raw text of each output token, and where each starts.
	var raw []byte
	starts := []int{}
	prev := int(testPrompt[len(testPrompt)-1])
	for _, tok := range out {
		starts = append(starts, len(raw))
		if ts.vocab.Types[tok] != tokenizer.Control {
			raw = append(raw, ts.vocab.Decode(prev, int(tok))...)
		}
		prev = int(tok)
	}
	starts = append(starts, len(raw))
	// A stop string spanning tokens k and k+1: the last byte of token k and the first of token k+1, both ASCII, at
	// their first occurrence in the text.
	k := -1
	for i := 3; i+1 < len(out); i++ {
		a, b := starts[i+1]-1, starts[i+1]
		if a >= starts[i] && b < starts[i+2] && raw[a] >= ' ' && raw[a] < 0x7f && raw[b] >= ' ' && raw[b] < 0x7f &&
			bytes.Index(raw, raw[a:b+1]) == a {
			k = i
			break
		}
	}
	if k < 0 {
		t.Skipf("the synthetic model's output %q has no two ASCII bytes across a token boundary", raw)
	}
	stop := string(raw[starts[k+1]-1 : starts[k+1]+1])
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "stop": [%q], "stream": %v}`,
			testModel, tokenJSON(testPrompt), n, stop, stream)
		got, reason, u := complete(t, ts.url, body, stream)
		want := jsonRoundTrip(string(raw[:starts[k+1]-1]))
		if got != want || reason != "stop" || u != nil && u.CompletionTokens != k+2 {
			t.Errorf("stream %v, stop %q spanning tokens %d and %d: %q, %s, usage %+v; want %q, stop, %d tokens",
				stream, stop, k, k+1, got, reason, u, want, k+2)
		}
	}
	// A one-token stop string: the text of the first output token from 3 on whose text is ASCII and occurs first
	// there.
	k = -1
	for i := 3; i < len(out); i++ {
		piece := raw[starts[i]:starts[i+1]]
		if len(piece) > 0 && bytes.Index(raw, piece) == starts[i] && isASCII(piece) {
			k = i
			break
		}
	}
	if k < 0 {
		t.Skipf("no output token of %q occurs first where it stands", raw)
	}
	stop = string(raw[starts[k]:starts[k+1]])
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "stop": %q}`, testModel, tokenJSON(testPrompt), n, stop)
	got, reason, u := complete(t, ts.url, body, false)
	if want := jsonRoundTrip(string(raw[:starts[k]])); got != want || reason != "stop" || u.CompletionTokens != k+1 {
		t.Errorf("one-token stop %q (token %d): %q, %s, %d tokens; want %q, stop, %d tokens", stop, k, got, reason, u.CompletionTokens, want, k+1)
	}
}

// TestIgnoreEOS: a greedy completion that ends at an end token without ignore_eos runs on to max_tokens with it,
// as the model's continuation past the end token, streamed or not.
func TestIgnoreEOS(t *testing.T) {
	ts := newTestServer(t, nil)
	const n = 24
	var prompt, short []int32
	for a := int32(3); a < int32(len(ts.vocab.Pieces)) && prompt == nil; a++ {
		p := []int32{1, a}
		if out := greedy(t, ts.m, ts.vocab, p, n); len(out) < n {
			prompt, short = p, out
		}
	}
	if prompt == nil {
		t.Fatal("no two-token prompt whose greedy continuation ends within 24 tokens")
	}
	full := greedyTo(t, ts.m, ts.vocab, prompt, n, true)
	for _, stream := range []bool{false, true} {
		for _, ignore := range []bool{false, true} {
			want, wantReason := short, "stop"
			if ignore {
				want, wantReason = full, "length"
			}
			body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "ignore_eos": %v, "stream": %v}`,
				testModel, tokenJSON(prompt), n, ignore, stream)
			got, reason, u := complete(t, ts.url, body, stream)
			if wantText := text(ts.vocab, prompt, want); got != wantText || reason != wantReason || u != nil && u.CompletionTokens != len(want) {
				t.Errorf("ignore_eos %v, stream %v: %q, %s, usage %+v; want %q, %s, %d tokens", ignore, stream, got, reason, u, wantText, wantReason, len(want))
			}
		}
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// complete runs a completion, streamed or not, and returns its text, finish reason and usage (nil when streamed
// without include_usage).
func complete(t *testing.T, url, body string, stream bool) (string, string, *openai.Usage) {
	t.Helper()
	if !stream {
		code, _, b := post(t, url+"/v1/completions", body)
		var c completion
		if err := json.Unmarshal(b, &c); code != 200 || err != nil || len(c.Choices) != 1 {
			t.Fatalf("status %d: %s", code, b)
		}
		return *c.Choices[0].Text, *c.Choices[0].FinishReason, c.Usage
	}
	var sb strings.Builder
	reason := ""
	for _, c := range streamChunks(t, url+"/v1/completions", body) {
		if len(c.Choices) == 1 {
			sb.WriteString(*c.Choices[0].Text)
			if fr := c.Choices[0].FinishReason; fr != nil {
				reason = *fr
			}
		}
	}
	return sb.String(), reason, nil
}

// TestSampling: a seeded sampled completion repeats with the same seed, written as an integer or not (1, 1.0,
// 1e0, as counts are); another seed gives another text; int64's extremes are seeds.
func TestSampling(t *testing.T) {
	ts := newTestServer(t, nil)
	run := func(seed string) string {
		body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 32, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": %s}`, testModel, seed)
		got, _, _ := complete(t, ts.url, body, false)
		return got
	}
	a, b, c, d, e := run("1"), run("1"), run("2"), run("1.0"), run("1e0")
	if a != b || a == c || d != a || e != a {
		t.Errorf("seed 1 twice: %q and %q (want equal); 1.0 and 1e0: %q, %q (want the same); seed 2: %q (want different)", a, b, d, e, c)
	}
	if run("9223372036854775807") == run("-9223372036854775808") {
		t.Errorf("seeds 2^63-1 and -2^63 gave the same text")
	}
}

// TestDecoderHoldsBack: the decoder hands out no text that may begin a stop string or a UTF-8 character, finds a
// stop string across pieces, and at the end hands out what it held. Its text is the text as returned, each byte
// that starts no character written as U+FFFD as JSON writes it, so a stop string "\ufffd" matches one.
func TestDecoderHoldsBack(t *testing.T) {
	pieces := []string{"<unk>", "<s>", "</s>", "Hel", "lo", " wor", "ld", "\xe2\x82", "\xac", "END", "E", "ND!"}
	v, err := tokenizer.New(pieces, make([]float32, len(pieces)), nil, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		tok     int32
		delta   string
		stopped bool
	}
	for _, c := range []struct {
		stops   []string
		steps   []step
		rest    string
		endStop bool // the rest ends at a stop string
	}{
		{nil, []step{{3, "Hel", false}, {4, "lo", false}, {7, "", false}, {8, "\u20ac", false}}, "", false},
		{[]string{"lo wo"}, []step{{3, "He", false}, {4, "l", false}, {5, "", true}}, "", false},
		{[]string{"lo wo"}, []step{{3, "He", false}, {4, "l", false}, {6, "lold", false}}, "", false},
		{[]string{"END"}, []step{{3, "Hel", false}, {10, "", false}, {11, "", true}}, "", false},
		{[]string{"ENDX"}, []step{{3, "Hel", false}, {9, "", false}}, "END", false},
		{nil, []step{{3, "Hel", false}, {7, "", false}}, "\ufffd\ufffd", false},
		{nil, []step{{3, "Hel", false}, {7, "", false}, {4, "\ufffd\ufffdlo", false}}, "", false},
		{[]string{"\ufffd"}, []step{{3, "Hel", false}, {7, "", false}, {4, "", true}}, "", false},
		{[]string{"\ufffdl"}, []step{{3, "Hel", false}, {7, "", false}, {4, "\ufffd", true}}, "", false},
		{[]string{"\ufffd"}, []step{{3, "Hel", false}, {7, "", false}}, "", true},
		{[]string{"\u20ac"}, []step{{3, "Hel", false}, {7, "", false}, {8, "", true}}, "", false},
	} {
		d := decoder{vocab: v, prev: 1, stops: c.stops}
		for i, s := range c.steps {
			delta, stopped := d.add(s.tok)
			if delta != s.delta || stopped != s.stopped {
				t.Errorf("stops %q, step %d (%q): %q, %v; want %q, %v", c.stops, i, pieces[s.tok], delta, stopped, s.delta, s.stopped)
			}
		}
		if rest, stopped := d.end(); rest != c.rest || stopped != c.endStop {
			t.Errorf("stops %q: end %q, %v; want %q, %v", c.stops, rest, stopped, c.rest, c.endStop)
		}
	}
}

// TestStopReplacementCharacter: a stop string is found in the text as the client reads it, in which each byte of
// the output that starts no UTF-8 character is U+FFFD (the random weights' output has such bytes): stop "\ufffd"
// ends the text before the first one, with finish_reason stop.
func TestStopReplacementCharacter(t *testing.T) {
	ts := newTestServer(t, nil)
	const n = 40
	var prompt, out []int32
	first := -1
	for a := int32(3); a < 512 && first < 0; a++ {
		prompt = []int32{1, a}
		out = greedyTo(t, ts.m, ts.vocab, prompt, n, true)
		first = strings.Index(text(ts.vocab, prompt, out), "\ufffd")
		if first == 0 {
			first = -1 // one that has text before it
		}
	}
	if first < 0 {
		t.Fatal("no two-token prompt whose greedy output has a U+FFFD after some text")
	}
	want := text(ts.vocab, prompt, out)[:first]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "ignore_eos": true, "stop": ["\ufffd"], "stream": %v}`,
			testModel, tokenJSON(prompt), n, stream)
		got, reason, u := complete(t, ts.url, body, stream)
		if got != want || reason != "stop" || u != nil && u.CompletionTokens >= n {
			t.Errorf("stream %v, prompt %v, stop U+FFFD: %q, %s, usage %+v; want %q, stop, fewer than %d tokens", stream, prompt, got, reason, u, want, n)
		}
	}
}

// TestErrors: every error path answers OpenAI's error shape with the status, type and field expected.
func TestErrors(t *testing.T) {
	ts := newTestServer(t, nil)
	long := make([]int32, 512)
	for i := range long {
		long[i] = 5
	}
	longText := strings.Repeat("z", 600) // one byte token a character: beyond the 512-token context
	for _, c := range []struct {
		path, body string
		status     int
		param      string // "" for null
		msg        string // a part of the message
	}{
		{"/v1/completions", `{"model": `, 400, "", "malformed JSON body"},
		{"/v1/completions", `[1, 2]`, 400, "", "malformed JSON body"},
		{"/v1/completions", `null`, 400, "", "malformed JSON body: want a JSON object"},
		{"/v1/completions", `{"model": "gpt-4", "prompt": "hi"}`, 404, "model", `model "gpt-4" does not exist`},
		{"/v1/completions", `{"prompt": "hi"}`, 400, "model", "model: required"},
		{"/v1/completions", `{"model": 3, "prompt": "hi"}`, 400, "model", "model: want a string, got 3"},
		{"/v1/completions", `{"model": "M"}`, 400, "prompt", "prompt: required"},
		{"/v1/completions", `{"model": "M", "prompt": ` + tokenJSON(long) + `}`, 400, "prompt", "prompt has at least 512 tokens, the model's context is 512"},
		{"/v1/completions", `{"model": "M", "prompt": "` + longText + `"}`, 400, "prompt", "the model's context is 512"},
		{"/v1/chat/completions", `{"model": "M", "messages": [{"role": "user", "content": "` + longText + `"}]}`, 400, "messages", "the model's context is 512"},
		{"/v1/completions", `{"model": "M", "prompt": [1, 99999]}`, 400, "prompt", "prompt[1]=99999 is outside the vocabulary of 512"},
		{"/v1/completions", `{"model": "M", "prompt": [1, -2]}`, 400, "prompt", "prompt[1]=-2, want a token id >= 0"},
		{"/v1/completions", `{"model": "M", "prompt": []}`, 400, "prompt", "prompt: want a string or a non-empty array of token ids"},
		{"/v1/completions", `{"model": "M", "prompt": ["a", "b"]}`, 400, "prompt", "a batch of 2 prompts"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "max_tokens": 0}`, 400, "max_tokens", "max_tokens=0, want at least 1"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "max_tokens": -5}`, 400, "max_tokens", "max_tokens=-5, want at least 1"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "max_tokens": 1.5}`, 400, "max_tokens", "max_tokens: want an integer"},
		{"/v1/completions", `{"model": "M", "prompt": [1, 2], "max_tokens": 511}`, 400, "max_tokens", "max_tokens=511 with a prompt of 2 tokens exceeds the model's context of 512 tokens (at most 510)"},
		{"/v1/chat/completions", `{"model": "M", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}`, 400, "max_completion_tokens", "max_completion_tokens=0"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "temperature": -1}`, 400, "temperature", "temperature=-1, want 0..2"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "top_p": 0}`, 400, "top_p", "top_p=0"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "top_k": -3}`, 400, "top_k", "top_k=-3"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "n": 2}`, 400, "n", "only n=1 is supported"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "seed": 1.5}`, 400, "seed", "seed: want an integer, got 1.5"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "seed": "1"}`, 400, "seed", `seed: want an integer, got "1"`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "seed": 9223372036854775808}`, 400, "seed",
			"seed=9223372036854775808 is out of range: want -9223372036854775808 to 9223372036854775807 (int64, as vLLM's)"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "seed": -9223372036854775809}`, 400, "seed",
			"seed=-9223372036854775809 is out of range: want -9223372036854775808 to 9223372036854775807 (int64, as vLLM's)"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "seed": 9.3e18}`, 400, "seed",
			"seed=9.3e18 is out of range: want -9223372036854775808 to 9223372036854775807 (int64, as vLLM's)"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stop": ["a", ""]}`, 400, "stop", "stop[1] is empty"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}`, 400, "stop", "5 strings, at most 4"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stop": 7}`, 400, "stop", "stop: want a string or an array of strings"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stop": ["a", null]}`, 400, "stop", "stop[1] is null, want a string"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stop": ["a", 7]}`, 400, "stop", "stop[1]: want a string, got 7"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "logit_bias": {"5": 100}}`, 400, "logit_bias", `parameter "logit_bias" is not supported`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "presence_penalty": 0.5}`, 400, "presence_penalty", `parameter "presence_penalty" is not supported except as 0`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "bogus": 1}`, 400, "bogus", `unsupported parameter "bogus"`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "messages": []}`, 400, "messages", `unsupported parameter "messages"`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stream_options": {"include_usage": true}}`, 400, "stream_options", "only allowed with stream: true"},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stream": true, "stream_options": {"extra": 1}}`, 400, "stream_options.extra", `unsupported parameter "stream_options.extra"`},
		{"/v1/completions", `{"model": "M", "prompt": "hi", "stream": "yes"}`, 400, "stream", "stream: want true or false"},
		{"/v1/chat/completions", `{"model": "M"}`, 400, "messages", "messages: required"},
		{"/v1/chat/completions", `{"model": "M", "messages": []}`, 400, "messages", "non-empty array"},
		{"/v1/chat/completions", `{"model": "M", "messages": [{"role": "tool", "content": "x"}]}`, 400, "messages[0].role", `messages[0].role="tool"`},
		{"/v1/chat/completions", `{"model": "M", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "messages[0].content[0]", "only {\"type\": \"text\""},
		{"/v1/chat/completions", `{"model": "M", "messages": [{"role": "user", "content": "x", "tool_calls": []}]}`, 400, "messages[0].tool_calls", `unsupported parameter "messages[0].tool_calls"`},
		{"/v1/chat/completions", `{"model": "M", "prompt": "hi", "messages": [{"role": "user", "content": "x"}]}`, 400, "prompt", `unsupported parameter "prompt"`},
	} {
		body := strings.Replace(c.body, `"model": "M"`, `"model": "`+testModel+`"`, 1)
		code, hdr, b := post(t, ts.url+c.path, body)
		var e openai.ErrorResponse
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err := dec.Decode(&e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if code != c.status || err != nil || hdr.Get("Content-Type") != "application/json" || e.Error.Type != "invalid_request_error" ||
			param != c.param || (c.param == "" && e.Error.Param != nil) || !strings.Contains(e.Error.Message, c.msg) || strings.Contains(e.Error.Message, "\n") {
			t.Errorf("%s %.60s: status %d, %s; want %d, invalid_request_error, param %q, a one-line message with %q", c.path, c.body, code, b, c.status, c.param, c.msg)
		}
	}
	// Methods and paths.
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "/v1/completions", 405}, {"POST", "/v1/models", 405}, {"POST", "/health", 405}, {"GET", "/v1/embeddings", 404}} {
		req, _ := http.NewRequest(c.method, ts.url+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e openai.ErrorResponse
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || err != nil || e.Error.Message == "" {
			t.Errorf("%s %s: status %d (%v), want %d with an error body", c.method, c.path, resp.StatusCode, err, c.status)
		}
	}
}

// TestNoOpParameters: parameters the server does not implement pass at the values that ask for nothing, as
// clients send them by default.
func TestNoOpParameters(t *testing.T) {
	ts := newTestServer(t, nil)
	body := fmt.Sprintf(`{"model": %q, "prompt": ["Once"], "max_tokens": 3, "presence_penalty": 0, "frequency_penalty": 0.0,
		"logprobs": null, "echo": false, "best_of": 1, "logit_bias": {}, "n": 1, "user": "u1", "top_k": -1, "suffix": null}`, testModel)
	code, _, b := post(t, ts.url+"/v1/completions", body)
	if code != 200 {
		t.Errorf("status %d: %s", code, b)
	}
}

// TestModelsAndHealth: /v1/models lists the served model with its context; /health is ok.
func TestModelsAndHealth(t *testing.T) {
	ts := newTestServer(t, nil)
	resp, err := http.Get(ts.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != testModel || list.Data[0].Object != "model" || list.Data[0].MaxModelLen != 512 {
		t.Errorf("models %+v (%v), want one model %s with max_model_len 512", list, err, testModel)
	}
	checkHealth(t, ts.url, 200)
}

func checkHealth(t *testing.T, url string, status int) {
	t.Helper()
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Errorf("/health: %d, want %d", resp.StatusCode, status)
	}
}

type metricFamily = dto.MetricFamily

// scrape reads /metrics into metric families by name.
func scrape(t testing.TB, url string) map[string]*metricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is a gauge's or counter's value, or a histogram's sample count; labels pick the series (name=value pairs).
func value(t testing.TB, fams map[string]*metricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s has no series %v", name, labels)
	return 0
}

// TestMetrics: after requests of known sizes the counters and histograms hold exactly them, and the gauges are
// back at rest.
func TestMetrics(t *testing.T) {
	ts := newTestServer(t, nil)
	var prompt, gen int
	for i, n := range []int{5, 9, 1} {
		body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "stream": %v}`, testModel, tokenJSON(testPrompt[:3+i]), n, i == 1)
		_, _, u := complete(t, ts.url, body, i == 1)
		if u == nil {
			u = &openai.Usage{PromptTokens: 3 + i, CompletionTokens: n} // streamed without usage: greedy runs to max_tokens or stops earlier
		}
		prompt += u.PromptTokens
		gen += u.CompletionTokens
	}
	fams := scrape(t, ts.url)
	reasons := value(t, fams, "morphlab:request_success_total", "finished_reason", "length") + value(t, fams, "morphlab:request_success_total", "finished_reason", "stop")
	for _, c := range []struct {
		name string
		want float64
	}{
		{"morphlab:prompt_tokens_total", float64(prompt)},
		{"morphlab:generation_tokens_total", float64(gen)},
		{"morphlab:time_to_first_token_seconds", 3},
		{"morphlab:e2e_request_latency_seconds", 3},
		{"morphlab:request_time_per_output_token_seconds", 2}, // the one-token request has no TPOT
		{"morphlab:inter_token_latency_seconds", float64(gen - 3)},
		{"morphlab:num_requests_running", 0},
		{"morphlab:num_requests_waiting", 0},
		{"morphlab:kv_cache_usage_perc", 0},
		{"morphlab:num_preemptions_total", 0},
		{"morphlab:num_quantized_layers", 0},
		{"morphlab:kv_cache_blocks", 256},
	} {
		if got := value(t, fams, c.name, "model_name", testModel); got != c.want {
			t.Errorf("%s = %g, want %g", c.name, got, c.want)
		}
	}
	if reasons != 3 || value(t, fams, "morphlab:request_success_total", "finished_reason", "abort") != 0 {
		t.Errorf("request_success_total: %g stop or length, want 3 and no abort", reasons)
	}
	// The endpoint picker's cache info: the pool's block size and blocks as labels.
	if value(t, fams, "morphlab:cache_config_info", "num_gpu_blocks", "256") != 1 || value(t, fams, "morphlab:cache_config_info", "block_size", "16") != 1 {
		t.Errorf("cache_config_info: want 1 with block_size 16 and num_gpu_blocks 256")
	}
}

// TestPrefixCacheMetrics: with prefix caching, a 40-token prompt sent twice, one request after the other, is
// queried twice (80 tokens) and found cached the second time for its first two 16-token blocks (the third is
// partial); the counters say so, as vLLM's do, and stay at 0 without the cache.
func TestPrefixCacheMetrics(t *testing.T) {
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(3 + i*7%500)
	}
	for _, caching := range []bool{false, true} {
		ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.Engine.PrefixCaching = caching })
		for range 2 {
			complete(t, ts.url, fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": 3, "temperature": 0}`, testModel, tokenJSON(prompt)), false)
		}
		fams := scrape(t, ts.url)
		queries := value(t, fams, "morphlab:prefix_cache_queries_total", "model_name", testModel)
		hits := value(t, fams, "morphlab:prefix_cache_hits_total", "model_name", testModel)
		if want := map[bool][2]float64{false: {0, 0}, true: {80, 32}}[caching]; queries != want[0] || hits != want[1] {
			t.Errorf("caching %v: %g queries, %g hits; want %v", caching, queries, hits, want)
		}
	}
}

// TestQueueFull: with MaxQueue 1, a request arriving while one waits for its first batch is answered 429 with
// Retry-After, and the waiting ones complete.
func TestQueueFull(t *testing.T) {
	ts := newTestServer(t, func(x *testExec, c *testConfig) {
		x.gate = make(chan struct{})
		c.MaxQueue = 1
	})
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 4}`, testModel)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	send := func(i int) {
		wg.Go(func() { codes[i], _, _ = post(t, ts.url+"/v1/completions", body) })
	}
	send(0)
	waitFor(t, func() bool { return ts.Engine().Pending() == 1 && ts.queued.Load() == 0 }) // in a batch: the step is held
	send(1)
	waitFor(t, func() bool { return ts.queued.Load() == 1 })
	code, hdr, b := post(t, ts.url+"/v1/completions", body)
	var e openai.ErrorResponse
	if err := json.Unmarshal(b, &e); code != 429 || err != nil || hdr.Get("Retry-After") != "1" || e.Error.Type != "rate_limit_error" {
		t.Errorf("third request: %d, Retry-After %q, %s; want 429, 1 and a rate_limit_error", code, hdr.Get("Retry-After"), b)
	}
	ts.x.release()
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 {
		t.Errorf("the admitted requests: %v, want 200 200", codes)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDisconnectFreesKV: a client that goes away mid-request cancels it, whether it streams (the server notices
// on its next write, or from the connection) or waits for one JSON answer (only the connection tells): the KV
// usage metric, above 0 while it ran, returns to 0 long before the request could have finished, and the request
// counts as aborted.
func TestDisconnectFreesKV(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			ts := newTestServer(t, func(x *testExec, _ *testConfig) { x.delay = 5 * time.Millisecond })
			if out := greedy(t, ts.m, ts.vocab, testPrompt, 400); len(out) < 400 {
				t.Fatalf("the synthetic model's greedy output ends after %d tokens, want one that runs to 400", len(out))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": 400, "temperature": 0, "stream": %v}`, testModel, tokenJSON(testPrompt), stream)
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			start := time.Now()
			waitFor(t, func() bool { return value(t, scrape(t, ts.url), "morphlab:kv_cache_usage_perc") > 0 })
			cancel()
			<-done
			waitFor(t, func() bool {
				f := scrape(t, ts.url)
				return value(t, f, "morphlab:kv_cache_usage_perc") == 0 && value(t, f, "morphlab:request_success_total", "finished_reason", "abort") == 1
			})
			if d := time.Since(start); d > 1500*time.Millisecond { // 400 steps of at least 5 ms each: 2 s to run to its end
				t.Errorf("the KV was freed %v after the request started, want well before it could have finished", d)
			}
			if n := ts.Engine().Pending(); n != 0 {
				t.Errorf("%d requests pending after the disconnect, want 0", n)
			}
		})
	}
}

// TestShutdown: when Serve's context ends, a running request finishes within the grace period, new connections
// are refused, /health stops answering ok, and Serve returns nil; a request still running at the deadline is
// ended with an error event.
func TestShutdown(t *testing.T) {
	for _, c := range []struct {
		name     string
		grace    time.Duration
		tokens   int
		complete bool
	}{{"finishes", 5 * time.Second, 40, true}, {"deadline", 100 * time.Millisecond, 480, false}} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t, func(x *testExec, cfg *testConfig) { x.delay = 2 * time.Millisecond; cfg.Grace = c.grace })
			if out := greedy(t, ts.m, ts.vocab, testPrompt, c.tokens); len(out) < c.tokens {
				t.Fatalf("the synthetic model's greedy output ends after %d tokens, want one that runs to %d", len(out), c.tokens)
			}
			body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "stream": true}`, testModel, tokenJSON(testPrompt), c.tokens)
			resp, err := http.Post(ts.url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ts.stop()
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			tail := string(rest)
			if strings.Contains(tail, `"error"`) == c.complete || !strings.HasSuffix(tail, "data: [DONE]\n\n") {
				t.Errorf("stream after the stop: ...%q; want it to end with [DONE], an error event %v", tail[max(0, len(tail)-300):], !c.complete)
			}
			select {
			case err := <-ts.served:
				close(ts.served)
				if err != nil {
					t.Errorf("Serve: %v, want nil", err)
				}
			case <-time.After(c.grace + 10*time.Second):
				t.Fatal("Serve did not return")
			}
			if d := time.Since(start); d > c.grace+5*time.Second {
				t.Errorf("Serve took %v after the stop, grace %v", d, c.grace)
			}
			_, err = http.Get(ts.url + "/health")
			var op *net.OpError
			if !errors.As(err, &op) {
				t.Errorf("GET /health after Serve returned: %v, want a refused connection", err)
			}
		})
	}
}
