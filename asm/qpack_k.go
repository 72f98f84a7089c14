package asm

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/govinfer/govinfer/quant"
)

// The packed layouts of Q4_K and Q6_K weights and of their inputs (see
// qpack.go's comment for the byte layout).

// GGML's block sizes of the K-quants packed here.
const (
	q4KBlockBytes = 144
	q6KBlockBytes = 210
)

// packK is PackQ for Q4_K and Q6_K (shapes checked): each group of 16 rows
// is its super-blocks, each its quant part then its side part; padding
// rows are zero.
func packK(t quant.Type, dst, w []byte, rows, cols int) {
	blocks, rb := cols/256, t.RowBytes(cols)
	qb, sb, bb := q4KPackQuants, q4KPackSide, q4KBlockBytes
	if t == quant.Q6_K {
		qb, sb, bb = q6KPackQuants, q6KPackSide, q6KBlockBytes
	}
	gb := blocks * (qb + sb)
	var q [256]byte
	for g := 0; g*packRows < rows; g++ {
		out := dst[g*gb : (g+1)*gb]
		clear(out)
		for r := range packRows {
			row := g*packRows + r
			if row >= rows {
				break
			}
			for b := range blocks {
				blk := w[row*rb+b*bb:][:bb]
				qp, sd := out[b*(qb+sb):][:qb], out[b*(qb+sb)+qb:][:sb]
				if t == quant.Q6_K {
					quant.Q6KValues(&q, blk)
					for j := range 16 {
						c := 16 * j
						for i := range 4 {
							x := q[c+12+i]
							qp[192*j+4*r+i] = q[c+i] | (x&3)<<6
							qp[192*j+64+4*r+i] = q[c+4+i] | (x>>2&3)<<6
							qp[192*j+128+4*r+i] = q[c+8+i] | (x>>4)<<6
						}
						sd[16*j+r] = blk[192+j]
					}
					sd[256+2*r], sd[257+2*r] = blk[208], blk[209]
					continue
				}
				for v := range 32 {
					copy(qp[64*v+4*r:][:4], blk[16+4*v:][:4])
				}
				sc, m := quant.Q4KScaleMins(blk[4:16])
				for j := range 8 {
					sd[16*j+r] = sc[j]
					sd[128+32*(j/2)+2*r+j%2] = m[j]
				}
				sd[256+2*r], sd[257+2*r] = blk[0], blk[1]
				sd[288+2*r], sd[289+2*r] = blk[2], blk[3]
			}
		}
	}
}

// unpackKRow is UnpackQRow for Q4_K and Q6_K (shapes checked).
func unpackKRow(t quant.Type, dst, packed []byte, cols, row int) {
	blocks := cols / 256
	qb, sb, bb := q4KPackQuants, q4KPackSide, q4KBlockBytes
	if t == quant.Q6_K {
		qb, sb, bb = q6KPackQuants, q6KPackSide, q6KBlockBytes
	}
	g, r := row/packRows, row%packRows
	gb := blocks * (qb + sb)
	in := packed[g*gb : (g+1)*gb]
	var q [256]byte
	for b := range blocks {
		blk := dst[b*bb:][:bb]
		qp, sd := in[b*(qb+sb):][:qb], in[b*(qb+sb)+qb:][:sb]
		if t == quant.Q6_K {
			for j := range 16 {
				c := 16 * j
				for i := range 4 {
					a, bq, cq := qp[192*j+4*r+i], qp[192*j+64+4*r+i], qp[192*j+128+4*r+i]
					q[c+i], q[c+4+i], q[c+8+i] = a&63, bq&63, cq&63
					q[c+12+i] = a>>6 | bq>>6<<2 | cq>>6<<4
				}
				blk[192+j] = sd[16*j+r]
			}
			quant.PutQ6KValues(blk, &q)
			blk[208], blk[209] = sd[256+2*r], sd[257+2*r]
			continue
		}
		for v := range 32 {
			copy(blk[16+4*v:][:4], qp[64*v+4*r:][:4])
		}
		var sc, m [8]byte
		for j := range 8 {
			sc[j] = sd[16*j+r]
			m[j] = sd[128+32*(j/2)+2*r+j%2]
		}
		quant.PutQ4KScaleMins(blk[4:16], &sc, &m)
		blk[0], blk[1] = sd[256+2*r], sd[257+2*r]
		blk[2], blk[3] = sd[288+2*r], sd[289+2*r]
	}
}

// packInputRowK writes the Q8_K blocks a as one packed K-quant input row:
// per block the values, d, −32·Σq per 16 values (int32) and
// Bsums[2j]+Bsums[2j+1] (int16; exact, as Bsums are sums of 16 values).
func packInputRowK(dst []byte, a []quant.BlockQ8K) {
	for b := range a {
		out := dst[b*qKPackInput:][:qKPackInput]
		y := &a[b]
		copy(out[:256], unsafe.Slice((*byte)(unsafe.Pointer(&y.Qs[0])), len(y.Qs)))
		binary.LittleEndian.PutUint32(out[256:], math.Float32bits(y.D))
		// Bsums[j] is the exact sum of values 16j..16j+15 (QuantizeQ8K).
		for j, bs := range y.Bsums {
			binary.LittleEndian.PutUint32(out[qKInputCorr+4*j:], uint32(-32*int32(bs)))
		}
		for j := range 8 {
			binary.LittleEndian.PutUint16(out[qKInputBsum32+2*j:], uint16(int32(y.Bsums[2*j])+int32(y.Bsums[2*j+1])))
		}
	}
}

// unpackInputRowK is packInputRowK's inverse: Bsums[2j] is the sum of its
// 16 values and Bsums[2j+1] the stored sum of 32 less it, so that the
// pairs' sums are the packed ones the kernels read.
func unpackInputRowK(dst []quant.BlockQ8K, in []byte) {
	for b := range dst {
		blk := in[b*qKPackInput:][:qKPackInput]
		y := &dst[b]
		for i := range y.Qs {
			y.Qs[i] = int8(blk[i])
		}
		y.D = math.Float32frombits(binary.LittleEndian.Uint32(blk[256:]))
		for j := range 8 {
			var s int16
			for _, q := range y.Qs[32*j : 32*j+16] {
				s += int16(q)
			}
			y.Bsums[2*j] = s
			y.Bsums[2*j+1] = int16(binary.LittleEndian.Uint16(blk[qKInputBsum32+2*j:])) - s
		}
	}
}
