package trace

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestClipJoins: a clip right after another is recorded once where one clip does both, and that clip cuts every
// request as the two did; where none does, both are recorded.
func TestClipJoins(t *testing.T) {
	in := &Trace{Source: "lengths", Format: Synthetic}
	for p := 1; p <= 24; p++ {
		for o := 1; o <= 24; o++ {
			in.Requests = append(in.Requests, Request{PromptTokens: p, OutputTokens: o})
		}
	}
	bounds, contexts := []int{0, 1, 3, 8, 13}, []int{0, 2, 5, 13, 20}
	joined := 0
	for _, ap := range bounds {
		for _, ao := range bounds {
			for _, ac := range contexts {
				for _, bp := range bounds {
					for _, bc := range contexts {
						a, b := Limits{Prompt: ap, Output: ao, Context: ac}, Limits{Prompt: bp, Context: bc}
						first, err := Clip(in, a)
						if err != nil {
							t.Fatal(err)
						}
						both, err := Clip(first, b)
						if err != nil {
							t.Fatal(err)
						}
						want := 2
						if ac == 0 || bp == 0 {
							want = 1
						}
						if len(both.Transforms) != want {
							t.Fatalf("clip %+v then %+v: records %q, want %d", a, b, both.Transforms, want)
						}
						if want == 2 {
							continue
						}
						joined++
						l, ok := parseClip(both.Transforms[0])
						once, err := Clip(in, l)
						if !ok || err != nil || !reflect.DeepEqual(once.Requests, both.Requests) {
							t.Fatalf("clip %+v then %+v, recorded as %s, cuts otherwise than the two (%v)", a, b, both.Transforms[0], err)
						}
					}
				}
			}
		}
	}
	if joined < 1000 {
		t.Errorf("only %d pairs of clips joined", joined)
	}
	s, _ := TimeScale(in, 2)
	c1, _ := Clip(s, Limits{Prompt: 512, Output: 256})
	c2, _ := Clip(c1, Limits{Context: 4096})
	if want := []string{"time-scale=2", "clip=prompt:512,output:256,context:4096"}; !slices.Equal(c2.Transforms, want) {
		t.Errorf("an experiment's clip then a replay's: %q, want %q", c2.Transforms, want)
	}
}

