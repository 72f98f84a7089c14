package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/govinfer/govinfer/internal/half"
)

// The Go structs must have ggml's byte layout, so that assembly (and ggml
// itself) can read them.
func TestActivationBlockLayout(t *testing.T) {
	var a BlockQ8_0
	var k BlockQ8K
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(BlockQ8_0)", unsafe.Sizeof(a), 34},
		{"offsetof(BlockQ8_0.Qs)", unsafe.Offsetof(a.Qs), 2},
		{"sizeof(BlockQ8K)", unsafe.Sizeof(k), 292},
		{"offsetof(BlockQ8K.Qs)", unsafe.Offsetof(k.Qs), 4},
		{"offsetof(BlockQ8K.Bsums)", unsafe.Offsetof(k.Bsums), 260},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}

func TestQuantizeQ8_0Rules(t *testing.T) {
	// max|x| = 127, so d = 1, 1/d = 1: the values round half away from zero
	// (roundf), not to even.
	x := make([]float32, 32)
	in := []float32{-127, 2.5, -2.5, 3.5, 0.5, -0.5, 1.49, 126.5}
	want := []int8{-127, 3, -3, 4, 1, -1, 1, 127}
	copy(x, in)
	var b [1]BlockQ8_0
	QuantizeQ8_0(b[:], x)
	if b[0].D != 0x3c00 {
		t.Errorf("D = %#04x, want fp16(1) 0x3c00", b[0].D)
	}
	for i, w := range want {
		if b[0].Qs[i] != w {
			t.Errorf("q(%v) = %d, want %d", in[i], b[0].Qs[i], w)
		}
	}
	// The values use the float32 d, not fp16(d): max 1 gives d = 1/127,
	// whose fp16 is not exact, and x = 0.5 gives round(63.5) = 64.
	clear(x)
	x[0], x[1] = 1, 0.5
	QuantizeQ8_0(b[:], x)
	if d := half.F16ToF32(b[0].D); d == 1.0/127 || b[0].Qs[0] != 127 || b[0].Qs[1] != 64 {
		t.Errorf("max 1: D %v q %d %d, want fp16(1/127) 127 64", d, b[0].Qs[0], b[0].Qs[1])
	}
	// All zero: d = 0 and q = 0.
	clear(x)
	QuantizeQ8_0(b[:], x)
	if b[0] != (BlockQ8_0{}) {
		t.Errorf("zero block = %+v", b[0])
	}
}

// TestQuantizeQ8_0MatchesWeights: the activation quantizer and the Q8_0
// weight quantizer are ggml's one rule, so the bytes agree.
func TestQuantizeQ8_0MatchesWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := randRow(rng, 4096, 1)
	w := quantized(t, Q8_0, x)
	a := make([]BlockQ8_0, 4096/32)
	QuantizeQ8_0(a, x)
	for b := range a {
		blk := w[34*b : 34*b+34]
		same := binary.LittleEndian.Uint16(blk) == a[b].D
		for j, q := range a[b].Qs {
			same = same && int8(blk[2+j]) == q
		}
		if !same {
			t.Fatalf("block %d: Q8_0 activation block %+v differs from the weight block % x", b, a[b], blk)
		}
	}
}

