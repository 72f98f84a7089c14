//go:build !(linux || darwin)

package main

// freeBytes cannot tell the free space on this platform.
func freeBytes(string) (int64, bool) { return 0, false }
