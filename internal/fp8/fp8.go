// Package fp8 decodes the 8-bit floats of FP8 checkpoints: E4M3 (OCP's
// "fn" variant that PyTorch's float8_e4m3fn and safetensors' F8_E4M3 use:
// 1 sign, 4 exponent bits of bias 7, 3 mantissa bits, no infinities, and
// NaN only where the exponent and mantissa bits are all ones).
package fp8

import "math"

// e4m3 holds the value of every E4M3 byte.
var e4m3 = func() (t [256]float32) {
	for b := range t {
		t[b] = decodeE4M3(uint8(b))
	}
	return t
}()

// decodeE4M3 computes the value of an E4M3 byte from its fields.
func decodeE4M3(b uint8) float32 {
	sign, exp, man := b>>7, int(b>>3)&0xf, float64(b&7)
	var v float64
	switch {
	case exp == 0xf && man == 7:
		v = math.NaN()
	case exp == 0:
		v = man / 8 * math.Ldexp(1, -6) // subnormal
	default:
		v = (1 + man/8) * math.Ldexp(1, exp-7)
	}
	if sign != 0 {
		v = -v
	}
	return float32(v)
}

// E4M3 returns the value of the E4M3 byte b.
func E4M3(b uint8) float32 { return e4m3[b] }
