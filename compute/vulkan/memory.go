//go:build cgo

package vulkan

import (
	"fmt"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// memKind says what a raw buffer is for, which decides its memory type.
type memKind int

const (
	memDevice   memKind = iota // device-local, for weights and activations
	memUpload                  // host-visible, coherent: the upload ring
	memReadback                // host-visible, coherent, cached if possible
)

// rawBuf is a VkBuffer bound to memory of its own or (block set) to a
// range of an arena block.
type rawBuf struct {
	buf  vk.Buffer
	mem  vk.DeviceMemory
	size uint64
	heap uint32
	// block, when set, is the arena block buf is bound into at byte off.
	block *memBlock
	off   uint64
	// alloc is the bytes of memory bound to buf (its requirements), which
	// count against heap.
	alloc uint64
	ptr   unsafe.Pointer // mapped memory, nil unless host-visible and mapped
	// reads and writes are the byte ranges recorded work reads and
	// writes since the latest barrier (see recorder.epoch).
	reads, writes spanSet
}

// span is a byte range [lo, hi) of a buffer; the zero span stands for the
// whole buffer.
type span struct{ lo, hi uint64 }

// floats returns the span of n float32 elements from element off.
func floats(off, n int) span { return span{uint64(off) * 4, uint64(off+n) * 4} }

// headsSpan returns the span of n rows of the head layouts hs (the range
// from the first element of any to the last of any).
func headsSpan(n int, hs ...compute.Heads) span {
	var lo, hi int
	for i, h := range hs {
		a, z := h.Off, h.Head(n-1, h.Count-1)+h.Dim
		if i == 0 || a < lo {
			lo = a
		}
		if i == 0 || z > hi {
			hi = z
		}
	}
	return floats(lo, hi-lo)
}

// maxSpans is how many separate ranges a spanSet keeps before it merges
// them into one covering range (which can only add barriers).
const maxSpans = 8

// spanSet holds the ranges of a buffer accessed in one recorder epoch.
type spanSet struct {
	epoch uint64
	spans []span
}

// overlaps reports whether s overlaps a range accessed in epoch.
func (ss *spanSet) overlaps(epoch uint64, s span) bool {
	if ss.epoch != epoch {
		return false
	}
	for _, t := range ss.spans {
		if s.lo < t.hi && t.lo < s.hi {
			return true
		}
	}
	return false
}

// add notes s as accessed in epoch.
func (ss *spanSet) add(epoch uint64, s span) {
	if ss.epoch != epoch {
		ss.epoch = epoch
		ss.spans = ss.spans[:0]
	}
	if len(ss.spans) == maxSpans {
		all := s
		for _, t := range ss.spans {
			all.lo, all.hi = min(all.lo, t.lo), max(all.hi, t.hi)
		}
		ss.spans = append(ss.spans[:0], all)
		return
	}
	ss.spans = append(ss.spans, s)
}

// pickMemory returns the index of the best memory type allowed by bits for
// kind.
func (b *Backend) pickMemory(bits uint32, kind memKind) (uint32, bool) {
	const (
		local    = vk.MemoryPropertyFlags(vk.MemoryPropertyDeviceLocalBit)
		visible  = vk.MemoryPropertyFlags(vk.MemoryPropertyHostVisibleBit)
		coherent = vk.MemoryPropertyFlags(vk.MemoryPropertyHostCoherentBit)
		cached   = vk.MemoryPropertyFlags(vk.MemoryPropertyHostCachedBit)
	)
	var prefs []vk.MemoryPropertyFlags
	switch kind {
	case memDevice:
		prefs = []vk.MemoryPropertyFlags{local, 0}
	case memUpload:
		prefs = []vk.MemoryPropertyFlags{visible | coherent}
	case memReadback:
		prefs = []vk.MemoryPropertyFlags{visible | coherent | cached, visible | coherent}
	}
	for _, want := range prefs {
		for i := uint32(0); i < b.mem.MemoryTypeCount; i++ {
			if bits&(1<<i) != 0 && b.mem.MemoryTypes[i].PropertyFlags&want == want {
				return i, true
			}
		}
	}
	return 0, false
}

// newRaw creates a buffer of size bytes (rounded up to 16) for kind.
// Device-local buffers are bound inside the arena's blocks (arena.go);
// host-visible ones (the upload ring, readback) get memory of their own.
// Memory that is host-visible is mapped.
func (b *Backend) newRaw(size uint64, kind memKind) (*rawBuf, error) {
	size = max(16, (size+15)&^15)
	if size > b.maxBinding {
		return nil, fmt.Errorf("vulkan: buffer of %d bytes exceeds the largest binding (%d bytes)", size, b.maxBinding)
	}
	buf, err := b.fast.createBuffer(b.dev, size, vk.BufferUsageFlags(vk.BufferUsageStorageBufferBit|vk.BufferUsageTransferSrcBit|vk.BufferUsageTransferDstBit))
	if err != nil {
		return nil, err
	}
	reqSize, reqAlign, typeBits := b.fast.bufferRequirements(b.dev, buf)
	if kind == memDevice {
		bl, off, err := b.bindBlock(buf, reqSize, reqAlign, typeBits, kind)
		if err != nil {
			vk.DestroyBuffer(b.dev, buf, nil)
			return nil, err
		}
		r := &rawBuf{buf: buf, mem: bl.mem, block: bl, off: off, size: size, heap: bl.heap, alloc: reqSize}
		if bl.ptr != nil {
			r.ptr = unsafe.Add(bl.ptr, off)
		}
		b.heapUsed[r.heap] += reqSize
		b.live[r] = struct{}{}
		return r, nil
	}
	ti, ok := b.pickMemory(typeBits, kind)
	if !ok {
		vk.DestroyBuffer(b.dev, buf, nil)
		return nil, fmt.Errorf("vulkan: no suitable memory type for a %d-byte buffer", size)
	}
	heap := b.mem.MemoryTypes[ti].HeapIndex
	heapSize := uint64(b.mem.MemoryHeaps[heap].Size)
	if b.heapAlloc[heap]+reqSize > heapSize {
		vk.DestroyBuffer(b.dev, buf, nil)
		return nil, fmt.Errorf("vulkan: out of device memory: %d bytes more would exceed heap %d (%d MiB, %d MiB allocated)",
			reqSize, heap, heapSize>>20, b.heapAlloc[heap]>>20)
	}
	mem, err := b.fast.allocMemory(b.dev, reqSize, ti)
	if err != nil {
		vk.DestroyBuffer(b.dev, buf, nil)
		return nil, err
	}
	if err := vkErr("vkBindBufferMemory", vk.BindBufferMemory(b.dev, buf, mem, 0)); err != nil {
		vk.FreeMemory(b.dev, mem, nil)
		vk.DestroyBuffer(b.dev, buf, nil)
		return nil, err
	}
	r := &rawBuf{buf: buf, mem: mem, size: size, heap: heap, alloc: reqSize}
	b.heapUsed[heap] += reqSize
	b.heapAlloc[heap] += reqSize
	b.allocations++
	b.live[r] = struct{}{}
	const hostOK = vk.MemoryPropertyFlags(vk.MemoryPropertyHostVisibleBit | vk.MemoryPropertyHostCoherentBit)
	if b.mem.MemoryTypes[ti].PropertyFlags&hostOK == hostOK {
		var p unsafe.Pointer
		if err := vkErr("vkMapMemory", vk.MapMemory(b.dev, mem, 0, vk.DeviceSize(size), 0, &p)); err != nil {
			r.destroy(b)
			return nil, err
		}
		r.ptr = p
	}
	return r, nil
}

// bytes returns the mapped memory as a byte slice.
func (r *rawBuf) bytes() []byte { return unsafe.Slice((*byte)(r.ptr), r.size) }

// destroy releases the buffer and its memory now; nil is a no-op.
func (r *rawBuf) destroy(b *Backend) {
	if r == nil || r.buf == vk.NullBuffer {
		return
	}
	b.heapUsed[r.heap] -= r.alloc
	vk.DestroyBuffer(b.dev, r.buf, nil)
	if r.block != nil {
		b.release(r.block, r.off, r.alloc)
	} else {
		if r.ptr != nil {
			vk.UnmapMemory(b.dev, r.mem)
		}
		vk.FreeMemory(b.dev, r.mem, nil)
		b.heapAlloc[r.heap] -= r.alloc
		b.allocations--
	}
	r.buf = vk.NullBuffer
	delete(b.live, r)
}

// buffer is a float32 activation buffer.
type buffer struct {
	raw *rawBuf
	n   int
	b   *Backend
}

func (x *buffer) Len() int { return x.n }

// weight is a matrix split by rows into chunks that each fit one binding.
type weight struct {
	name       string
	dt         compute.DType
	rows, cols int
	rowBytes   int // bytes of a row (whole blocks for quantized dtypes)
	chunks     []wchunk
	// ex, when set, says the weight is a stack of experts (NewExperts):
	// only MatMulExperts takes it.
	ex *experts
	// f16 says every value converts to f16 without overflow, so the
	// cooperative-matrix shader may multiply it (set only where the
	// device has that shader).
	f16 bool
}

// wchunk holds rows [row0, row0+rows) of a weight.
type wchunk struct {
	raw        *rawBuf
	row0, rows int
}

func (w *weight) Rows() int            { return w.rows }
func (w *weight) Cols() int            { return w.cols }
func (w *weight) DType() compute.DType { return w.dt }

// NewBuffer implements compute.Backend. The buffer is zeroed in program
// order with the recorded work.
func (b *Backend) NewBuffer(n int) (compute.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("vulkan: negative buffer size %d", n)
	}
	if uint64(n)*4 > b.maxBinding {
		return nil, fmt.Errorf("vulkan: buffer of %d floats (%d MiB) exceeds the device's largest binding (%d MiB)", n, n>>18, b.maxBinding>>20)
	}
	raw, err := b.newRaw(uint64(n)*4, memDevice)
	if err != nil {
		return nil, err
	}
	if err := b.rec.begin(b); err != nil {
		raw.destroy(b)
		return nil, err
	}
	b.rec.transfer(nil, span{}, raw, span{})
	vk.CmdFillBuffer(b.rec.cmd, raw.buf, 0, vk.DeviceSize(raw.size), 0)
	b.rec.done("copy")
	return &buffer{raw: raw, n: n, b: b}, nil
}

