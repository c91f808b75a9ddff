//go:build cuda

package executor

import (
	"sync"
	"testing"

	"github.com/morphlab/morphlab/engine/model"
	kcuda "github.com/morphlab/morphlab/kernels/cuda"
)

var (
	devOnce sync.Once
	dev     *kcuda.Device
	devErr  error
)

// gpuDevice is GPU 0, opened once for all the tests.
func gpuDevice(t testing.TB) *kcuda.Device {
	devOnce.Do(func() { dev, devErr = kcuda.Open(0) })
	if devErr != nil {
		t.Fatal(devErr)
	}
	return dev
}

// deviceBackends is GPU 0.
func deviceBackends() []Backend {
	return []Backend{{"gpu", func(t testing.TB, m *model.Model, opt CUDAOptions) *CUDA {
		e, err := NewCUDA(gpuDevice(t), m, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}}}
}
