package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/govinfer/govinfer/internal/half"
)

// This file follows ggml's reference quantizers (ggml-quants.c:
// quantize_row_q8_0_ref, quantize_row_q4_K_ref with make_qkx2_quants,
// quantize_row_q6_K_ref with make_qx_quants) with no importance matrix, which
// is what llama-quantize runs when it is given none. Every float operation is
// a float32 operation in ggml's order; every product that feeds a sum, even
// through a variable or an inlined call, is wrapped in float32() so that no
// compiler fuses them into an FMA (Go fuses x*y+z, across statements too, on
// arm64, ppc64le, riscv64 and s390x; ggml-base is built without FMA on
// x86-64). The tests pass under qemu on those four.

// QuantizeRow quantizes the float32 values of src into t blocks in dst, as
// ggml's reference quantizer for t does with no importance matrix. len(src)
// must fit t (Q8_0: a multiple of 32, K-quants: of 256) and len(dst) must be
// t.RowBytes(len(src)); several rows one after the other are one longer row.
// Non-finite inputs do not panic, but the blocks they give are unspecified.
func QuantizeRow(t Type, dst []byte, src []float32) error {
	if err := checkRow("QuantizeRow", t, len(src), len(dst)); err != nil {
		return err
	}
	n, b := t.BlockSize(), t.BlockBytes()
	var quant func(dst []byte, x []float32)
	switch t {
	case Q8_0:
		quant = quantizeBlockQ8_0
	case Q4_K:
		quant = quantizeBlockQ4K
	case Q5_K:
		quant = quantizeBlockQ5K
	case Q6_K:
		quant = quantizeBlockQ6K
	default:
		return fmt.Errorf("quant: QuantizeRow: no quantizer for %v", t)
	}
	for i := 0; i < len(src)/n; i++ {
		quant(dst[i*b:(i+1)*b], src[i*n:(i+1)*n])
	}
	return nil
}

// QuantizeRowBF16 quantizes a row of little-endian bfloat16 values (the
// encoding of BF16 checkpoints) into t blocks: the values are converted to
// float32 exactly, then quantized by QuantizeRow. len(src) is two bytes per
// value.
func QuantizeRowBF16(t Type, dst, src []byte) error {
	return quantizeEncoded(t, dst, src, 2, half.DecodeBF16)
}

// QuantizeRowF16 quantizes a row of little-endian IEEE binary16 values into t
// blocks: converted to float32 exactly, then quantized by QuantizeRow.
func QuantizeRowF16(t Type, dst, src []byte) error {
	return quantizeEncoded(t, dst, src, 2, half.DecodeF16)
}

// QuantizeRowF32 quantizes a row of little-endian float32 values, as stored
// in safetensors and GGUF files, into t blocks (QuantizeRow on the decoded
// values).
func QuantizeRowF32(t Type, dst, src []byte) error {
	return quantizeEncoded(t, dst, src, 4, func(dst []float32, src []byte) error {
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	})
}

func quantizeEncoded(t Type, dst, src []byte, size int, decode func([]float32, []byte) error) error {
	if len(src)%size != 0 {
		return fmt.Errorf("quant: %d source bytes are not whole %d-byte values", len(src), size)
	}
	x := make([]float32, len(src)/size)
	if err := decode(x, src); err != nil {
		return err
	}
	return QuantizeRow(t, dst, x)
}

// nearestInt rounds f to the nearest integer, ties to even, the way ggml's
// nearest_int does: adding 1.5·2^23 leaves the integer in the low mantissa
// bits. It is exact for |f| ≤ 2^22 − 1; beyond that (and for NaN and Inf) it
// returns what ggml's bit trick returns, a value within ±2^22.
func nearestInt(f float32) int32 {
	// float32(f): when the call is inlined, f may be a product, which Go
	// could otherwise fuse with this add into an FMA.
	v := float32(f) + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// roundInt8 is C's (int8_t)roundf(f) as x86-64 compiles it: round half
// away from zero, truncate to 32 bits then to 8; a value outside the int32
// range or NaN becomes 0 (the 0x80000000 of cvttss2si, low byte 0).
func roundInt8(f float32) int8 {
	r := math.Round(float64(f))
	if !(r >= math.MinInt32 && r <= math.MaxInt32) {
		return 0
	}
	return int8(int32(r))
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// sqrt32 is C's sqrtf: the float64 square root of a float32 rounded back to
// float32 is the correctly rounded float32 square root.
func sqrt32(f float32) float32 { return float32(math.Sqrt(float64(f))) }

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, half.F32ToF16(f)) }

