//go:build !linux

package mmap

// AdviseHugePages does nothing where the kernel takes no such advice.
func AdviseHugePages(mem []byte, total int64) {}
