//go:build cgo

package model

import "testing"

// TestPrefillCutsExactVulkan is TestPrefillCutsExact on the Vulkan
// backend.
func TestPrefillCutsExactVulkan(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			gm := loadGolden(t, name, Options{Backend: newVulkan(t)})
			checkPrefillCuts(t, gm.m)
		})
	}
}
