package machine

import (
	"bufio"

	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageBytes is the transparent huge page the read buffer asks for
// (x86-64, and arm64 with 4 KiB base pages).
const hugePageBytes = 2 << 20

// NewHugeReadBuffer is NewReadBuffer in memory mapped for the purpose and
// backed by transparent huge pages where the kernel gives them
// (MADV_HUGEPAGE), as weights mapped from a file that fits in memory are
// (see internal/mmap): the read loop to set beside products that stream
// such weights. share is the part of the buffer the kernel did back with
// huge pages (from /proc/self/smaps; 0 where it cannot tell). It returns
// nil where the memory cannot be mapped; Close gives it back.
func NewHugeReadBuffer(size int) (b *ReadBuffer, share float64) {
	size = (max(size, 64<<10) + hugePageBytes - 1) / hugePageBytes * hugePageBytes
	raw, err := unix.Mmap(-1, 0, size+hugePageBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, 0
	}
	head := 0
	if off := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % hugePageBytes); off != 0 {
		head = hugePageBytes - off
	}
	buf := raw[head : head+size : head+size]
	_ = unix.Madvise(buf, unix.MADV_HUGEPAGE) // an error only means 4 KiB pages
	touch(buf)
	b = &ReadBuffer{buf: buf, unmap: func() { _ = unix.Munmap(raw) }}
	if huge, ok := anonHugeBytes(buf); ok {
		share = float64(huge) / float64(size)
	}
	return b, share
}

// anonHugeBytes returns the AnonHugePages of the mappings that lie within
// mem, from /proc/self/smaps.
func anonHugeBytes(mem []byte) (int64, bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	hi := lo + uint64(len(mem))
	var total int64
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if a, b, ok := mappingRange(line); ok {
			in = a < hi && b > lo
			found = found || in
			continue
		}
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); in && ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, false
			}
			total += kb << 10
		}
	}
	return total, found && sc.Err() == nil
}

// mappingRange parses the "start-end perms ..." line that begins a
// mapping's entry in /proc/self/smaps.
func mappingRange(line string) (lo, hi uint64, ok bool) {
	r, _, found := strings.Cut(line, " ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(r, "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(a, 16, 64)
	hi, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return lo, hi, true
}
