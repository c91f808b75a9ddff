package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The worker pool: a fixed set of goroutines, started once, that run the chunks of a Parallel call. Starting a
// goroutine per row or per call costs more than the small kernels of a decode step take, so kernels share these.

// job is one Parallel call: chunks are claimed by an atomic counter, so the caller and any number of workers can
// work on it at once, and a worker that arrives late finds nothing left and goes back. finished counts the chunks
// that have returned; the caller waits for it by polling, never by parking, because a parked caller is woken
// through the scheduler and the OS, which costs as long as a decode step's kernels take.
type job struct {
	fn       func(lo, hi int)
	n        int
	chunk    int
	chunks   int64
	next     atomic.Int64
	finished atomic.Int64
}

func (j *job) run() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c) * j.chunk
		j.fn(lo, min(lo+j.chunk, j.n))
		j.finished.Add(1)
	}
}

// wait returns when every chunk has returned. The chunks still running belong to workers that are running (they
// claimed them), so a short poll usually suffices; past that the caller yields its thread between polls, so that
// a worker descheduled onto this thread's queue can finish.
func (j *job) wait() {
	for spins := 0; j.finished.Load() < j.chunks; spins++ {
		if spins > 1000 {
			runtime.Gosched()
		}
	}
}

var (
	poolMu   sync.Mutex
	threads  int
	jobQueue chan *job
)

// SetThreads sets how many threads (the caller included) kernels use; n <= 0 means runtime.GOMAXPROCS(0). It
// returns the previous setting. Workers are started when first needed and are never stopped, so it is cheap to
// call before a benchmark.
func SetThreads(n int) int {
	poolMu.Lock()
	defer poolMu.Unlock()
	prev := threads
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	if jobQueue == nil {
		jobQueue = make(chan *job, 256)
	}
	for t := max(threads, 1); t < n; t++ {
		go worker()
	}
	threads = max(threads, n)
	active.Store(int64(n))
	return prev
}

// active is the number of threads Parallel splits work across (at most the number of workers started + 1).
var active atomic.Int64

// Threads reports how many threads kernels use.
func Threads() int {
	if active.Load() == 0 {
		SetThreads(0)
	}
	return int(active.Load())
}

func worker() {
	for {
		var j *job
		select {
		case j = <-jobQueue:
		default:
			j = pollForJob()
		}
		j.run()
	}
}

// workerSpin is how long an idle worker polls for the next job before it blocks. The kernels of a decode step
// come microseconds apart, and waking a blocked goroutine takes about as long as a small kernel runs, so a worker
// that slept between them would leave the caller working alone (OpenMP runtimes spin for the same reason).
const workerSpin = 200 * time.Microsecond

// pollForJob polls the queue (an empty channel's receive with default is a few loads) until a job comes or
// workerSpin passes, then blocks. It does not yield while it polls: a yield puts the worker at the back of the
// scheduler's global queue, from which it comes back microseconds later.
func pollForJob() *job {
	deadline := time.Now().Add(workerSpin)
	for i := 0; ; i++ {
		select {
		case j := <-jobQueue:
			return j
		default:
		}
		if i%64 == 63 && time.Now().After(deadline) {
			return <-jobQueue
		}
	}
}

// Parallel calls fn(lo, hi) on disjoint ranges that cover [0, n), each of at least grain items (one range when n < 2*grain),
// across the pool's threads, and returns when all calls have returned. The caller works too, so a nested Parallel
// (from inside fn) cannot deadlock: when no worker is free the caller runs every chunk itself.
func Parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	t := Threads()
	grain = max(grain, 1)
	chunks := min(t, n/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	j := &job{fn: fn, n: n, chunk: (n + chunks - 1) / chunks}
	j.chunks = int64((n + j.chunk - 1) / j.chunk)
	for w := 1; w < int(j.chunks); w++ {
		select {
		case jobQueue <- j:
		default:
		}
	}
	j.run()
	j.wait()
}

