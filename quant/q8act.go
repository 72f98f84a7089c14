package quant

import (
	"fmt"

	"github.com/govinfer/govinfer/internal/half"
)

// 8-bit activations, as ggml's CPU backend computes a quantized matvec: the
// activation row is quantized too (Q8_0 blocks for Q8_0 weights, Q8_K blocks
// for K-quant weights) and each block pair is an integer dot product, exact
// in int32, scaled once per block in float32.

// BlockQ8_0 is one Q8_0 block of 32 activations: x ≈ fp16(D)·Qs. Its memory
// layout is ggml's block_q8_0 (34 bytes: D at 0, Qs at 2), on a little-endian
// machine the same bytes as a Q8_0 weight block.
type BlockQ8_0 struct {
	D  uint16   // scale, IEEE binary16 bits
	Qs [32]int8 // quantized values
}

// BlockQ8K is one Q8_K block of 256 activations: x ≈ D·Qs. Its memory
// layout is ggml's block_q8_K (292 bytes: D at 0, Qs at 4, Bsums at 260;
// little-endian machines store the same bytes as ggml).
type BlockQ8K struct {
	D     float32   // scale
	Qs    [256]int8 // quantized values, in −127..127
	Bsums [16]int16 // Bsums[j] is the sum of Qs[16j .. 16j+15]
}

// QuantizeQ8_0 quantizes the activations x into Q8_0 blocks by ggml's
// reference rule (quantize_row_q8_0_ref, which its generic CPU code runs):
// per block of 32, d = max|x|/127, q = roundf(x·(1/d)) (half away from
// zero), D = fp16(d); the values use the float32 d, not the rounded one.
// (ggml's AVX2 path differs slightly: 127/max and ties to even.)
// len(x) must be 32·len(dst); it panics otherwise.
func QuantizeQ8_0(dst []BlockQ8_0, x []float32) {
	if len(x) != q80Block*len(dst) {
		panic(fmt.Sprintf("quant: QuantizeQ8_0: %d values for %d blocks", len(x), len(dst)))
	}
	for i := range dst {
		dst[i].D = quantQ8_0(&dst[i].Qs, x[q80Block*i:])
	}
}

// quantQ8_0 quantizes x[:32] into qs and returns d's binary16 bits.
func quantQ8_0(qs *[q80Block]int8, x []float32) uint16 {
	var amax float32
	for _, v := range x[:q80Block] {
		if a := abs32(v); !(amax > a) {
			amax = a
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for j, v := range x[:q80Block] {
		qs[j] = roundInt8(v * id)
	}
	return half.F32ToF16(d)
}

// QuantizeQ8K quantizes the activations x into Q8_K blocks by ggml's rule
// (quantize_row_q8_K_ref): per block of 256, with m the value of largest
// magnitude (the first one if several), iscale = −127/m,
// q = min(127, nearest_int(iscale·x)) (ties to even), D = 1/iscale, and Bsums
// the sums of each 16 q. An all-zero block has D = 0 and zero q and Bsums.
// len(x) must be 256·len(dst); it panics otherwise.
func QuantizeQ8K(dst []BlockQ8K, x []float32) {
	if len(x) != qkK*len(dst) {
		panic(fmt.Sprintf("quant: QuantizeQ8K: %d values for %d blocks", len(x), len(dst)))
	}
	for i := range dst {
		y := &dst[i]
		xs := x[qkK*i : qkK*i+qkK]
		var mx, amax float32
		for _, v := range xs {
			if a := abs32(v); a > amax {
				amax = a
				mx = v
			}
		}
		if amax == 0 {
			*y = BlockQ8K{}
			continue
		}
		iscale := -127 / mx
		for j, v := range xs {
			y.Qs[j] = int8(min(127, nearestInt(iscale*v)))
		}
		for j := range y.Bsums {
			var s int32
			for _, q := range y.Qs[16*j : 16*j+16] {
				s += int32(q)
			}
			y.Bsums[j] = int16(s)
		}
		y.D = 1 / iscale
	}
}

// DotQ8_0Q8_0 is ggml's vec_dot_q8_0_q8_0: for each block pair the int32 sum
// s of w.q·a.q, and the result is Σ float32(s)·(d_w·d_a) accumulated in
// block order in one float32 (each term rounded before the add). len(w) must
// be Q8_0.RowBytes(32·len(a)); it panics otherwise. The result equals ggml's
// generic C code bit for bit wherever the C compiler does not contract the
// multiply-add into an FMA.
func DotQ8_0Q8_0(w []byte, a []BlockQ8_0) float32 {
	checkDot(Q8_0, w, q80Block*len(a))
	var sum float32
	for b := range a {
		blk := w[b*q80Bytes : (b+1)*q80Bytes]
		var s int32
		for j, q := range a[b].Qs {
			s += int32(int8(blk[2+j])) * int32(q)
		}
		d := fp16(blk) * half.F16ToF32(a[b].D)
		sum += float32(float32(s) * d)
	}
	return sum
}

// DotQ4KQ8K is ggml's vec_dot_q4_K_q8_K: per super-block, the exact int32
//
//	S = Σ_j sc_j · Σ_{k in sub-block j} q_k·a_k   (j = 0..7, q in 0..15)
//	M = Σ_j m_{j/2} · a.Bsums[j]                  (j = 0..15)
//
// then sum += float32((d_w·a.D)·float32(S)) and sum −= float32((dmin_w·a.D)·
// float32(M)), in block order, one float32 accumulator. The integer parts are
// exact in any order, so a kernel that keeps this per-block epilogue matches
// bit for bit; ggml's generic C code splits S into 8 lanes scaled
// separately, which differs from this only in float32 rounding. len(w) must
// be Q4_K.RowBytes(256·len(a)); it panics otherwise.
func DotQ4KQ8K(w []byte, a []BlockQ8K) float32 {
	checkDot(Q4_K, w, qkK*len(a))
	var sum float32
	for b := range a {
		blk := w[b*q4KBytes : (b+1)*q4KBytes]
		y := &a[b]
		scales, qs := blk[4:16], blk[16:q4KBytes]
		var S, M int32
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, scales)
			g, shift := j/2, uint(4*(j%2))
			q := qs[32*g : 32*g+32]
			aq := y.Qs[32*j : 32*j+32]
			var s int32
			for l := range q {
				s += int32(q[l]>>shift&0x0f) * int32(aq[l])
			}
			S += int32(sc) * s
			M += int32(m) * (int32(y.Bsums[2*j]) + int32(y.Bsums[2*j+1]))
		}
		d := fp16(blk[0:]) * y.D
		dmin := fp16(blk[2:]) * y.D
		sum += float32(d * float32(S))
		sum -= float32(dmin * float32(M))
	}
	return sum
}

