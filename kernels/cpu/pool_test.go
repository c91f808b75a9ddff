package cpu

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestParallelCoversEachIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 5} {
		prev := SetThreads(threads)
		for _, n := range []int{1, 2, 7, 100, 1025} {
			for _, grain := range []int{1, 3, 64, 2000} {
				hits := make([]atomic.Int32, n)
				Parallel(n, grain, func(lo, hi int) {
					if hi-lo < min(grain, n-lo) && hi != n {
						t.Errorf("threads=%d n=%d grain=%d: chunk [%d,%d) smaller than grain", threads, n, grain, lo, hi)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("threads=%d n=%d grain=%d: index %d covered %d times, want 1", threads, n, grain, i, h)
					}
				}
			}
		}
		SetThreads(prev)
	}
}

func TestParallelNested(t *testing.T) {
	prev := SetThreads(2)
	defer SetThreads(prev)
	var total atomic.Int64
	Parallel(8, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			Parallel(100, 10, func(a, b int) { total.Add(int64(b - a)) })
		}
	})
	if got := total.Load(); got != 800 {
		t.Fatalf("nested Parallel covered %d items, want 800", got)
	}
}

// BenchmarkParallelHandoff measures how late the second chunk of a two-way Parallel starts after the call begins,
// each chunk doing about 20 µs of work: the pool's hand-off, which bounds how small a kernel call can usefully be
// split. It reports the median (µs-start); near 20 µs would mean the caller ran both chunks itself.
//
//	go test -run '^$' -bench ParallelHandoff -count 6 ./kernels/cpu
func BenchmarkParallelHandoff(b *testing.B) {
	defer SetThreads(SetThreads(2))
	spin := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
	}
	var lat []float64
	for b.Loop() {
		start := time.Now()
		var second atomic.Int64
		Parallel(2, 1, func(lo, _ int) {
			if lo == 1 {
				second.Store(int64(time.Since(start)))
			}
			spin(20 * time.Microsecond)
		})
		lat = append(lat, float64(second.Load())/1e3)
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "µs-start")
}
