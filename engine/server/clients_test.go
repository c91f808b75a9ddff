package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/internal/openai"
)

// errorBody reads an error answer: OpenAI's shape with no other field, one line of message.
func errorBody(t *testing.T, b []byte) openai.ErrorBody {
	t.Helper()
	var e openai.ErrorResponse
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Message == "" || e.Error.Type == "" || strings.Contains(e.Error.Message, "\n") {
		t.Fatalf("error body %.300s (%v): want OpenAI's error shape with a one-line message and a type", b, err)
	}
	return e.Error
}

// do sends a request with the given headers (name, value pairs) and returns the status, headers and body.
func do(t testing.TB, method, url, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestLongPromptBoundedWork: a 4 MB text prompt, or chat message, far beyond the context is refused with a 400
// naming the context, from its length (a message's with the text the template adds: "User: ", "\n",
// "Assistant:"): the server allocates the body and little more.
func TestLongPromptBoundedWork(t *testing.T) {
	ts := newTestServer(t, nil)
	text := strings.Repeat("a ", 2_097_052)
	for _, c := range []struct {
		path, body, param string
		bytes             int
	}{
		{"/v1/completions", fmt.Sprintf(`{"model": %q, "prompt": %q, "max_tokens": 1}`, testModel, text), "prompt", len(text)},
		{"/v1/chat/completions", fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": %q}], "max_tokens": 1}`, testModel, text), "messages",
			len("User: ") + len(text) + len("\nAssistant:")},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, _, b := post(t, ts.url+c.path, c.body)
		runtime.ReadMemStats(&after)
		e := errorBody(t, b)
		want := fmt.Sprintf("%s has at least %d tokens (%d bytes of text), the model's context is 512 tokens (a prompt may have at most 511, leaving one for the output)",
			c.param, ts.vocab.MinTokens(c.bytes)+1, c.bytes)
		if code != 400 || e.Param == nil || *e.Param != c.param || e.Message != want {
			t.Errorf("%s with a 4 MB prompt: %d %s; want 400 on %s: %q", c.path, code, b, c.param, want)
		}
		// About the body (4 MiB; twice that under the race detector).
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 12<<20 {
			t.Errorf("%s with a 4 MB prompt: %.1f MiB allocated, want at most 12", c.path, float64(alloc)/(1<<20))
		}
	}
}

// TestConnect: CONNECT, to a host (a proxy's request) or to a path, gets a 405 in OpenAI's JSON error shape with
// Allow, as every other method the server does not serve does.
func TestConnect(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, c := range []struct{ target, allow, msg string }{
		{"example.com:443", "GET, POST", "CONNECT example.com:443: method not allowed, want GET, POST"},
		{"/v1/models", "GET", "CONNECT /v1/models: method not allowed, want GET"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: example.com:443\r\n\r\n", c.target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if e := errorBody(t, b); resp.StatusCode != 405 || resp.Header.Get("Allow") != c.allow || e.Message != c.msg {
			t.Errorf("CONNECT %s: %d, Allow %q, %s; want 405, Allow %q and %q", c.target, resp.StatusCode, resp.Header.Get("Allow"), b, c.allow, c.msg)
		}
	}
}

// TestLongNamesBoundedWork: a 4 MB name, of a parameter, a message's member or a stream option, of the model or
// of a role, is refused from its length in the body, before it is decoded: the server allocates the body and
// little more.
func TestLongNamesBoundedWork(t *testing.T) {
	ts := newTestServer(t, nil)
	const size = 4 << 20
	fill := func(before, after string) string {
		before = strings.Replace(before, `"model": "m"`, `"model": "`+testModel+`"`, 1)
		return before + strings.Repeat("\u2028", (size-len(before)-len(after))/3) + after
	}
	clipped := strings.Repeat("\u2028", 40) + "..."
	start := fmt.Sprintf("%q", clipped)
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/v1/completions", fill(`{"model": "m", "prompt": "Once", "`, `": 1}`), 400, "unsupported parameter " + start},
		{"/v1/chat/completions", fill(`{"model": "m", "messages": [{"role": "user", "`, `": 1}]}`), 400, fmt.Sprintf("unsupported parameter %q", "messages[0]."+clipped)},
		{"/v1/completions", fill(`{"model": "m", "prompt": "Once", "stream": true, "stream_options": {"`, `": 1}}`), 400,
			fmt.Sprintf("unsupported parameter %q", "stream_options."+clipped)},
		{"/v1/completions", fill(`{"model": "`, `", "prompt": "Once"}`), 404, fmt.Sprintf("model %s does not exist; this server serves %q", start, testModel)},
		{"/v1/chat/completions", fill(`{"model": "m", "messages": [{"role": "`, `", "content": ""}]}`), 400,
			"messages[0].role=" + start + ", want system, developer, user or assistant"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, _, b := post(t, ts.url+c.path, c.body)
		runtime.ReadMemStats(&after)
		if e := errorBody(t, b); code != c.status || e.Message != c.msg {
			t.Errorf("%.60s... (%d bytes): %d %.300s; want %d: %.300q", c.body, len(c.body), code, b, c.status, c.msg)
		}
		// About the body (4 MiB; twice that under the race detector).
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 12<<20 {
			t.Errorf("%.60s... (%d bytes): %.1f MiB allocated, want at most 12", c.body, len(c.body), float64(alloc)/(1<<20))
		}
	}
}

// TestLongString: longString tells a string longer than its limit in the body, quotes included, from one that is
// not, after a comma or a colon and white space, escapes counted as written; it decodes the first 40 characters.
func TestLongString(t *testing.T) {
	a := strings.Repeat("a", 60)
	for _, c := range []struct {
		body   string
		tokens int // tokens to read first
		start  string
		long   bool
	}{
		{`{"` + strings.Repeat("a", 254) + `": 1}`, 1, "", false}, // 256 bytes with its quotes
		{`{"` + strings.Repeat("a", 255) + `": 1}`, 1, a[:40] + "...", true},
		{`{"` + strings.Repeat(`\"`, 127) + `": 1}`, 1, "", false},
		{`{"` + strings.Repeat(`\"`, 128) + `": 1}`, 1, strings.Repeat(`"`, 40) + "...", true},
		{`{"` + strings.Repeat(`\u2028`, 50) + `": 1}`, 1, strings.Repeat("\u2028", 40) + "...", true},
		{`{"` + strings.Repeat(`\ud83d\ude00`, 30) + `": 1}`, 1, strings.Repeat("\U0001F600", 20) + "...", true},
		{`{"model": 1 ,` + "\n\t" + ` "` + strings.Repeat("b", 300) + `": 1}`, 3, strings.Repeat("b", 40) + "...", true},
		{`{"model" :  "` + strings.Repeat("c", 300) + `"}`, 2, strings.Repeat("c", 40) + "...", true},
		{`{"model": "` + strings.Repeat("c", 300), 2, strings.Repeat("c", 40) + "...", true},
		{`{"model": "` + strings.Repeat("c", 200), 2, "", false}, // ends inside the string
		{`{"model": 7}`, 2, "", false},
	} {
		dec := jsontext.NewDecoder(bytes.NewBufferString(c.body))
		for range c.tokens {
			if _, err := dec.ReadToken(); err != nil {
				t.Fatal(err)
			}
		}
		if start, long := longString(dec, 256); start != c.start || long != c.long {
			t.Errorf("%.80q after %d tokens: %q, %v; want %q, %v", c.body, c.tokens, start, long, c.start, c.long)
		}
	}
}

// TestEmptyMessagesBoundedWork: a chat of 144,000 empty messages (4 MB) is refused from the length of the text its
// messages render to ("User: \n" each, then "Assistant:"), not from their content, which is empty: as soon as
// that text cannot fit in the context, before the rest is read or any of it tokenized.
func TestEmptyMessagesBoundedWork(t *testing.T) {
	ts := newTestServer(t, nil)
	const n = 144_000
	body := fmt.Sprintf(`{"model": %q, "messages": [%s], "max_tokens": 1}`, testModel,
		strings.TrimSuffix(strings.Repeat(`{"role":"user","content":""},`, n), ","))
	// The first count of messages whose text, BOS included, certainly exceeds the context.
	k, rendered := 0, 0
	for k = 1; ts.vocab.MinTokens(7*k+len("Assistant:"))+1 < 512; k++ {
	}
	rendered = 7*k + len("Assistant:")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, _, b := post(t, ts.url+"/v1/chat/completions", body)
	runtime.ReadMemStats(&after)
	e := errorBody(t, b)
	want := fmt.Sprintf("messages has at least %d tokens (%d bytes of text), the model's context is 512 tokens (a prompt may have at most 511, leaving one for the output)",
		ts.vocab.MinTokens(rendered)+1, rendered)
	if code != 400 || e.Param == nil || *e.Param != "messages" || e.Message != want {
		t.Errorf("%d empty messages (%d bytes): %d %s; want 400 on messages: %q (refused at message %d)", n, len(body), code, b, want, k)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 12<<20 {
		t.Errorf("%d empty messages: %.1f MiB allocated, want at most 12", n, float64(alloc)/(1<<20))
	}
}

// TestRefusedFromStart: a body is refused from its first 64 KiB when they already make the refusal certain, without
// waiting for the rest: a client that announces 4 MiB and sends only that start gets its 400 (and the connection
// closed after it) within the time it is given to send the whole body, not a 408 after it. A start that does not
// decide, a long prompt's, waits for the rest. A client that sends the whole body before it reads gets the answer.
func TestRefusedFromStart(t *testing.T) {
	ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.BodyTimeout = 5 * time.Second })
	model := fmt.Sprintf(`{"model": %q, `, testModel)
	for _, c := range []struct {
		path, start, want string
	}{
		{"/v1/chat/completions", model + `"messages": [` + strings.Repeat(`{"role":"user","content":""},`, 3000), "the model's context is 512 tokens"},
		{"/v1/completions", model + `"prompt": "Once", "` + strings.Repeat("k", 70_000), "unsupported parameter"},
		{"/v1/completions", `{"model": "` + strings.Repeat("m", 70_000), "does not exist"},
		{"/v1/completions", model + `"prompt": "` + strings.Repeat("a", 70_000), ""},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", c.path, 4<<20, c.start)
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if c.want == "" {
			conn.Close()
			if err == nil {
				t.Errorf("%.40s... (%d of %d bytes): %s before the rest of the body, want no answer yet", c.start, len(c.start), 4<<20, resp.Status)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%.40s... (%d of %d bytes): %v, want a refusal before the rest of the body", c.start, len(c.start), 4<<20, err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close() // the rest of the body never comes
		if resp.StatusCode/100 != 4 || !resp.Close || !strings.Contains(errorBody(t, b).Message, c.want) {
			t.Errorf("%.40s... (%d of %d bytes): %s (Connection: %q) %s; want a refusal saying %q, the connection closed", c.start, len(c.start), 4<<20,
				resp.Status, resp.Header.Get("Connection"), b, c.want)
		}
	}
	// A client that reads only once it has sent the whole body, through a small send buffer, still gets the
	// answer: the server reads the rest, and does not reset the connection while the client is sending.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
	body := model + `"prompt": "Once", "` + strings.Repeat("k", 4<<20-200) + `": 1}`
	if _, err := fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatalf("sending a %d-byte body refused from its start: %v", len(body), err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("a %d-byte body refused from its start, sent whole before reading: %v, %v; want 400", len(body), resp, err)
	}
}

// TestParsingCountsAgainstQueue: a request whose body is still arriving holds a place in the bounded queue, so
// with MaxQueue 1 another request is answered 429 at once; when the slow client goes, the place is free again.
func TestParsingCountsAgainstQueue(t *testing.T) {
	ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.MaxQueue = 1 })
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\": ")
	waitFor(t, func() bool { return ts.queued.Load() == 1 })
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel)
	code, hdr, b := post(t, ts.url+"/v1/completions", body)
	if e := errorBody(t, b); code != 429 || hdr.Get("Retry-After") != "1" || e.Type != "rate_limit_error" {
		t.Errorf("a request while another's body arrives, MaxQueue 1: %d %s, want 429 with Retry-After", code, b)
	}
	conn.Close()
	waitFor(t, func() bool { return ts.queued.Load() == 0 })
	if code, _, b := post(t, ts.url+"/v1/completions", body); code != 200 {
		t.Errorf("a request after the slow client left: %d %s, want 200", code, b)
	}
}

