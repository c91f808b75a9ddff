package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/kernels/cpu"
)

// BenchmarkHTTPOverhead compares, at batch 1, the TTFT and TPOT a client sees through the server (a streamed
// completion over loopback HTTP, from a client in a process of its own, as a real client is) with those a client of
// the engine in the same process sees (Submit and the stream's events), on two identical engines over a synthetic
// model: stories15M, whose 32-token prompt takes a few milliseconds, so that the server's fixed costs show, and
// stories110M, the model the other CPU measurements serve. Each iteration runs one request each way, in alternating
// order, so that the machine's drift falls on both alike. TTFT is from sending to the first token; TPOT is (last
// token - first token) / (tokens - 1), as vLLM's benchmark defines it. It reports the medians and their ratios
// (HTTP / in-process), for prompts of 32 and 128 tokens and 32 output tokens.
//
// threads is the kernels' thread count: threads=GOMAXPROCS gives the kernels every core, threads=GOMAXPROCS-1
// leaves the front end one, as vLLM runs its API server in a process of its own. The client is not in the
// server's process because there it would measure Go's scheduler rather than the server: while the kernels hold
// every P, the runtime polls the network only every 10 ms (sysmon), so an in-process client learns of a streamed
// token up to 10 ms late, which a client in another process, woken by the OS, does not.
func BenchmarkHTTPOverhead(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	for _, shape := range []string{"stories15M", "stories110M"} {
		for _, threads := range slices.Compact([]int{max(1, procs-1), procs}) {
			for _, promptLen := range []int{32, 128} {
				b.Run(fmt.Sprintf("model=%s/threads=%d/prompt=%d", shape, threads, promptLen), func(b *testing.B) {
					defer cpu.SetThreads(cpu.SetThreads(threads))
					benchOverhead(b, shape, promptLen)
				})
			}
		}
	}
}

func benchOverhead(b *testing.B, shape string, promptLen int) {
	cfg, err := model.ShapeByName(shape)
	if err != nil {
		b.Fatal(err)
	}
	ck := model.Synthesize(cfg, 5)
	newExec := func() executor.Executor {
		m, err := model.FromCheckpoint(ck)
		if err != nil {
			b.Fatal(err)
		}
		// A pool that holds a request of the whole context, as the server asks.
		x, err := executor.NewCPU(m, executor.CPUOptions{Pool: executor.Pool{Blocks: cfg.SeqLen/16 + 2},
			BlockSize: 16, MaxBatchedTokens: 256})
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	const outLen = 32
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(300 + i*37%30000)
	}

	eng, err := engine.New(newExec(), engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go eng.Run(ctx)
	served, err := engine.New(newExec(), engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Model: "bench", Vocab: ck.Vocab, Engine: served})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ctx, ln)
	url := "http://" + ln.Addr().String() + "/v1/completions"
	body := fmt.Sprintf(`{"model": "bench", "prompt": %s, "max_tokens": %d, "temperature": 0, "stop": [], "stream": true, "stream_options": {"include_usage": true}}`,
		tokenJSON(prompt), outLen)
	inProcess := func() (ttft, tpot time.Duration) {
		start := time.Now()
		st := eng.Submit(engine.Request{Prompt: prompt, MaxTokens: outLen})
		var first, last time.Time
		n := 0
		for ev := range st.Events() {
			if ev.Kind == engine.Token {
				last = time.Now()
				if n == 0 {
					first = last
				}
				n++
			}
		}
		if n != outLen {
			b.Fatalf("in-process: %d tokens, want %d", n, outLen)
		}
		return first.Sub(start), last.Sub(first) / time.Duration(n-1)
	}
	overHTTP := startClientProcess(b, url, body, outLen)
	inProcess()
	overHTTP()
	var ttftE, tpotE, ttftH, tpotH []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			a, c := inProcess()
			d, e := overHTTP()
			ttftE, tpotE, ttftH, tpotH = append(ttftE, a), append(tpotE, c), append(ttftH, d), append(tpotH, e)
		} else {
			d, e := overHTTP()
			a, c := inProcess()
			ttftE, tpotE, ttftH, tpotH = append(ttftE, a), append(tpotE, c), append(ttftH, d), append(tpotH, e)
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(median(ttftE)), "engine-ttft-ms")
	b.ReportMetric(ms(median(ttftH)), "http-ttft-ms")
	b.ReportMetric(ms(median(tpotE)), "engine-tpot-ms")
	b.ReportMetric(ms(median(tpotH)), "http-tpot-ms")
	b.ReportMetric(float64(median(ttftH))/float64(median(ttftE)), "ttft-ratio")
	b.ReportMetric(float64(median(tpotH))/float64(median(tpotE)), "tpot-ratio")
}

// clientEnv, set in a child process of the test binary, makes it the benchmark's HTTP client (see TestMain).
const clientEnv = "MORPHLAB_BENCH_CLIENT"

// TestMain lets BenchmarkHTTPOverhead run its HTTP client in a child process: with clientEnv set to a URL and
// the request body in MORPHLAB_BENCH_BODY, the test binary sends one streamed request per line of its standard
// input and answers each with a line "TTFT-ns TPOT-ns tokens", or "error: ..." and exits 1.
func TestMain(m *testing.M) {
	if url := os.Getenv(clientEnv); url != "" {
		os.Exit(clientProcess(url, os.Getenv("MORPHLAB_BENCH_BODY"), os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func clientProcess(url, body string, in io.Reader, out io.Writer) int {
	client := &http.Client{}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		ttft, tpot, tokens, err := streamTimings(client, url, body)
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
			return 1
		}
		fmt.Fprintf(out, "%d %d %d\n", ttft, tpot, tokens)
	}
	return 0
}

// streamTimings sends one streamed completion and times it as vLLM's benchmark does: TTFT from sending to the
// first token, TPOT (last token - first token) / (tokens - 1).
func streamTimings(client *http.Client, url, body string) (ttft, tpot time.Duration, tokens int, err error) {
	start := time.Now()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	var first, last time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return 0, 0, 0, err
		}
		if c.Usage != nil {
			tokens = c.Usage.CompletionTokens
		}
		if len(c.Choices) == 1 && c.Choices[0].Text != nil && *c.Choices[0].Text != "" {
			last = time.Now()
			if first.IsZero() {
				first = last
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if tokens < 2 || first.IsZero() {
		return 0, 0, 0, fmt.Errorf("%d tokens streamed, want at least 2", tokens)
	}
	return first.Sub(start), last.Sub(first) / time.Duration(tokens-1), tokens, nil
}

// startClientProcess starts the test binary as the HTTP client (clientEnv) and returns a function that has it
// send one request and returns the timings it measured; the process ends with the benchmark.
func startClientProcess(b *testing.B, url, body string, want int) func() (ttft, tpot time.Duration) {
	cmd := osexec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), clientEnv+"="+url, "MORPHLAB_BENCH_BODY="+body)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	out := bufio.NewReader(outPipe)
	return func() (ttft, tpot time.Duration) {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			b.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			b.Fatalf("HTTP client process: %v", err)
		}
		var tokens int
		if _, err := fmt.Sscanf(line, "%d %d %d", &ttft, &tpot, &tokens); err != nil {
			b.Fatalf("HTTP client process: %s", strings.TrimSpace(line))
		}
		if tokens != want {
			b.Fatalf("over HTTP: %d tokens, want %d", tokens, want)
		}
		return ttft, tpot
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
