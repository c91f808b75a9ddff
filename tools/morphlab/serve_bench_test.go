package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkServeHostileBodies serves stories260K (synthesized) in a child process with --max-process-memory 64MiB, one
// process a body, and each iteration posts eight of these 4 MB bodies at once:
//
//   - empty-messages: a chat of 144,629 messages {"role":"user","content":""}, refused from the text they render to
//     (a 400 naming the 512-token context);
//   - long-key: a completion with an unknown key of 1.4 M characters U+2028 (3 bytes each in the body, 6 in JSON's
//     escape), a 400 that quotes 40 of them;
//   - long-model: a completion for a model named so, a 404 that quotes 40 of them.
//
// Each answer must be that error, under 1 KiB. It reports the slowest and the median time from sending a request
// to having its answer, the server's CPU time a request (which other jobs on the machine do not inflate as they
// do the times), the largest answer, and the server's peak resident set (VmHWM, over the whole run, its start
// included) with what it is over --memory: the server refuses these bodies from their first 64 KiB and drops
// the rest unparsed, so that the peak stays within --memory plus 64 MiB and each answer, on an idle machine, within
// 100 ms (BENCHMARKS.md).
func BenchmarkServeHostileBodies(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("skipping: no /proc/PID/status to read the peak resident set from")
	}
	const size = 4 << 20 // the largest body the server reads
	fill := func(before, unit, after string) []byte {
		n := (size - len(before) - len(after)) / len(unit)
		return []byte(before + strings.Repeat(unit, n) + after)
	}
	messages := fill(`{"model": "m", "messages": [`, `{"role":"user","content":""},`, `{"role":"user","content":""}], "max_tokens": 1}`)
	for _, c := range []struct {
		name, path string
		body       []byte
		status     int
		answer     string // a part of the answer
	}{
		{"empty-messages", "/v1/chat/completions", messages, 400, "the model's context is 512 tokens"},
		{"long-key", "/v1/completions", fill(`{"model": "m", "prompt": "Once", "`, "\u2028", `": 1}`), 400, "unsupported parameter"},
		{"long-model", "/v1/completions", fill(`{"model": "`, "\u2028", `", "prompt": "Once"}`), 404, "does not exist"},
	} {
		b.Run("body="+c.name, func(b *testing.B) {
			benchRefusals(b, c.path, c.body, func(status int, answer []byte) error {
				if status != c.status || !bytes.Contains(answer, []byte(c.answer)) || len(answer) > 1024 {
					return fmt.Errorf("%d, %d bytes: %.300s; want %d with %s, at most 1 KiB", status, len(answer), answer, c.status, c.answer)
				}
				return nil
			})
		})
	}
}

// benchRefusals serves a synthesized stories260K with --max-process-memory 64MiB in a child process and, each iteration,
// posts eight copies of body to path at once, checking each answer with check; it reports the time to the
// answers, the server's CPU time a request, the largest answer and the server's peak resident set.
func benchRefusals(b *testing.B, path string, body []byte, check func(status int, answer []byte) error) {
	const memory = 64 << 20
	model := filepath.Join(b.TempDir(), "m.gguf")
	if code, _, stderr := runCLI("synth", "--shape", "stories260K", "--out", model); code != 0 {
		b.Fatalf("synth: %s", stderr)
	}
	cmd, lines := startServe(b, nil, "--model", model, "--addr", "127.0.0.1:0", "--max-process-memory", "64MiB")
	var addr []string
	for addr == nil {
		line, err := lines.ReadString('\n')
		if err != nil {
			b.Fatalf("serve: %q, %v", line, err)
		}
		addr = regexp.MustCompile(`^serving m on (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(line)
	}
	go io.Copy(io.Discard, lines)
	const clients = 8
	// Bodies go out in writes of 64 KiB, as curl's do, not the 4 KiB of Go's default transport.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, WriteBufferSize: 64 << 10}}
	var mu sync.Mutex
	var took []time.Duration
	largest := 0
	send := func() {
		start := time.Now()
		resp, err := client.Post(addr[1]+path, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Error(err)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err == nil {
			err = check(resp.StatusCode, answer)
		}
		if err != nil {
			b.Errorf("a body of %d bytes: %v", len(body), err)
		}
		mu.Lock()
		took = append(took, d)
		largest = max(largest, len(answer))
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
	peak := peakResident(b, cmd.Process.Pid)
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(peak-memory)/(1<<20), "over-memory-MiB")
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms-to-refusal")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms-to-refusal")
	b.ReportMetric(ms(cpu)/float64(len(took)), "server-cpu-ms/request")
	b.ReportMetric(float64(largest), "max-answer-bytes")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// peakResident is process pid's peak resident set in bytes (VmHWM in /proc/PID/status).
func peakResident(b *testing.B, pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscan(v, &kib); err != nil {
				b.Fatalf("/proc/%d/status: %q", pid, line)
			}
			return kib << 10
		}
	}
	b.Fatalf("/proc/%d/status has no VmHWM", pid)
	return 0
}
