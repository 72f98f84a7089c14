//go:build cgo

package model

import "testing"

// TestMTPGoldensVulkan runs the MTP head goldens on the Vulkan backend.
func TestMTPGoldensVulkan(t *testing.T) { runMTPGoldens(t, Options{Backend: newVulkan(t)}) }

// TestSpeculativeGoldensVulkan runs greedy speculative decoding on the
// Vulkan backend.
func TestSpeculativeGoldensVulkan(t *testing.T) {
	runSpeculativeGoldens(t, Options{Backend: newVulkan(t)})
}
