//go:build cuda

package cuda

import (
	"embed"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

//go:embed ptx/*.ptx
var ptxFS embed.FS

// modules are the .cu files whose PTX is embedded, as ptx/NAME.sm_XX.ptx.
var modules = []string{"norm", "gemm", "attention", "serve"}

// Device is one GPU. A single goroutine, locked to its OS thread, owns the CUDA context and runs every CUDA call
// (the context is current on that thread only); the methods send it closures and wait for them.
type Device struct {
	Name     string
	Major    int // compute capability
	Minor    int
	SMs      int
	Memory   int64 // bytes of device memory
	Arch     int   // the PTX loaded: 80 or 90
	calls    chan func()
	done     chan struct{}
	mods     []cu.Module
	fns      map[string]cu.Function
	start    cu.Event
	stop     cu.Event
	flushBuf cu.DevicePtr // 256 MB written before each timed run, so that runs start with a cold L2
	ws       Buffer       // scratch of the split-K GEMMs, grown on demand
}

// flushBytes is larger than any current GPU's L2 cache (H200: 60 MB).
const flushBytes = 256 << 20

// Open starts the owner goroutine of GPU ordinal, creates its context and loads the embedded PTX for its compute
// capability. The kernels use mma.sync, ldmatrix and cp.async, so the GPU must be sm_80 or newer.
func Open(ordinal int) (*Device, error) {
	d := &Device{calls: make(chan func()), done: make(chan struct{}), fns: map[string]cu.Function{}}
	ready := make(chan error)
	go d.own(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) own(ordinal int, ready chan<- error) {
	runtime.LockOSThread()
	defer close(d.done)
	ctx, err := d.setup(ordinal)
	ready <- err
	if err != nil {
		return
	}
	for f := range d.calls {
		f()
	}
	if d.flushBuf != 0 {
		_ = cu.MemFree(d.flushBuf)
	}
	if d.ws.Ptr != 0 {
		d.ws.Free()
	}
	for _, m := range d.mods {
		_ = m.Unload()
	}
	_ = ctx.Destroy()
}

func (d *Device) setup(ordinal int) (cu.CUContext, error) {
	var ctx cu.CUContext
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return ctx, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	if d.Name, err = dev.Name(); err != nil {
		return ctx, err
	}
	if d.Major, d.Minor, err = dev.ComputeCapability(); err != nil {
		return ctx, err
	}
	if d.Major < 8 {
		return ctx, fmt.Errorf("cuda: %s is sm_%d%d, want sm_80 or newer (mma.sync, cp.async)", d.Name, d.Major, d.Minor)
	}
	if d.SMs, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return ctx, err
	}
	if d.Memory, err = dev.TotalMem(); err != nil {
		return ctx, err
	}
	if ctx, err = dev.MakeContext(cu.SchedAuto); err != nil { // current on this thread from here on
		return ctx, err
	}
	d.Arch = 80
	if d.Major >= 9 {
		d.Arch = 90
	}
	for _, name := range modules {
		src, err := ptxFS.ReadFile(fmt.Sprintf("ptx/%s.sm_%d.ptx", name, d.Arch))
		if err != nil {
			return ctx, err
		}
		m, err := cu.LoadData(string(src))
		if err != nil {
			return ctx, fmt.Errorf("cuda: loading %s.sm_%d.ptx: %w", name, d.Arch, err)
		}
		d.mods = append(d.mods, m)
	}
	if d.start, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return ctx, err
	}
	if d.stop, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return ctx, err
	}
	return ctx, nil
}

// Close stops the owner goroutine and destroys the context; every Buffer of the device becomes invalid.
func (d *Device) Close() {
	close(d.calls)
	<-d.done
}

// Do runs f on the owner goroutine, where CUDA calls are valid, and returns its error.
func (d *Device) Do(f func() error) error {
	errc := make(chan error, 1)
	d.calls <- func() { errc <- f() }
	return <-errc
}

