package cpu_test

import (
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/computetest"
	"github.com/govinfer/govinfer/compute/cpu"
)

// TestConformance runs the backend conformance suite on the CPU backend with
// each kernel set this machine supports, one thread and several. The suite's
// reference is the CPU backend itself with its default kernels, so this
// checks the assembly kernels and the parallel splits against it.
func TestConformance(t *testing.T) {
	sets := map[string]*asm.Kernels{
		"generic": asm.Generic(),
		"avx2":    asm.New(asm.Features{AVX2: true}),
		"best":    asm.Detect(),
	}
	for name, k := range sets {
		for _, threads := range []int{1, 3} {
			t.Run(name, func(t *testing.T) {
				computetest.Run(t, func(t *testing.T) compute.Backend {
					b := cpu.New(cpu.Options{Threads: threads, Kernels: k})
					t.Cleanup(func() { b.Close() })
					return b
				})
			})
		}
	}
}
