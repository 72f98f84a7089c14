//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenCase returns case i of the golden.json of the checkpoint in dir:
// its prompt and greedy tokens.
func goldenCase(t *testing.T, dir string, i int) (prompt, greedy []int) {
	t.Helper()
	var g struct {
		Cases []struct {
			Prompt       []int `json:"prompt"`
			GreedyTokens []int `json:"greedy_tokens"`
		} `json:"cases"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g.Cases[i].Prompt, g.Cases[i].GreedyTokens
}

// generateVulkan runs "govinfer generate --backend vulkan" with flags added
// on a golden prompt and checks the greedy tokens against the golden; it
// returns standard error. It skips without a Vulkan device unless
// GOVINFER_REQUIRE_VULKAN=1 (as in CI).
func generateVulkan(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	prompt, greedy := goldenCase(t, dir, 2)
	args := append([]string{"generate", "--model", dir, "--ids", strings.Trim(jsonString(t, prompt), "[]"),
		"-n", "24", "--backend", "vulkan", "--json"}, flags...)
	code, out, errOut := run(t, "", args...)
	if code != exitOK {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") != "1" && strings.Contains(errOut, "cannot start") {
			t.Skipf("no Vulkan device: %s", errOut)
		}
		t.Fatalf("%v: exit %d: %s", flags, code, errOut)
	}
	var res struct {
		IDs []int `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if jsonString(t, res.IDs) != jsonString(t, greedy) {
		t.Errorf("%v: ids %v, golden %v", flags, res.IDs, greedy)
	}
	return errOut
}

// TestGenerateVulkan runs "govinfer generate --backend vulkan" on the tiny
// checkpoint and checks the greedy tokens against the golden, and the
// device line on standard error.
func TestGenerateVulkan(t *testing.T) {
	errOut := generateVulkan(t, filepath.Join("..", "..", "testdata", "models", "tiny"))
	if !strings.Contains(errOut, "backend: vulkan:") {
		t.Errorf("no device line on stderr: %q", errOut)
	}
}

// TestGenerateVulkanCPUMoE runs "govinfer generate --backend vulkan" on
// the mixture-of-experts checkpoint with its experts on the CPU
// (--cpu-moe, and --n-cpu-moe 2) and checks the greedy tokens against the
// golden.
func TestGenerateVulkanCPUMoE(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "moe-tiny")
	for _, flags := range [][]string{{"--cpu-moe"}, {"--n-cpu-moe", "2"}} {
		generateVulkan(t, dir, flags...)
	}
	if code, _, errOut := run(t, "", "generate", "--model", dir, "--ids", "1", "--cpu-moe", "--n-cpu-moe", "2"); code != exitUsage || !strings.Contains(errOut, "give one") {
		t.Errorf("--cpu-moe with --n-cpu-moe: exit %d, %q", code, errOut)
	}
}
