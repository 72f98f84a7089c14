// Package mmap maps files read-only into memory and gives mapped pages back
// to the kernel, for the weight-file readers (safetensors, gguf).
package mmap

import (
	"fmt"
	"math"
	"os"
)

// Map is a read-only view of a whole file.
type Map struct {
	// Data is the file's bytes: a memory mapping, or a heap copy where the
	// platform or file system cannot map files.
	Data    []byte
	release func([]byte) error
}

// Open maps the regular file at path. A file too short to map (0 bytes)
// gives an empty Map.
func Open(path string) (*Map, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	size := st.Size()
	if size > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes is too large for this platform", path, size)
	}
	if size == 0 {
		return &Map{Data: []byte{}}, nil
	}
	data, release, err := mapFile(fd, int(size))
	if err != nil {
		return nil, err
	}
	return &Map{Data: data, release: release}, nil
}

// Mapped reports whether Data is a memory mapping (and Evict can release
// its pages).
func (m *Map) Mapped() bool { return m.release != nil }

// Evict tells the kernel that the pages wholly inside part, a sub-slice of
// Data, are not needed for now: they leave the process's resident memory
// and are read again from the file if touched. It does nothing for a heap
// copy.
func (m *Map) Evict(part []byte) {
	if m.release != nil {
		evict(part)
	}
}

// Close releases the mapping; Data must not be used afterwards.
func (m *Map) Close() error {
	if m.release == nil {
		m.Data = nil
		return nil
	}
	err := m.release(m.Data)
	m.Data, m.release = nil, nil
	return err
}

// FitsMemory reports whether size bytes of weights are at most three
// quarters of the machine's memory (false where it is not known): the
// share whose pages the CPU backend maps at load, and whose mappings ask
// for huge pages (AdviseHugePages).
func FitsMemory(size int64) bool {
	ram := MemoryBytes()
	return size >= 0 && ram > 0 && uint64(size) <= ram/4*3
}
