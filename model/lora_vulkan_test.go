//go:build cgo

package model

import "testing"

// TestLoRAGoldensVulkan checks the adapters' goldens on the Vulkan backend.
func TestLoRAGoldensVulkan(t *testing.T) { runLoRAGoldens(t, Options{Backend: newVulkan(t)}) }

// TestLoRAMixedBatchVulkan checks on the Vulkan backend that a sequence's
// logits do not depend on the adapters of the sequences it shares a step
// with.
func TestLoRAMixedBatchVulkan(t *testing.T) {
	checkLoRAMixedBatch(t, Options{Backend: newVulkan(t), MaxStepTokens: 48})
}

// TestLoRAMergedGoldensVulkan checks merged adapters on the Vulkan
// backend.
func TestLoRAMergedGoldensVulkan(t *testing.T) {
	runLoRAMergedGoldens(t, Options{Backend: newVulkan(t)})
}
