package quant

import (
	"encoding/binary"
	"fmt"

	"github.com/govinfer/govinfer/internal/half"
)

// DequantizeRow writes the values of the t blocks in src to dst, as ggml's
// dequantize_row_* functions compute them in float32 (Q8_0: d·q; Q4_K and
// Q5_K: (d·sc)·q − dmin·m; Q6_K: (d·sc)·(q−32), each product rounded to
// float32). len(dst) must fit t and len(src) must be t.RowBytes(len(dst));
// several rows one after the other are one longer row.
func DequantizeRow(t Type, dst []float32, src []byte) error {
	if err := checkRow("DequantizeRow", t, len(dst), len(src)); err != nil {
		return err
	}
	n := t.BlockSize()
	b := t.BlockBytes()
	for i := 0; i < len(dst)/n; i++ {
		blk := src[i*b : (i+1)*b]
		out := dst[i*n : (i+1)*n]
		switch t {
		case Q8_0:
			dequantQ8_0((*[q80Block]float32)(out), blk)
		case Q4_K:
			dequantQ4K((*[qkK]float32)(out), blk)
		case Q5_K:
			dequantQ5K((*[qkK]float32)(out), blk)
		case Q6_K:
			dequantQ6K((*[qkK]float32)(out), blk)
		}
	}
	return nil
}

// checkRow reports why n values in nb bytes are not a row of t, or nil.
func checkRow(op string, t Type, n, nb int) error {
	if !t.known() {
		return fmt.Errorf("quant: %s: no block format %v", op, t)
	}
	if !t.Fits(n) {
		return fmt.Errorf("quant: %s: %d values are not whole %v blocks of %d", op, n, t, t.BlockSize())
	}
	if want := t.RowBytes(n); nb != want {
		return fmt.Errorf("quant: %s: %d bytes for %d %v values, want %d", op, nb, n, t, want)
	}
	return nil
}

// fp16 reads the little-endian binary16 at b[0:2] as a float32.
func fp16(b []byte) float32 { return half.F16ToF32(binary.LittleEndian.Uint16(b)) }

// dequantQ8_0 decodes one Q8_0 block: out[j] = q[j]·d.
func dequantQ8_0(out *[q80Block]float32, blk []byte) {
	d := fp16(blk)
	qs := blk[2:q80Bytes]
	for j := range out {
		out[j] = float32(int8(qs[j])) * d
	}
}

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from the 12 scale
// bytes of a Q4_K or Q5_K block (ggml's get_scale_min_k4). Bytes 0..3 hold
// the scales of sub-blocks 0..3 in their low 6 bits, bytes 4..7 their mins;
// bytes 8..11 hold the low 4 bits of sub-blocks 4..7 (scale in the low
// nibble, min in the high one), whose top 2 bits are the top 2 bits of bytes
// 0..3 (scales) and 4..7 (mins).
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0x0f | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// dequantQ4K decodes one Q4_K block. Layout: d fp16, dmin fp16, scales[12],
// qs[128]; 64 values at a time from 32 bytes of qs, low nibbles first.
func dequantQ4K(out *[qkK]float32, blk []byte) {
	d, dmin := fp16(blk[0:]), fp16(blk[2:])
	scales, qs := blk[4:16], blk[16:q4KBytes]
	for g := 0; g < 4; g++ {
		sc1, m1 := scaleMinK4(2*g, scales)
		sc2, m2 := scaleMinK4(2*g+1, scales)
		d1, mm1 := d*float32(sc1), float32(dmin*float32(m1))
		d2, mm2 := d*float32(sc2), float32(dmin*float32(m2))
		q := qs[32*g : 32*g+32]
		o := out[64*g : 64*g+64]
		for l := 0; l < 32; l++ {
			o[l] = float32(d1*float32(q[l]&0x0f)) - mm1
			o[l+32] = float32(d2*float32(q[l]>>4)) - mm2
		}
	}
}

// dequantQ5K decodes one Q5_K block. Layout: d fp16, dmin fp16, scales[12],
// qh[32], qs[128]; as Q4_K, the fifth bit of value 64g+l (l < 32) being bit
// 2g of qh[l] and that of value 64g+32+l bit 2g+1.
func dequantQ5K(out *[qkK]float32, blk []byte) {
	d, dmin := fp16(blk[0:]), fp16(blk[2:])
	scales, qh, qs := blk[4:16], blk[16:48], blk[48:q5KBytes]
	for g := 0; g < 4; g++ {
		sc1, m1 := scaleMinK4(2*g, scales)
		sc2, m2 := scaleMinK4(2*g+1, scales)
		d1, mm1 := d*float32(sc1), float32(dmin*float32(m1))
		d2, mm2 := d*float32(sc2), float32(dmin*float32(m2))
		q := qs[32*g : 32*g+32]
		o := out[64*g : 64*g+64]
		for l := 0; l < 32; l++ {
			lo := q[l]&0x0f | (qh[l]>>(2*g)&1)<<4
			hi := q[l]>>4 | (qh[l]>>(2*g+1)&1)<<4
			o[l] = float32(d1*float32(lo)) - mm1
			o[l+32] = float32(d2*float32(hi)) - mm2
		}
	}
}

// dequantQ6K decodes one Q6_K block. Layout: ql[128], qh[64], scales[16]
// int8, d fp16. Each half of 128 values uses 64 bytes of ql, 32 of qh and 8
// scales: value l (l < 32) takes ql[l]'s low nibble and qh[l] bits 0-1,
// value l+32 ql[l+32]'s low nibble and bits 2-3, value l+64 ql[l]'s high
// nibble and bits 4-5, value l+96 ql[l+32]'s high nibble and bits 6-7;
// values 16s..16s+15 of the block share scales[s].
func dequantQ6K(out *[qkK]float32, blk []byte) {
	d := fp16(blk[208:])
	for h := 0; h < 2; h++ {
		ql := blk[64*h : 64*h+64]
		qh := blk[128+32*h : 128+32*h+32]
		sc := blk[192+8*h : 192+8*h+8]
		o := out[128*h : 128*h+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int8(ql[l]&0x0f|(qh[l]>>0&3)<<4) - 32
			q2 := int8(ql[l+32]&0x0f|(qh[l]>>2&3)<<4) - 32
			q3 := int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			o[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			o[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			o[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			o[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}
