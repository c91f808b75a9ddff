package probe

import (
	"runtime"
	"slices"
	"sync"
	"time"

	"gonum.org/v1/gonum/stat"
)

// team is a set of goroutines, each locked to its own OS thread, that run the same measured work together.
// Each member builds its state (buffers, accumulators) on its own thread, so that memory is first touched where
// it will be read, and keeps it for every run.
type team struct {
	start []chan int
	done  chan struct{}
	wg    sync.WaitGroup
}

// newTeam starts threads members; member t calls setup(t) once and then runs the returned work function with
// the count given to each run.
func newTeam(threads int, setup func(t int) func(n int)) *team {
	tm := &team{done: make(chan struct{}, threads)}
	ready := make(chan struct{}, threads)
	for t := range threads {
		start := make(chan int)
		tm.start = append(tm.start, start)
		tm.wg.Add(1)
		go func() {
			defer tm.wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			work := setup(t)
			ready <- struct{}{}
			for n := range start {
				work(n)
				tm.done <- struct{}{}
			}
		}()
	}
	for range threads {
		<-ready
	}
	return tm
}

// run has every member do work(n) at once and returns the wall time until the last one finished.
func (tm *team) run(n int) time.Duration {
	t0 := time.Now()
	for _, s := range tm.start {
		s <- n
	}
	for range tm.start {
		<-tm.done
	}
	return time.Since(t0)
}

// close stops the members and waits for them, so that their buffers can be freed before the next point.
func (tm *team) close() {
	for _, s := range tm.start {
		close(s)
	}
	tm.wg.Wait()
}

// rate measures units per second of a team's work: it grows the count until one run takes about opt.Target,
// then keeps the median rate over opt.Repeats runs of that count. unitsPerCount is the work one count does
// over all members. Calibration times each count by the fastest of three runs, so that one run stretched by
// another process (common on a shared machine) cannot shrink the count to where timing overhead dominates.
func (tm *team) rate(unitsPerCount float64, opt Options) float64 {
	target := max(opt.Target, time.Microsecond)
	n := 1
	for {
		d := min(tm.run(n), tm.run(n), tm.run(n))
		if d >= target/2 {
			n = max(n, int(float64(n)*float64(target)/float64(d)))
			break
		}
		if d < target/64 {
			n *= 16
		} else {
			n *= 2
		}
	}
	rates := make([]float64, opt.Repeats)
	for i := range rates {
		rates[i] = unitsPerCount * float64(n) / tm.run(n).Seconds()
	}
	return median(rates)
}

// median returns the median of the empirical distribution of xs (gonum's stat.Quantile): the middle value for
// an odd count, as the probe's repeats are by default, and the lower of the two middle ones for an even count,
// a value that was measured.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return stat.Quantile(0.5, stat.Empirical, s, nil)
}

// measureBandwidth returns the read bandwidth in GB/s of threads threads each summing its own slice of a
// working set of size bytes (rounded down to whole 512-byte blocks per thread, at least one).
func measureBandwidth(k readKernel, threads int, size int64, opt Options) float64 {
	words := max(size/int64(threads)/8&^63, 64)
	sinks := make([]uint64, threads)
	tm := newTeam(threads, func(t int) func(n int) {
		buf := make([]uint64, words)
		for i := range buf {
			buf[i] = uint64(i)
		}
		return func(n int) {
			for range n {
				sinks[t] += k.sum(buf)
			}
		}
	})
	defer tm.close()
	return tm.rate(float64(words*8*int64(threads)), opt) / 1e9
}

// measureFMA returns the f32 FMA rate in GFLOP/s of threads threads each running k's independent chains.
func measureFMA(k fmaKernel, threads int, opt Options) float64 {
	tm := newTeam(threads, func(int) func(n int) {
		acc := make([]float32, k.accLen)
		return func(n int) { k.run(acc, 0.5, 0.25, n) }
	})
	defer tm.close()
	return tm.rate(float64(k.flopsPerIter*threads), opt) / 1e9
}

// measureDot returns the int8 dot-product rate in GOP/s of threads threads each running k's independent chains.
func measureDot(k dotKernel, threads int, opt Options) float64 {
	tm := newTeam(threads, func(int) func(n int) {
		acc := make([]int32, k.accLen)
		return func(n int) { k.run(acc, 0x01020304, 0xfd03fe01, n) }
	})
	defer tm.close()
	return tm.rate(float64(k.opsPerIter*threads), opt) / 1e9
}
