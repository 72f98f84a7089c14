//go:build !unix

package mmap

import (
	"io"
	"os"
)

// mapFile reads size bytes of fd into memory: this platform has no mmap
// support here, so the data is a heap copy (release is nil).
func mapFile(fd *os.File, size int) (mem []byte, release func([]byte) error, err error) {
	mem = make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(fd, 0, int64(size)), mem); err != nil {
		return nil, nil, err
	}
	return mem, nil, nil
}

// evict does nothing: nothing is mapped on this platform.
func evict([]byte) {}
