package asm

import "math"

// The float32 exponential shared by Exp, Sigmoid, SiLU, SiLUMul and
// SigmoidMul. exp(t) = p * 2^n with n = round(t*log2(e)), r = t - n*ln2 (a
// Cody-Waite split, so n*expLn2Hi is exact) and p = exp(r) from the Cephes
// degree-7 polynomial 1 + r + r²*q(r) on |r| <= ln2/2, about 1 ulp. The
// argument is clamped to [expMin, expMax]: exp(expMin) is below half the
// smallest subnormal and exp(expMax) is beyond the float32 range, so the clamp
// does not change the rounded result. The scale 2^n is applied as two factors
// 2^n1 * 2^n2 (n1 = n>>1), each a normal float32, so results in the subnormal
// range are rounded once and overflow gives +Inf. The assembly versions follow
// the same steps (with fused multiply-adds; AVX-512 scales with VSCALEFPS).
const (
	expMin   = -110
	expMax   = 100
	expLog2e = 1.44269504088896341
	expLn2Hi = 0.693359375    // ln 2 rounded to 9 bits: n*expLn2Hi is exact
	expLn2Lo = -2.12194440e-4 // ln 2 - expLn2Hi
	expMagic = 12582912       // 1.5 * 2^23: adding and subtracting it rounds to an integer

	// exp(r) ≈ 1 + r + r²*(((((expC0*r+expC1)*r+expC2)*r+expC3)*r+expC4)*r+expC5)
	expC0 = 1.9875691500e-4
	expC1 = 1.3981999507e-3
	expC2 = 8.3334519073e-3
	expC3 = 4.1665795894e-2
	expC4 = 1.6666665459e-1
	expC5 = 5.0000001201e-1

	signBit  = 0x80000000 // float32 sign bit
	expBias  = 127        // float32 exponent bias
	expShift = 23         // float32 mantissa bits
)

// expParts splits exp(t) for t in [expMin, expMax] into p ≈ exp(r), |r| <=
// ln2/2, and the two scale factors s1 = 2^n1 and s2 = 2^n2 with n1+n2 = n:
// exp(t) = (p*s1)*s2, where p*s1 is exact.
func expParts(t float32) (p, s1, s2 float32) {
	k := t*expLog2e + expMagic
	nf := k - expMagic
	n := int32(nf)
	r := t - nf*expLn2Hi
	r -= nf * expLn2Lo
	q := ((((expC0*r+expC1)*r+expC2)*r+expC3)*r+expC4)*r + expC5
	p = q*(r*r) + r + 1
	n1 := n >> 1
	return p, pow2(n1), pow2(n - n1)
}

// pow2 returns 2^n for -126 <= n <= 127.
func pow2(n int32) float32 { return math.Float32frombits(uint32(n+expBias) << expShift) }

// negAbs returns -|x| (NaN stays NaN).
func negAbs(x float32) float32 { return math.Float32frombits(math.Float32bits(x) | signBit) }

// signSet reports whether the sign bit of x is set (x < 0, -0 or a negative NaN).
func signSet(x float32) bool { return math.Float32bits(x)&signBit != 0 }

// exp32 returns e^x in float32: within about 1 ulp (relative error below 4e-7) for
// results in the normal range, +Inf above the float32 range, correctly scaled
// subnormals down to 0, and NaN for NaN.
func exp32(x float32) float32 {
	if x != x {
		return x
	}
	p, s1, s2 := expParts(min(max(x, expMin), expMax))
	return p * s1 * s2
}

// expGo sets dst[i] = e^x[i] (see exp32) for i < len(dst). It needs len(x) >=
// len(dst); dst may be x.
func expGo(dst, x []float32) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = exp32(v)
	}
}
