package model

import (
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// withCPU returns o with a CPU backend on all cores, closed when the test
// ends, if o has no backend.
func withCPU(tb testing.TB, o Options) Options {
	tb.Helper()
	if o.Backend == nil {
		be := cpu.New(cpu.Options{})
		tb.Cleanup(func() { be.Close() })
		o.Backend = be
	}
	return o
}