// TestStalledBodiesHoldNoPlace: a request takes its place in the bounded queue once its body has begun, so
// connections that send headers announcing a body and then nothing hold no place: with MaxQueue 4, four of them
// (each told "100 Continue", so each is in the handler, waiting for its body) do not turn a valid request away.
func TestStalledBodiesHoldNoPlace(t *testing.T) {
	ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.MaxQueue = 4 })
	for range 4 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
		if line, err := bufio.NewReader(conn).ReadString('\n'); line != "HTTP/1.1 100 Continue\r\n" {
			t.Fatalf("headers with Expect: 100-continue: %q, %v; want 100 Continue", line, err)
		}
	}
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel)
	if code, hdr, b := post(t, ts.url+"/v1/completions", body); code != 200 {
		t.Errorf("a request while four bodies have not begun, MaxQueue 4: %d (Retry-After %q) %s, want 200", code, hdr.Get("Retry-After"), b)
	}
}

// TestRetryAfter: a 429's Retry-After is the mean time a request held its place in the queue over the places,
// in whole seconds and at least 1 (at MaxQueue places held that long each, one frees that often).
func TestRetryAfter(t *testing.T) {
	var h holdTime
	if got := h.retryAfter(4); got != 1 {
		t.Errorf("no hold yet: Retry-After %d, want 1", got)
	}
	h.add(30 * time.Second) // the first hold is the mean
	if got := h.retryAfter(4); got != 8 {
		t.Errorf("a hold of 30 s over 4 places: Retry-After %d, want 8 (7.5 s up)", got)
	}
	for range 100 {
		h.add(2 * time.Second)
	}
	if got := h.retryAfter(1); got != 2 {
		t.Errorf("100 holds of 2 s after one of 30, 1 place: Retry-After %d, want 2", got)
	}
	if got := h.retryAfter(16); got != 1 {
		t.Errorf("holds of 2 s over 16 places: Retry-After %d, want 1", got)
	}
}

