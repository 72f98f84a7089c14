//go:build unix

package safetensors

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// mapFile maps size bytes of fd read-only. If the file system cannot map
// files it falls back to reading the file into memory (release is then nil).
func mapFile(fd *os.File, size int) (mem []byte, release func([]byte) error, err error) {
	mem, err = syscall.Mmap(int(fd.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err == nil {
		return mem, syscall.Munmap, nil
	}
	if !errors.Is(err, syscall.ENODEV) {
		return nil, nil, &os.PathError{Op: "mmap", Path: fd.Name(), Err: err}
	}
	mem = make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(fd, 0, int64(size)), mem); err != nil {
		return nil, nil, err
	}
	return mem, nil, nil
}
