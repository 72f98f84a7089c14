//go:build cgo

package model

import (
	"testing"

	"github.com/govinfer/govinfer/quant"
)

// TestDraftQuantizeVulkan runs speculative greedy decoding with a Q8_0
// draft head on the Vulkan backend (lavapipe in CI): the tokens are plain
// greedy's for k = 1..3.
func TestDraftQuantizeVulkan(t *testing.T) {
	g, gm, _ := loadMTPGolden(t, Options{Backend: newVulkan(t), DraftQuantize: "q8_0"})
	if gm.m.DraftType() != quant.Q8_0 {
		t.Fatalf("drafts in %v, want Q8_0", gm.m.DraftType())
	}
	checkDraftSpeculation(t, gm.m, g, "vulkan q8_0")
}
