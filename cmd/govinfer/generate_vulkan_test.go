//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateVulkan runs "govinfer generate --backend vulkan" on the tiny
// checkpoint and checks the greedy tokens against the golden. It skips
// without a Vulkan device unless GOVINFER_REQUIRE_VULKAN=1 (as in CI).
func TestGenerateVulkan(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
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
	c := g.Cases[2]
	code, out, errOut := run(t, "", "generate", "--model", dir, "--ids", strings.Trim(jsonString(t, c.Prompt), "[]"),
		"-n", "24", "--backend", "vulkan", "--json")
	if code != exitOK {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") != "1" && strings.Contains(errOut, "cannot start") {
			t.Skipf("no Vulkan device: %s", errOut)
		}
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "backend: vulkan:") {
		t.Errorf("no device line on stderr: %q", errOut)
	}
	var res struct {
		IDs []int `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if jsonString(t, res.IDs) != jsonString(t, c.GreedyTokens) {
		t.Errorf("ids %v, golden %v", res.IDs, c.GreedyTokens)
	}
}

// TestGenerateVulkanCPUMoE runs "govinfer generate --backend vulkan" on
// the mixture-of-experts checkpoint with its experts on the CPU
// (--cpu-moe, and --n-cpu-moe 2) and checks the greedy tokens against the
// golden.
func TestGenerateVulkanCPUMoE(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "moe-tiny")
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
	c := g.Cases[2]
	for _, flags := range [][]string{{"--cpu-moe"}, {"--n-cpu-moe", "2"}} {
		args := append([]string{"generate", "--model", dir, "--ids", strings.Trim(jsonString(t, c.Prompt), "[]"),
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
		if jsonString(t, res.IDs) != jsonString(t, c.GreedyTokens) {
			t.Errorf("%v: ids %v, golden %v", flags, res.IDs, c.GreedyTokens)
		}
	}
	if code, _, errOut := run(t, "", "generate", "--model", dir, "--ids", "1", "--cpu-moe", "--n-cpu-moe", "2"); code != exitUsage || !strings.Contains(errOut, "give one") {
		t.Errorf("--cpu-moe with --n-cpu-moe: exit %d, %q", code, errOut)
	}
}
