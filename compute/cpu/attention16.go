package cpu

import (
	"unsafe"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
)

// attention16 runs CausalAttention for caches of 16-bit elements (BF16 or
// F16, two per float32 slot; see compute.Attention.CacheType): each
// sequence's new keys and values are rounded into its caches, then the
// cached positions it attends over are expanded into float32 scratch and
// attended as float32 caches are. Every sequence reads the rounded values
// of all its positions, the new ones included, so its results do not
// depend on which step stored a position. Sequences run one at a time so
// that the scratch holds one sequence's context; each one's results do not
// depend on the others.
func (b *Backend) attention16(ps []compute.Attention) {
	for i := range ps {
		p := ps[i]
		if p.N <= 0 || p.Q.Count <= 0 {
			continue
		}
		width := p.K.Count * p.K.Dim
		n := (p.Pos + p.N) * width
		b.kv16 = grow(b.kv16, 2*n)
		keys, values := &buffer{data: b.kv16[:n]}, &buffer{data: b.kv16[n : 2*n]}
		store16(Data(p.KCache), Data(p.KBuf), p.K, p, p.CacheType)
		store16(Data(p.VCache), Data(p.VBuf), p.V, p, p.CacheType)
		expand16(keys.data, Data(p.KCache), p.CacheType)
		expand16(values.data, Data(p.VCache), p.CacheType)
		p.KCache, p.VCache, p.CacheType = keys, values, compute.F32
		b.attend([]compute.Attention{p})
	}
}

// store16 rounds the new heads hs of src (tokens p.Pos.. of the call) into
// the packed cache.
func store16(cache, src []float32, hs compute.Heads, p compute.Attention, dt compute.DType) {
	words := bitsOf(cache)
	width := hs.Count * hs.Dim
	for t := 0; t < p.N; t++ {
		row := (p.Pos + t) * width
		for h := 0; h < hs.Count; h++ {
			for d, x := range src[hs.Head(t, h) : hs.Head(t, h)+hs.Dim] {
				i := row + h*hs.Dim + d
				shift := uint(16 * (i & 1))
				words[i/2] = words[i/2]&^(0xffff<<shift) | uint32(toHalf(x, dt))<<shift
			}
		}
	}
}

// toHalf rounds x to dt (BF16 or F16).
func toHalf(x float32, dt compute.DType) uint16 {
	if dt == compute.BF16 {
		return half.F32ToBF16(x)
	}
	return half.F32ToF16(x)
}

// expand16 writes the len(dst) first elements of a packed cache as
// float32.
func expand16(dst, cache []float32, dt compute.DType) {
	words := bitsOf(cache[:len(dst)/2])
	if dt == compute.BF16 {
		for i, w := range words {
			dst[2*i], dst[2*i+1] = half.BF16ToF32(uint16(w)), half.BF16ToF32(uint16(w>>16))
		}
		return
	}
	for i, w := range words {
		dst[2*i], dst[2*i+1] = half.F16ToF32(uint16(w)), half.F16ToF32(uint16(w>>16))
	}
}

// bitsOf views float32 slots as their bits (packed 16-bit elements must
// not pass through float32 arithmetic or registers).
func bitsOf(s []float32) []uint32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&s[0])), len(s))
}
