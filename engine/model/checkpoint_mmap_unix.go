//go:build unix

package model

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile returns the whole file read-only, memory-mapped when the system allows (so that loading a large
// checkpoint costs no copy and its pages are shared between processes), else read into memory. release unmaps.
func mapFile(path string) (data []byte, release func() error, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size > 0 && size == int64(int(size)) && st.Mode().IsRegular() {
		if m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			return m, func() error { return unix.Munmap(m) }, nil
		}
	}
	data, err = os.ReadFile(path)
	return data, func() error { return nil }, err
}
