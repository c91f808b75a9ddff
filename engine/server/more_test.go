package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/internal/openai"
	"github.com/morphlab/morphlab/quant"
)

// TestSchedulers: static and dynamic batching serve the same greedy text as continuous batching.
func TestSchedulers(t *testing.T) {
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": 12, "temperature": 0}`, testModel, tokenJSON(testPrompt))
	var want string
	for _, policy := range []string{"continuous", "static", "dynamic"} {
		ts := newTestServer(t, func(_ *testExec, c *testConfig) {
			c.Engine = engine.Options{Scheduler: policy, BatchSize: 4, MaxDelay: 5 * time.Millisecond}
		})
		got, reason, u := complete(t, ts.url, body, false)
		if policy == "continuous" {
			want = got
		}
		if got != want || reason == "" || u.PromptTokens != len(testPrompt) {
			t.Errorf("%s batching: %q (%s, %+v), want %q as continuous batching gives", policy, got, reason, u, want)
		}
	}
}

// TestPoolBelowContext: a server whose KV pool cannot hold a request of the whole context is refused at the
// start, naming the pool and the context (such a request would otherwise be refused when it came, with a 400
// about a max_tokens it may never have sent); the smallest pool it accepts serves a request that fills the
// context.
func TestPoolBelowContext(t *testing.T) {
	m, vocab := synthModel(t)
	newServer := func(blocks int) (*Server, error) {
		x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: blocks}, BlockSize: 16, MaxBatchedTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := engine.New(x, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return New(Config{Model: testModel, Vocab: vocab, Engine: eng})
	}
	_, err := newServer(8)
	var small *PoolError
	if want := "server: the KV pool of 8 blocks of 16 tokens holds requests of at most 112 tokens, less than the model's context of 512 tokens"; err == nil ||
		err.Error() != want || !errors.As(err, &small) || small.Blocks != 8 || small.Tokens != 112 || small.Context != 512 {
		t.Errorf("a pool of 8 blocks of 16 tokens: %v, want a *PoolError %q", err, want)
	}
	blocks := 32 // one context's worth
	var s *Server
	for ; s == nil && blocks < 64; blocks++ {
		if s, err = newServer(blocks); err != nil && !errors.As(err, &small) {
			t.Fatal(err)
		}
	}
	t.Logf("the smallest pool accepted: %d blocks", blocks-1)
	if s == nil {
		t.Fatal("no pool of 32 to 63 blocks accepted")
	}
	url := start(t, s).url
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "ignore_eos": true}`, testModel, tokenJSON(testPrompt))
	if _, reason, u := complete(t, url, body, false); reason != "length" || u.TotalTokens != 512 {
		t.Errorf("a request of the whole context on the smallest pool accepted: %s, %+v; want length and 512 tokens", reason, u)
	}
}

// TestPreemptedCountAgainstQueue: a request preempted (its KV blocks taken for an older one's) waits for a batch
// again, and holds a place in the bounded queue while it does: with MaxQueue 1, a request that arrives then is
// answered 429. Two requests of 508 tokens on a pool of 33 blocks of 16 cannot both run to their ends, so the
// newer one is preempted; the engine is held right after that step while the test looks.
func TestPreemptedCountAgainstQueue(t *testing.T) {
	preempted, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ts := newTestServer(t, func(x *testExec, c *testConfig) {
		m, _ := synthModel(t)
		cx, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 33}, BlockSize: 16, MaxBatchedTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		x.Executor, x.delay, c.MaxQueue = cx, time.Millisecond, 1
		c.OnStep = func(_ *engine.Engine, info engine.StepInfo) {
			if info.Preempted > 0 {
				once.Do(func() {
					close(preempted)
					<-resume
				})
			}
		}
	})
	var resumed sync.Once
	release := func() { resumed.Do(func() { close(resume) }) }
	t.Cleanup(release) // before the server stops, however the test ends
	body := fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": 500, "temperature": 0, "ignore_eos": true}`, testModel, tokenJSON(testPrompt))
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() { codes[i], _, _ = post(t, ts.url+"/v1/completions", body) })
		waitFor(t, func() bool { return ts.Engine().Pending() == i+1 && ts.queued.Load() == 0 }) // running
	}
	select {
	case <-preempted:
	case <-time.After(30 * time.Second):
		t.Fatal("no preemption in 30 s")
	}
	waitFor(t, func() bool { return ts.queued.Load() == 1 })
	code, hdr, b := post(t, ts.url+"/v1/completions", body)
	if e := errorBody(t, b); code != 429 || hdr.Get("Retry-After") == "" || e.Code != "queue_full" {
		t.Errorf("a request while a preempted one waits, MaxQueue 1: %d %s, want 429 queue_full with Retry-After", code, b)
	}
	release()
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 || ts.queued.Load() != 0 {
		t.Errorf("the two requests: %v, %d places held after them; want 200 200 and none", codes, ts.queued.Load())
	}
}