// quantizeBlockQ8_0 writes one Q8_0 block: d = max|x|/127 stored as fp16,
// q = round(x/d) with the float32 d (ggml multiplies by 1/d). See quantQ8_0.
func quantizeBlockQ8_0(y []byte, x []float32) {
	var qs [q80Block]int8
	binary.LittleEndian.PutUint16(y, quantQ8_0(&qs, x))
	for j, q := range qs {
		y[2+j] = byte(q)
	}
}

// quantizeBlockQ4K writes one Q4_K block (quantize_row_q4_K_ref): levels
// 0..15 with a scale and a min per sub-block of 32 (see quantizeKScaleMin),
// packed 64 values to 32 bytes, low nibbles first.
func quantizeBlockQ4K(y []byte, x []float32) {
	var L [qkK]uint8
	quantizeKScaleMin(y[0:16], &L, x, 15, -1, 20)
	qs := y[16:q4KBytes]
	for g := 0; g < 4; g++ {
		for l := 0; l < 32; l++ {
			qs[32*g+l] = L[64*g+l] | L[64*g+l+32]<<4
		}
	}
}

// quantizeBlockQ5K writes one Q5_K block (quantize_row_q5_K_ref): levels
// 0..31 with a scale and a min per sub-block of 32 (see quantizeKScaleMin),
// their low four bits packed as Q4_K's nibbles and the fifth bit of values
// 64g+l and 64g+32+l (l < 32) as bits 2g and 2g+1 of qh[l].
func quantizeBlockQ5K(y []byte, x []float32) {
	var L [qkK]uint8
	quantizeKScaleMin(y[0:16], &L, x, 31, -0.5, 15)
	qh, qs := y[16:48], y[48:q5KBytes]
	clear(qh)
	for g := 0; g < 4; g++ {
		for l := 0; l < 32; l++ {
			lo, hi := L[64*g+l], L[64*g+l+32]
			qh[l] |= lo>>4<<(2*g) | hi>>4<<(2*g+1)
			qs[32*g+l] = lo&0x0f | (hi&0x0f)<<4
		}
	}
}

// quantizeKScaleMin is the part Q4_K's and Q5_K's reference quantizers
// share: for each sub-block of 32 a weighted least-squares scale and min
// (makeQKX2 with weights av_x + |x| and the format's nmax, rmin and nstep),
// then the 8 scales and 8 mins quantized to 6 bits against d = max scale/63
// and dmin = max min/63 (hdr: fp16 d, fp16 dmin and the 12 packed scale
// bytes), and the values quantized again with the 6-bit scales into L (a
// sub-block whose scale is 0 keeps the levels makeQKX2 chose).
func quantizeKScaleMin(hdr []byte, L *[qkK]uint8, x []float32, nmax int, rmin float32, nstep int) {
	var (
		laux           [32]uint8
		weights        [32]float32
		mins, scales   [8]float32
		maxScale, maxM float32
	)
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(xs, weights[:], L[32*j:32*j+32], laux[:], nmax, rmin, 0.1, nstep)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxM {
			maxM = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxM > 0 {
		invMin = 63 / maxM
	}
	s := hdr[4:16]
	var ls, lm [8]uint8
	for j := range 8 {
		ls[j] = min(uint8(nearestInt(invScale*scales[j])), 63)
		lm[j] = min(uint8(nearestInt(invMin*mins[j])), 63)
	}
	PutQ4KScaleMins(s, &ls, &lm)
	putF16(hdr[0:], maxScale/63)
	putF16(hdr[2:], maxM/63)
	dAll, dminAll := fp16(hdr[0:]), fp16(hdr[2:])
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, s)
		d := dAll * float32(sc)
		if d == 0 {
			continue
		}
		dm := float32(dminAll * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max(0, min(int32(nmax), l)))
		}
	}
}

