package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/loadtest"
	"github.com/morphlab/morphlab/internal/openai/openaitest"
)

// TestLoadtestOutcomes: --outcomes writes a record a rate of a sweep, with every request sent and its outcome.
func TestLoadtestOutcomes(t *testing.T) {
	s := openaitest.NewServer(openaitest.Options{Model: "m", TTFT: 10 * time.Millisecond, TokenDelay: time.Millisecond})
	defer s.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "outcomes.jsonl")
	code, _, stderr := runCLI("loadtest", "--url", s.URL, "--model", "m", "--sweep", "10,20", "--duration", "400ms",
		"--prompt-tokens", "8", "--output-tokens", "4", "--timeout", "20s", "--outcomes", path, "--server-header", "X-None",
		"--plot", filepath.Join(dir, "curve"))
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	recs, err := loadtest.ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Rate != 10 || recs[1].Rate != 20 || len(recs[0].Requests) != 4 || len(recs[1].Requests) != 8 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	for _, rec := range recs {
		if rec.Timeout != 20*time.Second || rec.Start.IsZero() {
			t.Errorf("rate %v: timeout %v, start %v", rec.Rate, rec.Timeout, rec.Start)
		}
		for i, r := range rec.Requests {
			if r.Status != loadtest.Completed || r.MaxTokens != 4 || r.OutputTokens != 4 || r.Server != "" || !(r.Ended > r.Sent) {
				t.Errorf("rate %v, request %d: %+v", rec.Rate, i, r)
			}
		}
	}
}
