package deploy

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// TestRecordSteps: the steps file holds every step of a replay, as the results keep them, and none after Close.
func TestRecordSteps(t *testing.T) {
	d := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: KV{Blocks: 958}, Policy: mustPolicy(t, "morph:default")}
	in, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "steps.jsonl")
	rec, err := RecordSteps(in.Engine, path)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := in.Replay(context.Background(), burst(t, 40, 300, 100), ReplayOptions{KeepSteps: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := costmodel.ReadSteps(f, path, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) != len(r.Steps) {
		t.Fatalf("%d steps in the file, %d in the results", len(got), len(r.Steps))
	}
	for i := range got {
		if got[i].Work != r.Steps[i].Work || got[i].Seconds != r.Steps[i].Seconds || !reflect.DeepEqual(got[i].Layers, r.Steps[i].Layers) {
			t.Fatalf("step %d: file %+v, results %+v", i, got[i], r.Steps[i])
		}
	}
	if _, err := RecordSteps(in.Engine, filepath.Join(t.TempDir(), "no", "such", "dir", "steps.jsonl")); err == nil {
		t.Error("a steps file in a missing directory was created")
	}
}
