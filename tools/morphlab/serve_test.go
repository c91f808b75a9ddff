package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// TestMain lets a test run the command line in a child process (MORPHLAB_TEST_CLI=1), for what needs a process
// of its own, such as a signal.
func TestMain(m *testing.M) {
	if os.Getenv("MORPHLAB_TEST_CLI") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// startServe runs `morphlab serve args...` in a child process of this test binary, env added to its environment,
// and returns it and its standard error; the child is killed when the test ends, however it ends.
func startServe(tb testing.TB, env []string, args ...string) (*exec.Cmd, *bufio.Reader) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "MORPHLAB_TEST_CLI=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill() })
	return cmd, bufio.NewReader(stderr)
}

// TestServeStopSignals serves a synthetic model in a child process, sends SIGTERM, or SIGHUP (a closed terminal's),
// while a stream runs, and checks that the stream still completes, new connections are refused and the process
// exits 0, having written its steps (--steps): the prompt's prefill, then one decode step a token.
func TestServeStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			path, steps := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "steps.jsonl")
			if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", path); code != 0 {
				t.Fatalf("synth: %s", stderr)
			}
			cmd, lines := startServe(t, nil, "--model", path, "--addr", "127.0.0.1:0", "--grace", "20s", "--steps", steps)
			first, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("serve's first line: %q, %v", first, err)
			}
			addr := regexp.MustCompile(`^serving m on (http://127\.0\.0\.1:\d+): continuous batching, policy fp16, \d+ KV blocks of 16 tokens`).FindStringSubmatch(first)
			if addr == nil {
				t.Fatalf("serve's first line %q, want the model, the address and the pool", first)
			}
			body := `{"model": "m", "prompt": "Once", "max_tokens": 300, "temperature": 0, "stream": true}`
			resp, err := http.Post(addr[1]+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(r)
			if s := string(rest); err != nil || !regexp.MustCompile(`"finish_reason":"(length|stop)"`).MatchString(s) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
				t.Errorf("the stream after %v: ...%q, %v; want it to run to its end and [DONE]", sig, s[max(0, len(s)-200):], err)
			}
			tail, _ := io.ReadAll(lines)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if want := "stopping: finishing running requests (at most 20s; a second signal exits now)\nstopped\n"; err != nil || string(tail) != want {
					t.Errorf("serve after %v: %v, stderr %q; want exit 0 and %q", sig, err, tail, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("serve did not exit 30 s after %v", sig)
			}
			if _, err := http.Get(addr[1] + "/health"); err == nil {
				t.Errorf("GET /health after serve exited: no error, want a refused connection")
			}
			f, err := os.Open(steps)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := costmodel.ReadSteps(f, steps, 5)
			if err != nil {
				t.Fatal(err)
			}
			prompt := got[0].Work.PrefillTokens
			if prompt < 2 || got[0].Work.Sampled != 1 || len(got) < 2 || len(got) > 300 {
				t.Fatalf("%d steps, the first %+v; want a prefill of the prompt, then decode steps", len(got), got[0])
			}
			for i, s := range got[1:] {
				if w := s.Work; w.Tokens != 1 || w.DecodeSeqs != 1 || w.DecodeKeys != int64(prompt+i+1) || s.Seconds <= 0 {
					t.Fatalf("step %d: %+v, %v s; want one decode of %d keys", i+1, w, s.Seconds, prompt+i+1)
				}
			}
		})
	}
}