// Work is one part of a ParallelWork call: the items its fn claims, a run at a time. A part starts as a range
// of [0, n) and hands its items out in ascending order; once its range is used up it takes over the upper half
// of what is left of the part with the most left, and goes on from there.
type Work struct {
	parts []workPart
	me    int
}

// workPart is a part's range still to claim, next<<32 | end, alone on its cache line: the owner advances next,
// a part taking over lowers end.
type workPart struct {
	span atomic.Uint64
	_    [56]byte
}

func workSpan(next, end int) uint64 { return uint64(next)<<32 | uint64(end) }

func (p *workPart) load() (s uint64, next, end int) {
	s = p.span.Load()
	return s, int(s >> 32), int(uint32(s))
}

// Next claims the next run of at most most items, [lo, hi), and reports false when none is left in any part.
func (w *Work) Next(most int) (lo, hi int, ok bool) {
	p := &w.parts[w.me]
	for {
		s, next, end := p.load()
		if next < end {
			hi := min(next+max(most, 1), end)
			if p.span.CompareAndSwap(s, workSpan(hi, end)) {
				return next, hi, true
			}
			continue
		}
		if !w.takeOver() {
			return 0, 0, false
		}
	}
}

// Peek returns the item Next would hand out first, if this part has one left; another part may take it over
// first, so it suits prefetching only.
func (w *Work) Peek() (int, bool) {
	_, next, end := w.parts[w.me].load()
	return next, next < end
}

// takeOver moves the upper half (rounded up) of the largest range left to this part, whose own is used up, and
// reports false when every range is used up. Only the owner of an empty range sets it, so the store needs no
// compare: no other part takes over from a range with nothing left.
func (w *Work) takeOver() bool {
	for {
		v, most := -1, 0
		var vs uint64
		for i := range w.parts {
			if s, next, end := w.parts[i].load(); end-next > most {
				v, most, vs = i, end-next, s
			}
		}
		if v < 0 {
			return false
		}
		next, end := int(vs>>32), int(uint32(vs))
		mid := end - (most+1)/2
		if w.parts[v].span.CompareAndSwap(vs, workSpan(next, mid)) {
			w.parts[w.me].span.Store(workSpan(mid, end))
			return true
		}
	}
}

// ParallelWork runs fn for each of up to Threads() parts of the items [0, n), each at least grain items (one part
// when n < 2*grain), across the pool's threads as Parallel does, and returns when all have returned. Each part
// starts as an equal contiguous range, claimed in ascending order, so that a kernel can prefetch the next item
// while it runs one (Work.Peek); a part that runs out takes over half of the largest range left, so the threads
// finish together even when one runs slower, at the cost of one item that was not prefetched. On a shared VM the
// two halves of a static split of a batched-decode matmul finish apart by a tenth of the call or more, at random.
func ParallelWork(n, grain int, fn func(w *Work)) {
	if n <= 0 {
		return
	}
	if n >= 1<<32 {
		panic("cpu: ParallelWork of 2^32 items or more")
	}
	parts := max(1, min(Threads(), n/max(grain, 1)))
	set := workSets.get()
	defer workSets.put(set)
	if len(set.parts) < parts {
		set.parts, set.works = make([]workPart, parts), make([]Work, parts)
	}
	ps, ws := set.parts[:parts], set.works[:parts]
	for i := range ps {
		ps[i].span.Store(workSpan(i*n/parts, (i+1)*n/parts))
		ws[i] = Work{ps, i}
	}
	Parallel(parts, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			fn(&ws[i])
		}
	})
}

// workSet is a ParallelWork call's parts and their Work values, kept on a free list between calls (a decode step
// makes dozens of calls, and each allocation lands on fresh pages until the heap's first collection).
type workSet struct {
	parts []workPart
	works []Work
}

var workSets freeList[workSet]