// TestContentType: a POST must say its body is JSON; any other Content-Type, or none, is a 415 (a web page can
// send text/plain across origins without a preflight).
func TestContentType(t *testing.T) {
	ts := newTestServer(t, nil)
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel)
	for _, c := range []struct {
		contentType string
		status      int
		msg         string
	}{
		{"text/plain", 415, `Content-Type: want application/json, got "text/plain"`},
		{"application/x-www-form-urlencoded", 415, `Content-Type: want application/json, got "application/x-www-form-urlencoded"`},
		{"", 415, "Content-Type: missing, want application/json"},
		{"application/json; charset=utf-8", 200, ""},
		{"Application/JSON", 200, ""},
	} {
		var headers []string
		if c.contentType != "" {
			headers = []string{"Content-Type", c.contentType}
		}
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			b := body
			if path == "/v1/chat/completions" {
				b = strings.Replace(body, `"prompt": "Once"`, `"messages": [{"role": "user", "content": "Once"}]`, 1)
			}
			code, _, got := do(t, "POST", ts.url+path, b, headers...)
			if code != c.status || c.status != 200 && errorBody(t, got).Message != c.msg {
				t.Errorf("%s with Content-Type %q: %d %s, want %d %s", path, c.contentType, code, got, c.status, c.msg)
			}
		}
	}
}

