package asm

// silu32 returns x*sigmoid(x) = x/(1+e^-x) in float32. With e = e^-|x| it is
// x/(1+e) for x >= 0 and (x*e)/(1+e) for x < 0, where x*e is formed before the
// final power-of-two scaling so results down to the subnormal range stay
// accurate; silu(-Inf) is -0 (the limit) and NaN gives NaN.
func silu32(x float32) float32 {
	if x != x {
		return x
	}
	p, s1, s2 := expParts(max(negAbs(x), expMin))
	q := p * s1
	d := 1 + q*s2
	if signSet(x) {
		return max(x, expMin) * q * s2 / d
	}
	return x / d
}

// siluGo sets dst[i] = silu(x[i]) (see silu32) for i < len(dst). It needs
// len(x) >= len(dst); dst may be x.
func siluGo(dst, x []float32) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = silu32(v)
	}
}
