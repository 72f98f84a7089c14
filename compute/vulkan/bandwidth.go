//go:build cgo

package vulkan

import (
	"context"
	"fmt"
	"time"

	vk "github.com/vulkan-go/vulkan"
)

// Copy-bandwidth measurement parameters: buffer size on GPUs and on CPU
// devices (lavapipe, where a copy runs at host memcpy speed), copies per
// submission (so submission latency is amortised) and submissions (the
// best is reported).
const (
	bwBytesGPU   = 1 << 30
	bwBytesCPU   = 64 << 20
	bwCopies     = 8
	bwRepeats    = 5
	bwMinBytes   = 1 << 20
	bwHeapShare  = 4 // use at most 1/bwHeapShare of the free device-local heap per buffer
	bwFillMarker = 0x3f800000
)

// MemoryBandwidth measures the device's memory bandwidth with
// buffer-to-buffer copies (vkCmdCopyBuffer) between two device-local
// buffers of up to 1 GiB: each submission records bwCopies copies back and
// forth with a barrier between them, and the best of bwRepeats submissions
// counts. The result, in GB/s (10⁹ bytes), counts the bytes read plus the
// bytes written, which is what a device's datasheet bandwidth counts too;
// a decode step, which streams every weight once, can at most read at this
// rate. Work recorded before the call is submitted and waited for first.
func (b *Backend) MemoryBandwidth(ctx context.Context) (float64, error) {
	if err := b.Sync(ctx); err != nil {
		return 0, fmt.Errorf("vulkan: bandwidth: pending work: %w", err)
	}
	size := uint64(bwBytesGPU)
	if b.props.DeviceType == vk.PhysicalDeviceTypeCpu {
		size = bwBytesCPU
	}
	size = min(size, b.maxBinding)
	for i := range b.mem.MemoryHeaps[:b.mem.MemoryHeapCount] {
		h := b.mem.MemoryHeaps[i]
		if h.Flags&vk.MemoryHeapFlags(vk.MemoryHeapDeviceLocalBit) != 0 {
			free := uint64(h.Size) - min(uint64(h.Size), b.heapUsed[i])
			size = min(size, free/bwHeapShare)
		}
	}
	size &^= 255
	if size < bwMinBytes {
		return 0, fmt.Errorf("vulkan: bandwidth: only %d bytes of device memory free for the copy buffers", size)
	}
	src, err := b.newRaw(size, memDevice)
	if err != nil {
		return 0, fmt.Errorf("vulkan: bandwidth: source buffer: %w", err)
	}
	defer src.destroy(b)
	dst, err := b.newRaw(size, memDevice)
	if err != nil {
		return 0, fmt.Errorf("vulkan: bandwidth: destination buffer: %w", err)
	}
	defer dst.destroy(b)
	// Touch both buffers once so first-use costs (page mapping on CPU
	// devices, lazy allocation) fall outside the timed submissions.
	if err := b.rec.begin(b); err != nil {
		return 0, err
	}
	b.rec.transfer(nil, span{}, src, span{})
	vk.CmdFillBuffer(b.rec.cmd, src.buf, 0, vk.DeviceSize(size), bwFillMarker)
	b.rec.transfer(nil, span{}, dst, span{})
	vk.CmdFillBuffer(b.rec.cmd, dst.buf, 0, vk.DeviceSize(size), 0)
	if err := b.flush(ctx); err != nil {
		return 0, err
	}
	best := 0.0
	for r := 0; r < bwRepeats; r++ {
		if err := b.rec.begin(b); err != nil {
			return 0, err
		}
		for c := 0; c < bwCopies; c++ {
			from, to := src, dst
			if c%2 == 1 {
				from, to = dst, src
			}
			b.rec.transfer(from, span{}, to, span{})
			b.fast.copy(b.rec.cmd, from.buf, to.buf, 0, 0, uint64(size))
		}
		start := time.Now()
		if err := b.flush(ctx); err != nil {
			return 0, err
		}
		sec := time.Since(start).Seconds()
		best = max(best, 2*float64(size)*bwCopies/sec/1e9)
	}
	if err := b.report(); err != nil {
		return 0, err
	}
	// dst started as zeros and every copy into it carries src's fill
	// pattern: check its last word so a copy that silently did nothing
	// cannot report a bandwidth.
	data, err := b.readInto(ctx, dst, size-4, 4)
	if err != nil {
		return 0, fmt.Errorf("vulkan: bandwidth: reading back: %w", err)
	}
	if got := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24; got != bwFillMarker {
		return 0, fmt.Errorf("vulkan: bandwidth: copied data reads %#x, want %#x", got, bwFillMarker)
	}
	return best, nil
}
