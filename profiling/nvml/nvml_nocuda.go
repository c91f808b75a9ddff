//go:build !cuda || !cgo || !linux

package nvml

import (
	"errors"
	"time"
)

// lib has no implementation outside a CUDA build: go-nvml calls NVML through cgo, and its header's deprecated
// functions make every cgo compile of it print about a hundred warnings, so only the build that runs on a GPU
// (-tags cuda, with cgo, on Linux) compiles it.
type lib struct{}

func open() (*lib, error) {
	return nil, errors.New("nvml: not available: NVML is read by a morphlab built with -tags cuda (cgo, linux)")
}

func (*lib) devices() []Device { return nil }

func (*lib) read(time.Duration) ([]Sample, error) { return nil, nil }

func (*lib) close() {}
