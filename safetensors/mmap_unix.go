//go:build unix

package safetensors

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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

// evict tells the kernel that the pages wholly inside data, a part of a
// memory map, are not needed for now: they leave the process's resident
// memory and are read again from the file if touched.
func evict(data []byte) {
	page := uintptr(os.Getpagesize())
	if len(data) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(&data[0]))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(data))) &^ (page - 1)
	if hi <= lo {
		return
	}
	// Best effort: an error only means nothing was evicted.
	_ = unix.Madvise(data[lo-start:hi-start], unix.MADV_DONTNEED)
}
