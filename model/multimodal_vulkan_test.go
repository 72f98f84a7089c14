//go:build cgo

package model

import "testing"

// TestMultimodalGoldensVulkan runs the vl-tiny goldens (vision tower and
// text model) on the Vulkan backend.
func TestMultimodalGoldensVulkan(t *testing.T) {
	runMultimodalGoldens(t, Options{Backend: newVulkan(t)})
}
