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

// AllocPinned allocates bytes of page-locked host memory (cuMemAllocHost): a host-to-device copy from it on a
// stream runs without staging through a driver buffer, so it overlaps the kernels of other streams
// (gorgonia.org/cu frees such memory but does not allocate it). It must run inside Device.Do.
func AllocPinned(bytes int64) ([]byte, error) {
	var p unsafe.Pointer
	if r := C.cuMemAllocHost(&p, C.size_t(max(bytes, 1))); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuda: cuMemAllocHost of %d bytes: CUresult %d", bytes, int(r))
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// FreePinned releases memory AllocPinned returned. It must run inside Device.Do.
func FreePinned(b []byte) { _ = cu.MemFreeHost(unsafe.Pointer(unsafe.SliceData(b))) }
