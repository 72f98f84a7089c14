//go:build linux || darwin

// Package diskfree tells the free space of a file system.
package diskfree

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Bytes returns the bytes an unprivileged user may still write on the file
// system that holds path, or its nearest existing parent when path does
// not exist yet; ok is false when that cannot be told.
func Bytes(path string) (free int64, ok bool) {
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err == nil {
			return int64(st.Bavail) * int64(st.Bsize), true
		}
		parent := filepath.Dir(path)
		if parent == path {
			return 0, false
		}
		path = parent
	}
}
