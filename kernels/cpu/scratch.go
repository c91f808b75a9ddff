package cpu

import "sync"

// Scratch arrays of kernel calls come from free lists and go back when the call returns. A decode step makes
// hundreds of kernel calls; allocating their scratch anew is cheap for the allocator, but the runtime hands the
// freed pages back to the OS and takes them again with a page fault each, which on this project's VM cost more
// than the kernels (2,000 faults a batch-32 step of stories110M before these lists). A sync.Pool would not do:
// it empties at every garbage collection, and its objects come back as fresh pages. The lists keep what they are
// given, as many buffers as calls ran at once, each as large as the largest request it served.

// freeList is a stack of reusable values.
type freeList[T any] struct {
	mu    sync.Mutex
	items []*T
}

// get returns a value from the list, or a new zero one.
func (l *freeList[T]) get() *T {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.items); n > 0 {
		v := l.items[n-1]
		l.items = l.items[:n-1]
		return v
	}
	return new(T)
}

// put gives v back to the list.
func (l *freeList[T]) put(v *T) {
	l.mu.Lock()
	l.items = append(l.items, v)
	l.mu.Unlock()
}

var (
	scratchF32List freeList[[]float32]
	scratchI32List freeList[[]int32]
	scratchI8List  freeList[[]int8]
)

// scratchHandle gives a scratch slice back to its list (a value, not a closure, so that deferring its release
// allocates nothing).
type scratchHandle[T any] struct {
	list *freeList[[]T]
	p    *[]T
}

func (h scratchHandle[T]) release() { h.list.put(h.p) }

// scratch returns a slice of n elements from list (contents left over from earlier use) and its handle; the
// caller must not use the slice after releasing it.
func scratch[T any](list *freeList[[]T], n int) ([]T, scratchHandle[T]) {
	p := list.get()
	if cap(*p) < n {
		*p = make([]T, n)
	}
	return (*p)[:n], scratchHandle[T]{list, p}
}

// scratchF32 is scratch for float32s.
func scratchF32(n int) ([]float32, scratchHandle[float32]) { return scratch(&scratchF32List, n) }

// scratchI32 is scratch for int32s.
func scratchI32(n int) ([]int32, scratchHandle[int32]) { return scratch(&scratchI32List, n) }

// scratchI8 is scratch for int8s.
func scratchI8(n int) ([]int8, scratchHandle[int8]) { return scratch(&scratchI8List, n) }
