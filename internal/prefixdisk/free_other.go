//go:build !linux && !darwin

package prefixdisk

// FreeBytes cannot tell the free space here.
func FreeBytes(path string) (free int64, ok bool) { return 0, false }