// TestStatusCodes: the answers whose status OpenAI and vLLM fix: 413 for a body over 4 MiB (declared or
// chunked), 404 model_not_found for another model, 405 with Allow for another method; and the two messages that
// misled: a token id that is not an integer, and a max_tokens beyond the context.
func TestStatusCodes(t *testing.T) {
	ts := newTestServer(t, nil)
	big := fmt.Sprintf(`{"model": %q, "prompt": "%s"}`, testModel, strings.Repeat("a", 4<<20))
	code, _, b := post(t, ts.url+"/v1/completions", big)
	if e := errorBody(t, b); code != 413 || e.Message != "request body over 4194304 bytes (4 MiB), the most this server reads" {
		t.Errorf("a body of %d bytes: %d %s, want 413 naming the limit", len(big), code, b)
	}
	resp, err := http.Post(ts.url+"/v1/completions", "application/json", io.MultiReader(strings.NewReader(big))) // no length: chunked
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := errorBody(t, b); resp.StatusCode != 413 || e.Message != "request body over 4194304 bytes (4 MiB), the most this server reads" {
		t.Errorf("a chunked body of %d bytes: %d %s, want 413 naming the limit", len(big), resp.StatusCode, b)
	}

	code, _, b = post(t, ts.url+"/v1/completions", `{"model": "gpt-4", "prompt": "hi"}`)
	if e := errorBody(t, b); code != 404 || e.Code != "model_not_found" || e.Type != "invalid_request_error" || e.Param == nil || *e.Param != "model" ||
		e.Message != fmt.Sprintf(`model "gpt-4" does not exist; this server serves %q`, testModel) {
		t.Errorf("another model: %d %s, want 404 model_not_found", code, b)
	}

	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/completions", "POST"}, {"PUT", "/v1/chat/completions", "POST"}, {"POST", "/v1/models", "GET"}, {"DELETE", "/health", "GET"},
		{"POST", "/metrics", "GET"}, {"PUT", "/metrics", "GET"}, {"DELETE", "/metrics", "GET"},
	} {
		code, hdr, b := do(t, c.method, ts.url+c.path, "")
		want := fmt.Sprintf("%s %s: method not allowed, want %s", c.method, c.path, c.allow)
		if e := errorBody(t, b); code != 405 || hdr.Get("Allow") != c.allow || e.Message != want {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405, Allow %s and %q", c.method, c.path, code, hdr.Get("Allow"), b, c.allow, want)
		}
	}

	for _, c := range []struct{ body, param, msg string }{
		{`{"model": "M", "prompt": [1, 2.5]}`, "prompt", "prompt[1]=2.5: a token id must be an integer"},
		{`{"model": "M", "prompt": [[1, 2.5]]}`, "prompt", "prompt[0][1]=2.5: a token id must be an integer"},
		{`{"model": "M", "prompt": [1, "a"]}`, "prompt", `prompt[1]: want a token id, got "a"`},
		{`{"model": "M", "prompt": "hi", "max_tokens": 1e12}`, "max_tokens", "max_tokens=1000000000000 exceeds the model's context of 512 tokens (at most 511, with a prompt of one token)"},
		{`{"model": "M", "prompt": "hi", "max_tokens": 1000000000000}`, "max_tokens", "max_tokens=1000000000000 exceeds the model's context of 512 tokens (at most 511, with a prompt of one token)"},
		{`{"model": "M", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 512}`, "max_completion_tokens",
			"max_completion_tokens=512 exceeds the model's context of 512 tokens (at most 511, with a prompt of one token)"},
	} {
		path := "/v1/completions"
		if strings.Contains(c.body, "messages") {
			path = "/v1/chat/completions"
		}
		code, _, b := post(t, ts.url+path, strings.Replace(c.body, `"M"`, `"`+testModel+`"`, 1))
		if e := errorBody(t, b); code != 400 || e.Param == nil || *e.Param != c.param || e.Message != c.msg {
			t.Errorf("%s: %d %s, want 400 on %s: %q", c.body, code, b, c.param, c.msg)
		}
	}
	// A whole number written as a float is a count as pydantic (and so vLLM) reads it.
	if code, _, b := post(t, ts.url+"/v1/completions", fmt.Sprintf(`{"model": %q, "prompt": [1, 2.0], "max_tokens": 3e0, "n": 1.0}`, testModel)); code != 200 {
		t.Errorf("token ids and counts written as whole floats: %d %s, want 200", code, b)
	}
}

