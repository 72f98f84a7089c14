package mmap

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// vmFlags returns the VmFlags line of the mapping that holds mem, from
// /proc/self/smaps.
func vmFlags(t *testing.T, mem []byte) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

// TestFitsMemory checks the share of memory against the machine's.
func TestFitsMemory(t *testing.T) {
	ram := MemoryBytes()
	if ram == 0 {
		t.Fatal("no memory size on Linux")
	}
	for _, c := range []struct {
		size int64
		want bool
	}{{0, true}, {int64(ram / 4 * 3), true}, {int64(ram/4*3) + 1, false}, {-1, false}} {
		if got := FitsMemory(c.size); got != c.want {
			t.Errorf("FitsMemory(%d) of %d bytes = %v, want %v", c.size, ram, got, c.want)
		}
	}
}

// TestAdviseHugePages checks that a file's mapping is marked for huge
// pages ("hg") when the model fits in memory, and left alone when it does
// not.
func TestAdviseHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skipf("kernel without transparent huge pages: %v", err)
	}
	for _, c := range []struct {
		name  string
		total int64
		want  bool
	}{
		{"fits", 4 << 20, true},
		{"larger than memory", 1 << 62, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.bin")
			if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if strings.Contains(vmFlags(t, m.Data), " hg") {
				t.Fatal("mapping marked for huge pages before any advice")
			}
			AdviseHugePages(m.Data, c.total)
			flags := vmFlags(t, m.Data)
			if got := strings.Contains(flags, " hg"); got != c.want {
				t.Fatalf("total %d bytes: huge pages %v, want %v (%s)", c.total, got, c.want, flags)
			}
		})
	}
}
