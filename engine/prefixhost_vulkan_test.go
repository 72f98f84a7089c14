//go:build cgo

package engine

import (
	"os"
	"testing"

	"github.com/govinfer/govinfer/compute/vulkan"
	"github.com/govinfer/govinfer/model"
)

// TestHostTierVulkan runs checkHostSessions on the Vulkan backend
// (lavapipe in CI): device memory holds about one session, host memory
// the rest, and the states copied back from host memory answer bit for bit
// as a cold engine. It skips without a Vulkan device unless
// GOVINFER_REQUIRE_VULKAN=1.
func TestHostTierVulkan(t *testing.T) {
	be, err := vulkan.New(vulkan.Options{})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { be.Close() }) // cleanups run last first: engines, model, backend
	m, err := model.Open("../testdata/models/tiny", model.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	checkHostSessions(t, m)
}
