package main

import (
	"context"
	"fmt"

	"github.com/govinfer/govinfer/compute"
)

// bandwidthMeter is implemented by backends that can measure their own
// device memory bandwidth (the Vulkan backend: buffer-to-buffer copies),
// which is then the bench baseline instead of a host read loop.
type bandwidthMeter interface {
	MemoryBandwidth(ctx context.Context) (float64, error)
}

// benchBaseline returns the memory bandwidth decode speed is compared
// with, and how it was measured: the device's own measurement where the
// backend has one, else a host read loop over size bytes with threads
// goroutines.
func benchBaseline(ctx context.Context, be compute.Backend, threads, size int) (float64, string, error) {
	if m, ok := be.(bandwidthMeter); ok {
		gbps, err := m.MemoryBandwidth(ctx)
		if err != nil {
			return 0, "", fmt.Errorf("measuring device bandwidth: %w", err)
		}
		return gbps, "device buffer copy, bytes read + written", nil
	}
	return memoryReadGBps(threads, size), fmt.Sprintf("plain read loop, %d threads", threads), nil
}
