package diskfree

import (
	"path/filepath"
	"runtime"
	"testing"
)

// TestBytes checks that a temporary folder, and a path below it that does
// not exist yet, report the same positive free space.
func TestBytes(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("free space is not told on", runtime.GOOS)
	}
	dir := t.TempDir()
	free, ok := Bytes(dir)
	if !ok || free <= 0 {
		t.Fatalf("Bytes(%s) = %d, %v", dir, free, ok)
	}
	below, ok := Bytes(filepath.Join(dir, "not", "yet"))
	if !ok || below <= 0 || below > 2*free+1<<30 {
		t.Errorf("Bytes of a path not made yet = %d, %v (the folder: %d)", below, ok, free)
	}
}
