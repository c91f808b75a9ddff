package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

// TestWritesCommittedFiles regenerates the golden files into a temporary directory: they must verify, and be
// byte for byte the committed ones (generation is deterministic, so a difference means the committed files are
// stale or were edited). The files are generated on amd64; elsewhere a compiler that fuses multiply-adds changes
// the last bits of the reference outputs, which VerifyGoldenFiles tolerates and a byte comparison does not.
func TestWritesCommittedFiles(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("golden files are generated on amd64")
	}
	tmp := t.TempDir()
	if err := run(tmp, false); err != nil {
		t.Fatal(err)
	}
	if err := run(tmp, true); err != nil {
		t.Fatal(err)
	}
	committed, err := kerneltest.GoldenDir()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(tmp, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files written: %v", err)
	}
	for _, f := range files {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(committed, filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the committed file: run go run ./tools/goldengen", filepath.Base(f))
		}
	}
}
