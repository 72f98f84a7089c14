//go:build cgo

package model

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// TestGGUFMoEGoldensVulkan runs llama.cpp's BF16 qwen35moe file against the
// float64 goldens of its checkpoint on the Vulkan backend.
func TestGGUFMoEGoldensVulkan(t *testing.T) {
	runGoldenModel(t, loadGoldenModel(t, kmoeDir, filepath.Join(ggufDir, "kmoe-bf16.gguf"), Options{Backend: newVulkan(t)}))
}

// TestGGUFMoEVulkan runs llama.cpp's qwen35moe files on the Vulkan backend
// against the CPU backend: the median position's max|diff|/max|CPU| within
// vulkanGGUFGuard (the CPU quantizes the inputs of products with quantized
// weights to 8-bit blocks and the shaders do not, so a near tie of the
// router may pick another expert at a few positions). Measured on
// lavapipe: bf16 8.0e-7 (every position 1.1e-6), q8_0 0.019 (0.027),
// q4_k_m 0.031 (0.11).
func TestGGUFMoEVulkan(t *testing.T) {
	vk := newVulkan(t)
	c := cpu.New(cpu.Options{})
	defer c.Close()
	for _, name := range []string{"bf16", "q8_0", "q4_k_m"} {
		path := filepath.Join(ggufDir, "kmoe-"+name+".gguf")
		want := ggufPromptLogits(t, c, path, Options{})
		got := ggufPromptLogits(t, vk, path, Options{})
		rows := len(want) / 2048
		errs := make([]float64, rows)
		for i := range rows {
			errs[i] = relErr(got[i*2048:(i+1)*2048], want[i*2048:(i+1)*2048])
		}
		slices.Sort(errs)
		t.Logf("%s: Vulkan against CPU: rel err %.3g, median position %.3g", name, relErr(got, want), errs[rows/2])
		if !(errs[rows/2] <= vulkanGGUFGuard[name]) {
			t.Errorf("%s: median position rel err %.3g > %g", name, errs[rows/2], vulkanGGUFGuard[name])
		}
	}
}
