package model

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// loadMemory writes a seeded Q4_0 GGUF file of cfg's shape, loads it (LoadGGUF, FromCheckpoint, Close) and returns
// the file's size, the heap the loaded model holds (live bytes after a GC, over those before the load), and all
// the bytes the load allocated on the way (transient copies included).
func loadMemory(tb testing.TB, cfg Config) (file, held, allocated int64) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "q4_0.gguf")
	ck, err := SynthesizeAs(cfg, 1, Q4_0)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := WriteGGUF(f, ck); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	ck = nil
	st, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	loaded, err := LoadGGUF(path)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := FromCheckpoint(loaded)
	if err != nil {
		tb.Fatal(err)
	}
	if err := loaded.Close(); err != nil {
		tb.Fatal(err)
	}
	loaded = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	return st.Size(), int64(after.HeapAlloc) - int64(before.HeapAlloc), int64(after.TotalAlloc - before.TotalAlloc)
}

// TestLoadQ4_0Memory loads a Q4_0 GGUF file of Llama-2-7B's widths (one decoder layer of its 32, so that the test
// stays small: every matrix shape of the full model, the embedding and the classifier at a larger share) and
// checks that the model holds no more than 1.1x the file's bytes, and that the load never allocated more than
// that either: the blocks are repacked in place of a copy, and no float32 table is made on the way.
// BenchmarkLoadQ4_0Memory measures the full model.
func TestLoadQ4_0Memory(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: writes and loads a 260 MB file")
	}
	cfg, err := ShapeByName("llama2-7b")
	if err != nil {
		t.Fatal(err)
	}
	cfg.NLayers = 1
	file, held, allocated := loadMemory(t, cfg)
	t.Logf("llama2-7b widths, 1 layer, Q4_0: file %d bytes, model %d (%.3fx), allocated %d (%.3fx)", file, held,
		float64(held)/float64(file), allocated, float64(allocated)/float64(file))
	if float64(held) > 1.1*float64(file) || float64(allocated) > 1.1*float64(file) {
		t.Errorf("loading a %d-byte Q4_0 file holds %d bytes and allocated %d; want at most 1.1x the file", file, held, allocated)
	}
	if float64(held) < 0.9*float64(file) {
		t.Errorf("the loaded model holds %d bytes of a %d-byte file; the measurement missed the weights", held, file)
	}
}

// BenchmarkLoadQ4_0Memory reports the memory a loaded Q4_0 GGUF file of Llama-2-7B's shape takes, as a multiple
// of the file's size (held-x: the live heap after the load; alloc-x: everything the load allocated). It writes a
// 3.8 GB file to the temporary directory and needs about twice that in memory while it does:
//
//	go test -run '^$' -bench LoadQ4_0Memory -benchtime 1x ./engine/model/
func BenchmarkLoadQ4_0Memory(b *testing.B) {
	cfg, err := ShapeByName("llama2-7b")
	if err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("shape=llama2-7b/layers=%d", cfg.NLayers), func(b *testing.B) {
		for b.Loop() {
			file, held, allocated := loadMemory(b, cfg)
			b.ReportMetric(float64(file), "file-bytes")
			b.ReportMetric(float64(held)/float64(file), "held-x")
			b.ReportMetric(float64(allocated)/float64(file), "alloc-x")
		}
	})
}
