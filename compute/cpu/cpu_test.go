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
					b := cpu.New(cpu.Options{Threads: threads, Kernels: k, NoAMXTiles: true})
					t.Cleanup(func() { b.Close() })
					return b
				})
			})
		}
	}
	// The row-major bf16 products of the kernel sets that would otherwise
	// repack bf16 weights for the FMA tile products (AVX-512).
	if k := asm.Detect(); k.TilesFMA() {
		t.Run("best/row-major", func(t *testing.T) {
			computetest.Run(t, func(t *testing.T) compute.Backend {
				b := cpu.New(cpu.Options{Threads: 3, Kernels: k, NoAMXTiles: true, NoFMATiles: true})
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	}
	// The AVX2 set's row-major bf16 products, which it would otherwise
	// repack for its outer-product tile kernel.
	if k := asm.New(asm.Features{AVX2: true}); k.TilesOP() {
		t.Run("avx2/row-major", func(t *testing.T) {
			computetest.Run(t, func(t *testing.T) compute.Backend {
				b := cpu.New(cpu.Options{Threads: 3, Kernels: k, NoFMATiles: true})
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	}
	// Products of bf16 weights on bf16-rounded inputs (VDPBF16PS where
	// the CPU has it); the suite allows for the inputs' rounding.
	for name, k := range map[string]*asm.Kernels{"generic": asm.Generic(), "best": asm.Detect()} {
		t.Run(name+"/bf16-inputs", func(t *testing.T) {
			computetest.Run(t, func(t *testing.T) compute.Backend {
				b := cpu.New(cpu.Options{Threads: 3, Kernels: k, BF16Inputs: true, NoAMXTiles: true})
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	}
	// The default products of bf16 weights: on AMX tiles where the CPU
	// has them, exact (three bf16 parts per input) and on bf16-rounded
	// inputs.
	for _, bf16In := range []bool{false, true} {
		t.Run("best/amx-tiles", func(t *testing.T) {
			computetest.Run(t, func(t *testing.T) compute.Backend {
				b := cpu.New(cpu.Options{Threads: 3, BF16Inputs: bf16In})
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	}
}
