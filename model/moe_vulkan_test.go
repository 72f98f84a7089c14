//go:build cgo

package model

import (
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// TestGoldenMoEVulkan runs the mixture-of-experts goldens, the MTP head's
// and speculative decoding's on the Vulkan backend.
func TestGoldenMoEVulkan(t *testing.T) {
	runGoldens(t, "moe-tiny", Options{Backend: newVulkan(t)})
	runMTPGoldens(t, Options{Backend: newVulkan(t)}, moeTiny)
	runSpeculativeGoldens(t, Options{Backend: newVulkan(t)}, moeTiny)
}

// TestMoEBatchInvariantVulkan checks batch invariance on the Vulkan backend.
func TestMoEBatchInvariantVulkan(t *testing.T) {
	checkMoEBatchInvariant(t, Options{Backend: newVulkan(t)})
}

// TestGoldenMoEVulkanCPUExperts runs the goldens, the MTP head's and
// speculation with everything on Vulkan but the experts, which a CPU
// backend holds and runs (--cpu-moe), and with the first two layers'
// experts only (--n-cpu-moe 2).
func TestGoldenMoEVulkanCPUExperts(t *testing.T) {
	for _, layers := range []int{-1, 2} {
		host := cpu.New(cpu.Options{})
		defer host.Close()
		o := Options{Backend: newVulkan(t), ExpertBackend: host, CPUMoELayers: layers}
		runGoldens(t, "moe-tiny", o)
		if layers < 0 {
			runMTPGoldens(t, o, moeTiny)
			runSpeculativeGoldens(t, o, moeTiny)
		}
	}
}
