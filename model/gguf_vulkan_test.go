//go:build cgo

package model

import (
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
)

// vulkanGGUFGuard bounds the Vulkan backend's logits on llama.cpp's files
// against the CPU backend's (max|diff|/max|CPU|, every position): the same
// weights, but the CPU quantizes the inputs of products with quantized
// weights to 8-bit blocks and the shaders do not. Measured on lavapipe:
// bf16 9.1e-7, q8_0 0.023, q4_k_m 0.034, q5_k_m 0.039.
var vulkanGGUFGuard = map[string]float64{"bf16": 1e-4, "q8_0": 0.05, "q4_k_m": 0.05, "q5_k_m": 0.05}

// TestGGUFVulkan runs llama.cpp's files on the Vulkan backend against the
// CPU backend: the grouped path (bf16, q8_0) and the tiled one (K-quants,
// whose ssm_out blocks straddle this checkpoint's 64-wide value heads: the
// core output moves by Copy operations).
func TestGGUFVulkan(t *testing.T) {
	vk := newVulkan(t)
	c := cpu.New(cpu.Options{})
	defer c.Close()
	for _, name := range []string{"bf16", "q8_0", "q4_k_m", "q5_k_m"} {
		path := filepath.Join(ggufDir, "ksmall-"+name+".gguf")
		want := ggufPromptLogits(t, c, path, Options{})
		got := ggufPromptLogits(t, vk, path, Options{})
		e := relErr(got, want)
		t.Logf("%s: Vulkan against CPU: rel err %.3g", name, e)
		if !(e <= vulkanGGUFGuard[name]) {
			t.Errorf("%s: rel err %.3g > %g", name, e, vulkanGGUFGuard[name])
		}
	}
}

// TestGGUFTiledVulkan is TestGGUFTiledMatchesGrouped on the Vulkan backend.
func TestGGUFTiledVulkan(t *testing.T) { checkTiledMatchesGrouped(t, newVulkan(t)) }
