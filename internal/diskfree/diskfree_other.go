//go:build !linux && !darwin

// Package diskfree tells the free space of a file system.
package diskfree

// Bytes cannot tell the free space on this platform: ok is false.
func Bytes(path string) (free int64, ok bool) { return 0, false }
