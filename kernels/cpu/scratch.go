package cpu

import "sync"

// Scratch arrays of kernel calls come from pools and go back when the call returns. A decode step makes hundreds
// of kernel calls; allocating their scratch anew is cheap for the allocator, but the runtime hands the freed pages
// back to the OS and takes them again with a page fault each, which on this project's VM cost more than the
// kernels (2,000 faults a batch-32 step of stories110M before these pools).

var (
	scratchF32Pool = sync.Pool{New: func() any { return new([]float32) }}
	scratchI32Pool = sync.Pool{New: func() any { return new([]int32) }}
	scratchI8Pool  = sync.Pool{New: func() any { return new([]int8) }}
)

// scratch returns a pooled slice of n elements (contents left over from earlier use) and the function that gives
// it back; the caller must not use the slice after calling it.
func scratch[T any](pool *sync.Pool, n int) ([]T, func()) {
	p := pool.Get().(*[]T)
	if cap(*p) < n {
		*p = make([]T, n)
	}
	s := (*p)[:n]
	return s, func() { pool.Put(p) }
}

// scratchF32 is scratch for float32s.
func scratchF32(n int) ([]float32, func()) { return scratch[float32](&scratchF32Pool, n) }

// scratchI32 is scratch for int32s.
func scratchI32(n int) ([]int32, func()) { return scratch[int32](&scratchI32Pool, n) }

// scratchI8 is scratch for int8s.
func scratchI8(n int) ([]int8, func()) { return scratch[int8](&scratchI8Pool, n) }
