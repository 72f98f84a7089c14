//go:build cgo

package model

import (
	"os"
	"testing"

	"github.com/govinfer/govinfer/compute/vulkan"
)

// newVulkan returns a Vulkan backend with the validation layer on, or skips
// the test when no device is present (fails instead when
// GOVINFER_REQUIRE_VULKAN=1, as in CI).
func newVulkan(t *testing.T) *vulkan.Backend {
	t.Helper()
	be, err := vulkan.New(vulkan.Options{Validation: true, Log: func(msg string) { t.Log(msg) }})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { be.Close() })
	t.Log(be.Describe())
	return be
}

// TestGoldenVulkan runs every golden check on the Vulkan backend.
func TestGoldenVulkan(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			runGoldens(t, name, Options{Backend: newVulkan(t)})
		})
	}
}

// TestBlockPrefillVulkan checks that prefill in blocks gives the logits of
// one block on the Vulkan backend.
func TestBlockPrefillVulkan(t *testing.T) {
	checkBlockPrefill(t, "small", Options{Backend: newVulkan(t)})
}

// TestBatchMatchesSoloVulkan checks continuous batching on the Vulkan
// backend: sequences at different lengths in one step get their solo logits.
func TestBatchMatchesSoloVulkan(t *testing.T) {
	checkBatchMatchesSolo(t, Options{Backend: newVulkan(t), MaxStepTokens: 48})
}

// TestLastArgmaxVulkan checks the device argmax path of greedy decoding.
func TestLastArgmaxVulkan(t *testing.T) { checkLastArgmax(t, Options{Backend: newVulkan(t)}) }

// TestGoldenVulkanCoopmat runs the golden checks and block prefill with
// every product of more than 8 tokens on the cooperative-matrix shader. It
// skips on devices without VK_KHR_cooperative_matrix, unless
// GOVINFER_REQUIRE_COOPMAT=1 (CI runs it on a lavapipe that has it).
func TestGoldenVulkanCoopmat(t *testing.T) {
	open := func(t *testing.T) *vulkan.Backend {
		be, err := vulkan.New(vulkan.Options{Validation: true, TiledFrom: 9, Log: func(msg string) { t.Log(msg) }})
		if err != nil {
			if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
				t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
			}
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Cleanup(func() { be.Close() })
		if be.CooperativeMatrix() == 0 {
			if os.Getenv("GOVINFER_REQUIRE_COOPMAT") == "1" {
				t.Fatalf("GOVINFER_REQUIRE_COOPMAT=1 but %s", be.Describe())
			}
			t.Skipf("no cooperative matrix: %s", be.Describe())
		}
		t.Log(be.Describe())
		return be
	}
	for _, name := range []string{"tiny", "small"} {
		t.Run(name, func(t *testing.T) {
			runGoldens(t, name, Options{Backend: open(t)})
		})
	}
	t.Run("block-prefill", func(t *testing.T) {
		checkBlockPrefill(t, "small", Options{Backend: open(t)})
	})
}