// TestRebuildFile: a trace read from a file (out of order, so sorted) and transformed by every flag rebuilds from
// its recipe to the same requests and records; a changed or missing file is one error naming it.
func TestRebuildFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.csv")
	var b bytes.Buffer
	b.WriteString("arrived_at,num_prefill_tokens,num_decode_tokens\n")
	for i := range 200 {
		at := float64(i) * 0.25
		if i == 7 {
			at = 0.1 // before its neighbours: sorted
		}
		fmt.Fprintf(&b, "%g,%d,%d\n", at, 10+(i*37)%500, 5+(i*11)%300)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Flags{Sort: true, Spread: 0.5, Window: "2s+40s", Busiest: 20, BusiestBy: ByTokens, Thin: 0.7, Seed: 3,
		TimeScale: 4.75, LengthScale: "0.5,0.25", MaxPrompt: 200, Clip: 180}
	orig, err := f.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	orig, err = Clip(orig, Limits{Context: 150}) // a replay's clip, joined to the flags'
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sorted=1", "spread=0.5s", "window=2s+40s", "busiest=20s/tokens", "window=5.75s+20s", "thin=0.7/seed=3",
		"time-scale=4.75", "length-scale=0.5,0.25", "clip=prompt:200,output:0,context:150"}
	if !slices.Equal(orig.Transforms, want) || orig.SHA256 == "" || len(orig.Requests) < 20 {
		t.Fatalf("transforms %q, sha256 %q, %d requests; want %q", orig.Transforms, orig.SHA256, len(orig.Requests), want)
	}
	again, err := orig.Recipe().Rebuild()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, orig) {
		t.Errorf("rebuilt %v, want %v", again, orig)
	}
	for _, drop := range []int{1, 5, len(want) - 1} { // a recipe short of a transform gives another trace
		r := orig.Recipe()
		r.Transforms = slices.Delete(r.Transforms, drop, drop+1)
		if other, err := r.Rebuild(); err == nil && reflect.DeepEqual(other.Requests, orig.Requests) {
			t.Errorf("without %s: the same requests", want[drop])
		}
	}
	r := orig.Recipe()
	r.Transforms[5] = "thin=0.7/seed=4"
	if other, err := r.Rebuild(); err != nil || reflect.DeepEqual(other.Requests, orig.Requests) {
		t.Errorf("another thinning seed: %v, the same requests", err)
	}

	r = orig.Recipe()
	r.Transforms[4] = "window=19s+20s"
	if _, err := r.Rebuild(); err == nil || !strings.Contains(err.Error(), "chose window=5.75s+20s") {
		t.Errorf("a busiest window recorded otherwise: %v", err)
	}
	r = orig.Recipe()
	r.Transforms = append(r.Transforms, "head=3")
	if _, err := r.Rebuild(); err == nil || err.Error() != `trace: transform "head=3": not a record this build reads` {
		t.Errorf("an unknown transform: %v", err)
	}
	if err := os.WriteFile(path, append(b.Bytes(), "60,10,10\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := orig.Recipe().Rebuild(); err == nil || !strings.HasPrefix(err.Error(), "trace: "+path+" has changed since the run: sha256 ") {
		t.Errorf("a changed file: %v", err)
	}
	os.Remove(path)
	if _, err := orig.Recipe().Rebuild(); err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestRebuildGenerated: generated traces (from distributions, from a length table, and a length table given
// arrivals) draw again from their sources; a table that changed is named.
func TestRebuildGenerated(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "lengths.csv")
	var b bytes.Buffer
	b.WriteString("num_prefill_tokens,num_decode_tokens\n")
	for i := range 50 {
		fmt.Fprintf(&b, "%d,%d\n", 10+i*7, 3+i)
	}
	if err := os.WriteFile(table, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := Load(table, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var traces []*Trace
	for _, spec := range []Spec{
		{Process: Gamma{PerSecond: 8.56, Burstiness: 0.86}, Duration: 72, Lengths: Independent{Prompt: LogNormal{Median: 1020, Sigma: 1}, Output: Fixed{N: 9}}},
		{Process: OnOff{OnRate: 4.8828125, OffRate: 0.48828125, OnMean: 6, OffMean: 12}, N: 40, Duration: 30, Lengths: Independent{Prompt: Uniform{Min: 3, Max: 9}, Output: Fixed{N: 2}}},
		{Process: Schedule{{Duration: 5, PerSecond: 2}, {Duration: 2.5, PerSecond: 20}}, N: 60, Lengths: Table{From: tab}},
	} {
		g, err := Generate(spec, 11)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = TimeScale(g, 1/1.5); err != nil {
			t.Fatal(err)
		}
		traces = append(traces, g)
	}
	given, err := WithArrivals(tab, Poisson{PerSecond: 3}, 5)
	if err != nil {
		t.Fatal(err)
	}
	traces = append(traces, given)
	for _, g := range traces {
		again, err := g.Recipe().Rebuild()
		if err != nil {
			t.Fatalf("%s: %v", g.Source, err)
		}
		if !reflect.DeepEqual(again, g) {
			t.Errorf("%s: rebuilt otherwise", g)
		}
	}
	if traces[2].SHA256 != tab.SHA256 || traces[0].SHA256 != "" {
		t.Errorf("a table's draw has sha256 %q (the table's %q), a distributions' %q", traces[2].SHA256, tab.SHA256, traces[0].SHA256)
	}
	r := traces[0].Recipe()
	r.Source = strings.Replace(r.Source, "seed=11", "seed=12", 1)
	if other, err := r.Rebuild(); err != nil || reflect.DeepEqual(other.Requests, traces[0].Requests) {
		t.Errorf("another seed: %v, the same requests", err)
	}
	if err := os.WriteFile(table, append(b.Bytes(), "5,5\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := traces[2].Recipe().Rebuild(); err == nil || !strings.Contains(err.Error(), "the length table of "+traces[2].Source+" has changed") {
		t.Errorf("a changed table: %v", err)
	}
	for _, src := range []string{"poisson:2", "poisson:2 prompt=fixed:3 seed=1", "poisson:2 prompt=fixed:3 output=fixed:1 seed=x n=3",
		"poisson:2 prompt=fixed:3 output=fixed:1 seed=1 n=3 size=4", "poisson:2 prompt=fixed:3 output=fixed:1 seed=1 n=3.0"} {
		if _, err := Regenerate(src); err == nil || !strings.HasPrefix(err.Error(), "trace: generator "+fmt.Sprintf("%q", src)) {
			t.Errorf("Regenerate(%q): %v", src, err)
		}
	}
}

// TestRebuildKeptFailed: BurstGPT's failed requests kept are recorded, and kept again.
func TestRebuildKeptFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.csv")
	data := burstNewHead +
		"19440110.0,1722ac82-0a46-4bf0-aa08-89794e7a2b3f,43,GPT-4,906,446,1352,Conversation log\n" +
		"19440161.0,d5983bf9-4b48-497b-892b-a58995247443,2,ChatGPT,36,0,36,Conversation log\n" +
		"19440192.0,a5c69b35-4fbc-45e9-955e-18715e376d74,8,GPT-4,1779,123,1902,Conversation log\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	kept, err := Load(path, LoadOptions{KeepFailed: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := kept.Recipe().Rebuild()
	if err != nil || !slices.Equal(kept.Transforms, []string{"kept-failed=1"}) || !reflect.DeepEqual(again, kept) {
		t.Errorf("kept %q, rebuilt %v (%v)", kept.Transforms, again, err)
	}
}