// makeQKX2 is ggml's make_qkx2_quants with use_mad false: it fits
// x ≈ scale·L − theMin (L in 0..nmax, theMin ≥ 0) minimising the weighted
// squared error, starting from the min/max grid and trying nstep+1 grids of
// nmax+rmin+rdelta·is levels, each refined by least squares. L gets the
// levels of the best fit; laux is scratch of len(x).
func makeQKX2(x, w []float32, L, laux []uint8, nmax int, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L[:n])
		return 0, -lo
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	var bestErr float32
	for i := 0; i < n; i++ {
		l := nearestInt(iscale * (x[i] - lo))
		L[i] = uint8(max(0, min(int32(nmax), l)))
		diff := float32(scale*float32(L[i])) + lo - x[i]
		diff = diff * diff
		bestErr += float32(w[i] * diff)
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := max(0, min(int32(nmax), nearestInt(iscale*(x[i]-lo))))
			laux[i] = uint8(l)
			wl := float32(w[i] * float32(l))
			sumL += wl
			sumL2 += float32(wl * float32(l))
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if !(D > 0) {
			continue
		}
		thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var curErr float32
		for i := 0; i < n; i++ {
			diff := float32(thisScale*float32(laux[i])) + thisMin - x[i]
			diff = diff * diff
			curErr += float32(w[i] * diff)
		}
		if curErr < bestErr {
			copy(L[:n], laux[:n])
			bestErr = curErr
			scale = thisScale
			lo = thisMin
		}
	}
	return scale, -lo
}

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group counts as all zero.
const groupMaxEps = 1e-15

// quantizeBlockQ6K writes one Q6_K block (quantize_row_q6_K_ref): for each
// sub-block of 16 a scale from makeQX (nmax 32, weights x²), the 16 scales
// quantized to int8 against d = −max/128 where max is the scale of largest
// magnitude, and the values quantized again with the int8 scales (a
// sub-block whose scale is 0 keeps the values makeQX chose). A block whose
// scales are all below groupMaxEps is all zero.
func quantizeBlockQ6K(y []byte, x []float32) {
	var (
		L                     [qkK]int8
		scales                [16]float32
		maxScale, maxAbsScale float32
	)
	for ib := 0; ib < 16; ib++ {
		sc := makeQX(x[16*ib:16*ib+16], L[16*ib:16*ib+16], 32)
		scales[ib] = sc
		if a := abs32(sc); a > maxAbsScale {
			maxAbsScale = a
			maxScale = sc
		}
	}
	if maxAbsScale < groupMaxEps {
		clear(y[:q6KBytes])
		return
	}
	iscale := -128 / maxScale
	putF16(y[208:], 1/iscale)
	sc := y[192:208]
	for ib := range sc {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	dAll := fp16(y[208:])
	for j := 0; j < 16; j++ {
		d := dAll * float32(int8(sc[j]))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
		}
	}
	var q [qkK]uint8
	for i, l := range L {
		q[i] = uint8(l)
	}
	PutQ6KValues(y, &q)
}

// makeQX is ggml's make_qx_quants with rmse_type 1 and no importance
// weights: it fits x ≈ scale·(L − nmax), L in 0..2·nmax−1, with weights x²,
// starting from the grid −nmax/max (max the value of largest magnitude) and
// trying the grids −(nmax + 0.1·is)/max for is = −9..9, each refined by
// least squares; it returns the scale of the best fit and leaves its levels
// in L. A group whose largest magnitude is below groupMaxEps gets scale 0.
func makeQX(x []float32, L []int8, nmax int) float32 {
	n := len(x)
	var mx, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax = a
			mx = v
		}
	}
	if amax < groupMaxEps {
		clear(L[:n])
		return 0
	}
	fit := func(iscale float32) (sumlx, suml2 float32) {
		for _, v := range x {
			l := float32(max(int32(-nmax), min(int32(nmax-1), nearestInt(iscale*v))))
			w := v * v
			sumlx += float32(float32(w*v) * l)
			suml2 += float32(float32(w*l) * l)
		}
		return sumlx, suml2
	}
	setL := func(iscale float32) {
		for i, v := range x {
			L[i] = int8(int32(nmax) + max(int32(-nmax), min(int32(nmax-1), nearestInt(iscale*v))))
		}
	}
	iscale := float32(-nmax) / mx
	sumlx, suml2 := fit(iscale)
	setL(iscale)
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / mx
		sumlx, suml2 = fit(iscale)
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			setL(iscale)
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}
