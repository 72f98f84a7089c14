//go:build cgo

package model

import (
	"testing"

	"github.com/govinfer/govinfer/compute"
)

// The Vulkan variants of the exactness tests run on the tiny model (both
// kinds of layer, every shader): lavapipe with the validation layer takes
// about a minute for the small one.

// TestPrefillCutsExactVulkan is TestPrefillCutsExact on the Vulkan
// backend.
func TestPrefillCutsExactVulkan(t *testing.T) {
	checkPrefillCuts(t, loadGolden(t, "tiny", Options{Backend: newVulkan(t)}).m)
}

// TestKVCacheTypeGoldensVulkan measures the golden error of 16-bit KV
// caches on the Vulkan backend, and checks cut invariance and restores
// with a bf16 cache.
func TestKVCacheTypeGoldensVulkan(t *testing.T) {
	be := newVulkan(t)
	checkKVTypes(t, be, []string{"tiny"}, false)
	gm := loadGolden(t, "tiny", Options{Backend: be, KVCacheType: compute.BF16})
	checkPrefillCuts(t, gm.m)
	checkRestore(t, gm.m)
}

// TestRestoreExactVulkan is TestRestoreExact on the Vulkan backend.
func TestRestoreExactVulkan(t *testing.T) {
	checkRestore(t, loadGolden(t, "tiny", Options{Backend: newVulkan(t)}).m)
}
