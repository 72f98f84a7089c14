//go:build cgo

package vulkan

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/computetest"
)

// newTestBackend opens a backend with the validation layer on when it is
// installed, failing the test on any message it reports. Without a device
// the test skips, unless GOVINFER_REQUIRE_VULKAN=1 (CI), where it fails.
func newTestBackend(t *testing.T, o Options) *Backend {
	t.Helper()
	o.Validation = o.Validation || layerInstalled()
	var mu sync.Mutex
	o.Log = func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		t.Log(msg)
	}
	b, err := New(o)
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device (set VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json for lavapipe): %v", err)
	}
	t.Log(b.Describe())
	return b
}

// layerInstalled reports whether the Khronos validation layer is present.
func layerInstalled() bool {
	if _, err := loaderOnce(); err != nil {
		return false
	}
	return layerAvailable(validationLayer)
}

func TestConformance(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend { return newTestBackend(t, Options{}) })
}

// TestConformanceSplitWeights runs the suite with 4 KiB weight chunks, so
// that every matrix with rows of at most 512 bytes is split over several
// bindings.
func TestConformanceSplitWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	computetest.Run(t, func(t *testing.T) compute.Backend { return newTestBackend(t, Options{MaxBindingBytes: 1 << 12}) })
}

func TestDescribe(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	d := b.Describe()
	for _, want := range []string{"vulkan:", "subgroup", "device-local"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() = %q, missing %q", d, want)
		}
	}
}
