package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestCPUTop builds a profile by hand: main calls work, which calls an inlined helper. Flat time goes to each
// sample's innermost frame, cumulative time once to every function on the stack.
func TestCPUTop(t *testing.T) {
	fns := []*profile.Function{{ID: 1, Name: "main.main"}, {ID: 2, Name: "main.work"}, {ID: 3, Name: "main.helper"}}
	locs := []*profile.Location{
		{ID: 1, Line: []profile.Line{{Function: fns[0]}}},
		// helper inlined into work: one location, innermost line first.
		{ID: 2, Line: []profile.Line{{Function: fns[2]}, {Function: fns[1]}}},
		{ID: 3, Line: []profile.Line{{Function: fns[1]}}},
	}
	ms := int64(time.Millisecond)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function:   fns,
		Location:   locs,
		Sample: []*profile.Sample{
			{Location: []*profile.Location{locs[1], locs[0]}, Value: []int64{3, 30 * ms}},
			{Location: []*profile.Location{locs[2], locs[0]}, Value: []int64{2, 20 * ms}},
			{Location: []*profile.Location{locs[0]}, Value: []int64{1, 10 * ms}},
			// A recursive stack: work counted once in its cumulative time.
			{Location: []*profile.Location{locs[2], locs[2], locs[0]}, Value: []int64{1, 5 * ms}},
		},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	top, total, err := cpuTop(&buf)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Millisecond
	want := []funcTime{{"main.helper", 30 * d, 30 * d}, {"main.work", 25 * d, 55 * d}, {"main.main", 10 * d, 65 * d}}
	if total != 65*d || len(top) != len(want) {
		t.Fatalf("total %v, %d functions; want 65ms and 3", total, len(top))
	}
	for i := range want {
		if top[i] != want[i] {
			t.Errorf("function %d = %+v, want %+v", i, top[i], want[i])
		}
	}

	if _, _, err := cpuTop(strings.NewReader("not a profile")); err == nil {
		t.Error("cpuTop accepted text")
	}
}

// TestPprofTopFlag: a command given --cpuprofile and --pprof-top prints the two tables on stderr; --pprof-top alone
// is a usage error.
func TestPprofTopFlag(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	code, _, stderr := runCLI("probe", "--quick", "--out", "", "--cpuprofile", prof, "--pprof-top", "3")
	if code != 0 {
		t.Fatalf("probe --pprof-top: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"CPU profile " + prof + ": ", "top 3 by flat time", "top 3 by cumulative time", "| flat", "| function"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	code, _, stderr = runCLI("probe", "--quick", "--out", "", "--pprof-top", "3")
	if code != 2 || stderr != "morphlab probe: --pprof-top needs --cpuprofile\n" {
		t.Errorf("probe --pprof-top without --cpuprofile: exit %d, stderr %q", code, stderr)
	}
}

// FuzzCPUTop: any input is a profile or an error, never a panic; a profile's flat times add up to its total.
func FuzzCPUTop(f *testing.F) {
	var buf bytes.Buffer
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		Function: []*profile.Function{{ID: 1, Name: "f"}}}
	p.Location = []*profile.Location{{ID: 1, Line: []profile.Line{{Function: p.Function[0]}}}}
	p.Sample = []*profile.Sample{{Location: p.Location, Value: []int64{7}}}
	if err := p.Write(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("not a profile"))
	f.Fuzz(func(t *testing.T, in []byte) {
		top, total, err := cpuTop(bytes.NewReader(in))
		if err != nil {
			return
		}
		var flat time.Duration
		for _, ft := range top {
			flat += ft.Flat
		}
		if flat != total {
			t.Fatalf("flat times add to %v, total %v", flat, total)
		}
	})
}