func TestQuantizeQ8KRules(t *testing.T) {
	x := make([]float32, 256)
	var b [1]BlockQ8K
	// Largest magnitude −127 (first of equals): iscale = 1, D = 1; ties go to
	// even (nearest_int), not away from zero.
	copy(x, []float32{1, -127, 127, 2.5, -2.5, 3.5, 0.5, -0.5, 1.5})
	want := []int8{1, -127, 127, 2, -2, 4, 0, 0, 2}
	QuantizeQ8K(b[:], x)
	if b[0].D != 1 {
		t.Errorf("D = %v, want 1", b[0].D)
	}
	for i, w := range want {
		if b[0].Qs[i] != w {
			t.Errorf("q(%v) = %d, want %d", x[i], b[0].Qs[i], w)
		}
	}
	// Largest magnitude positive: iscale = −127/max, so D < 0 and the max
	// maps to −127, as ggml does it.
	clear(x)
	x[5], x[6] = 2, -1
	QuantizeQ8K(b[:], x)
	if b[0].D != 1/(-127/float32(2)) || b[0].Qs[5] != -127 || b[0].Qs[6] != 64 {
		t.Errorf("max 2: D %v q %d %d, want %v −127 64", b[0].D, b[0].Qs[5], b[0].Qs[6], 1/(-127/float32(2)))
	}
	// Bsums are the sums of each 16.
	rng := rand.New(rand.NewPCG(11, 12))
	copy(x, randRow(rng, 256, 1))
	QuantizeQ8K(b[:], x)
	for j := range 16 {
		s := 0
		for _, q := range b[0].Qs[16*j : 16*j+16] {
			s += int(q)
		}
		if int(b[0].Bsums[j]) != s {
			t.Errorf("Bsums[%d] = %d, want %d", j, b[0].Bsums[j], s)
		}
	}
	// |x·iscale| ≤ 127 for every value, and the error is within half a step.
	for i, v := range x {
		if e := math.Abs(float64(b[0].D)*float64(b[0].Qs[i]) - float64(v)); e > 0.5001*math.Abs(float64(b[0].D)) {
			t.Errorf("value %d: %v quantized with error %v, step %v", i, v, e, b[0].D)
		}
	}
	clear(x)
	b[0].Bsums[3] = 7
	QuantizeQ8K(b[:], x)
	if b[0] != (BlockQ8K{}) {
		t.Errorf("zero block: %+v", b[0])
	}
}

// TestIntegerDots checks the 8-bit-activation dots against a float64 dot of
// the dequantized weights with the dequantized activations. The integer
// parts are exact; what remains is the float32 epilogue per block (S to
// float32, d·D, the product, the add), so |err| ≤ (blocks + 5)·2⁻²⁴·Σ|w·a|.
func TestIntegerDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		t       Type
		lengths []int
	}{{Q8_0, []int{32, 96, 4096}}, {Q4_K, []int{256, 1280, 4096, 12288}}, {Q5_K, []int{256, 1280, 4096, 12288}}, {Q6_K, []int{256, 1280, 4096, 12288}}} {
		for _, n := range c.lengths {
			t.Run(fmt.Sprintf("%v/%d", c.t, n), func(t *testing.T) {
				var worst float64
				for range 20 {
					w := quantized(t, c.t, randRow(rng, n, 0.02))
					x := randRow(rng, n, 1)
					deqW := make([]float32, n)
					if err := DequantizeRow(c.t, deqW, w); err != nil {
						t.Fatal(err)
					}
					deqA := make([]float64, n)
					var got float32
					if c.t == Q8_0 {
						a := make([]BlockQ8_0, n/32)
						QuantizeQ8_0(a, x)
						for i := range deqA {
							deqA[i] = float64(half.F16ToF32(a[i/32].D)) * float64(a[i/32].Qs[i%32])
						}
						got = DotQ8_0Q8_0(w, a)
					} else {
						a := make([]BlockQ8K, n/256)
						QuantizeQ8K(a, x)
						for i := range deqA {
							deqA[i] = float64(a[i/256].D) * float64(a[i/256].Qs[i%256])
						}
						switch c.t {
						case Q4_K:
							got = DotQ4KQ8K(w, a)
						case Q5_K:
							got = DotQ5KQ8K(w, a)
						default:
							got = DotQ6KQ8K(w, a)
						}
					}
					var ref, mag float64
					for i := range deqA {
						p := float64(deqW[i]) * deqA[i]
						ref += p
						mag += math.Abs(p)
					}
					// Q4_K's (and Q5_K's) weight is (d·sc)·q − dmin·m rounded in float32 by the
					// dequantizer, while the integer dot scales exactly: allow the
					// dequantizer's own rounding too (2 ulps per weight).
					bound := float64(n/c.t.BlockSize()+5+2) * 0x1p-24 * mag
					if e := math.Abs(float64(got) - ref); e > bound {
						t.Fatalf("dot = %v, float64 %v: error %.3g > bound %.3g", got, ref, e, bound)
					} else {
						worst = max(worst, e/bound)
					}
				}
				t.Logf("worst error / bound = %.3f", worst)
			})
		}
	}
}