// TestStopStringEndsInEngine: a stop string that spans tokens ends the request in the engine at the iteration
// that produced its last token (finished with stop, not cancelled a step or more later), so the tokens the
// metrics count are the tokens usage reports.
func TestStopStringEndsInEngine(t *testing.T) {
	ts := newTestServer(t, func(x *testExec, _ *testConfig) { x.delay = 2 * time.Millisecond })
	const n = 40
	out := greedy(t, ts.m, ts.vocab, testPrompt, n)
	raw := text(ts.vocab, testPrompt, out)
	stop := ""
	for k := 4; k+2 < len(out) && stop == ""; k++ { // the text of tokens k and k+1, first found there
		pair := text(ts.vocab, testPrompt, out[:k+2])[len(text(ts.vocab, testPrompt, out[:k])):]
		if len(pair) >= 2 && strings.Index(raw, pair) == len(text(ts.vocab, testPrompt, out[:k])) && !strings.ContainsRune(pair, '\uFFFD') {
			stop = pair
		}
	}
	if stop == "" {
		t.Skipf("no two-token text in %q that occurs first where it stands", raw)
	}
	for _, stream := range []bool{false, true} {
		before := value(t, scrape(t, ts.url), "morphlab:generation_tokens_total")
		stopJSON, _ := json.Marshal(stop)
		body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "temperature": 0, "stop": [%s], "stream": %v, "stream_options": %s}`,
			testModel, tokenJSON(testPrompt), n, stopJSON, stream, map[bool]string{false: "null", true: `{"include_usage": true}`}[stream])
		var usage *openai.Usage
		if stream {
			for _, c := range streamChunks(t, ts.url+"/v1/completions", body) {
				if c.Usage != nil {
					usage = c.Usage
				}
			}
		} else {
			_, _, usage = complete(t, ts.url, body, false)
		}
		waitFor(t, func() bool { return ts.Engine().Pending() == 0 })
		gen := value(t, scrape(t, ts.url), "morphlab:generation_tokens_total") - before
		if usage == nil || gen != float64(usage.CompletionTokens) {
			t.Errorf("stream %v, stop %q: generation_tokens_total grew by %g, usage %+v; want the same count", stream, stop, gen, usage)
		}
		var last engine.Event
		lastToken := -1
		for _, ev := range ts.Engine().Log() {
			switch ev.Kind {
			case engine.Token:
				lastToken = ev.Iter
			case engine.Finished, engine.Cancelled:
				last = ev
			}
		}
		if last.Kind != engine.Finished || last.Detail != "stop" || last.Iter != lastToken {
			t.Errorf("stream %v, stop %q: the request ended %v (%s) at iteration %d, its last token at %d; want finished with stop at that iteration",
				stream, stop, last.Kind, last.Detail, last.Iter, lastToken)
		}
	}
}

// TestAPIKey: with Config.APIKey every route but /health and /metrics needs "Authorization: Bearer KEY" (the
// scheme in any case); anything else is a 401 in OpenAI's shape, with WWW-Authenticate.
func TestAPIKey(t *testing.T) {
	const key = "sk-morphlab-test-1"
	ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.APIKey = key })
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel)
	for _, c := range []struct {
		method, path, auth string
		status             int
		msg                string
	}{
		{"POST", "/v1/completions", "", 401, "missing API key: send it as Authorization: Bearer KEY"},
		{"POST", "/v1/completions", "Bearer sk-morphlab-test-2", 401, "invalid API key"},
		{"POST", "/v1/completions", "Bearer " + key + "x", 401, "invalid API key"},
		{"POST", "/v1/completions", "Bearer " + key[:len(key)-1], 401, "invalid API key"},
		{"POST", "/v1/completions", "Basic " + key, 401, "invalid API key"},
		{"POST", "/v1/completions", key, 401, "invalid API key"},
		{"POST", "/v1/completions", "Bearer " + key, 200, ""},
		{"POST", "/v1/completions", "bearer " + key, 200, ""},
		{"POST", "/v1/chat/completions", "", 401, "missing API key: send it as Authorization: Bearer KEY"},
		{"GET", "/v1/models", "", 401, "missing API key: send it as Authorization: Bearer KEY"},
		{"GET", "/v1/models", "Bearer " + key, 200, ""},
		{"GET", "/v1/embeddings", "", 401, "missing API key: send it as Authorization: Bearer KEY"},
		{"GET", "/health", "", 200, ""},
		{"GET", "/metrics", "", 200, ""},
	} {
		headers := []string{"Content-Type", "application/json"}
		if c.auth != "" {
			headers = append(headers, "Authorization", c.auth)
		}
		code, hdr, b := do(t, c.method, ts.url+c.path, body, headers...)
		if code != c.status {
			t.Errorf("%s %s with Authorization %q: %d %.200s, want %d", c.method, c.path, c.auth, code, b, c.status)
			continue
		}
		if c.status == 401 {
			if e := errorBody(t, b); e.Message != c.msg || e.Code != "invalid_api_key" || e.Type != "invalid_request_error" || hdr.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("%s %s with Authorization %q: %s, WWW-Authenticate %q; want invalid_api_key %q and Bearer", c.method, c.path, c.auth, b, hdr.Get("WWW-Authenticate"), c.msg)
			}
		}
	}
}

// TestCORS: without AllowedOrigins no answer carries Access-Control-Allow-Origin, so no page of another origin
// reads one; with them, a listed origin's preflight is answered (before the API key, which a preflight never
// carries) and its requests carry the header, an unlisted origin's do not.
func TestCORS(t *testing.T) {
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel)
	preflight := []string{"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"}
	off := newTestServer(t, nil)
	code, hdr, _ := do(t, "OPTIONS", off.url+"/v1/completions", "", append([]string{"Origin", "https://a.example"}, preflight...)...)
	if code != 405 || hdr.Get("Access-Control-Allow-Origin") != "" || hdr.Get("Allow") != "POST" {
		t.Errorf("preflight with CORS off: %d, Access-Control-Allow-Origin %q; want 405 (Allow: POST) and none", code, hdr.Get("Access-Control-Allow-Origin"))
	}
	if code, hdr, _ := do(t, "POST", off.url+"/v1/completions", body, "Origin", "https://a.example", "Content-Type", "application/json"); code != 200 || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a request from a page with CORS off: %d, Access-Control-Allow-Origin %q; want 200 and none", code, hdr.Get("Access-Control-Allow-Origin"))
	}

	const key = "sk-cors"
	on := newTestServer(t, func(_ *testExec, c *testConfig) {
		c.AllowedOrigins = []string{"https://a.example", "http://localhost:3000"}
		c.APIKey = key
	})
	for _, origin := range []string{"https://a.example", "http://localhost:3000", "https://b.example"} {
		listed := origin != "https://b.example"
		code, hdr, _ := do(t, "OPTIONS", on.url+"/v1/chat/completions", "", append([]string{"Origin", origin}, preflight...)...)
		allowed := hdr.Get("Access-Control-Allow-Origin")
		if listed && (code != 204 || allowed != origin || !strings.Contains(strings.ToLower(hdr.Get("Access-Control-Allow-Headers")), "authorization") ||
			hdr.Get("Access-Control-Allow-Methods") != "POST") || !listed && allowed != "" {
			t.Errorf("preflight from %s (listed %v): %d, Allow-Origin %q, Allow-Headers %q, Allow-Methods %q", origin, listed, code, allowed,
				hdr.Get("Access-Control-Allow-Headers"), hdr.Get("Access-Control-Allow-Methods"))
		}
		code, hdr, b := do(t, "POST", on.url+"/v1/completions", body, "Origin", origin, "Content-Type", "application/json", "Authorization", "Bearer "+key)
		if want := map[bool]string{true: origin, false: ""}[listed]; code != 200 || hdr.Get("Access-Control-Allow-Origin") != want {
			t.Errorf("a request from %s: %d %.100s, Access-Control-Allow-Origin %q; want 200 and %q", origin, code, b, hdr.Get("Access-Control-Allow-Origin"), want)
		}
	}
}

// TestSlowClients: headers that never end and a body that stops are cut off after their timeouts (the body with a
// 408), a kept-alive connection that sends nothing is closed after the idle timeout, and connections beyond
// MaxConnections wait until one closes.
func TestSlowClients(t *testing.T) {
	const headerTimeout, bodyTimeout, idleTimeout = 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond
	ts := newTestServer(t, func(_ *testExec, c *testConfig) {
		c.HeaderTimeout, c.BodyTimeout, c.IdleTimeout = headerTimeout, bodyTimeout, idleTimeout
	})
	dial := func(addr string) net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	closedAfter := func(conn net.Conn, what string, least time.Duration) {
		t.Helper()
		start := time.Now()
		conn.SetReadDeadline(start.Add(5 * time.Second))
		rest, err := io.ReadAll(conn)
		if d := time.Since(start); err != nil || d < least {
			t.Errorf("%s: closed after %v (%v), want after about %v", what, d, err, least)
		}
		if what == "a body that stops" {
			status, body, _ := strings.Cut(string(rest), "\r\n")
			if status != "HTTP/1.1 408 Request Timeout" || !strings.Contains(body, `"message":"request body not received within 300ms"`) {
				t.Errorf("%s: answered %q, want a 408 naming the timeout", what, rest)
			}
		} else if len(rest) > 0 {
			t.Errorf("%s: answered %q, want nothing", what, rest)
		}
	}

	addr := strings.TrimPrefix(ts.url, "http://")
	headers := dial(addr)
	fmt.Fprintf(headers, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
	closedAfter(headers, "headers that never end", headerTimeout-50*time.Millisecond)

	body := dial(addr)
	fmt.Fprintf(body, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\": ")
	closedAfter(body, "a body that stops", bodyTimeout-50*time.Millisecond)

	idle := dial(addr)
	fmt.Fprintf(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /health: %v, %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	closedAfter(idle, "an idle connection", idleTimeout-50*time.Millisecond)

	// Two connections hold the two places (their headers take their time); a third waits for one of them.
	capped := newTestServer(t, func(_ *testExec, c *testConfig) { c.MaxConnections = 2 })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 300 * time.Millisecond}
	a, b := dial(strings.TrimPrefix(capped.url, "http://")), dial(strings.TrimPrefix(capped.url, "http://"))
	fmt.Fprintf(a, "GET /health HTTP/1.1\r\n")
	fmt.Fprintf(b, "GET /health HTTP/1.1\r\n")
	time.Sleep(50 * time.Millisecond) // both accepted
	if resp, err := client.Get(capped.url + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("a third connection with two open and MaxConnections 2: answered %d, want it to wait", resp.StatusCode)
	}
	a.Close()
	client.Timeout = 5 * time.Second
	if resp, err := client.Get(capped.url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("a connection once one of two has closed: %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestErrorsEchoBounded: an error quotes at most 40 characters of any name or value the client sent (a key, the
// model, a role, a nested or duplicate key, a token id, a Content-Type, a path, a method), so that an answer stays small
// whatever the request's size: 1.4 M characters of U+2028, which JSON writes as six bytes each, once made an
// 18 MB answer to a 4 MB request.
func TestErrorsEchoBounded(t *testing.T) {
	ts := newTestServer(t, nil)
	long := strings.Repeat("\u2028", 100_000)
	clipped := strings.Repeat("\u2028", 40) + "..."
	quoted := fmt.Sprintf("%q", clipped)
	prompt := fmt.Sprintf(`"model": %q, "prompt": "Once"`, testModel)
	for _, c := range []struct {
		name, method, path, contentType, body string
		status                                int
		param, msg                            string // param "-" for null
	}{
		{"a key", "POST", "/v1/completions", "", `{` + prompt + `, "` + long + `": 1}`, 400, clipped, "unsupported parameter " + quoted},
		{"the model", "POST", "/v1/completions", "", `{"model": "` + long + `", "prompt": "Once"}`, 404, "model",
			fmt.Sprintf("model %s does not exist; this server serves %q", quoted, testModel)},
		{"a role", "POST", "/v1/chat/completions", "", `{"model": "m", "messages": [{"role": "` + long + `", "content": ""}]}`, 400, "messages[0].role",
			"messages[0].role=" + quoted + ", want system, developer, user or assistant"},
		{"a message's key", "POST", "/v1/chat/completions", "", `{"model": "m", "messages": [{"role": "user", "` + long + `": ""}]}`, 400,
			"messages[0]." + clipped, fmt.Sprintf("unsupported parameter %q", "messages[0]."+clipped)},
		{"a stream option", "POST", "/v1/completions", "", `{` + prompt + `, "stream": true, "stream_options": {"` + long + `": 1}}`, 400,
			"stream_options." + clipped, fmt.Sprintf("unsupported parameter %q", "stream_options."+clipped)},
		{"a duplicate key", "POST", "/v1/completions", "", `{` + prompt + `, "logit_bias": {"` + long + `": 1, "` + long + `": 2}}`, 400, "-",
			`malformed JSON body: duplicate object member name ` + quoted + ` within "/logit_bias"`},
		{"a duplicate nested key", "POST", "/v1/chat/completions", "",
			`{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "` + long + `": 1, "` + long + `": 2}]}]}`, 400, "-",
			`malformed JSON body: duplicate object member name ` + quoted + ` within "/messages/0/content/0"`},
		{"a token id", "POST", "/v1/completions", "", `{"model": "m", "prompt": [0.5` + strings.Repeat("0", 100_000) + `1]}`, 400, "prompt",
			"prompt[0]=0.5" + strings.Repeat("0", 37) + "...: a token id must be an integer"},
		{"a Content-Type", "POST", "/v1/completions", "text/" + strings.Repeat("x", 100_000), `{` + prompt + `}`, 415, "-",
			`Content-Type: want application/json, got "text/` + strings.Repeat("x", 35) + `..."`},
		{"a path", "GET", "/" + strings.Repeat("p", 100_000), "", "", 404, "-",
			"no endpoint GET /" + strings.Repeat("p", 39) + "... (endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)"},
		{"a method", strings.Repeat("M", 100_000), "/v1/models", "", "", 405, "-",
			strings.Repeat("M", 40) + "... /v1/models: method not allowed, want GET"},
	} {
		body := strings.Replace(c.body, `"model": "m"`, `"model": "`+testModel+`"`, 1)
		ct := cmp.Or(c.contentType, "application/json")
		code, _, b := do(t, c.method, ts.url+c.path, body, "Content-Type", ct)
		e := errorBody(t, b)
		param := "-"
		if e.Param != nil {
			param = *e.Param
		}
		if code != c.status || param != c.param || e.Message != c.msg || len(b) > 1024 {
			t.Errorf("%s of 100,000 characters: %d, %d bytes, param %.100q, %.300q; want %d, at most 1 KiB, param %.100q, %.300q",
				c.name, code, len(b), param, e.Message, c.status, c.param, c.msg)
		}
	}
}

// pipeStream sends a streamed completion of n tokens over a connection of l and returns the connection, unread.
func pipeStream(t *testing.T, l *pipeListener, n int) net.Conn {
	t.Helper()
	conn, err := l.Dial(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": %d, "ignore_eos": true, "stream": true}`, testModel, tokenJSON(testPrompt), n)
	go fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return conn
}

