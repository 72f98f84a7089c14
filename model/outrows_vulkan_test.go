//go:build cgo

package model

import "testing"

// TestOutputRowsExactVulkan is TestOutputRowsExact on the Vulkan backend.
func TestOutputRowsExactVulkan(t *testing.T) {
	runOutputRows(t, func(t *testing.T, o Options) Options {
		o.Backend = newVulkan(t)
		return o
	})
}
