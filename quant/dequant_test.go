package quant

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

// Hand-built blocks whose values can be written down, packed from the layout
// in quant-formats.md independently of the quantizers.

const (
	f16One  = 0x3c00 // 1.0
	f16Half = 0x3800 // 0.5
)

func deq(t *testing.T, typ Type, blk []byte) []float32 {
	t.Helper()
	out := make([]float32, typ.BlockSize()*len(blk)/typ.BlockBytes())
	if err := DequantizeRow(typ, out, blk); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDequantQ8_0(t *testing.T) {
	for _, c := range []struct {
		d    uint16
		dval float32
	}{{f16Half, 0.5}, {0xb800, -0.5}, {0x0001, 0x1p-24}, {0, 0}} {
		t.Run(fmt.Sprintf("d=%#04x", c.d), func(t *testing.T) {
			blk := make([]byte, 34)
			binary.LittleEndian.PutUint16(blk, c.d)
			qs := []int8{-128, -127, -1, 0, 1, 2, 100, 127}
			for j := range 32 {
				blk[2+j] = byte(qs[j%len(qs)])
			}
			for j, v := range deq(t, Q8_0, blk) {
				if want := float32(qs[j%len(qs)]) * c.dval; v != want {
					t.Errorf("value %d = %v, want %v", j, v, want)
				}
			}
		})
	}
}

// q4k is a Q4_K block written down field by field.
type q4k struct {
	d, dmin uint16
	sc, m   [8]uint8 // 6-bit
	q       [256]uint8
}

// pack follows quant-formats.md: bytes 0-3 scales 0-3 in their low 6 bits
// and the top 2 bits of scales 4-7 in their top 2; bytes 4-7 the same for
// the mins; bytes 8-11 the low 4 bits of scale (low nibble) and min (high
// nibble) of sub-blocks 4-7. qs: byte 32g+l holds value 64g+l in its low
// nibble, 64g+32+l in its high nibble.
func (b *q4k) pack() []byte {
	out := make([]byte, 144)
	binary.LittleEndian.PutUint16(out[0:], b.d)
	binary.LittleEndian.PutUint16(out[2:], b.dmin)
	s := out[4:16]
	for j := range 4 {
		s[j] = b.sc[j] | b.sc[j+4]>>4<<6
		s[j+4] = b.m[j] | b.m[j+4]>>4<<6
		s[j+8] = b.sc[j+4]&15 | (b.m[j+4]&15)<<4
	}
	for g := range 4 {
		for l := range 32 {
			out[16+32*g+l] = b.q[64*g+l] | b.q[64*g+32+l]<<4
		}
	}
	return out
}

func (b *q4k) want(i int) float32 {
	j := i / 32
	return half.F16ToF32(b.d)*float32(b.sc[j])*float32(b.q[i]) - half.F16ToF32(b.dmin)*float32(b.m[j])
}

func TestDequantQ4KLiteral(t *testing.T) {
	// Scales bytes written by hand: sub-block 0 scale 0xC1&63 = 1, min
	// 0x85&63 = 5; sub-block 4 scale 0xA | (0xC1>>6)<<4 = 58, min
	// 9 | (0x85>>6)<<4 = 41. All q = 3, d = 1, dmin = 0.5.
	blk := make([]byte, 144)
	binary.LittleEndian.PutUint16(blk[0:], f16One)
	binary.LittleEndian.PutUint16(blk[2:], f16Half)
	copy(blk[4:], []byte{0xC1, 0, 0, 0, 0x85, 0, 0, 0, 0x9A, 0, 0, 0})
	for i := 16; i < 144; i++ {
		blk[i] = 0x33
	}
	out := deq(t, Q4_K, blk)
	for i, want := range map[int]float32{0: 1*3 - 2.5, 31: 1*3 - 2.5, 32: 0, 128: 58*3 - 20.5, 159: 58*3 - 20.5, 160: 0} {
		if out[i] != want {
			t.Errorf("value %d = %v, want %v", i, out[i], want)
		}
	}
}

// TestDequantQ4KScales sets every 6-bit pattern as the scale, then as the
// min, of every sub-block, over a random background of the other 15.
func TestDequantQ4KScales(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []string{"scale", "min"} {
		for j := range 8 {
			t.Run(fmt.Sprintf("%s%d", kind, j), func(t *testing.T) {
				for v := range uint8(64) {
					b := q4k{d: f16One, dmin: f16Half}
					for k := range 8 {
						b.sc[k], b.m[k] = uint8(rng.IntN(64)), uint8(rng.IntN(64))
					}
					for i := range b.q {
						b.q[i] = uint8(rng.IntN(16))
					}
					if kind == "scale" {
						b.sc[j] = v
					} else {
						b.m[j] = v
					}
					for i, got := range deq(t, Q4_K, b.pack()) {
						if want := b.want(i); got != want {
							t.Fatalf("%s %d of sub-block %d: value %d = %v, want %v", kind, v, j, i, got, want)
						}
					}
				}
			})
		}
	}
}

// TestDequantQ4KNibbles puts 15 in one nibble at a time: exactly the value
// the layout names must move.
func TestDequantQ4KNibbles(t *testing.T) {
	base := q4k{d: f16One}
	for j := range 8 {
		base.sc[j] = 1
	}
	blk0 := base.pack()
	for byt := range 128 {
		for _, hi := range []bool{false, true} {
			blk := append([]byte(nil), blk0...)
			want := 64*(byt/32) + byt%32
			if hi {
				blk[16+byt] = 0xf0
				want += 32
			} else {
				blk[16+byt] = 0x0f
			}
			for i, v := range deq(t, Q4_K, blk) {
				if (v != 0) != (i == want) || (i == want && v != 15) {
					t.Fatalf("qs[%d] high=%v: value %d = %v; want 15 at %d only", byt, hi, i, v, want)
				}
			}
		}
	}
}

// q6k is a Q6_K block written down field by field.
type q6k struct {
	d  uint16
	sc [16]int8
	q  [256]uint8 // 6-bit, value = d·sc·(q−32)
}

// pack follows quant-formats.md: per half h of 128 values, value 128h+l
// (l < 32) is ql[64h+l] low nibble + qh[32h+l] bits 0-1, value 128h+32+l
// ql[64h+32+l] low + bits 2-3, 128h+64+l ql[64h+l] high + bits 4-5,
// 128h+96+l ql[64h+32+l] high + bits 6-7.
func (b *q6k) pack() []byte {
	out := make([]byte, 210)
	for h := range 2 {
		for l := range 32 {
			q := b.q[128*h+l : 128*h+l+97]
			out[64*h+l] = q[0]&15 | (q[64]&15)<<4
			out[64*h+32+l] = q[32]&15 | (q[96]&15)<<4
			out[128+32*h+l] = q[0]>>4 | q[32]>>4<<2 | q[64]>>4<<4 | q[96]>>4<<6
		}
	}
	for s, v := range b.sc {
		out[192+s] = byte(v)
	}
	binary.LittleEndian.PutUint16(out[208:], b.d)
	return out
}

func (b *q6k) want(i int) float32 {
	return half.F16ToF32(b.d) * float32(b.sc[i/16]) * float32(int(b.q[i])-32)
}

func TestDequantQ6KLowBits(t *testing.T) {
	// All q = 0 (value −32·sc) except one nibble of ql set to 15.
	blk0 := make([]byte, 210)
	for s := range 16 {
		blk0[192+s] = 1
	}
	binary.LittleEndian.PutUint16(blk0[208:], f16One)
	for byt := range 128 {
		for _, hi := range []bool{false, true} {
			blk := append([]byte(nil), blk0...)
			h, l := byt/64, byt%64 // l < 32: values l, l+64; l ≥ 32: values l (= 32+(l−32)), l+64 (= 96+(l−32))
			want := 128*h + l
			if hi {
				blk[byt] = 0xf0
				want += 64
			} else {
				blk[byt] = 0x0f
			}
			for i, v := range deq(t, Q6_K, blk) {
				if exp := map[bool]float32{true: 15 - 32, false: -32}[i == want]; v != exp {
					t.Fatalf("ql[%d] high=%v: value %d = %v, want %v (moved value %d)", byt, hi, i, v, exp, want)
				}
			}
		}
	}
}

func TestDequantQ6KHighBits(t *testing.T) {
	blk0 := make([]byte, 210)
	for s := range 16 {
		blk0[192+s] = 1
	}
	binary.LittleEndian.PutUint16(blk0[208:], f16One)
	for byt := range 64 {
		for pair := range 4 {
			for _, bits := range []byte{1, 2, 3} {
				blk := append([]byte(nil), blk0...)
				blk[128+byt] = bits << (2 * pair)
				want := 128*(byt/32) + byt%32 + 32*pair
				for i, v := range deq(t, Q6_K, blk) {
					exp := float32(-32)
					if i == want {
						exp = float32(16*int(bits) - 32)
					}
					if v != exp {
						t.Fatalf("qh[%d] bits %d = %d: value %d = %v, want %v", byt, 2*pair, bits, i, v, exp)
					}
				}
			}
		}
	}
}

// TestDequantQ6KScales sets every int8 value as every sub-block's scale.
func TestDequantQ6KScales(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for s := range 16 {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			for v := -128; v < 128; v++ {
				b := q6k{d: f16Half}
				for k := range b.sc {
					b.sc[k] = int8(rng.IntN(256) - 128)
				}
				for i := range b.q {
					b.q[i] = uint8(rng.IntN(64))
				}
				b.sc[s] = int8(v)
				for i, got := range deq(t, Q6_K, b.pack()) {
					if want := b.want(i); got != want {
						t.Fatalf("scale %d = %d: value %d = %v, want %v", s, v, i, got, want)
					}
				}
			}
		})
	}
}