// DotQ5KQ8K is ggml's vec_dot_q5_K_q8_K, with DotQ4KQ8K's rules: per
// super-block the exact int32 S over the eight sub-blocks of 32 (q in 0..31,
// the fifth bit from qh) and M over the mins, then
// sum += float32((d_w·a.D)·float32(S)) and sum −= float32((dmin_w·a.D)·
// float32(M)), in block order, one float32 accumulator. len(w) must be
// Q5_K.RowBytes(256·len(a)); it panics otherwise.
func DotQ5KQ8K(w []byte, a []BlockQ8K) float32 {
	checkDot(Q5_K, w, qkK*len(a))
	var sum float32
	for b := range a {
		blk := w[b*q5KBytes : (b+1)*q5KBytes]
		y := &a[b]
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:q5KBytes]
		var S, M int32
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, scales)
			g, shift := j/2, uint(4*(j%2))
			q := qs[32*g : 32*g+32]
			aq := y.Qs[32*j : 32*j+32]
			var s int32
			for l := range q {
				v := q[l]>>shift&0x0f | (qh[l]>>uint(j)&1)<<4
				s += int32(v) * int32(aq[l])
			}
			S += int32(sc) * s
			M += int32(m) * (int32(y.Bsums[2*j]) + int32(y.Bsums[2*j+1]))
		}
		d := fp16(blk[0:]) * y.D
		dmin := fp16(blk[2:]) * y.D
		sum += float32(d * float32(S))
		sum -= float32(dmin * float32(M))
	}
	return sum
}

// DotQ6KQ8K is ggml's vec_dot_q6_K_q8_K: per super-block the exact int32
// S = Σ_j sc_j · Σ_{k in sub-block j} (q_k−32)·a_k over the 16 sub-blocks of
// 16 (sc signed), then sum += float32((d_w·a.D)·float32(S)) in block order,
// one float32 accumulator (ggml's generic C code scales 8 lanes separately;
// the difference is float32 rounding only). len(w) must be
// Q6_K.RowBytes(256·len(a)); it panics otherwise.
func DotQ6KQ8K(w []byte, a []BlockQ8K) float32 {
	checkDot(Q6_K, w, qkK*len(a))
	var sum float32
	for b := range a {
		blk := w[b*q6KBytes : (b+1)*q6KBytes]
		y := &a[b]
		var S int32
		for h := 0; h < 2; h++ {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			sc := blk[192+8*h : 192+8*h+8]
			aq := y.Qs[128*h : 128*h+128]
			var s [8]int32 // sub-blocks 8h+0 .. 8h+7
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0x0f|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0x0f|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				s[is+0] += q1 * int32(aq[l])
				s[is+2] += q2 * int32(aq[l+32])
				s[is+4] += q3 * int32(aq[l+64])
				s[is+6] += q4 * int32(aq[l+96])
			}
			for k := range s {
				S += int32(int8(sc[k])) * s[k]
			}
		}
		d := fp16(blk[208:]) * y.D
		sum += float32(d * float32(S))
	}
	return sum
}

// MatVecQ8 computes dst = W·x as ggml's CPU backend does: x is quantized
// once (QuantizeQ8_0 for Q8_0 weights, QuantizeQ8K for the K-quants) and
// each row is an integer dot product (DotQ8_0Q8_0, DotQ4KQ8K, DotQ5KQ8K,
// DotQ6KQ8K).
// Shapes as MatVec; it panics on a mismatch or another type.
func MatVecQ8(t Type, dst []float32, w []byte, rows, cols int, x []float32) {
	if !t.Fits(cols) || len(dst) != rows || len(x) != cols || len(w) != rows*t.RowBytes(cols) {
		panic(fmt.Sprintf("quant: MatVecQ8 %v: %d×%d matrix in %d bytes, dst %d, x %d", t, rows, cols, len(w), len(dst), len(x)))
	}
	rb := t.RowBytes(cols)
	switch t {
	case Q8_0:
		a := make([]BlockQ8_0, cols/q80Block)
		QuantizeQ8_0(a, x)
		for r := range dst {
			dst[r] = DotQ8_0Q8_0(w[r*rb:(r+1)*rb], a)
		}
	case Q4_K, Q5_K, Q6_K:
		a := make([]BlockQ8K, cols/qkK)
		QuantizeQ8K(a, x)
		dot := DotQ4KQ8K
		switch t {
		case Q5_K:
			dot = DotQ5KQ8K
		case Q6_K:
			dot = DotQ6KQ8K
		}
		for r := range dst {
			dst[r] = dot(w[r*rb:(r+1)*rb], a)
		}
	default:
		panic(fmt.Sprintf("quant: MatVecQ8: no 8-bit activation dot for %v", t))
	}
}