// TestStalledReaders: streams whose clients stop reading are cut off once a write has waited WriteTimeout,
// their requests cancelled and their connections closed; so with MaxConnections 2, two such clients do not
// hold the server.
func TestStalledReaders(t *testing.T) {
	l := newPipeListener()
	ts := newTestServer(t, func(_ *testExec, c *testConfig) {
		c.MaxConnections, c.WriteTimeout, c.Listener = 2, 300*time.Millisecond, l
	})
	for range 2 {
		pipeStream(t, l, 500)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: l.Dial}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://server/health")
	if err != nil {
		t.Fatalf("GET /health with two stalled readers on the two connections: %v, want 200 once they are cut off", err)
	}
	resp.Body.Close()
	waitFor(t, func() bool { return ts.Engine().Pending() == 0 })
	cancelled := 0
	for _, ev := range ts.Engine().Log() {
		if ev.Kind == engine.Cancelled {
			cancelled++
		}
	}
	if cancelled != 2 {
		t.Errorf("%d requests cancelled, want the two stalled readers'", cancelled)
	}
}

// TestSlowReader: a client that reads a stream slowly but steadily gets all of it, though the stream takes
// several times WriteTimeout: the deadline is on each write, not on the answer.
func TestSlowReader(t *testing.T) {
	const writeTimeout = time.Second
	l := newPipeListener()
	newTestServer(t, func(_ *testExec, c *testConfig) { c.WriteTimeout, c.Listener = writeTimeout, l })
	conn := pipeStream(t, l, 500)
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 256), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 256)
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if err != io.EOF {
				t.Errorf("reading the stream after %v: %v", time.Since(start), err)
			}
			break
		}
		time.Sleep(10 * time.Millisecond) // at most 25.6 KB/s
	}
	took := time.Since(start)
	if resp.StatusCode != 200 || !bytes.Contains(got, []byte(`"finish_reason":"length"`)) || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
		t.Errorf("a slow reader's stream (%d, %d bytes in %v): ...%q, want all of it, ending with [DONE]", resp.StatusCode, len(got), took, got[max(0, len(got)-200):])
	}
	if took < 2*writeTimeout {
		t.Fatalf("the stream took %v, want a reader slower than twice the write timeout %v", took, writeTimeout)
	}
}
