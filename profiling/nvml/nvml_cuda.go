//go:build cuda && cgo && linux

package nvml

import (
	"fmt"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// lib is an open NVML library with its device handles.
type lib struct {
	handles []gonvml.Device
	names   []string
}

// open loads libnvidia-ml (go-nvml dlopens it in Init, not at package load, so a machine without the driver gets
// an error here rather than a crash) and finds the devices.
func open() (*lib, error) {
	if ret := gonvml.Init(); ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: no NVIDIA driver: %s", gonvml.ErrorString(ret))
	}
	n, ret := gonvml.DeviceGetCount()
	if ret != gonvml.SUCCESS || n == 0 {
		gonvml.Shutdown()
		return nil, fmt.Errorf("nvml: no NVIDIA device: count %d, %s", n, gonvml.ErrorString(ret))
	}
	l := &lib{}
	for i := range n {
		h, ret := gonvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			gonvml.Shutdown()
			return nil, fmt.Errorf("nvml: device %d: %s", i, gonvml.ErrorString(ret))
		}
		name, ret := h.GetName()
		if ret != gonvml.SUCCESS {
			name = "unknown"
		}
		l.handles, l.names = append(l.handles, h), append(l.names, name)
	}
	return l, nil
}

func (l *lib) devices() []Device {
	var d []Device
	for i, n := range l.names {
		d = append(d, Device{Index: i, Name: n})
	}
	return d
}

// read samples every device once.
func (l *lib) read(at time.Duration) ([]Sample, error) {
	var out []Sample
	for i, h := range l.handles {
		mem, ret := h.GetMemoryInfo()
		if ret != gonvml.SUCCESS {
			return out, fmt.Errorf("nvml: device %d memory: %s", i, gonvml.ErrorString(ret))
		}
		util, ret := h.GetUtilizationRates()
		if ret != gonvml.SUCCESS {
			return out, fmt.Errorf("nvml: device %d utilization: %s", i, gonvml.ErrorString(ret))
		}
		out = append(out, Sample{At: at, Device: i, MemUsed: mem.Used, MemTotal: mem.Total, GPUUtil: util.Gpu, MemUtil: util.Memory})
	}
	return out, nil
}

func (l *lib) close() { gonvml.Shutdown() }
