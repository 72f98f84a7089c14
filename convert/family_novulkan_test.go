//go:build !cgo

package convert

import "testing"

// familyVulkan has no Vulkan backend to run on without cgo.
func familyVulkan(t *testing.T, _ []familyCase, _ map[string][]float32) {
	t.Run("vulkan", func(t *testing.T) { t.Skip("built without cgo: no Vulkan backend") })
}