// TestIntegerDotsExact: small blocks whose dot is known exactly.
func TestIntegerDotsExact(t *testing.T) {
	// Q4_K with d = 1, dmin = 0.5, sub-block j scale j+1, min 2j, all q = 1;
	// activations D = 1, all q = 1: Σ_j 32·(j+1) − 0.5·Σ_j 2j·32 = 1152 − 896.
	b := q4k{d: f16One, dmin: f16Half}
	for j := range 8 {
		b.sc[j], b.m[j] = uint8(j+1), uint8(2*j)
	}
	for i := range b.q {
		b.q[i] = 1
	}
	var a [1]BlockQ8K
	a[0].D = 1
	for i := range a[0].Qs {
		a[0].Qs[i] = 1
	}
	for j := range a[0].Bsums {
		a[0].Bsums[j] = 16
	}
	if got := DotQ4KQ8K(b.pack(), a[:]); got != 1152-896 {
		t.Errorf("Q4_K·Q8_K = %v, want %v", got, 1152-896)
	}
	// Q5_K with d = 1, dmin = 0, sub-block j scale j+1, all q = 17 (low
	// nibble 1, fifth bit set in every qh bit): Σ_j 32·(j+1)·17 = 19584.
	q5 := make([]byte, 176)
	q5[1] = 0x3c // fp16 1.0
	for j := range 4 {
		q5[4+j] = uint8(j + 1)
		q5[4+8+j] = uint8(j + 5) // scales 4..7 (< 16: no top bits), mins 0
	}
	for l := range 32 {
		q5[16+l] = 0xff
	}
	for i := 48; i < 176; i++ {
		q5[i] = 0x11
	}
	if got := DotQ5KQ8K(q5, a[:]); got != 19584 {
		t.Errorf("Q5_K·Q8_K = %v, want 19584", got)
	}
	// Q6_K with d = 0.5, scale s = s−8 (signed), all q = 33 (value q−32 = 1);
	// activations 2 each with D = 0.25: S = Σ_s (s−8)·16·1·2 = −256, times
	// d·D = 0.125 gives −32.
	w := q6k{d: f16Half}
	for s := range w.sc {
		w.sc[s] = int8(s - 8)
	}
	for i := range w.q {
		w.q[i] = 33
	}
	a[0].D = 0.25
	for i := range a[0].Qs {
		a[0].Qs[i] = 2
	}
	if got := DotQ6KQ8K(w.pack(), a[:]); got != -32 {
		t.Errorf("Q6_K·Q8_K = %v, want −32", got)
	}
}

func TestMatVecQ8(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, typ := range []Type{Q8_0, Q4_K, Q5_K, Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			const rows, cols = 4, 768
			w := quantized(t, typ, randRow(rng, rows*cols, 0.05))
			x := randRow(rng, cols, 1)
			got := make([]float32, rows)
			MatVecQ8(typ, got, w, rows, cols, x)
			ref := make([]float32, rows)
			MatVec(typ, ref, w, rows, cols, x)
			// 8-bit activations: the result moves by the activation rounding
			// error, at most half a step (max|x|/127) per value.
			rb := typ.RowBytes(cols)
			deq := make([]float32, cols)
			for r := range rows {
				if err := DequantizeRow(typ, deq, w[r*rb:(r+1)*rb]); err != nil {
					t.Fatal(err)
				}
				var amax float64
				for _, v := range x {
					amax = max(amax, math.Abs(float64(v)))
				}
				var bound float64
				for _, v := range deq {
					bound += math.Abs(float64(v)) * amax / 127 / 2
				}
				if e := math.Abs(float64(got[r] - ref[r])); e > bound*1.01 {
					t.Errorf("row %d: 8-bit %v, float %v: difference %.3g > %.3g", r, got[r], ref[r], e, bound)
				}
			}
			if !panics(func() { MatVecQ8(typ, got, w, rows, cols, x[1:]) }) || !panics(func() { MatVecQ8(Keep, got, nil, rows, cols, x) }) {
				t.Error("bad arguments did not panic")
			}
		})
	}
}

func TestActivationQuantizerShapes(t *testing.T) {
	for name, f := range map[string]func(){
		"Q8_0 short": func() { QuantizeQ8_0(make([]BlockQ8_0, 2), make([]float32, 63)) },
		"Q8_0 long":  func() { QuantizeQ8_0(make([]BlockQ8_0, 1), make([]float32, 64)) },
		"Q8_K short": func() { QuantizeQ8K(make([]BlockQ8K, 1), make([]float32, 255)) },
		"Q8_K long":  func() { QuantizeQ8K(make([]BlockQ8K, 1), make([]float32, 512)) },
		"dot blocks": func() { DotQ4KQ8K(make([]byte, 144), make([]BlockQ8K, 2)) },
	} {
		if !panics(f) {
			t.Errorf("%s: no panic", name)
		}
	}
}
