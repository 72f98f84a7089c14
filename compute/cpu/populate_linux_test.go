package cpu

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/mmap"
	"github.com/govinfer/govinfer/quant"
)

// TestLoadTablePopulates checks that a table in a file's memory map (at an
// offset that is no page boundary) reads back as stored and that Embed
// then takes no page faults: each of its rows is more than the kernel
// maps around one fault, so unmapped rows would cost a fault every few
// (small pages or large folios).
func TestLoadTablePopulates(t *testing.T) {
	if !populateWorks(t) {
		t.Skip("MADV_POPULATE_READ maps no pages here (before Linux 5.14, or emulated)")
	}
	const rows, cols, off = 384, 1 << 16, 100
	rb := compute.Q8_0.RowBytes(cols)
	r := rand.New(rand.NewPCG(7, 8))
	file := make([]byte, off+rows*rb)
	row := make([]float32, cols)
	for i := range rows {
		for j := range row {
			row[j] = float32(r.NormFloat64())
		}
		if err := quant.QuantizeRow(quant.Q8_0, file[off+i*rb:off+(i+1)*rb], row); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "table")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mmap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Mapped() {
		t.Skip("the file system cannot map files")
	}
	b := New(Options{Threads: 1})
	defer b.Close()
	wt, err := b.LoadTable("table", compute.Q8_0, rows, cols, m.Data[off:])
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(i)
	}
	dst, _ := b.NewBuffer(rows * cols)
	d := Data(dst)
	clear(d) // the buffer's own pages, faulted in before counting
	if faults := threadFaults(t, func() { b.Embed(dst, wt, ids) }); faults > 4 {
		t.Errorf("Embed of %d rows took %d page faults: the table was not mapped at load", rows, faults)
	}
	for i := range rows {
		if err := quant.DequantizeRow(quant.Q8_0, row, file[off+i*rb:off+(i+1)*rb]); err != nil {
			t.Fatal(err)
		}
		for j, v := range row {
			if d[i*cols+j] != v {
				t.Fatalf("row %d col %d: %v, stored %v", i, j, d[i*cols+j], v)
			}
		}
	}
}

// threadFaults returns the page faults the calling thread takes in f
// (Embed runs on the caller's thread).
func threadFaults(t *testing.T, f func()) int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		t.Fatal(err)
	}
	f()
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
		t.Fatal(err)
	}
	return after.Minflt - before.Minflt + after.Majflt - before.Majflt
}

// populateWorks reports whether MADV_POPULATE_READ maps a file's pages
// here, so that reading them takes no faults (the kernel has it from
// Linux 5.14; user-mode emulators may accept it and map nothing).
func populateWorks(t *testing.T) bool {
	const size = 4 << 20
	path := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if unix.Madvise(m, unix.MADV_POPULATE_READ) != nil {
		return false
	}
	var sum byte
	faults := threadFaults(t, func() {
		for i := 0; i < size; i += 4096 {
			sum += m[i]
		}
	})
	return faults <= 2 && sum == 0
}
