//go:build cgo

package vulkan

import (
	"fmt"
	"math/bits"

	"github.com/govinfer/govinfer/compute"
)

// The chunked delta rule (deltachunk.comp) for prefill.
const (
	// deltaChunk is the number of tokens of one chunk (the shader's C).
	deltaChunk = 64
	// deltaChunkMinDefault is the fewest tokens of a sequence for which
	// GatedDeltaRule uses the chunked form; shorter ones (decode, short
	// prompts) run the recurrent shader.
	deltaChunkMinDefault = 64
	// deltaScratchCap bounds the scratch buffer of the chunked form (with
	// the largest binding); a sequence with more chunks than fit runs in
	// windows of chunks, one after another.
	deltaScratchCap = 64 << 20
	// deltaMaxDk is the largest key head dimension the chunked shader
	// supports.
	deltaMaxDk = 256
	// deltaOutCols is the number of output columns per workgroup of the
	// output pass (the shader's BO).
	deltaOutCols = 64
	// deltaShared is the shared memory the shader declares, in bytes.
	deltaShared = (4096 + 2048 + 1024 + 64) * 4
)

// Modes of deltachunk.comp (specialisation constant 0).
const (
	deltaModePrep  = 0
	deltaModeState = 1
	deltaModeOut   = 2
)

// deltaChunkFloats returns the scratch floats one chunk of p needs over all
// its value heads: U, W, M, G and the chunk's starting state H.
func deltaChunkFloats(p *compute.DeltaRule) int {
	const c = deltaChunk
	return p.Nv * (c*p.Dv + c*p.Dk + c*c + c + p.Dk*p.Dv)
}

// useChunked reports whether p runs in the chunked form: long enough, a
// key dimension the shader supports, a device with the shared memory it
// declares, and a chunk's scratch fitting one binding.
func (b *Backend) useChunked(p *compute.DeltaRule) bool {
	return p.N >= b.deltaChunkMin && p.Dk <= deltaMaxDk &&
		b.props.Limits.MaxComputeSharedMemorySize >= deltaShared &&
		uint64(deltaChunkFloats(p))*4 <= b.deltaScratchMax
}

// deltaChunked records the chunked delta rule for one validated sequence:
// per window of chunks, the parallel preparation pass, the pass that runs
// the state through the chunks, and the parallel output pass.
func (b *Backend) deltaChunked(p *compute.DeltaRule, qkv, g, beta, out, st *buffer) {
	per := deltaChunkFloats(p)
	chunks := (p.N + deltaChunk - 1) / deltaChunk
	window := min(chunks, int(b.deltaScratchMax/4)/per)
	sc, err := b.deltaScratchBuf(uint64(window*per) * 4)
	if err != nil {
		b.fail(fmt.Errorf("vulkan: GatedDeltaRule scratch: %w", err))
		return
	}
	dkPow := max(16, 1<<bits.Len(uint(p.Dk-1)))
	bv := 4096 / max(dkPow, 128) // state columns per workgroup, <= 32
	bufs := []*rawBuf{qkv.raw, g.raw, beta.raw, out.raw, st.raw, sc}
	spec := func(mode int) []uint32 { return []uint32{u32(mode), u32(dkPow), u32(bv)} }
	for c0 := 0; c0 < chunks; c0 += window {
		nc := min(window, chunks-c0)
		// Scratch layout of this window (see deltachunk.comp).
		rows := nc * p.Nv * deltaChunk
		uOff := 0
		wOff := uOff + rows*p.Dv
		mOff := wOff + rows*p.Dk
		gOff := mOff + rows*deltaChunk
		hOff := gOff + rows
		push := pushWords(&deltachunkPush{headsOf(p.Q), headsOf(p.K), headsOf(p.V),
			u32(p.GateRow), u32(p.OutRow), u32(p.N), p.QScale, u32(p.Nk), u32(p.Nv), u32(p.Dk), u32(p.Dv),
			u32(c0 * deltaChunk), u32(nc), u32(uOff), u32(wOff), u32(mOff), u32(gOff), u32(hOff)})
		b.dispatch("deltachunk", spec(deltaModePrep), bufs, push, u32(nc), u32(p.Nv), 1)
		b.dispatch("deltachunk", spec(deltaModeState), bufs, push, u32((p.Dv+bv-1)/bv), u32(p.Nv), 1)
		b.dispatch("deltachunk", spec(deltaModeOut), bufs, push, u32(nc), u32(p.Nv), u32((p.Dv+deltaOutCols-1)/deltaOutCols))
	}
}

// deltaScratchBuf returns a device buffer of at least size bytes for the
// chunked delta rule, growing the backend's one scratch buffer if needed.
func (b *Backend) deltaScratchBuf(size uint64) (*rawBuf, error) {
	if b.deltaScratch != nil && b.deltaScratch.size >= size {
		return b.deltaScratch, nil
	}
	r, err := b.newRaw(size, memDevice)
	if err != nil {
		return nil, err
	}
	if b.deltaScratch != nil {
		if b.rec.busy() {
			b.pending = append(b.pending, b.deltaScratch)
		} else {
			b.deltaScratch.destroy(b)
		}
	}
	b.deltaScratch = r
	return r, nil
}
