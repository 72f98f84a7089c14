package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/vulkan"
)

// requireVulkan skips the test without a Vulkan device, or fails it under
// GOVINFER_REQUIRE_VULKAN=1 (CI).
func requireVulkan(t *testing.T) {
	t.Helper()
	be, err := vulkan.New(vulkan.Options{})
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	be.Close()
}

// TestBenchVulkanBaseline checks that bench on the Vulkan backend uses the
// device's copy bandwidth as its baseline.
func TestBenchVulkanBaseline(t *testing.T) {
	requireVulkan(t)
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	code, out, errOut := run(t, "", "bench", "--backend", "vulkan", "--model", dir, "--prompt", "8", "--gen", "2", "--repeat", "1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !strings.Contains(res.MemoryBaseline, "device buffer copy") || res.MemoryReadGBPerSecond <= 0 ||
		res.DecodeBandwidthFraction <= 0 || !strings.HasPrefix(res.Backend, "vulkan") {
		t.Errorf("implausible result: %+v", res)
	}
}

// TestBenchProfile checks --profile: the decode profile of the tiny model
// counts one embed, one argmax and a matvec per projection per token
// (TestBenchProfileCPU checks --profile on the CPU backend).
func TestBenchProfile(t *testing.T) {
	requireVulkan(t)
	dir := filepath.Join("..", "..", "testdata", "models", "tiny")
	code, out, errOut := run(t, "", "bench", "--backend", "vulkan", "--model", dir, "--prompt", "8", "--gen", "3", "--repeat", "2", "--profile", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	ops := map[string]profileRow{}
	var total float64
	for _, r := range res.DecodeProfile {
		ops[r.Op] = r
		total += r.MS
	}
	if ops["embed"].Count != 1 || ops["argmax"].Count != 1 || ops["matvec"].Count < 4 || total <= 0 {
		t.Errorf("implausible decode profile: %+v", res.DecodeProfile)
	}
	if len(res.PrefillProfile) == 0 {
		t.Errorf("no prefill profile")
	}
	if res.DecodeDispatchesPerToken < ops["matvec"].Count || res.DecodeBarriersPerToken <= 0 || res.DecodeSubmissionsPerToken < 1 {
		t.Errorf("implausible record counts: %+v", res)
	}
	// Without --profile: counts, but no profile.
	code, out, errOut = run(t, "", "bench", "--backend", "vulkan", "--model", dir, "--prompt", "8", "--gen", "2", "--repeat", "1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	res = benchResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.DecodeProfile != nil || res.PrefillProfile != nil || res.DecodeDispatchesPerToken <= 0 {
		t.Errorf("without --profile: %+v", res)
	}
}