// must is Do for the host-slice wrappers, whose signatures have no error: a CUDA failure there is a broken
// device, not bad input, and panics.
func (d *Device) must(f func() error) {
	if err := d.Do(f); err != nil {
		panic(err)
	}
}

// Buffer is device memory. Its methods must run inside Do.
type Buffer struct {
	Ptr   cu.DevicePtr
	Bytes int64
}

// Alloc allocates bytes of device memory (at least 1 byte). It must run inside Do.
func Alloc(bytes int64) (Buffer, error) {
	p, err := cu.MemAlloc(max(bytes, 1))
	return Buffer{p, bytes}, err
}

// Free releases b. It must run inside Do.
func (b Buffer) Free() { _ = cu.MemFree(b.Ptr) }

// workspace returns device scratch of at least bytes, reallocated when it must grow; what it held before is
// lost. It must run inside Do, and the buffer is valid until the next call.
func (d *Device) workspace(bytes int64) (Buffer, error) {
	if d.ws.Bytes >= bytes {
		return d.ws, nil
	}
	if d.ws.Ptr != 0 {
		d.ws.Free()
		d.ws = Buffer{}
	}
	b, err := Alloc(bytes)
	if err != nil {
		return Buffer{}, fmt.Errorf("cuda: split-K workspace of %d bytes: %w", bytes, err)
	}
	d.ws = b
	return b, nil
}

// Upload allocates a buffer holding a copy of s. It must run inside Do.
func Upload[T any](s []T) (Buffer, error) {
	var z T
	b, err := Alloc(int64(len(s)) * int64(unsafe.Sizeof(z)))
	if err != nil || len(s) == 0 {
		return b, err
	}
	return b, cu.MemcpyHtoD(b.Ptr, unsafe.Pointer(&s[0]), b.Bytes)
}

// Download copies the start of b into s. It must run inside Do.
func Download[T any](s []T, b Buffer) error {
	if len(s) == 0 {
		return nil
	}
	var z T
	return cu.MemcpyDtoH(unsafe.Pointer(&s[0]), b.Ptr, int64(len(s))*int64(unsafe.Sizeof(z)))
}

// launch runs kernel name with args, each a Buffer, cu.DevicePtr, int or float32. cu passes every argument as 8
// bytes read from the Go value, so each is widened into a uint64 here: the kernel reads the low 4 bytes of an int
// or float parameter (little-endian), all 8 of a pointer. It must run inside Do.
func (d *Device) launch(name string, grid, block dim3, args ...any) error {
	fn, ok := d.fns[name]
	if !ok {
		var err error
		for _, m := range d.mods {
			if fn, err = m.Function(name); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		d.fns[name] = fn
	}
	vals := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			vals[i] = uint64(v.Ptr)
		case cu.DevicePtr:
			vals[i] = uint64(v)
		case int:
			vals[i] = uint64(int64(v))
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		default:
			return fmt.Errorf("cuda: kernel %s: argument %d has type %T", name, i, a)
		}
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	if err := fn.Launch(grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, cu.Stream{}, ptrs); err != nil {
		return fmt.Errorf("cuda: launching %s: %w", name, err)
	}
	return nil
}

// Time returns the GPU time of run in milliseconds, measured with CUDA events around it after the L2 cache has
// been flushed by writing a 256 MB buffer. It must run inside Do.
func (d *Device) Time(run func() error) (float64, error) {
	if d.flushBuf == 0 {
		p, err := cu.MemAlloc(flushBytes)
		if err != nil {
			return 0, err
		}
		d.flushBuf = p
	}
	if err := cu.MemsetD32(d.flushBuf, 0, flushBytes/4); err != nil {
		return 0, err
	}
	if err := d.start.Record(cu.Stream{}); err != nil {
		return 0, err
	}
	if err := run(); err != nil {
		return 0, err
	}
	if err := d.stop.Record(cu.Stream{}); err != nil {
		return 0, err
	}
	if err := d.stop.Synchronize(); err != nil {
		return 0, err
	}
	return d.start.Elapsed(d.stop)
}
