//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// Pinned is page-locked host memory: a host-to-device copy from it on a stream runs without staging through a
// driver buffer, so it overlaps the kernels of other streams (gorgonia.org/cu frees such memory but does not
// allocate it).
type Pinned struct {
	Ptr   unsafe.Pointer
	Bytes int64
}

// AllocPinned allocates bytes of page-locked host memory (cuMemAllocHost). It must run inside Device.Do.
func AllocPinned(bytes int64) (Pinned, error) {
	var p unsafe.Pointer
	if r := C.cuMemAllocHost(&p, C.size_t(max(bytes, 1))); r != C.CUDA_SUCCESS {
		return Pinned{}, fmt.Errorf("cuda: cuMemAllocHost of %d bytes: CUresult %d", bytes, int(r))
	}
	return Pinned{p, bytes}, nil
}

// Slice is the memory as bytes.
func (p Pinned) Slice() []byte { return unsafe.Slice((*byte)(p.Ptr), p.Bytes) }

// Free releases the memory. It must run inside Device.Do.
func (p Pinned) Free() { _ = cu.MemFreeHost(p.Ptr) }
