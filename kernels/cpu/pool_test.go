package cpu

import (
	"sync/atomic"
	"testing"
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
