package cpu

import "math"

// bf16 widens a bfloat16 (the top half of a float32) to float32.
func bf16(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }

// f16 widens an IEEE 754 half-precision value to float32.
func f16(v uint16) float32 {
	sign := uint32(v>>15) << 31
	exp := uint32(v>>10) & 0x1f
	man := uint32(v) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value is man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// dotBF16 returns sum_i w[i]*x[i] with bf16 weights, in four float32
// accumulators.
func dotBF16(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += bf16(w[i]) * x[i]
		s1 += bf16(w[i+1]) * x[i+1]
		s2 += bf16(w[i+2]) * x[i+2]
		s3 += bf16(w[i+3]) * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += bf16(w[i]) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotF16 returns sum_i w[i]*x[i] with f16 weights.
func dotF16(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(w); i += 2 {
		s0 += f16(w[i]) * x[i]
		s1 += f16(w[i+1]) * x[i+1]
	}
	for ; i < len(w); i++ {
		s0 += f16(w[i]) * x[i]
	}
	return s0 + s1
}

// dotF32 returns sum_i w[i]*x[i].
func dotF32(w, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += w[i] * x[i]
		s1 += w[i+1] * x[i+1]
		s2 += w[i+2] * x[i+2]
		s3 += w[i+3] * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += w[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}
