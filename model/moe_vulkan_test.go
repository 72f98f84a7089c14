//go:build cgo

package model

import "testing"

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
