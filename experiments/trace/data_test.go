package trace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/morphlab/morphlab/internal/datadir"
)

// figures are a trace's published numbers, as SOURCES.md rounds them; a negative value was not published.
type figures struct {
	requests          int
	duration          float64 // whole seconds
	rate              float64 // two decimals
	promptP50, outP50 int
	promptMean        float64 // whole tokens
	outMean           float64
	promptP99, outP99 int
}

// sharedTraces are the traces in the shared data with SOURCES.md's figures and sha256 prefixes.
var sharedTraces = []struct {
	rel, sha, format string
	want             figures
}{
	{"traces/azure2023/AzureLLMInferenceTrace_conv.csv", "2f1e5b666d4e3055", Azure,
		figures{19366, 3502, 5.53, 1020, 129, 1155, 211, 4142, 601}},
	{"traces/azure2023/AzureLLMInferenceTrace_code.csv", "54e9a6d2a4bd06ba", Azure,
		figures{8819, 3436, -1, 1469, 13, -1, -1, -1, -1}},
	{"traces/mooncake/conversation_trace.jsonl", "b8cbb061a85206d7", Mooncake,
		figures{12031, 3537, -1, -1, -1, 12035, 343, -1, -1}},
	{"traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", "6d6c296302a853e2", Lengths,
		figures{30731, -1, -1, -1, -1, -1, -1, -1, -1}},
	{"traces/vidur/splitwise_conv.csv", "439e4138b7e384f3", Vidur,
		figures{19366, 3502, 5.53, 1020, 129, 1155, 211, 4142, 601}},
	{"traces/vidur/splitwise_code.csv", "f266b907d109d471", Vidur,
		figures{8819, 3436, -1, 1469, 13, -1, -1, -1, -1}},
}

// checkFigures asserts every published figure of want on t's statistics, rounded as published.
func checkFigures(t *testing.T, tr *Trace, want figures) {
	t.Helper()
	s := Stats(tr)
	check := func(name string, got, want float64) {
		t.Helper()
		if want >= 0 && got != want {
			t.Errorf("%s: %s = %v, want %v", tr.Source, name, got, want)
		}
	}
	check("requests", float64(s.Requests), float64(want.requests))
	check("duration (s, rounded)", math.Round(s.Duration), want.duration)
	check("mean rate (2 decimals)", math.Round(s.MeanRate*100)/100, want.rate)
	check("prompt p50", float64(s.Prompt.P50), float64(want.promptP50))
	check("output p50", float64(s.Output.P50), float64(want.outP50))
	check("prompt mean (rounded)", math.Round(s.Prompt.Mean), want.promptMean)
	check("output mean (rounded)", math.Round(s.Output.Mean), want.outMean)
	check("prompt p99", float64(s.Prompt.P99), float64(want.promptP99))
	check("output p99", float64(s.Output.P99), float64(want.outP99))
}

func TestSharedTraceFigures(t *testing.T) {
	for _, c := range sharedTraces {
		t.Run(filepath.Base(c.rel), func(t *testing.T) {
			path := datadir.ForTest(t, c.rel)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:])[:16]; got != c.sha {
				t.Fatalf("%s: sha256 %s..., SOURCES.md gives %s...: not the file whose figures these are", path, got, c.sha)
			}
			tr, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Format != c.format {
				t.Errorf("detected format %q, want %q", tr.Format, c.format)
			}
			checkFigures(t, tr, c.want)
			wantLine := 2 // after the CSV header
			if c.format == Mooncake {
				wantLine = 1
			}
			if r := tr.Requests[0]; r.Arrival != 0 || r.Line != wantLine {
				t.Errorf("first request %+v, want arrival 0 on line %d", r, wantLine)
			}
		})
	}
}

