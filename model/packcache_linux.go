package model

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/govinfer/govinfer/internal/mmap"
)

// packCacheSupported reports whether the packed-weight cache works here:
// it maps files for writing and reserves their blocks as Linux does.
const packCacheSupported = true

// mapPackFile maps size bytes of f for reading, in huge pages where the
// kernel gives them, as the kernels stream it (mmap.AdviseHugePages).
func mapPackFile(f *os.File, size int64) ([]byte, error) {
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err == nil {
		mmap.AdviseHugePages(m, size)
	}
	return m, err
}

// allocPackRegion reserves size bytes of f's blocks at off (so that
// writing them through the map cannot fail for want of space) and maps
// them for writing, in huge pages where the kernel gives them to a file of
// total bytes, so that the page cache keeps the written weights in the
// folios the kernels read best (mmap.AdviseHugePages).
func allocPackRegion(f *os.File, off, size, total int64) ([]byte, error) {
	if err := unix.Fallocate(int(f.Fd()), 0, off, size); err != nil {
		return nil, err
	}
	m, err := unix.Mmap(int(f.Fd()), off, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err == nil {
		mmap.AdviseHugePages(m, total)
	}
	return m, err
}

// reservePackFile reserves size bytes of f's blocks from its start and
// sets its size to match, before any weight is written. Reserving each
// weight's region as it comes instead grows the file a region at a time,
// and the page cache then keeps the weights written near the end of the
// file in small folios, which the kernels later read through 4 KiB pages
// (mmap.AdviseHugePages). An error only means the regions reserve their
// own blocks.
func reservePackFile(f *os.File, size int64) {
	if size > 0 {
		_ = unix.Fallocate(int(f.Fd()), 0, 0, size)
	}
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
