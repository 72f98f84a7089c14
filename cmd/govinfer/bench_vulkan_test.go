package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/vulkan"
)

// TestBenchVulkanBaseline checks that bench on the Vulkan backend uses the
// device's copy bandwidth as its baseline.
func TestBenchVulkanBaseline(t *testing.T) {
	if be, err := vulkan.New(vulkan.Options{}); err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	} else {
		be.Close()
	}
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