// Free implements compute.Backend. Memory still used by recorded work is
// released after that work completes.
func (b *Backend) Free(x compute.Buffer) {
	buf, ok := x.(*buffer)
	if !ok || buf == nil || buf.raw == nil {
		return
	}
	if b.rec.busy() {
		b.pending = append(b.pending, buf.raw)
	} else {
		buf.raw.destroy(b)
	}
	buf.raw = nil
}

func (b *Backend) releasePending() {
	for _, r := range b.pending {
		r.destroy(b)
	}
	b.pending = b.pending[:0]
}

// LoadWeight implements compute.Backend: the weight is copied to device
// memory once, in row chunks of at most the largest binding. Quantized
// weights (Q8_0, Q4_K, Q5_K, Q6_K) are uploaded as their raw GGML blocks,
// rows of dt.RowBytes(cols) bytes, and only MatMul and Embed take them.
func (b *Backend) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("vulkan: weight %s: bad shape [%d, %d]", name, rows, cols)
	}
	rowBytes, err := weightRowBytes(dt, cols)
	if err != nil {
		return nil, fmt.Errorf("vulkan: weight %s [%d, %d]: %w", name, rows, cols, err)
	}
	if want := uint64(rows) * rowBytes; uint64(len(data)) != want {
		return nil, fmt.Errorf("vulkan: weight %s: %d bytes for [%d, %d] %v, want %d", name, len(data), rows, cols, dt, want)
	}
	// Chunks hold a multiple of 8 rows so every chunk starts on a 16-byte
	// boundary of the weight and row starts keep their alignment.
	per := int(b.chunkBytes/rowBytes) &^ 7
	if per == 0 || rows == 1 {
		// A lowered chunk size (tests) applies only where it leaves whole
		// blocks of 8 rows; vectors are never split.
		per = int(b.maxBinding/rowBytes) &^ 7
	}
	if per == 0 && uint64(rows)*rowBytes <= b.maxBinding {
		per = rows
	}
	if per == 0 {
		return nil, fmt.Errorf("vulkan: weight %s: rows of %d bytes are too wide for the largest binding (%d bytes)", name, rowBytes, b.maxBinding)
	}
	w := &weight{name: name, dt: dt, rows: rows, cols: cols, rowBytes: int(rowBytes)}
	if b.coopmat > 0 && rows > 1 {
		w.f16 = dt == compute.F16 || (dt == compute.BF16 && bf16FitsF16(data)) ||
			(dt.Quant() != quant.Keep && quantFitsF16(dt.Quant(), data))
	}
	for r0 := 0; r0 < rows; r0 += per {
		n := min(per, rows-r0)
		raw, err := b.newRaw(uint64(n)*rowBytes, memDevice)
		if err != nil {
			w.free(b)
			return nil, fmt.Errorf("vulkan: weight %s [%d, %d] %v does not fit: %w", name, rows, cols, dt, err)
		}
		w.chunks = append(w.chunks, wchunk{raw: raw, row0: r0, rows: n})
		if err := b.fill(raw, data[uint64(r0)*rowBytes:uint64(r0+n)*rowBytes]); err != nil {
			w.free(b)
			return nil, fmt.Errorf("vulkan: weight %s: %w", name, err)
		}
	}
	return w, nil
}

