//go:build !unix

package model

import "os"

// mapFile reads the whole file into memory (systems without mmap support here); release does nothing.
func mapFile(path string) (data []byte, release func() error, err error) {
	data, err = os.ReadFile(path)
	return data, func() error { return nil }, err
}
