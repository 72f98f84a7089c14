package asm

import "math"

// BF16ToF32 widens a bf16 value (the top half of a float32) to float32 exactly.
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 rounds f to the nearest bf16, ties to even. NaNs stay NaN (quiet),
// infinities and signed zeros are kept.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F32ToBF16Slice rounds src[i] to bf16 into dst[i] for i < min(len(dst), len(src)),
// as [F32ToBF16] does, and returns the number of values converted.
func F32ToBF16Slice(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	for i, f := range src[:n] {
		dst[i] = F32ToBF16(f)
	}
	return n
}

// F16ToF32 widens an IEEE 754 binary16 value to float32 exactly, including
// subnormals, infinities and NaNs.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal half: value = man * 2^-24, exact in float32.
	v := float32(man) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(v))
}
