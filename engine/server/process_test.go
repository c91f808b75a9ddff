package server

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestLimitHeap checks that the budget becomes the collector's soft memory limit, and that GOMEMLIMIT wins.
func TestLimitHeap(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	t.Setenv("GOMEMLIMIT", "") // restored after the test
	os.Unsetenv("GOMEMLIMIT")
	LimitHeap(256 << 20)
	if got := debug.SetMemoryLimit(-1); got != 256<<20 {
		t.Errorf("limit after LimitHeap(256 MiB): %d, want %d", got, 256<<20)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1 << 30)
	LimitHeap(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("limit after LimitHeap(64 MiB) with GOMEMLIMIT=1GiB: %d, want GOMEMLIMIT's %d", got, 1<<30)
	}
}

// TestEngineBudget: the engine gets the process budget less the process's own resident memory beyond the weights
// and the HTTP reserve; a budget that leaves no room past the weights is refused, naming the shares.
func TestEngineBudget(t *testing.T) {
	const mib = 1 << 20
	own := ProcessMemory{Resident: 90 * mib, File: 20 * mib}
	got, err := EngineBudget(256*mib, own, 60*mib)
	if want := int64(256*mib - 30*mib - HTTPReserve); err != nil || got != want {
		t.Errorf("EngineBudget(256 MiB, 90 MiB resident, 60 MiB weights) = %d, %v; want %d", got, err, want)
	}
	// Weights larger than the resident set (not yet touched): no negative overhead.
	if got, err := EngineBudget(256*mib, ProcessMemory{Resident: 40 * mib}, 60*mib); err != nil || got != 256*mib-HTTPReserve {
		t.Errorf("resident below the weights: %d, %v; want %d", got, err, 256*mib-HTTPReserve)
	}
	_, err = EngineBudget(100*mib, own, 60*mib)
	if want := "100 MiB leaves nothing for KV blocks: the weights take 60 MiB, the process 30 MiB and HTTP 16 MiB"; err == nil || err.Error() != want {
		t.Errorf("EngineBudget(100 MiB): %v, want %q", err, want)
	}
}
