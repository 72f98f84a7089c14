//go:build !linux

package mmap

// AdviseHugePages does nothing where the kernel takes no such advice.
func AdviseHugePages(mem []byte, total int64) {}

// MemoryBytes returns 0: the machine's memory is not known here.
func MemoryBytes() uint64 { return 0 }
