package asm

// sigmoid32 returns 1/(1+e^-x) in float32. It is computed from e = e^-|x| <= 1
// as 1/(1+e) for x >= 0 and e/(1+e) for x < 0, so no intermediate overflows,
// large inputs saturate to exactly 1 and 0, and results in the subnormal range
// keep their precision. NaN gives NaN.
func sigmoid32(x float32) float32 {
	if x != x {
		return x
	}
	p, s1, s2 := expParts(max(negAbs(x), expMin))
	e := p * s1 * s2
	d := 1 + e
	if signSet(x) {
		return e / d
	}
	return 1 / d
}

// sigmoidGo sets dst[i] = sigmoid(x[i]) (see sigmoid32) for i < len(dst). It
// needs len(x) >= len(dst); dst may be x.
func sigmoidGo(dst, x []float32) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = sigmoid32(v)
	}
}
