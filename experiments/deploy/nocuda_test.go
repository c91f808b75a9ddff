//go:build !cuda

package deploy

import (
	"strings"
	"testing"
)

// TestNoCUDA: without -tags cuda the cuda executor is a one-line error once the model is loaded.
func TestNoCUDA(t *testing.T) {
	_, err := Deployment{Model: "stories260K", Executor: "cuda", DType: "f16"}.Build()
	if err == nil || !strings.Contains(err.Error(), "-tags cuda") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("executor cuda without the tag: %v", err)
	}
}
