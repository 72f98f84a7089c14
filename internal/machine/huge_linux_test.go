package machine

import (
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestHugeReadBuffer checks the read buffer in huge pages: aligned to
// them, whole, readable, its share of huge pages read back from smaps
// (all of it where the kernel gives them at every request), and given
// back by Close.
func TestHugeReadBuffer(t *testing.T) {
	b, share := NewHugeReadBuffer(5 << 20)
	if b == nil {
		t.Fatal("no buffer")
	}
	if n := b.Len(); n != 6<<20 {
		t.Errorf("%d bytes, want 5 MiB rounded up to 6", n)
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(b.buf))); p%hugePageBytes != 0 {
		t.Errorf("buffer at %#x, not at a 2 MiB boundary", p)
	}
	if share < 0 || share > 1 {
		t.Errorf("huge-page share %v", share)
	}
	if mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil &&
		strings.Contains(string(mode), "[always]") && share == 0 {
		// Only logged: the kernel may find no free 2 MiB page.
		t.Logf("THP always, yet no huge page")
	}
	if r := b.Bandwidth(2, 2, 0); r.Value <= 0 {
		t.Errorf("read loop: %+v", r)
	}
	t.Logf("huge-page share %.2f", share)
	b.Close()
	if b.Len() != 0 {
		t.Error("Close kept the buffer")
	}
	b.Close() // a second Close does nothing
}

// TestAnonHugeBytes checks the smaps reading on memory the test knows:
// a heap buffer is found, and its huge pages are at most its size.
func TestAnonHugeBytes(t *testing.T) {
	buf := make([]byte, 1<<20)
	touch(buf)
	n, ok := anonHugeBytes(buf)
	if !ok {
		t.Skip("no /proc/self/smaps")
	}
	if n < 0 || n > 1<<30 {
		t.Errorf("AnonHugePages %d for a 1 MiB buffer's mappings", n)
	}
	for _, c := range []struct {
		line   string
		lo, hi uint64
		ok     bool
	}{
		{"7f0000200000-7f0000600000 rw-p 00000000 00:00 0", 0x7f0000200000, 0x7f0000600000, true},
		{"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon", 0x400000, 0x452000, true},
		{"AnonHugePages:      2048 kB", 0, 0, false},
		{"VmFlags: rd wr mr mw me ac", 0, 0, false},
	} {
		lo, hi, ok := mappingRange(c.line)
		if ok != c.ok || lo != c.lo || hi != c.hi {
			t.Errorf("mappingRange(%q) = %#x, %#x, %v; want %#x, %#x, %v", c.line, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// TestMeasureHugePages checks that Measure with HugePages reports the
// read loop over huge pages.
func TestMeasureHugePages(t *testing.T) {
	r := Measure(Options{ReadBytes: 64 << 20, HugePages: true, ReadRuns: 2})
	if r.ReadHuge.Value <= 0 || r.ReadHuge.Threads != r.Threads || r.ReadHugeShare < 0 || r.ReadHugeShare > 1 {
		t.Errorf("huge-page read loop: %+v, share %v", r.ReadHuge, r.ReadHugeShare)
	}
	if r2 := Measure(Options{ReadBytes: 64 << 20, ReadRuns: 2}); r2.ReadHuge.Value != 0 {
		t.Errorf("huge-page read loop measured without HugePages: %+v", r2.ReadHuge)
	}
}
