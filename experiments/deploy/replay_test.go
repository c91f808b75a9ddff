package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// TestReplayHoldsInFlightOnly: a replay of 2,450 requests over 20 minutes holds no more than its requests in
// flight and its results: the live heap, sampled after a collection every 500 steps, never grows by a quarter of
// what the prompts would take drawn all at once (before each request arrives, they were, and every result was kept
// to the end); the engine's log keeps instanceLog events, and still every event is returned: each request's
// queued, scheduled and finished.
func TestReplayHoldsInFlightOnly(t *testing.T) {
	tr, err := trace.Generate(trace.Spec{Process: trace.Poisson{PerSecond: 2}, Duration: 1200,
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 1500, Max: 2500}, Output: trace.Uniform{Min: 5, Max: 40}}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	prompts := 0
	for _, r := range tr.Requests {
		prompts += 4 * r.PromptTokens
	}
	in, err := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "a100", Policy: mustPolicy(t, "morph:default")}.Build()
	if err != nil {
		t.Fatal(err)
	}
	live := func() int {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int(ms.HeapAlloc)
	}
	base, most, steps := live(), 0, 0
	in.Engine.OnStep(func(engine.StepInfo) {
		if steps++; steps%500 == 0 {
			most = max(most, live()-base)
		}
	})
	r, events, err := in.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Aggregates.Completed != len(tr.Requests) || steps < 2000 {
		t.Fatalf("%d of %d requests completed in %d steps", r.Aggregates.Completed, len(tr.Requests), steps)
	}
	if most > prompts/4 {
		t.Errorf("the live heap grew by %d bytes in the replay; the prompts drawn at once take %d", most, prompts)
	}
	kinds := map[engine.EventKind]int{}
	for _, ev := range events {
		kinds[ev.Kind]++
	}
	n := len(tr.Requests)
	if len(in.Engine.Log()) > instanceLog || kinds[engine.Queued] != n || kinds[engine.Scheduled] < n || kinds[engine.Finished] != n {
		t.Errorf("the log holds %d events; %d returned, %v by kind: want %d of them queued and finished", len(in.Engine.Log()), len(events), kinds, n)
	}
}

// TestPromptAgain: a replay's arrivals draw each request's prompt again, while later requests are drawn, with the
// tokens they first gave it: the hash ids' blocks and the tokens of no hash id alike, as Requests builds them.
func TestPromptAgain(t *testing.T) {
	tr := &trace.Trace{HashBlock: 16, Requests: []trace.Request{
		{PromptTokens: 40, OutputTokens: 3, HashIDs: []int64{7, 9}},
		{PromptTokens: 25},
		{PromptTokens: 70, OutputTokens: 5, HashIDs: []int64{7, 9, 11}},
		{PromptTokens: 16, HashIDs: []int64{3}},
		{PromptTokens: 33, OutputTokens: 2},
	}}
	want, err := Requests(tr, 1000, 5)
	if err != nil {
		t.Fatal(err)
	}
	a := traceArrivals{t: tr, src: newPromptSource(1000, 5, hashBlock(tr)), marks: map[int][]byte{}}
	for i := range tr.Requests {
		if got := a.Request(i).Prompt; !slices.Equal(got, want[i].Prompt) {
			t.Fatalf("request %d drawn %v, Requests gives %v", i, got, want[i].Prompt)
		}
		for k := range i + 1 {
			if got := a.Prompt(k); !slices.Equal(got, want[k].Prompt) {
				t.Fatalf("request %d drawn again after request %d: %v, want %v", k, i, got, want[k].Prompt)
			}
		}
	}
}

// TestReplayStreamsEvents: a replay that hands its events to a results.EventLog as they come returns none, and
// writes the events.jsonl, results.json and table.md that one returning its events does, byte for byte.
func TestReplayStreamsEvents(t *testing.T) {
	tr := burst(t, 300, 700, 200)
	var dirs [2]string
	for i := range dirs {
		dirs[i] = t.TempDir()
		in, err := sim7b(t, "morph:default", 300).Build()
		if err != nil {
			t.Fatal(err)
		}
		o := ReplayOptions{SLO: metrics.SLO{TTFT: time.Second}}
		var log *results.EventLog
		if i == 1 {
			if log, err = results.CreateEventLog(dirs[i]); err != nil {
				t.Fatal(err)
			}
			o.Events = log.Add
		}
		r, events, err := in.Replay(context.Background(), tr, o)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = r.Write(dirs[i], events)
		} else if err = errors.Join(log.Close(), r.WriteResults(dirs[i])); len(events) > 0 {
			t.Errorf("a replay into an event log returned %d events", len(events))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"events.jsonl", "results.json", "table.md"} {
		kept, err := os.ReadFile(filepath.Join(dirs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		streamed, err := os.ReadFile(filepath.Join(dirs[1], name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(streamed, kept) {
			t.Errorf("%s: %d bytes from the event log, %d from the events returned", name, len(streamed), len(kept))
		}
		if name == "events.jsonl" && !bytes.Contains(kept, []byte(`"kind":"swap"`)) {
			t.Errorf("events.jsonl has no swap:\n%.500s", kept)
		}
	}
}
