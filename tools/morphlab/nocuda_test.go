//go:build !cuda

package main

import (
	"strings"
	"testing"
)

// TestServeNoCUDA: serve takes the cuda executor, and a build without -tags cuda says what it lacks.
func TestServeNoCUDA(t *testing.T) {
	code, _, stderr := runCLI("serve", "--model", "stories260K", "--dtype", "f16", "--executor", "cuda", "--addr", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "needs a morphlab built with -tags cuda") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("serve --executor cuda without the tag: exit %d, stderr %q", code, stderr)
	}
}
