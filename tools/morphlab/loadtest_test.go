package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

func TestLoadtestRun(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 30 * time.Millisecond, TokenDelay: 5 * time.Millisecond})
	defer s.Close()
	code, stdout, stderr := runCLI("loadtest", "--url", s.URL, "--model", "m", "--rate", "20", "--duration", "500ms",
		"--prompt-tokens", "16", "--output-tokens", "8", "--slo", "ttft=1s")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows := tableRows(stdout)
	for _, want := range [][2]string{{"requests", "10"}, {"completed", "10"}, {"failed", "0"}, {"TTFT", "10"}, {"TPOT", "10"}} {
		if got := rows[want[0]]; len(got) == 0 || got[0] != want[1] {
			t.Errorf("row %s: %q, want %s first:\n%s", want[0], got, want[1], stdout)
		}
	}
	if !strings.Contains(stderr, "rate 20: 10 requests, 10 completed, 0 rejected, 0 failed") {
		t.Errorf("stderr %q", stderr)
	}
	if s.Requests() != 10 {
		t.Errorf("server saw %d requests, want 10", s.Requests())
	}
}

func TestLoadtestSweepJSON(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 20 * time.Millisecond, TokenDelay: 2 * time.Millisecond})
	defer s.Close()
	prompts := filepath.Join(t.TempDir(), "p.txt")
	if err := os.WriteFile(prompts, []byte("one two\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plot := filepath.Join(t.TempDir(), "curve")
	code, stdout, stderr := runCLI("loadtest", "--url", s.URL, "--model", "m", "--sweep", "10,20", "--duration", "400ms",
		"--prompts", prompts, "--chat", "--output-tokens", "4", "--knee", "e2el=5s", "--target-rps", "25",
		"--cost-per-hour", "3", "--plot", plot, "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var r loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if len(r.Runs) != 2 || r.Runs[0].Metrics.Requests != 4 || r.Runs[1].Metrics.Requests != 8 || r.Runs[1].Metrics.Completed != 8 {
		t.Fatalf("runs %+v", r.Runs)
	}
	if r.Knee == nil || r.Knee.Rate != 20 || r.Capacity == nil {
		t.Fatalf("knee %+v capacity %+v, want the 20 req/s run and a plan", r.Knee, r.Capacity)
	}
	c := r.Capacity
	if want := int(25/r.Knee.Metrics.RequestThroughput) + 1; c.Instances != want || c.CostPerHour != 3*float64(want) {
		t.Errorf("capacity %+v, want %d instances", c, want)
	}
	for _, f := range r.Plots {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	// Half the knee's rate of the saved sweep: 10 req/s, 4 requests in 400 ms.
	saved := filepath.Join(t.TempDir(), "sweep.json")
	if err := os.WriteFile(saved, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI("loadtest", "--url", s.URL, "--model", "m", "--at-knee", saved, "--knee", "e2el=5s", "--times", "0.5",
		"--duration", "400ms", "--prompts", prompts, "--chat", "--output-tokens", "4", "--json")
	var half loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &half); code != 0 || err != nil || len(half.Runs) != 1 || half.Runs[0].Rate != 10 || half.Runs[0].Metrics.Requests != 4 {
		t.Errorf("--at-knee --times 0.5: exit %d (%v), %s, runs %+v", code, err, stderr, half.Runs)
	}
	code, _, stderr = runCLI("loadtest", "--url", s.URL, "--model", "m", "--at-knee", saved, "--knee", "e2el=1ms", "--duration", "400ms")
	if code != 1 || !strings.Contains(stderr, "--at-knee "+saved+": no rate meets P95 E2EL <= 1ms") {
		t.Errorf("--at-knee without a knee: exit %d, %q", code, stderr)
	}
}

// TestLoadtestRangeRatio: with --range-ratio the requests carry the lengths RandomLengths draws with the seed (the
// fake counts prompt token ids and generates max_tokens), and --ignore-eos reaches every request.
func TestLoadtestRangeRatio(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m"})
	defer s.Close()
	code, stdout, stderr := runCLI("loadtest", "--url", s.URL, "--model", "m", "--rate", "40", "--duration", "500ms",
		"--prompt-tokens", "16", "--output-tokens", "8", "--range-ratio", "0.5", "--ignore-eos", "--seed", "3", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var r loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	pl, ol, err := loadtest.RandomLengths(20, 16, 8, 0.5, 3)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Runs[0].Metrics
	if m.Requests != 20 || m.Completed != 20 || m.TotalInputTokens != sum(pl) || m.TotalOutputTokens != sum(ol) {
		t.Errorf("%d requests, %d completed, %d prompt and %d output tokens; want 20, 20, %d and %d",
			m.Requests, m.Completed, m.TotalInputTokens, m.TotalOutputTokens, sum(pl), sum(ol))
	}
	if s.IgnoredEOS() != 20 || r.RangeRatio != 0.5 || !r.IgnoreEOS {
		t.Errorf("%d requests with ignore_eos, report range ratio %v and ignore_eos %v; want 20, 0.5, true", s.IgnoredEOS(), r.RangeRatio, r.IgnoreEOS)
	}
}

// TestLoadtestAPIKey: --api-key (or $OPENAI_API_KEY) reaches a server that answers 401 without it; without the
// right key the run fails naming the 401.
func TestLoadtestAPIKey(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", APIKey: "k3y"})
	defer s.Close()
	args := []string{"loadtest", "--url", s.URL, "--model", "m", "--rate", "40", "--duration", "250ms", "--prompt-tokens", "4", "--output-tokens", "2", "--json"}
	for _, c := range []struct {
		name string
		env  string
		args []string
		ok   bool
	}{
		{"no key", "", nil, false},
		{"wrong key", "", []string{"--api-key", "k3"}, false},
		{"flag", "", []string{"--api-key", "k3y"}, true},
		{"environment", "k3y", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", c.env)
			code, stdout, stderr := runCLI(append(args, c.args...)...)
			if !c.ok {
				if code != 1 || !strings.Contains(stderr, "HTTP 401") {
					t.Errorf("exit %d, stderr %q; want 1 naming HTTP 401", code, stderr)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			var r loadtest.Report
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatal(err)
			}
			if m := r.Runs[0].Metrics; m.Requests != 10 || m.Completed != 10 {
				t.Errorf("%d requests, %d completed; want 10 and 10", m.Requests, m.Completed)
			}
		})
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestLoadtestTrace replays a Vidur-format trace, stretched 2x by --time-scale: each request at its own time with
// its own lengths.
func TestLoadtestTrace(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m"})
	defer s.Close()
	tr := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(tr, []byte("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,3\n0.1,2,7\n0.2,9,1\n0.25,4,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("loadtest", "--url", s.URL, "--model", "m", "--trace", tr, "--time-scale", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var r loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	m := r.Runs[0].Metrics
	// 3 gaps over 0.5 s once stretched; 20 prompt and 13 output tokens in all (the fake counts token ids).
	if m.Requests != 4 || m.Completed != 4 || m.TotalInputTokens != 20 || m.TotalOutputTokens != 13 || m.AskedRate != 6 || r.Runs[0].Rate != 6 {
		t.Errorf("metrics %+v", m)
	}
	if r.DurationS != 0.5 || !strings.Contains(stderr, "time-scale") {
		t.Errorf("duration %v, stderr %q", r.DurationS, stderr)
	}
}

// TestLoadtestCompare compares three saved sweeps under P95 E2EL <= 50ms: static's meets the target at 30 req/s
// again after missing it at 20, so its knee is 10; dynamic's is 20, continuous's 40, at 4x static's throughput and 2x
// dynamic's; the rates table has each curve's P95 at every rate.
func TestLoadtestCompare(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, c := range []struct {
		name  string
		e2els []float64 // P95 E2EL (ms) at 10, 20, 30 and 40 req/s
	}{{"static", []float64{30, 60, 40}}, {"dynamic", []float64{20, 40, 80}}, {"continuous", []float64{10, 20, 30, 45}}} {
		r := loadtest.Report{URL: "http://127.0.0.1:8000", Model: "m", Burstiness: 1, DurationS: 10}
		for i, e2el := range c.e2els {
			rate := 10 * float64(i+1)
			r.Runs = append(r.Runs, loadtest.Point{Rate: rate, Metrics: loadtest.Metrics{Requests: 100, Completed: 100,
				RequestThroughput: 0.95 * rate, E2EL: loadtest.Summary{P95: e2el}}})
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, c.name+".json")
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, c.name+"="+file)
	}
	plot := filepath.Join(dir, "all")
	args := []string{"loadtest", "--compare", strings.Join(files, ","), "--knee", "e2el=50ms", "--plot", plot}
	code, stdout, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("compare: exit %d, stderr %q", code, stderr)
	}
	rows := tableRows(stdout)
	for name, want := range map[string]string{
		"static":     "3 10.00 9.500 30.00 1.000 0.5",
		"dynamic":    "3 20.00 19.00 40.00 2.000 1.000",
		"continuous": "4 40.00 38.00 45.00 4.000 2.000",
		"40.00":      "- - 45.00",
		"20.00":      "60.00 40.00 20.00",
	} {
		if got := strings.Join(rows[name], " "); got != want {
			t.Errorf("row %s: %q, want %q:\n%s", name, got, want, stdout)
		}
	}
	svg, err := os.ReadFile(plot + ".svg")
	if err != nil || !strings.Contains(string(svg), "continuous E2EL P95") {
		t.Errorf("compare plot: %v", err)
	}
	code, stdout, _ = runCLI(append(args, "--json")...)
	var r loadtest.Comparison
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 || len(r.Curves) != 3 || r.Curves[0].Knee == nil || r.Curves[0].Knee.Rate != 10 ||
		r.Curves[2].Knee == nil || r.Curves[2].Knee.Rate != 40 || r.Curves[1].File != filepath.Join(dir, "dynamic.json") {
		t.Errorf("compare JSON: exit %d, %v, %+v", code, err, r)
	}
}

func TestLoadtestErrors(t *testing.T) {
	base := []string{"loadtest", "--url", "http://127.0.0.1:1", "--model", "m", "--duration", "1s"}
	prompts := filepath.Join(t.TempDir(), "p.txt")
	if err := os.WriteFile(prompts, []byte("a prompt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"loadtest", "--model", "m", "--rate", "1", "--duration", "1s"}, 2, "--url and --model are required"},
		{base, 2, "give one of --rate R and --sweep"},
		{append(base, "--rate", "1", "--sweep", "1,2"), 2, "give one of --rate R and --sweep"},
		{append(base, "--sweep", "1,x"), 2, `--sweep="1,x": "x" is not a rate above 0`},
		{append(base, "--rate", "-1"), 2, "--rate=-1"},
		{append(base, "--rate", "1", "--burstiness", "0"), 2, "burstiness 0, want a number above 0"},
		{append(base, "--rate", "1", "--slo", "ttft=soon"), 2, "--slo: "},
		{append(base, "--rate", "1", "--knee", "p50=1s"), 2, "--knee: "},
		{append(base, "--rate", "1", "--target-rps", "5"), 2, "need --knee"},
		{append(base, "--rate", "1", "--chat"), 2, "--chat needs --prompts"},
		{append(base, "--rate", "1", "--range-ratio", "1"), 2, "range ratio 1, want 0 or more and below 1"},
		{append(base, "--rate", "1", "--range-ratio", "0.5", "--prompts", prompts), 2, "a range ratio draws the lengths of synthetic prompts"},
		{append(base, "--rate", "1", "--vocab", "3"), 2, "vocabulary of 3, want at least 4"},
		{append(base, "--rate", "1", "--at-knee", "s.json", "--knee", "ttft=1s"), 2, "--at-knee takes --knee and neither --rate nor --sweep"},
		{append(base, "--at-knee", "s.json"), 2, "--at-knee takes --knee"},
		{append(base, "--rate", "1", "--times", "0"), 2, "--times=0, want a number above 0"},
		{[]string{"loadtest", "--compare", "a=x.json"}, 2, "--compare needs --knee"},
		{[]string{"loadtest", "--compare", "a=x.json", "--knee", "e2el=1s", "--rate", "1"}, 2, "--rate does not apply to --compare"},
		{[]string{"loadtest", "--compare", "x.json", "--knee", "e2el=1s"}, 2, "want LABEL=FILE"},
		{[]string{"loadtest", "--compare", "a=/nonexistent/x.json", "--knee", "e2el=1s"}, 1, "/nonexistent/x.json"},
		{append(base, "--trace", "t.csv"), 2, "--duration does not apply to --trace"},
		{append(base, "--rate", "1", "--window", "0+1"), 2, "--window needs --trace"},
		{[]string{"loadtest", "--url", "http://127.0.0.1:1", "--model", "m", "--trace", "/nonexistent/t.csv"}, 1, "/nonexistent/t.csv"},
		{append(base, "--rate", "1", "--prompts", "/nonexistent/p.txt"), 1, "/nonexistent/p.txt"},
		{[]string{"loadtest", "--url", "http://127.0.0.1:1/v1", "--model", "m", "--duration", "1s", "--rate", "1"}, 2, `--url "http://127.0.0.1:1/v1": want a server root`},
		// Nothing listens on port 1: every request fails and the command says so.
		{append(base, "--rate", "2", "--timeout", "2s"), 1, "rate 2: no request completed (the first: "},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != c.code || !strings.HasPrefix(stderr, "morphlab loadtest: ") && !strings.Contains(stderr, "\nmorphlab loadtest: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", strings.Join(c.args[1:], " "), code, stderr, c.code, c.want)
		}
	}
}

// tableRows returns the cells of each row of the Markdown tables in s, by the row's first cell.
func tableRows(s string) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows[cells[0]] = cells[1:]
	}
	return rows
}