// TestServeAccess serves a synthetic model in a child process with its API key from $MORPHLAB_API_KEY, or from
// --api-key, which wins, and an allowed origin: requests need the key, /health does not, and the origin's
// preflight is answered.
func TestServeAccess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", path); code != 0 {
		t.Fatalf("synth: %s", stderr)
	}
	for _, c := range []struct {
		flags      []string
		key, wrong string
	}{
		{nil, "from-env", "from-flag"},
		{[]string{"--api-key", "from-flag"}, "from-flag", "from-env"},
	} {
		args := append([]string{"--model", path, "--addr", "127.0.0.1:0", "--allowed-origins", "http://localhost:3000", "--max-connections", "8"}, c.flags...)
		cmd, lines := startServe(t, []string{"MORPHLAB_API_KEY=from-env"}, args...)
		first, err := lines.ReadString('\n')
		addr := regexp.MustCompile(`^serving m on (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(first)
		if err != nil || addr == nil {
			t.Fatalf("serve's first line: %q, %v", first, err)
		}
		get := func(method, path string, headers ...string) *http.Response {
			req, _ := http.NewRequest(method, addr[1]+path, nil)
			for i := 0; i+1 < len(headers); i += 2 {
				req.Header.Set(headers[i], headers[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		for _, r := range []struct {
			method, path, auth string
			status             int
		}{
			{"GET", "/v1/models", "", 401}, {"GET", "/v1/models", "Bearer " + c.wrong, 401}, {"GET", "/v1/models", "Bearer " + c.key, 200}, {"GET", "/health", "", 200},
		} {
			if resp := get(r.method, r.path, "Authorization", r.auth); resp.StatusCode != r.status {
				t.Errorf("serve %v: %s %s with %q: %d, want %d", c.flags, r.method, r.path, r.auth, resp.StatusCode, r.status)
			}
		}
		resp := get("OPTIONS", "/v1/completions", "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST")
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
			t.Errorf("serve %v: preflight from the allowed origin: %d, Access-Control-Allow-Origin %q", c.flags, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve %v after SIGTERM: %v, want exit 0", c.flags, err)
		}
	}
}

func TestServeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "morphlab serve: --model is required\n"},
		{[]string{"serve", "--model", "stories260K", "--scheduler", "fifo"}, "morphlab serve: scheduler \"fifo\", want continuous, static or dynamic\n"},
		{[]string{"serve", "--model", "stories260K", "--memory", "lots"}, "morphlab serve: --memory: \"lots\", want a positive size such as 512MiB, 2GiB or 1000000\n"},
		{[]string{"serve", "--model", "stories260K", "--max-process-memory", "lots"}, "morphlab serve: --max-process-memory: \"lots\", want a positive size such as 512MiB, 2GiB or 1000000\n"},
		{[]string{"serve", "--model", "stories260K", "--executor", "cuda", "--max-process-memory", "1GiB"},
			"morphlab serve: --max-process-memory bounds the cpu executor's process; the cuda executor's budget is --memory on its device\n"},
		{[]string{"serve", "--model", "stories260K", "--max-queue", "-1"}, "morphlab serve: --max-queue -1, --grace 30s: want neither negative\n"},
		{[]string{"serve", "--model", "stories260K", "--executor", "sim", "--device", "l4"}, "morphlab serve: --executor sim: serve runs the cpu or cuda executor\n"},
		{[]string{"serve", "--model", "x.bin"}, "morphlab serve: --model: model \"x.bin\" is neither a file nor a model name: unknown model \"x.bin\" " +
			"(models: llama-2-7b, vicuna-7b-v1.5, llama-2-13b, llama-3-8b, codellama-34b, stories260K, stories15M, stories42M, stories110M)\n"},
		{[]string{"serve", "--model", "x", "--max-connections", "0"}, "morphlab serve: --max-connections=0, want at least 1\n"},
		{[]string{"serve", "--model", "x", "--write-timeout", "0"}, "morphlab serve: --write-timeout=0s, want more than 0\n"},
		{[]string{"serve", "--model", "stories260K", "--kv-blocks", "8"}, "morphlab serve: server: the KV pool of 8 blocks of 16 tokens holds requests of at most " +
			"112 tokens, less than the model's context of 512 tokens: give it more blocks (--kv-blocks, or a larger --memory)\n"},
		{[]string{"serve", "--model", "x", "--allowed-origins", "https://a.example, app.example.com"},
			"morphlab serve: --allowed-origins: \"app.example.com\", want origins such as https://app.example.com or http://localhost:3000 (or *)\n"},
		{[]string{"serve", "--model", "x", "--allowed-origins", "https://a.example/path"},
			"morphlab serve: --allowed-origins: \"https://a.example/path\", want origins such as https://app.example.com or http://localhost:3000 (or *)\n"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != 2 || stderr != c.want || stdout != "" {
			t.Errorf("morphlab %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// TestServeProcessBudget: an engine budget (--memory) beyond what --max-process-memory leaves it is refused before
// the engine starts, naming both flags and the three sizes.
func TestServeProcessBudget(t *testing.T) {
	code, stdout, stderr := runCLI("serve", "--model", "stories260K", "--max-process-memory", "1GiB", "--memory", "2GiB")
	want := regexp.MustCompile(`^morphlab serve: --max-process-memory 1 GiB leaves the engine [0-9.]+ MiB, and its budget \(--memory or --kv-blocks\) is 2 GiB\n$`)
	if code != 2 || stdout != "" || !want.MatchString(stderr) {
		t.Errorf("serve --max-process-memory 1GiB --memory 2GiB: exit %d, stdout %q, stderr %q; want 2 and %v", code, stdout, stderr, want)
	}
}

// BenchmarkServeLongPrompts serves stories260K (synthesized) in a child process with --max-process-memory 64MiB
// and, each iteration, posts eight prompts of 4 MB at once ({"prompt": "a " x 2,097,052, "max_tokens": 1}), far
// beyond the 512-token context. Each must be a 400 naming the context. It reports the slowest and the median time
// from sending a request to having its answer, the server's CPU time a request (which other jobs on the machine
// do not inflate as they do the times), and the server's peak resident set (VmHWM, over the whole run, its start
// included) with what it is over --max-process-memory; the server refuses such prompts from their length, so the
// peak stays within --max-process-memory plus 64 MiB and, on an idle machine, each answer comes within 100 ms
// (BENCHMARKS.md).
func BenchmarkServeLongPrompts(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("skipping: no /proc/PID/status to read the peak resident set from")
	}
	path := filepath.Join(b.TempDir(), "m.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", path); code != 0 {
		b.Fatalf("synth: %s", stderr)
	}
	const memory = 64 << 20
	cmd, lines := startServe(b, nil, "--model", path, "--addr", "127.0.0.1:0", "--max-process-memory", "64MiB")
	var addr []string
	for addr == nil {
		line, err := lines.ReadString('\n')
		if err != nil {
			b.Fatalf("serve: %q, %v", line, err)
		}
		addr = regexp.MustCompile(`^serving m on (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(line)
	}
	go io.Copy(io.Discard, lines)
	body := []byte(`{"model": "m", "prompt": "` + strings.Repeat("a ", 2_097_052) + `", "max_tokens": 1}`)
	const clients = 8
	// Bodies go out in writes of 64 KiB, as curl's do, not the 4 KiB of Go's default transport.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, WriteBufferSize: 64 << 10}}
	var mu sync.Mutex
	var took []time.Duration
	send := func() {
		start := time.Now()
		resp, err := client.Post(addr[1]+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Error(err)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil || resp.StatusCode != 400 || !bytes.Contains(answer, []byte("the model's context is 512 tokens")) {
			b.Errorf("a 4 MB prompt: %d %.200s (%v), want a 400 naming the context", resp.StatusCode, answer, err)
		}
		mu.Lock()
		took = append(took, d)
		mu.Unlock()
	}
	b.SetBytes(clients * int64(len(body)))
	cpu0 := processCPU(b, cmd.Process.Pid)
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range clients {
			wg.Go(send)
		}
		wg.Wait()
	}
	b.StopTimer()
	cpu := processCPU(b, cmd.Process.Pid) - cpu0
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	var peakKiB int64
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Sscan(v, &peakKiB)
		}
	}
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(float64(peakKiB)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(peakKiB<<10-memory)/(1<<20), "over-memory-MiB")
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms-to-400")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms-to-400")
	b.ReportMetric(ms(cpu)/float64(len(took)), "server-cpu-ms/request")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// processCPU is the user and system time process pid has run, from /proc/PID/stat (in ticks of 10 ms, Linux's
// USER_HZ).
func processCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	_, after, _ := bytes.Cut(stat, []byte(") ")) // past the command's name, which may hold spaces
	fields := strings.Fields(string(after))
	var user, sys int64
	if len(fields) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	fmt.Sscan(fields[11], &user) // utime and stime, fields 14 and 15 of the line
	fmt.Sscan(fields[12], &sys)
	return time.Duration(user+sys) * 10 * time.Millisecond
}
