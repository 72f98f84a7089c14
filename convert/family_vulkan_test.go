//go:build cgo

package convert

import (
	"os"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/vulkan"
)

// familyVulkan runs checkFamily on a Vulkan backend and compares each
// shape's logits with the CPU's (onCPU): within familyTol, argmaxes equal.
// It skips without a device unless GOVINFER_REQUIRE_VULKAN=1 (as in CI).
func familyVulkan(t *testing.T, cases []familyCase, onCPU map[string][]float32) {
	t.Run("vulkan", func(t *testing.T) {
		probe, err := vulkan.New(vulkan.Options{})
		if err != nil {
			if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
				t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
			}
			t.Skipf("no Vulkan device: %v", err)
		}
		probe.Close()
		newBackend := func() compute.Backend {
			be, err := vulkan.New(vulkan.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return be
		}
		for name, got := range checkFamily(t, cases, newBackend) {
			if e := relErr(got, onCPU[name]); e > familyTol {
				t.Errorf("%s: Vulkan logits differ from the CPU's by %.3g (> %g)", name, e, familyTol)
			}
			checkArgmaxes(t, got, onCPU[name])
		}
	})
}