func TestDequantQ5KHighBits(t *testing.T) {
	// d = 1, every scale 1, every min 0, low nibbles 0: value = 16·bit.
	b := q4k{d: f16One}
	for j := range 8 {
		b.sc[j] = 1
	}
	q4 := b.pack()
	blk0 := make([]byte, 176)
	copy(blk0, q4[:16]) // d, dmin, scales; qh and qs zero
	for byt := range 32 {
		for bit := range 8 {
			blk := append([]byte(nil), blk0...)
			blk[16+byt] = 1 << bit
			want := 32*bit + byt // bit 2g: value 64g+l; bit 2g+1: 64g+32+l
			for i, v := range deq(t, Q5_K, blk) {
				if (v != 0) != (i == want) || (i == want && v != 16) {
					t.Fatalf("qh[%d] bit %d: value %d = %v; want 16 at %d only", byt, bit, i, v, want)
				}
			}
		}
	}
}

func TestDequantizeRowErrors(t *testing.T) {
	for _, c := range []struct {
		t    Type
		n, b int
	}{
		{Q8_0, 31, 34}, {Q8_0, 32, 33}, {Q4_K, 256, 145}, {Q6_K, 128, 105}, {Keep, 32, 34}, {Type(99), 32, 34},
	} {
		if err := DequantizeRow(c.t, make([]float32, c.n), make([]byte, c.b)); err == nil {
			t.Errorf("%v: %d values from %d bytes: no error", c.t, c.n, c.b)
		}
	}
}

