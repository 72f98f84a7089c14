//go:build cgo

package vulkan

// FreeMemory returns the bytes of the device-local heap that buffers are
// allocated from and that the backend does not use yet: the room left for
// activations and sequence state once the weights are loaded. Other
// processes sharing the device are not accounted for.
func (b *Backend) FreeMemory() int64 {
	ti, ok := b.pickMemory(^uint32(0), memDevice)
	if !ok {
		return 0
	}
	heap := b.mem.MemoryTypes[ti].HeapIndex
	size, used := uint64(b.mem.MemoryHeaps[heap].Size), b.heapUsed[heap]
	if used >= size {
		return 0
	}
	return int64(size - used)
}
