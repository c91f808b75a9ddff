package trace

import (
	"flag"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/internal/datadir"
)

// unchanged fails the test if tr differs from a fresh known trace: transforms must not touch their input.
func unchanged(t *testing.T, tr *Trace) {
	t.Helper()
	if !reflect.DeepEqual(tr, knownTrace()) {
		t.Error("the transform changed its input trace")
	}
}

func TestWindow(t *testing.T) {
	in := knownTrace()
	w, err := Window(in, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, in)
	// Arrivals 10, 10.5, ..., 14.5: requests 20..29 (prompts 21..30), shifted to start at 0.
	if len(w.Requests) != 10 || w.Requests[0].PromptTokens != 21 || w.Requests[9].PromptTokens != 30 {
		t.Fatalf("window 10s+5s kept %d requests, %+v first", len(w.Requests), w.Requests[0])
	}
	if w.Requests[0].Arrival != 0 || w.Requests[9].Arrival != 4.5 || w.Requests[0].Line != 0 {
		t.Errorf("window arrivals %g..%g", w.Requests[0].Arrival, w.Requests[9].Arrival)
	}
	if !slices.Equal(w.Transforms, []string{"window=10s+5s"}) {
		t.Errorf("Transforms = %q", w.Transforms)
	}
	for _, bad := range [][2]float64{{-1, 5}, {0, 0}, {0, math.Inf(1)}, {math.NaN(), 1}} {
		if _, err := Window(in, bad[0], bad[1]); err == nil {
			t.Errorf("Window(%v) accepted", bad)
		}
	}
}

func TestBusiest(t *testing.T) {
	// One request a second for 100 s, 10 more between 60 and 61 s, and at 20 s one request of 10,000 tokens.
	tr := &Trace{Source: "bursty", Format: Synthetic}
	for i := range 100 {
		n := 10
		if i == 20 {
			n = 10_000
		}
		tr.Requests = append(tr.Requests, Request{Arrival: float64(i), PromptTokens: n, OutputTokens: 1})
		if i == 60 {
			for j := range 10 {
				tr.Requests = append(tr.Requests, Request{Arrival: 60.05 + 0.09*float64(j), PromptTokens: 10, OutputTokens: 1})
			}
		}
	}
	b, err := Busiest(tr, 5, ByRequests)
	if err != nil {
		t.Fatal(err)
	}
	// [56, 61) holds 56..60 and the burst at 60.05..60.86: 15, the most (ties up to [60, 65)); 56 is the earliest.
	if len(b.Requests) != 15 || !slices.Equal(b.Transforms, []string{"busiest=5s/requests", "window=56s+5s"}) {
		t.Errorf("busiest 5 s by requests: %d requests, %q", len(b.Requests), b.Transforms)
	}
	bt, err := Busiest(tr, 5, ByTokens)
	if err != nil {
		t.Fatal(err)
	}
	// The big request at 20 s is in every window from 16 s to 20 s; 16 is the earliest.
	if !slices.Equal(bt.Transforms, []string{"busiest=5s/tokens", "window=16s+5s"}) || len(bt.Requests) != 5 {
		t.Errorf("busiest 5 s by tokens: %d requests, %q", len(bt.Requests), bt.Transforms)
	}
	if _, err := Busiest(tr, 5, "bytes"); err == nil {
		t.Error("busiest by bytes accepted")
	}
}

func TestTimeScale(t *testing.T) {
	in := knownTrace()
	s, err := TimeScale(in, 4.75)
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, in)
	if s.Requests[99].Arrival != 99*0.5*4.75 {
		t.Errorf("last arrival %g, want %g", s.Requests[99].Arrival, 99*0.5*4.75)
	}
	if got, want := Stats(s).MeanRate, Stats(in).MeanRate/4.75; math.Abs(got-want) > 1e-12 {
		t.Errorf("rate %g after stretching 4.75x, want %g", got, want)
	}
	if s.Transforms[0] != "time-scale=4.75" {
		t.Errorf("Transforms = %q", s.Transforms)
	}
	if _, err := TimeScale(in, 0); err == nil {
		t.Error("time-scale 0 accepted")
	}
}

