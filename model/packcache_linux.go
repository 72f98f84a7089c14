package model

import (
	"os"

	"golang.org/x/sys/unix"
)

// packCacheSupported reports whether the packed-weight cache works here:
// it maps files for writing and reserves their blocks as Linux does.
const packCacheSupported = true

// mapPackFile maps size bytes of f for reading.
func mapPackFile(f *os.File, size int64) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

// allocPackRegion reserves size bytes of f's blocks at off (so that
// writing them through the map cannot fail for want of space) and maps
// them for writing.
func allocPackRegion(f *os.File, off, size int64) ([]byte, error) {
	if err := unix.Fallocate(int(f.Fd()), 0, off, size); err != nil {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), off, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// freeBytes returns the bytes free to users on the file system of dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// unmapPack unmaps memory mapPackFile or allocPackRegion mapped.
func unmapPack(m []byte) error { return unix.Munmap(m) }