// weightRowBytes returns the bytes of a row of cols elements of dt: the
// float dtypes, and the block formats Q8_0, Q4_K, Q5_K and Q6_K, kept in
// GGML's layout (rows of whole blocks) for the shaders of quant.glsl.
func weightRowBytes(dt compute.DType, cols int) (uint64, error) {
	if s := dt.Size(); s > 0 {
		return uint64(cols * s), nil
	}
	switch dt {
	case compute.Q8_0, compute.Q4_K, compute.Q5_K, compute.Q6_K:
		if rb := dt.RowBytes(cols); rb > 0 {
			return uint64(rb), nil
		}
		return 0, fmt.Errorf("%d columns are not whole %v blocks of %d", cols, dt, dt.Quant().BlockSize())
	}
	return 0, fmt.Errorf("unsupported dtype %v", dt)
}

// free releases a weight's chunks (weights live until Close otherwise).
// FreeWeight implements compute.WeightFreer: the weight's memory is
// released once the work recorded so far is done.
func (b *Backend) FreeWeight(x compute.Weight) {
	if w, ok := x.(*weight); ok && w != nil {
		w.free(b)
	}
}

func (w *weight) free(b *Backend) {
	for _, c := range w.chunks {
		if b.rec.busy() {
			b.pending = append(b.pending, c.raw)
		} else {
			c.raw.destroy(b)
		}
	}
	w.chunks = nil
}

