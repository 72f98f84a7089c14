//go:build cgo

package vulkan

import (
	"fmt"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Device-local buffers (weights, activations, scratch) do not each get
// their own VkDeviceMemory: they are bound at offsets inside large blocks
// of memory, so a mixture of experts' tens of thousands of tensors make a
// few hundred allocations rather than tens of thousands (Vulkan only
// promises maxMemoryAllocationCount ≥ 4096, and drivers are slow with
// many). A memory type's blocks grow from minBlockBytes, doubling with its
// use, up to the preferred size (blockBytesMax, less on small heaps); a
// buffer larger than that gets a block of its own. Offsets are aligned to
// the buffer's memory requirements and to minStorageBufferOffsetAlignment;
// each buffer keeps its own VkBuffer, so a binding never exceeds
// maxStorageBufferRange. A block is freed when its last buffer is.

const (
	// blockBytesMax is the preferred block size on heaps of 2 GiB or more.
	blockBytesMax = 256 << 20
	// minBlockBytes is the size of a memory type's first block.
	minBlockBytes = 16 << 20
)

// memBlock is one VkDeviceMemory that buffers are bound into.
type memBlock struct {
	mem       vk.DeviceMemory
	size      uint64
	typeIndex uint32
	heap      uint32
	ptr       unsafe.Pointer // the whole block mapped, nil unless host-visible
	free      []span         // free byte ranges, ascending and disjoint
	users     int            // buffers bound into it
}

// arena holds the blocks of device-local memory, by memory type.
type arena struct {
	blocks []*memBlock
	// blockBytes is the preferred size of a block, minBytes that of a
	// memory type's first (tests lower both).
	blockBytes, minBytes uint64
	// align is the least alignment of an offset (minStorageBufferOffsetAlignment
	// and 16).
	align uint64
}

// init sets the arena's sizes from the device's limits and heaps.
func (a *arena) init(b *Backend) {
	a.align = max(16, uint64(b.props.Limits.MinStorageBufferOffsetAlignment))
	a.blockBytes, a.minBytes = blockBytesMax, minBlockBytes
	if ti, ok := b.pickMemory(^uint32(0), memDevice); ok {
		heap := uint64(b.mem.MemoryHeaps[b.mem.MemoryTypes[ti].HeapIndex].Size)
		for a.blockBytes > minBlockBytes && a.blockBytes > heap/8 {
			a.blockBytes /= 2
		}
	}
}

// typeBytes returns the bytes of the blocks of memory type ti.
func (a *arena) typeBytes(ti uint32) uint64 {
	var n uint64
	for _, bl := range a.blocks {
		if bl.typeIndex == ti {
			n += bl.size
		}
	}
	return n
}

// alignUp rounds v up to a multiple of al (a power of two, or any
// positive number).
func alignUp(v, al uint64) uint64 {
	if al <= 1 {
		return v
	}
	return (v + al - 1) / al * al
}

// take returns an offset of size bytes aligned to al inside bl's free
// ranges, first fit, removing it from them.
func (bl *memBlock) take(size, al uint64) (uint64, bool) {
	for i, f := range bl.free {
		off := alignUp(f.lo, al)
		if off+size > f.hi {
			continue
		}
		// What stays free: the range before the offset and the one after.
		var rest []span
		if off > f.lo {
			rest = append(rest, span{f.lo, off})
		}
		if off+size < f.hi {
			rest = append(rest, span{off + size, f.hi})
		}
		bl.free = append(bl.free[:i], append(rest, bl.free[i+1:]...)...)
		bl.users++
		return off, true
	}
	return 0, false
}

// give returns [off, off+size) to bl's free ranges, merging neighbours.
func (bl *memBlock) give(off, size uint64) {
	s := span{off, off + size}
	i := 0
	for i < len(bl.free) && bl.free[i].hi <= s.lo {
		i++
	}
	bl.free = append(bl.free, span{})
	copy(bl.free[i+1:], bl.free[i:])
	bl.free[i] = s
	// Merge with the next, then with the previous.
	if i+1 < len(bl.free) && bl.free[i].hi == bl.free[i+1].lo {
		bl.free[i].hi = bl.free[i+1].hi
		bl.free = append(bl.free[:i+1], bl.free[i+2:]...)
	}
	if i > 0 && bl.free[i-1].hi == bl.free[i].lo {
		bl.free[i-1].hi = bl.free[i].hi
		bl.free = append(bl.free[:i], bl.free[i+1:]...)
	}
	bl.users--
}

// bindBlock binds buf, whose memory requirements are size bytes aligned to
// al in one of the memory types typeBits allows for kind, at an offset
// inside a block, making a block when none has room.
func (b *Backend) bindBlock(buf vk.Buffer, size, al uint64, typeBits uint32, kind memKind) (*memBlock, uint64, error) {
	ti, ok := b.pickMemory(typeBits, kind)
	if !ok {
		return nil, 0, fmt.Errorf("vulkan: no suitable memory type for a %d-byte buffer", size)
	}
	a := &b.arena
	al = max(al, a.align)
	for _, bl := range a.blocks {
		if bl.typeIndex != ti {
			continue
		}
		if off, ok := bl.take(size, al); ok {
			if err := vkErr("vkBindBufferMemory", vk.BindBufferMemory(b.dev, buf, bl.mem, vk.DeviceSize(off))); err != nil {
				bl.give(off, size)
				return nil, 0, err
			}
			return bl, off, nil
		}
	}
	bl, err := b.newBlock(ti, size)
	if err != nil {
		return nil, 0, err
	}
	off, _ := bl.take(size, al) // offset 0 of a fresh block of at least size
	if err := vkErr("vkBindBufferMemory", vk.BindBufferMemory(b.dev, buf, bl.mem, vk.DeviceSize(off))); err != nil {
		bl.give(off, size)
		b.dropBlock(bl)
		return nil, 0, err
	}
	return bl, off, nil
}

// newBlock allocates a block of memory type ti with room for need bytes:
// half the type's blocks' bytes so far, between minBlockBytes and the
// preferred size, or need alone when larger. Where the heap has no room
// for such a block, one of need bytes is tried.
func (b *Backend) newBlock(ti uint32, need uint64) (*memBlock, error) {
	a := &b.arena
	size := a.blockBytes
	for size/2 >= a.minBytes && size/2 >= a.typeBytes(ti) && size/2 >= need {
		size /= 2
	}
	size = max(size, alignUp(need, a.align))
	heap := b.mem.MemoryTypes[ti].HeapIndex
	heapSize := uint64(b.mem.MemoryHeaps[heap].Size)
	if b.heapAlloc[heap]+size > heapSize {
		size = alignUp(need, a.align)
	}
	if b.heapAlloc[heap]+size > heapSize {
		return nil, fmt.Errorf("vulkan: out of device memory: %d bytes more would exceed heap %d (%d MiB, %d MiB allocated)",
			need, heap, heapSize>>20, b.heapAlloc[heap]>>20)
	}
	mem, err := b.fast.allocMemory(b.dev, size, ti)
	if err != nil {
		return nil, err
	}
	bl := &memBlock{mem: mem, size: size, typeIndex: ti, heap: heap, free: []span{{0, size}}}
	const hostOK = vk.MemoryPropertyFlags(vk.MemoryPropertyHostVisibleBit | vk.MemoryPropertyHostCoherentBit)
	if b.mem.MemoryTypes[ti].PropertyFlags&hostOK == hostOK {
		var p unsafe.Pointer
		if err := vkErr("vkMapMemory", vk.MapMemory(b.dev, mem, 0, vk.DeviceSize(size), 0, &p)); err != nil {
			vk.FreeMemory(b.dev, mem, nil)
			return nil, err
		}
		bl.ptr = p
	}
	b.heapAlloc[heap] += size
	b.allocations++
	a.blocks = append(a.blocks, bl)
	return bl, nil
}

// dropBlock frees a block no buffer uses.
func (b *Backend) dropBlock(bl *memBlock) {
	a := &b.arena
	for i, x := range a.blocks {
		if x == bl {
			a.blocks = append(a.blocks[:i], a.blocks[i+1:]...)
			break
		}
	}
	if bl.ptr != nil {
		vk.UnmapMemory(b.dev, bl.mem)
	}
	vk.FreeMemory(b.dev, bl.mem, nil)
	b.heapAlloc[bl.heap] -= bl.size
	b.allocations--
}

// release returns a buffer's range to its block, freeing the block when
// no buffer is left in it.
func (b *Backend) release(bl *memBlock, off, size uint64) {
	bl.give(off, size)
	if bl.users == 0 {
		b.dropBlock(bl)
	}
}

// MemoryAllocations returns the number of VkDeviceMemory allocations the
// backend holds: its blocks and its host-visible buffers (the upload ring,
// the readback buffer). It is bounded by the bytes allocated over the
// block size, not by the number of weights.
func (b *Backend) MemoryAllocations() int { return b.allocations }

// BlockBytes returns the preferred size of the blocks device-local
// buffers are placed in.
func (b *Backend) BlockBytes() int64 { return int64(b.arena.blockBytes) }
