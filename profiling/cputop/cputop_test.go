package cputop

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestRead builds a profile by hand: main calls work, which calls an inlined helper. Flat time goes to each
// sample's innermost frame, cumulative time once to every function on the stack.
func TestRead(t *testing.T) {
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
	top, total, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Millisecond
	want := []Func{{"main.helper", 30 * d, 30 * d}, {"main.work", 25 * d, 55 * d}, {"main.main", 10 * d, 65 * d}}
	if total != 65*d || len(top) != len(want) {
		t.Fatalf("total %v, %d functions; want 65ms and 3", total, len(top))
	}
	for i := range want {
		if top[i] != want[i] {
			t.Errorf("function %d = %+v, want %+v", i, top[i], want[i])
		}
	}

	if _, _, err := Read(strings.NewReader("not a profile")); err == nil {
		t.Error("Read accepted text")
	}
}

// FuzzRead: any input is a profile or an error, never a panic; a profile's flat times add up to its total.
func FuzzRead(f *testing.F) {
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
		top, total, err := Read(bytes.NewReader(in))
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
