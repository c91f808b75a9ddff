// Package nvml samples the memory use and utilization of NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml)
// while a command runs, so that a profile or benchmark can say what the device did. It reads NVML in a build with
// -tags cuda (cgo, Linux), the build that runs on a GPU; where there is no driver, or in any other build, Start
// fails with a one-line reason instead, and callers report that reason and carry on.
package nvml

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sample is one reading of one device.
type Sample struct {
	At       time.Duration `json:"at"` // since Start
	Device   int           `json:"device"`
	MemUsed  uint64        `json:"mem_used"` // bytes
	MemTotal uint64        `json:"mem_total"`
	GPUUtil  uint32        `json:"gpu_util"` // percent of the last sample period the device was busy
	MemUtil  uint32        `json:"mem_util"` // percent of it the memory was being read or written
}

// Device names one GPU.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
}

// Sampler reads every device at a fixed interval on its own goroutine until Stop.
type Sampler struct {
	Devices []Device
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []Sample
	err     error
}

// Start initializes NVML and starts sampling every interval (at least 10 ms). It fails, saying why in one line,
// when NVML cannot be used: no driver, no device, or no cgo.
func Start(interval time.Duration) (*Sampler, error) {
	d, err := open()
	if err != nil {
		return nil, err
	}
	s := &Sampler{Devices: d.devices(), done: make(chan struct{})}
	interval = max(interval, 10*time.Millisecond)
	start := time.Now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer d.close()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			got, err := d.read(time.Since(start))
			s.mu.Lock()
			s.samples = append(s.samples, got...)
			if err != nil && s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s, nil
}

// Stop ends sampling (NVML is shut down) and returns the samples and the first read error, if any.
func (s *Sampler) Stop() ([]Sample, error) {
	close(s.done)
	s.wg.Wait()
	return s.samples, s.err
}

// Summary is one line per device: peak and mean memory used, and mean GPU utilization.
func Summary(devices []Device, samples []Sample) string {
	var lines []string
	for _, d := range devices {
		var n, util, mem, peak, total uint64
		for _, s := range samples {
			if s.Device != d.Index {
				continue
			}
			n++
			util += uint64(s.GPUUtil)
			mem += s.MemUsed
			peak, total = max(peak, s.MemUsed), s.MemTotal
		}
		if n == 0 {
			lines = append(lines, fmt.Sprintf("nvml: gpu %d %s: no samples", d.Index, d.Name))
			continue
		}
		lines = append(lines, fmt.Sprintf("nvml: gpu %d %s: memory peak %.1f MiB, mean %.1f MiB of %.1f MiB; utilization mean %d%% (%d samples)",
			d.Index, d.Name, mib(peak), mib(mem/n), mib(total), util/n, n))
	}
	return strings.Join(lines, "\n")
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// Probe returns one line: the devices NVML sees, or why it cannot be used.
func Probe() string {
	d, err := open()
	if err != nil {
		return err.Error()
	}
	defer d.close()
	var names []string
	for _, dev := range d.devices() {
		names = append(names, fmt.Sprintf("%d: %s", dev.Index, dev.Name))
	}
	return fmt.Sprintf("nvml: %d device(s): %s", len(names), strings.Join(names, ", "))
}