// fill writes data to the start of a fresh raw buffer: directly when it is
// mapped, else through the upload ring in program order.
func (b *Backend) fill(r *rawBuf, data []byte) error {
	if r.ptr != nil {
		copy(r.bytes(), data)
		return nil
	}
	return b.stage(r, 0, data)
}

// stage records copies of data into r at byte offset off through the
// upload ring, flushing when the ring is full.
func (b *Backend) stage(r *rawBuf, off uint64, data []byte) error {
	for len(data) > 0 {
		n := min(uint64(len(data)), b.ring.size/2)
		roff, err := b.ring.alloc(b, n)
		if err != nil {
			return err
		}
		copy(b.ring.raw.bytes()[roff:], data[:n])
		if err := b.rec.begin(b); err != nil {
			return err
		}
		b.rec.transfer(b.ring.raw, span{roff, roff + n}, r, span{off, off + n})
		b.fast.copy(b.rec.cmd, b.ring.raw.buf, r.buf, uint64(roff), uint64(off), uint64(n))
		b.rec.done("copy")
		data = data[n:]
		off += n
	}
	return nil
}

// ring is a host-visible buffer that holds data for the work being
// recorded; it is reset after each submission completes.
type ring struct {
	raw  *rawBuf
	size uint64
	off  uint64
}

func newRing(b *Backend, size uint64) (*ring, error) {
	raw, err := b.newRaw(size, memUpload)
	if err != nil {
		return nil, fmt.Errorf("vulkan: upload ring: %w", err)
	}
	return &ring{raw: raw, size: raw.size}, nil
}

// alloc reserves n bytes (16-aligned) and returns their offset, submitting
// the recorded work first when the ring is full, and growing the ring when
// n alone does not fit.
func (rg *ring) alloc(b *Backend, n uint64) (uint64, error) {
	n = (n + 15) &^ 15
	if rg.off+n <= rg.size {
		o := rg.off
		rg.off += n
		return o, nil
	}
	if err := b.flush(nil); err != nil {
		return 0, err
	}
	if n > rg.size {
		if n > b.maxBinding {
			return 0, fmt.Errorf("vulkan: %d bytes of operation data exceed the largest binding", n)
		}
		raw, err := b.newRaw(max(n, min(2*rg.size, b.maxBinding)), memUpload)
		if err != nil {
			return 0, fmt.Errorf("vulkan: growing the upload ring: %w", err)
		}
		rg.raw.destroy(b)
		rg.raw, rg.size = raw, raw.size
	}
	rg.off = n
	return 0, nil
}

func (rg *ring) destroy(b *Backend) {
	if rg != nil {
		rg.raw.destroy(b)
	}
}

// float32Bytes views a float32 slice as bytes.
func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// int32Bytes views an int32 slice as bytes.
func int32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}
