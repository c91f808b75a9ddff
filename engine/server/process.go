package server

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/morphlab/morphlab/internal/numfmt"
)

// HTTPReserve is what a process budget (morphlab serve --max-process-memory) keeps for answering HTTP beside the
// engine: connection buffers, handler goroutines' stacks, request bodies and streams. The overload check of
// tools/loadbench/batching.sh (4x the knee rate for 60 s with --max-queue 32) holds its peak resident set within
// --max-process-memory with it.
const HTTPReserve = 16 << 20

// ProcessMemory is the process's resident memory once the model is loaded, and the part of it that maps files
// (the binary's pages), which the Go collector's limit does not cover.
type ProcessMemory struct{ Resident, File int64 }

// MeasureProcess collects the garbage of loading, returns it to the OS and reads the resident set from
// /proc/self/statm; where there is none (not Linux) it counts the memory the Go runtime holds from the OS.
func MeasureProcess() ProcessMemory {
	runtime.GC()
	debug.FreeOSMemory()
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		var size, resident, shared int64
		if _, err := fmt.Sscan(string(b), &size, &resident, &shared); err == nil {
			page := int64(os.Getpagesize())
			return ProcessMemory{Resident: resident * page, File: shared * page}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ProcessMemory{Resident: int64(ms.Sys - ms.HeapReleased)}
}

// EngineBudget splits a process budget of total bytes: the engine (weights, workspace, KV blocks) gets what is left
// once the process's own memory (resident after loading, less the weights, which the engine counts) and
// HTTPReserve are set aside.
func EngineBudget(total int64, own ProcessMemory, weights int64) (int64, error) {
	overhead := max(0, own.Resident-weights) + HTTPReserve
	if total <= overhead+weights {
		return 0, fmt.Errorf("%s leaves nothing for KV blocks: the weights take %s, the process %s and HTTP %s",
			numfmt.Bytes(total), numfmt.Bytes(weights), numfmt.Bytes(overhead-HTTPReserve), numfmt.Bytes(HTTPReserve))
	}
	return total - overhead, nil
}

// LimitHeap sets the Go collector's soft memory limit to budget bytes, unless GOMEMLIMIT sets one. Without it
// the heap of a loaded server grows to twice its live size between collections (GOGC=100): a server holding its
// budget would use twice the budget.
func LimitHeap(budget int64) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(budget)
	}
}
