//go:build linux || darwin

package prefixdisk

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FreeBytes returns the bytes an unprivileged user may still write on the
// file system that holds path (or its nearest existing parent); ok is
// false when that cannot be told.
func FreeBytes(path string) (free int64, ok bool) {
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
