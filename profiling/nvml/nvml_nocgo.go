//go:build !cgo || !linux

package nvml

import (
	"errors"
	"time"
)

// lib has no implementation without cgo on Linux: go-nvml calls NVML through cgo.
type lib struct{}

func open() (*lib, error) {
	return nil, errors.New("nvml: not available: built without cgo on linux, which go-nvml needs")
}

func (*lib) devices() []Device { return nil }

func (*lib) read(time.Duration) ([]Sample, error) { return nil, nil }

func (*lib) close() {}
