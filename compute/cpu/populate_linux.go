package cpu

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/govinfer/govinfer/internal/mmap"
)

// populateTable maps every page of an embedding table (data, usually part
// of a file's memory map) now, where the table is at most a sixteenth of
// the machine's memory. Otherwise Embed faults in the page of each
// token's row the first time a step reads it, inside the decode step: a
// minor fault where the page is in the page cache (10-20 µs of a step of
// the 4-layer 35B-A3B-width bench model), a read from disk where it is
// not (about 1 ms a step, on a machine whose kernel pages out file pages
// unused for a minute). llama.cpp maps its whole file so at load.
func populateTable(data []byte) {
	if ram := mmap.MemoryBytes(); len(data) > 0 && uint64(len(data)) <= ram/16 {
		populate(data)
	}
}

// populate maps every page of data (part of a file's memory map, or heap
// memory) now (MADV_POPULATE_READ, Linux 5.14; before it, or on any
// error, nothing happens and the pages fault in when first read).
func populate(data []byte) {
	if len(data) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	lo := start &^ (page - 1)
	// The page holding data's first byte belongs to the same mapping (or
	// to heap memory, whose pages are mapped already), so the advice may
	// start there. A signal (the Go runtime's preemption) interrupts it
	// with the pages so far mapped: ask again. Any other error only means
	// the pages fault in as before.
	for range 1000 {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, uintptr(len(data))+start-lo, unix.MADV_POPULATE_READ)
		if errno != unix.EINTR {
			return
		}
	}
}
