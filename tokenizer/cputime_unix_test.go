//go:build unix

package tokenizer

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the user+system CPU time the test process has used.
// The benchmarks report it per operation next to wall time, because on a
// machine shared with other work wall time mostly measures the neighbours.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
