//go:build cgo

package model

import (
	"path/filepath"
	"testing"
)

// TestOutputRowsExactVulkan is TestOutputRowsExact on the Vulkan backend.
func TestOutputRowsExactVulkan(t *testing.T) {
	tiny := filepath.Join("..", "testdata", "models", "tiny")
	for name, dir := range map[string]string{
		"attention last": tiny,
		"deltanet last":  truncatedCheckpoint(t, tiny, 3),
	} {
		t.Run(name, func(t *testing.T) {
			for _, opts := range []Options{{}, {MaxStepTokens: 7}} {
				opts.Backend = newVulkan(t)
				m, err := Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				checkOutputRows(t, m, func(what string, got, want []float32) { sameLogits(t, what, got, want) })
				m.Close()
			}
		})
	}
}