func TestThin(t *testing.T) {
	tr, err := Generate(Spec{Process: Poisson{10}, Lengths: Independent{Fixed{1}, Fixed{1}}, N: 100_000}, 9)
	if err != nil {
		t.Fatal(err)
	}
	th, err := Thin(tr, 0.25, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := float64(len(th.Requests)); math.Abs(n-25_000) > 4*math.Sqrt(100_000*0.25*0.75) {
		t.Errorf("thinning 100,000 with p=0.25 kept %g", n)
	}
	// A thinned Poisson process is Poisson: CV 1 at a quarter of the rate.
	s := Stats(th)
	if math.Abs(s.MeanRate/2.5-1) > 0.02 || math.Abs(s.InterArrivalCV-1) > 0.02 {
		t.Errorf("thinned: rate %g (want 2.5), CV %g (want 1)", s.MeanRate, s.InterArrivalCV)
	}
	again, _ := Thin(tr, 0.25, 4)
	if !reflect.DeepEqual(again, th) {
		t.Error("the same seed thinned differently")
	}
	if _, err := Thin(tr, 1.5, 1); err == nil {
		t.Error("thin 1.5 accepted")
	}
}

func TestClipAndLengthScale(t *testing.T) {
	in := &Trace{Source: "lengths", Requests: []Request{{PromptTokens: 1000, OutputTokens: 300}, {PromptTokens: 100, OutputTokens: 50}, {PromptTokens: 400, OutputTokens: 200}}}
	c, err := Clip(in, Limits{Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{511, 1}, {100, 50}, {400, 112}}
	for i, r := range c.Requests {
		if [2]int{r.PromptTokens, r.OutputTokens} != want[i] {
			t.Errorf("clip to 512: request %d is %d/%d, want %v", i, r.PromptTokens, r.OutputTokens, want[i])
		}
	}
	if in.Requests[0].PromptTokens != 1000 {
		t.Error("Clip changed its input")
	}
	c, _ = Clip(in, Limits{Prompt: 256, Output: 64, Context: 300})
	want = [][2]int{{256, 44}, {100, 50}, {256, 44}}
	for i, r := range c.Requests {
		if [2]int{r.PromptTokens, r.OutputTokens} != want[i] {
			t.Errorf("clip 256/64/300: request %d is %d/%d, want %v", i, r.PromptTokens, r.OutputTokens, want[i])
		}
	}
	s, err := LengthScale(in, 0.1, 0.001)
	if err != nil {
		t.Fatal(err)
	}
	want = [][2]int{{100, 1}, {10, 1}, {40, 1}}
	for i, r := range s.Requests {
		if [2]int{r.PromptTokens, r.OutputTokens} != want[i] {
			t.Errorf("length-scale 0.1,0.001: request %d is %d/%d, want %v", i, r.PromptTokens, r.OutputTokens, want[i])
		}
	}
	if s.Transforms[0] != "length-scale=0.1,0.001" || s.HashBlock != 0 {
		t.Errorf("Transforms = %q, HashBlock %d", s.Transforms, s.HashBlock)
	}
	// The tokens a hash id stands for scale with the prompts.
	mc, err := Parse("m.jsonl", []byte(`{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}`+"\n"), LoadOptions{})
	if err != nil || mc.HashBlock != MooncakeBlock {
		t.Fatalf("a Mooncake trace: HashBlock %d (%v), want %d", mc.HashBlock, err, MooncakeBlock)
	}
	if s, _ := LengthScale(mc, 1.0/16, 1); s.HashBlock != 32 || s.Requests[0].PromptTokens != 44 {
		t.Errorf("length-scale 1/16: HashBlock %d, prompt %d; want 32 and 44", s.HashBlock, s.Requests[0].PromptTokens)
	}
	if _, err := Clip(in, Limits{Context: 1}); err == nil {
		t.Error("a context of 1 accepted")
	}
}

// TestFlags parses a command line and checks the transforms applied, in the documented order whatever the
// order of the flags.
func TestSpread(t *testing.T) {
	// A one-second clock: three requests at 10 s (one recorded a millisecond early), one at 11 s, two at 13 s.
	tr := &Trace{Source: "coarse", Format: Mooncake}
	for i, a := range []float64{9.999, 10, 10, 11, 13, 13} {
		tr.Requests = append(tr.Requests, Request{Arrival: a, PromptTokens: i + 1, OutputTokens: 1})
	}
	in := *tr
	in.Requests = slices.Clone(tr.Requests)
	s, err := Spread(tr, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr, &in) {
		t.Error("Spread changed its input trace")
	}
	var got []float64
	for i, r := range s.Requests {
		got = append(got, r.Arrival)
		if r.PromptTokens != i+1 {
			t.Errorf("request %d has prompt %d: Spread reordered the requests", i, r.PromptTokens)
		}
	}
	if want := []float64{10, 10 + 1.0/3, 10 + 2.0/3, 11, 13, 13.5}; !slices.Equal(got, want) {
		t.Errorf("arrivals %v, want %v", got, want)
	}
	if !slices.Equal(s.Transforms, []string{"spread=1s"}) {
		t.Errorf("Transforms = %q", s.Transforms)
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := Spread(tr, bad); err == nil {
			t.Errorf("Spread(%v) accepted", bad)
		}
	}
}

// TestSpreadMooncake: the Mooncake trace's clock is whole seconds, so tens of its requests share one instant;
// spread, no two arrive together and none moves by more than its second.
func TestSpreadMooncake(t *testing.T) {
	tr, err := Load(datadir.ForTest(t, "traces/mooncake/conversation_trace.jsonl"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Spread(tr, 1)
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for i, r := range s.Requests {
		if i > 0 && tr.Requests[i].Arrival == tr.Requests[i-1].Arrival {
			same++
		}
		if i > 0 && r.Arrival <= s.Requests[i-1].Arrival {
			t.Fatalf("spread arrivals %d and %d: %g then %g", i-1, i, s.Requests[i-1].Arrival, r.Arrival)
		}
		if d := r.Arrival - tr.Requests[i].Arrival; d < -0.5 || d >= 1.5 {
			t.Fatalf("request %d moved %g s", i, d)
		}
	}
	if same < len(tr.Requests)/2 {
		t.Errorf("only %d of %d Mooncake requests share their predecessor's timestamp; want most", same, len(tr.Requests))
	}
}

func TestFlags(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	err := fs.Parse([]string{"--clip", "64", "--time-scale", "2", "--window", "5s+40", "--busiest", "10s", "--thin", "0.999", "--length-scale", "0.5", "--spread", "0.5s"})
	if err != nil {
		t.Fatal(err)
	}
	in := knownTrace()
	out, err := f.Apply(in)
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, in)
	wantT := []string{"spread=0.5s", "window=5s+40s", "busiest=10s/requests", "window=0s+10s", "thin=0.999/seed=1", "time-scale=2", "length-scale=0.5", "clip=prompt:0,output:0,context:64"}
	if !slices.Equal(out.Transforms, wantT) {
		t.Errorf("Transforms =\n %q, want\n %q", out.Transforms, wantT)
	}
	// The busiest 10 s of a uniform trace is its first 10 s: 20 requests (prompt 11..30 after the 5-s window),
	// thinned with p=0.999 (seed 1 keeps all 20), stretched 2x, halved and clipped to 64.
	if len(out.Requests) != 20 || out.Requests[19].Arrival != 19 || out.Requests[19].PromptTokens != 15 || out.Requests[19].OutputTokens != 30 {
		t.Errorf("%d requests, last %+v", len(out.Requests), out.Requests[len(out.Requests)-1])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--window", "5"}, "--window: window \"5\": want OFFSET+DURATION"},
		{[]string{"--busiest", "10s", "--busiest-by", "bytes"}, "--busiest: busiest by \"bytes\""},
		{[]string{"--thin", "2"}, "--thin: thin 2: want a probability"},
		{[]string{"--time-scale", "-1"}, "--time-scale: time-scale -1: want a factor > 0"},
		{[]string{"--length-scale", "x"}, "--length-scale: \"x\": want a factor"},
		{[]string{"--clip", "1"}, "--clip: clip"},
		{[]string{"--spread", "-1s"}, "--spread: spread -1s: want a resolution > 0"},
	} {
		var f Flags
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		_, err := f.Apply(knownTrace())
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to start %q", c.args, err, c.want)
		}
	}
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse([]string{"--busiest", "ten"}); err == nil {
		t.Error("--busiest ten accepted")
	}
}

// TestPaperSnippet checks the window that PAPER.md reports a third party matched to the paper's Azure snippet:
// the code trace from second 1073 for 72 s holds 443 requests.
func TestPaperSnippet(t *testing.T) {
	tr, err := Load(datadir.ForTest(t, "traces/azure2023/AzureLLMInferenceTrace_code.csv"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := Window(tr, 1073, 72)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 443 {
		t.Errorf("code trace 1073s+72s: %d requests, want 443", len(w.Requests))
	}
	s, _ := TimeScale(w, 4.75)
	if d := s.Duration(); d < 72*4.75*0.95 || d > 72*4.75 {
		t.Errorf("stretched 4.75x the snippet lasts %g s, want about %g", d, 72*4.75)
	}
}
