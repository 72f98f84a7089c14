// Package half converts between float32 and the 16-bit floating-point
// formats that model checkpoints store: bfloat16 (BF16) and IEEE 754
// binary16 (F16).
//
// Conversions to float32 are exact. Conversions from float32 round to the
// nearest representable value, ties to even, overflow to infinity, and keep
// NaNs NaN (the sign and the top payload bits survive; the result is quiet).
//
// The byte-slice helpers read and write little-endian values, the layout of
// safetensors files.
package half

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BF16ToF32 returns the float32 value of the bfloat16 bit pattern b. It is
// exact: bfloat16 is the top half of a float32.
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 returns the bfloat16 bit pattern nearest to f, rounding ties to
// even. Values beyond the largest finite bfloat16 round to infinity; NaN
// stays NaN.
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 { // NaN: truncate, force the quiet bit so the payload cannot vanish
		return uint16(bits>>16) | 0x0040
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// F16ToF32 returns the float32 value of the IEEE binary16 bit pattern h. It is
// exact, subnormals included.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN; the payload moves to the top of the float32 mantissa
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal: value = man * 2^-24. Shift the leading one into the implicit bit.
	e := uint32(127 - 15 + 1)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// F32ToF16 returns the IEEE binary16 bit pattern nearest to f, rounding ties
// to even. Values beyond the largest finite binary16 (65504) round to
// infinity, tiny values to signed zero or a subnormal; NaN stays NaN.
func F32ToF16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	man := bits & 0x7fffff
	if exp == 0xff {
		if man != 0 { // NaN: keep the top payload bits, force the quiet bit
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// The result is a subnormal (or zero, or the smallest normal after rounding).
		if e < -10 { // |f| < 2^-25: rounds to zero
			return sign
		}
		m := man | 0x800000
		shift := uint(14 - e) // 14..24
		h := m >> shift
		rem := m & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rem > halfway || (rem == halfway && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry out of the mantissa bumps the exponent, up to infinity
	}
	return sign | uint16(h)
}

// DecodeBF16 converts the little-endian bfloat16 values in src to float32
// values in dst. len(src) must be 2*len(dst).
func DecodeBF16(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("half: DecodeBF16: %d source bytes for %d values", len(src), len(dst))
	}
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return nil
}

// DecodeF16 converts the little-endian binary16 values in src to float32
// values in dst. len(src) must be 2*len(dst).
func DecodeF16(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("half: DecodeF16: %d source bytes for %d values", len(src), len(dst))
	}
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return nil
}

// EncodeBF16 writes src to dst as little-endian bfloat16 values, rounding to
// nearest even. len(dst) must be 2*len(src).
func EncodeBF16(dst []byte, src []float32) error {
	if len(dst) != 2*len(src) {
		return fmt.Errorf("half: EncodeBF16: %d destination bytes for %d values", len(dst), len(src))
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
	return nil
}

// EncodeF16 writes src to dst as little-endian binary16 values, rounding to
// nearest even. len(dst) must be 2*len(src).
func EncodeF16(dst []byte, src []float32) error {
	if len(dst) != 2*len(src) {
		return fmt.Errorf("half: EncodeF16: %d destination bytes for %d values", len(dst), len(src))
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
	}
	return nil
}
