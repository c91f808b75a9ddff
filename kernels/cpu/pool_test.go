package cpu

import (
	"slices"
	"sync"
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

func TestParallelWorkCoversEachItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 5} {
		prev := SetThreads(threads)
		for _, n := range []int{1, 2, 7, 100, 1025} {
			for _, grain := range []int{1, 3, 64, 2000} {
				for _, most := range []int{1, 4} {
					hits := make([]atomic.Int32, n)
					var parts atomic.Int32
					ParallelWork(n, grain, func(w *Work) {
						parts.Add(1)
						// Part 0 is slow at its start, so that the others take over from it.
						slow := w.me == 0
						for lo, hi, ok := w.Next(most); ok; lo, hi, ok = w.Next(most) {
							if hi <= lo || hi-lo > most {
								t.Errorf("n=%d most=%d: run [%d,%d)", n, most, lo, hi)
							}
							if next, ok := w.Peek(); ok && next < hi {
								t.Errorf("n=%d: Peek gave %d inside the run [%d,%d) just claimed", n, next, lo, hi)
							}
							if slow && lo < 4 {
								time.Sleep(200 * time.Microsecond)
							}
							for i := lo; i < hi; i++ {
								hits[i].Add(1)
							}
						}
					})
					if want := max(1, min(threads, n/grain)); int(parts.Load()) != want {
						t.Errorf("threads=%d n=%d grain=%d: %d parts, want %d", threads, n, grain, parts.Load(), want)
					}
					for i := range hits {
						if h := hits[i].Load(); h != 1 {
							t.Fatalf("threads=%d n=%d grain=%d most=%d: item %d claimed %d times, want 1", threads, n,
								grain, most, i, h)
						}
					}
				}
			}
		}
		SetThreads(prev)
	}
}

// TestParallelWorkTakesOver checks that a part whose range runs out takes over the other's: with one part
// blocked until the other has run out, the other must claim everything left, half at a time from the top.
func TestParallelWorkTakesOver(t *testing.T) {
	prev := SetThreads(2)
	defer SetThreads(prev)
	const n = 64
	var mu sync.Mutex
	runs := map[int][][2]int{}
	release := make(chan struct{})
	ParallelWork(n, 1, func(w *Work) {
		if w.me == 1 {
			<-release // part 1 claims nothing until part 0 is done
		}
		for lo, hi, ok := w.Next(1); ok; lo, hi, ok = w.Next(1) {
			mu.Lock()
			runs[w.me] = append(runs[w.me], [2]int{lo, hi})
			mu.Unlock()
		}
		if w.me == 0 {
			close(release)
		}
	})
	if len(runs[1]) != 0 || len(runs[0]) != n {
		t.Fatalf("part 0 claimed %d items and part 1 %d, want %d and 0", len(runs[0]), len(runs[1]), n)
	}
	// Part 0 runs 0..31, then takes over 48..63, 40..47, 36..39, 34..35, 33, 32.
	var want [][2]int
	for i := range 32 {
		want = append(want, [2]int{i, i + 1})
	}
	for _, r := range [][2]int{{48, 64}, {40, 48}, {36, 40}, {34, 36}, {33, 34}, {32, 33}} {
		for i := r[0]; i < r[1]; i++ {
			want = append(want, [2]int{i, i + 1})
		}
	}
	if !slices.Equal(runs[0], want) {
		t.Fatalf("part 0 claimed %v, want %v", runs[0], want)
	}
}
