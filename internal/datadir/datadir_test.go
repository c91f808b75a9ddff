package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvOverride(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MORPHLAB_DATA", dir)
	p, err := Path("x.txt")
	if err != nil || p != filepath.Join(dir, "x.txt") {
		t.Fatalf("Path(x.txt) = %q, %v; want %q", p, err, filepath.Join(dir, "x.txt"))
	}
	if _, err := Path("missing.bin"); err == nil || !strings.Contains(err.Error(), "missing.bin") {
		t.Fatalf("Path(missing.bin) error = %v, want one naming the file", err)
	}
	t.Setenv("MORPHLAB_DATA", filepath.Join(dir, "nope"))
	if _, err := Dir(); err == nil || !strings.Contains(err.Error(), "MORPHLAB_DATA") {
		t.Fatalf("Dir() with a bad MORPHLAB_DATA: error = %v, want one naming the variable", err)
	}
}
