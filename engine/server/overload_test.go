package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
)

// TestOverload drives the server far past what it serves (32 clients without think time against 4 running
// sequences and a queue of 4) for a few seconds over loopback. Every request must get either a full response
// (all its tokens, a finish reason, and [DONE] when streamed) or a 429 with Retry-After: no other status, none
// lost. Afterwards /health is ok, a new request succeeds and the KV pool is empty.
func TestOverload(t *testing.T) {
	ts := newTestServer(t, func(x *testExec, c *testConfig) {
		x.delay = time.Millisecond
		c.MaxQueue = 4
		c.Engine = engine.Options{MaxNumSeqs: 4}
	})
	const clients, perClient = 32, 200
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	var mu sync.Mutex
	counts := map[string]int{}
	var failures []string
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; i < perClient && time.Now().Before(deadline); i++ {
				n := 4 + (c*7+i*3)%20
				stream := (c+i)%2 == 0
				outcome, err := overloadRequest(client, ts.url, n, stream)
				mu.Lock()
				counts[outcome]++
				if err != nil && len(failures) < 10 {
					failures = append(failures, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("%d requests in %v: %v", total, duration, counts)
	if counts["ok"]+counts["429"] != total || len(failures) > 0 {
		t.Errorf("outcomes %v; failures: %s", counts, strings.Join(failures, "; "))
	}
	if counts["ok"] == 0 || counts["429"] == 0 {
		t.Errorf("outcomes %v, want both full responses and 429s (the server was not overloaded, or served nothing)", counts)
	}
	checkHealth(t, ts.url, 200)
	if outcome, err := overloadRequest(client, ts.url, 8, false); outcome != "ok" {
		t.Errorf("a request after the overload: %s, %v", outcome, err)
	}
	waitFor(t, func() bool {
		f := scrape(t, ts.url)
		return value(t, f, "morphlab:kv_cache_usage_perc") == 0 && value(t, f, "morphlab:num_requests_running") == 0
	})
}

// overloadRequest sends a completion of n tokens and classifies the answer: "ok" (complete), "429" (with
// Retry-After), or another outcome with the error saying what was wrong.
func overloadRequest(client *http.Client, url string, n int, stream bool) (string, error) {
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once upon a time", "max_tokens": %d, "temperature": 0, "stream": %v}`, testModel, n, stream)
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return "transport", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "transport", err
	}
	switch {
	case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "":
		return "429", nil
	case resp.StatusCode != 200:
		return fmt.Sprint(resp.StatusCode), fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	case !stream:
		var c completion
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || c.Usage == nil {
			return "partial", fmt.Errorf("response %.200s", b)
		}
		if fr := *c.Choices[0].FinishReason; fr == "length" && c.Usage.CompletionTokens != n || fr != "length" && fr != "stop" {
			return "partial", fmt.Errorf("finish_reason %s after %d of %d tokens", fr, c.Usage.CompletionTokens, n)
		}
		return "ok", nil
	}
	s := string(b)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"finish_reason":"`) || strings.Contains(s, `"error"`) {
		return "partial", fmt.Errorf("stream ...%.200s", s[max(0, len(s)-200):])
	}
	return "ok", nil
}