// TestAzureEqualsVidur checks that the conversation trace read from Azure's CSV and from Vidur's copy are the same
// requests: arrivals within 1 µs, lengths equal. (Vidur's arrived_at has 6 decimals, Azure's clock 7.)
func TestAzureEqualsVidur(t *testing.T) {
	for _, name := range []string{"conv", "code"} {
		t.Run(name, func(t *testing.T) {
			a, err := Load(datadir.ForTest(t, "traces/azure2023/AzureLLMInferenceTrace_"+name+".csv"), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v, err := Load(datadir.ForTest(t, "traces/vidur/splitwise_"+name+".csv"), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRequests(a, v, 1e-6); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sameRequests says how a and b differ, or nil when they have the same lengths and arrivals within tol seconds.
func sameRequests(a, b *Trace, tol float64) error {
	if len(a.Requests) != len(b.Requests) {
		return fmt.Errorf("%s has %d requests, %s %d", a.Source, len(a.Requests), b.Source, len(b.Requests))
	}
	worst := 0.0
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.PromptTokens != y.PromptTokens || x.OutputTokens != y.OutputTokens {
			return fmt.Errorf("request %d: %s line %d has lengths %d/%d, %s line %d has %d/%d", i, a.Source, x.Line,
				x.PromptTokens, x.OutputTokens, b.Source, y.Line, y.PromptTokens, y.OutputTokens)
		}
		if d := math.Abs(x.Arrival - y.Arrival); d > worst {
			worst = d
		}
		if d := math.Abs(x.Arrival - y.Arrival); d > tol {
			return fmt.Errorf("request %d (lines %d, %d): arrivals %.9f and %.9f differ by %.3g s, more than %g", i, x.Line, y.Line, x.Arrival, y.Arrival, d, tol)
		}
		if len(x.HashIDs) != len(y.HashIDs) {
			return fmt.Errorf("request %d: %d and %d hash ids", i, len(x.HashIDs), len(y.HashIDs))
		}
		for j := range x.HashIDs {
			if x.HashIDs[j] != y.HashIDs[j] {
				return fmt.Errorf("request %d: hash id %d is %d and %d", i, j, x.HashIDs[j], y.HashIDs[j])
			}
		}
	}
	return nil
}

// knownTrace is the twin of the shared traces: 100 requests, one every 0.5 s from 0, prompt i+1 tokens and
// output 2(i+1), so its figures are known by hand: duration 49.5 s, rate 100/49.5, prompt p50 50, mean 50.5, p99
// 99, output p50 100, mean 101, p99 198.
func knownTrace() *Trace {
	t := &Trace{Source: "known", Format: Synthetic}
	for i := range 100 {
		t.Requests = append(t.Requests, Request{Arrival: float64(i) * 0.5, PromptTokens: i + 1, OutputTokens: 2 * (i + 1),
			HashIDs: []int64{0, int64(i)}})
	}
	return t
}

var knownFigures = figures{100, 50, math.Round(100/49.5*100) / 100, 50, 100, 51, 101, 99, 198}

// TestGeneratedFileFigures writes the known trace in every format Load reads (BurstGPT by hand, with a failed
// row), loads each file and checks the figures and the requests.
func TestGeneratedFileFigures(t *testing.T) {
	known := knownTrace()
	s := Stats(known)
	if s.Duration != 49.5 || s.Prompt.Mean != 50.5 || s.Prompt.P50 != 50 || s.Prompt.P99 != 99 || s.Output.P99 != 198 {
		t.Fatalf("the known trace's statistics are %+v", s)
	}
	dir := t.TempDir()
	for _, format := range []string{Azure, Mooncake, Vidur, Lengths, BurstGPT} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if format == BurstGPT {
				buf.WriteString("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
				for i, r := range known.Requests {
					fmt.Fprintf(&buf, "%g,ChatGPT,%d,%d,%d,Conversation log\n", 5+r.Arrival, r.PromptTokens, r.OutputTokens, r.PromptTokens+r.OutputTokens)
					if i == 10 {
						fmt.Fprintf(&buf, "%g,GPT-4,300,0,300,API log\n", 5+r.Arrival)
					}
				}
			} else if err := Write(&buf, known, format); err != nil && format != Lengths {
				t.Fatal(err)
			}
			if format == Lengths {
				buf.Reset()
				lengthsOnly := *known
				lengthsOnly.NoArrivals = true
				if err := Write(&buf, &lengthsOnly, Lengths); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, "known."+format)
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != format {
				t.Errorf("detected %q, want %q", got.Format, format)
			}
			want := knownFigures
			ref := known
			switch format {
			case Lengths:
				want.duration, want.rate = 0, 0
				if !got.NoArrivals {
					t.Error("a length table has arrivals")
				}
				ref = withoutHashIDs(known)
				for i := range ref.Requests {
					ref.Requests[i].Arrival = 0
				}
			case Mooncake:
			case BurstGPT:
				if got.Failed != 1 {
					t.Errorf("Failed = %d, want the 1 failed row", got.Failed)
				}
				if got.Origin.Seconds() != 5 {
					t.Errorf("Origin = %v, want 5s", got.Origin)
				}
				ref = withoutHashIDs(known)
			default:
				ref = withoutHashIDs(known)
			}
			checkFigures(t, got, want)
			if err := sameRequests(got, ref, 1e-9); err != nil {
				t.Error(err)
			}
		})
	}
}

func withoutHashIDs(t *Trace) *Trace {
	out := *t
	out.Requests = make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		r.HashIDs = nil
		out.Requests[i] = r
	}
	return &out
}