func TestTypeSizes(t *testing.T) {
	for _, c := range []struct {
		t           Type
		name        string
		block, size int
		ggml        uint32
	}{
		{Q8_0, "Q8_0", 32, 34, 8}, {Q4_K, "Q4_K", 256, 144, 12}, {Q5_K, "Q5_K", 256, 176, 13}, {Q6_K, "Q6_K", 256, 210, 14},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.t.String() != c.name || c.t.BlockSize() != c.block || c.t.BlockBytes() != c.size {
				t.Errorf("%v: %d values in %d bytes, want %s %d in %d", c.t, c.t.BlockSize(), c.t.BlockBytes(), c.name, c.block, c.size)
			}
			if id, ok := c.t.GGMLType(); !ok || id != c.ggml {
				t.Errorf("GGMLType = %d, %v; want %d", id, ok, c.ggml)
			}
			if back, ok := TypeFromGGML(c.ggml); !ok || back != c.t {
				t.Errorf("TypeFromGGML(%d) = %v", c.ggml, back)
			}
			if got := c.t.RowBytes(4096); got != 4096/c.block*c.size {
				t.Errorf("RowBytes(4096) = %d", got)
			}
			if !c.t.Fits(2*c.block) || c.t.Fits(c.block+16) || c.t.Fits(0) || c.t.Fits(-c.block) {
				t.Error("Fits wrong")
			}
		})
	}
	if _, ok := Keep.GGMLType(); ok {
		t.Error("Keep has a ggml type")
	}
	if Keep.String() != "keep" || Keep.Fits(256) || Keep.BlockSize() != 0 || Keep.BlockBytes() != 0 || Type(200).String() != "Type(200)" || Type(200).BlockBytes() != 0 {
		t.Error("Keep or an unknown type misbehaves")
	}
	if _, ok := TypeFromGGML(30); ok {
		t.Error("BF16 taken for a block format")
	}
	defer func() {
		if recover() == nil {
			t.Error("RowBytes(100) of Q4_K did not panic")
		}
	}()
	Q4_K.RowBytes(100)
}
