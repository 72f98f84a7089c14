package main

import "context"

// bandwidthMeter is implemented by backends that can measure their own
// device memory bandwidth (the Vulkan backend: buffer-to-buffer copies),
// which is then the bench baseline instead of a host read loop.
type bandwidthMeter interface {
	MemoryBandwidth(ctx context.Context) (float64, error)
}