// TestEngineFailure: a step that fails under a request answers 500 (or an error event when streaming); from then
// on /health and new requests answer 503.
func TestEngineFailure(t *testing.T) {
	ts := newTestServer(t, func(x *testExec, _ *testConfig) { x.delay = time.Millisecond })
	ts.x.fail.Store(true)
	code, _, b := post(t, ts.url+"/v1/completions", fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 8}`, testModel))
	var e openai.ErrorResponse
	if err := json.Unmarshal(b, &e); code != 500 || err != nil || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "device lost") {
		t.Errorf("a request whose step fails: %d %s, want a 500 server_error saying why", code, b)
	}
	waitFor(t, func() bool { return ts.engineErr() != nil })
	checkHealth(t, ts.url, 503)
	code, _, b = post(t, ts.url+"/v1/completions", fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 8, "stream": true}`, testModel))
	if code != 503 || !strings.Contains(string(b), "engine failed: ") {
		t.Errorf("a request after the failure: %d %s, want 503", code, b)
	}
}

// TestOnStepHook: a hook added to the engine before the server (a controller's) is called by the engine's loop
// on iterations and idle ticks beside the server's metrics, and what it does through the engine (here a Note)
// takes effect.
func TestOnStepHook(t *testing.T) {
	var mu sync.Mutex
	var steps, idle int
	var eng *engine.Engine
	var ts *testServer
	ts = newTestServer(t, func(_ *testExec, c *testConfig) {
		c.Engine = engine.Options{IdleTick: 5 * time.Millisecond}
		c.OnStep = func(e *engine.Engine, info engine.StepInfo) {
			mu.Lock()
			defer mu.Unlock()
			eng = e
			if info.Idle {
				idle++
				return
			}
			if steps == 0 {
				e.Note("first step seen")
			}
			steps++
		}
	})
	complete(t, ts.url, fmt.Sprintf(`{"model": %q, "prompt": %s, "max_tokens": 6, "temperature": 0}`, testModel, tokenJSON(testPrompt)), false)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return idle > 0 })
	mu.Lock()
	defer mu.Unlock()
	if eng != ts.Engine() || steps < 6 {
		t.Errorf("hook: engine %p (server's %p), %d steps; want the server's engine and a step a token", eng, ts.Engine(), steps)
	}
	found := false
	for _, ev := range ts.Engine().Log() {
		found = found || ev.Kind == engine.Decision && ev.Detail == "first step seen"
	}
	if !found {
		t.Errorf("the hook's Note is not in the engine's log")
	}
}

// TestQuantizedLayersMetric: num_quantized_layers counts the layers a step ran in an integer format.
func TestQuantizedLayersMetric(t *testing.T) {
	ts := newTestServer(t, func(x *testExec, _ *testConfig) {
		m, _ := synthModel(t)
		for _, l := range []int{1, 3} {
			if _, err := m.AddVariant(l, quant.Int8); err != nil {
				t.Fatal(err)
			}
			if err := m.SetPrecision(l, quant.Int8); err != nil {
				t.Fatal(err)
			}
		}
		cx, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: 64}, BlockSize: 16, MaxBatchedTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		x.Executor = cx
	})
	complete(t, ts.url, fmt.Sprintf(`{"model": %q, "prompt": "Once", "max_tokens": 2}`, testModel), false)
	if n := value(t, scrape(t, ts.url), "morphlab:num_quantized_layers"); n != 2 {
		t.Errorf("num_quantized_layers %g with layers 1 and 3 in int8, want 2", n)
	}
}
