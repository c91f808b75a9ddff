package fidelity

import (
	"slices"
	"testing"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// TestCalibrateGridFitsContext checks that a model of a shorter context (stories15M's 256 positions) gets the
// grid scaled into it, and a long enough one the grid as it is.
func TestCalibrateGridFitsContext(t *testing.T) {
	if got := fitContext(grid, 1024); !slices.Equal(got, grid) {
		t.Errorf("a 1024-position context: grid %v, want it unchanged", got)
	}
	got := fitContext(grid, 256)
	// The longest step is at 640 positions: each position is scaled by 256/640, rounding down.
	want := []gridStep{
		{chunk: 6, chunkCtx: 6}, {chunk: 25, chunkCtx: 25}, {chunk: 25, chunkCtx: 128}, {chunk: 102, chunkCtx: 102},
		{decodes: 1, decodeCtx: 25}, {decodes: 4, decodeCtx: 25}, {decodes: 12, decodeCtx: 25},
		{decodes: 1, decodeCtx: 153}, {decodes: 4, decodeCtx: 153}, {decodes: 12, decodeCtx: 153},
		{decodes: 8, decodeCtx: 51, chunk: 12, chunkCtx: 12},
		{chunk: 204, chunkCtx: 204}, {chunk: 51, chunkCtx: 256},
	}
	if !slices.Equal(got, want) {
		t.Errorf("a 256-position context: grid\n%v\nwant\n%v", got, want)
	}
	for _, g := range fitContext(heldOutGrid, 256) {
		if g.chunkCtx > 256 || g.decodeCtx > 256 || g.chunk > g.chunkCtx {
			t.Errorf("held-out step %+v does not fit 256 positions", g)
		}
	}
}

// TestCalibrateKeptTime checks which of a step's rounds calibrate keeps: the fastest on the wall clock, the
// median on the CPU clock.
func TestCalibrateKeptTime(t *testing.T) {
	rounds := []costmodel.Sample{{Seconds: 0.012}, {Seconds: 0.010}, {Seconds: 0.015}, {Seconds: 0.011}, {Seconds: 0.013}}
	if got := keptTime(rounds, "wall").Seconds; got != 0.010 {
		t.Errorf("wall clock: kept %v, want the fastest 0.010", got)
	}
	if got := keptTime(rounds, "cpu").Seconds; got != 0.012 {
		t.Errorf("cpu clock: kept %v, want the median 0.012", got)
	}
	if rounds[2].Seconds != 0.015 {
		t.Errorf("keptTime reordered its rounds: %v", rounds)
	}
}
