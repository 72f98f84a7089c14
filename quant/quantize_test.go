package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

func TestNearestInt(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want int32
	}{
		{0, 0}, {0.5, 0}, {1.5, 2}, {2.5, 2}, {-0.5, 0}, {-1.5, -2}, {-2.5, -2},
		{0.49999997, 0}, {1.0000001, 1}, {-7.6, -8}, {4194303, 4194303}, {-4194303, -4194303},
	} {
		if got := nearestInt(c.f); got != c.want {
			t.Errorf("nearestInt(%v) = %d, want %d", c.f, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(17, 18))
	for range 100000 {
		f := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(23)))
		if got, want := nearestInt(f), int32(math.RoundToEven(float64(f))); got != want {
			t.Fatalf("nearestInt(%v) = %d, want %d", f, got, want)
		}
	}
	// Out of range: no panic, a value within ±2^22.
	for _, f := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e30, -1e30} {
		if got := nearestInt(f); got < -1<<22 || got >= 1<<22 {
			t.Errorf("nearestInt(%v) = %d", f, got)
		}
	}
}

func TestRoundInt8(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want int8
	}{
		{0.5, 1}, {-0.5, -1}, {2.5, 3}, {-2.5, -3}, {126.6, 127}, {-127.4, -127}, {128, -128},
		{float32(math.NaN()), 0}, {float32(math.Inf(1)), 0}, {float32(math.Inf(-1)), 0}, {3e9, 0},
	} {
		if got := roundInt8(c.f); got != c.want {
			t.Errorf("roundInt8(%v) = %d, want %d", c.f, got, c.want)
		}
	}
}

// TestQuantizeRoundTrip bounds the reconstruction error on Gaussian rows:
// Q8_0 within half a step per value plus the fp16 rounding of d (the values
// are quantized with the float32 d: up to 127·2⁻¹¹ steps more); the K-quants
// by their relative RMS error, near what the reference quantizers reach on
// these rows (measured: Q8_0 0.0084, Q4_K 0.088, Q6_K 0.025).
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	x := randRow(rng, 64*256, 0.02)
	for _, c := range []struct {
		t      Type
		maxRel float64
	}{{Q8_0, 0.01}, {Q4_K, 0.1}, {Q6_K, 0.03}} {
		t.Run(c.t.String(), func(t *testing.T) {
			w := quantized(t, c.t, x)
			y := make([]float32, len(x))
			if err := DequantizeRow(c.t, y, w); err != nil {
				t.Fatal(err)
			}
			var se, ss float64
			for i := range x {
				d := float64(y[i]) - float64(x[i])
				se += d * d
				ss += float64(x[i]) * float64(x[i])
				if c.t == Q8_0 {
					b := i / 32
					step := float64(half.F16ToF32(binary.LittleEndian.Uint16(w[34*b:])))
					if math.Abs(d) > (0.5+127.0/2048)*step {
						t.Fatalf("value %d: %v → %v, step %v", i, x[i], y[i], step)
					}
				}
			}
			rel := math.Sqrt(se / ss)
			t.Logf("relative RMS error %.4f", rel)
			if rel > c.maxRel {
				t.Errorf("relative RMS error %.4f > %.4f", rel, c.maxRel)
			}
		})
	}
}

// TestQuantizeEncodedRows: the BF16, F16 and F32 helpers are QuantizeRow of
// the decoded values.
func TestQuantizeEncodedRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	x := randRow(rng, 512, 0.05)
	bf := make([]byte, 2*len(x))
	f16 := make([]byte, 2*len(x))
	f32 := make([]byte, 4*len(x))
	if err := half.EncodeBF16(bf, x); err != nil {
		t.Fatal(err)
	}
	if err := half.EncodeF16(f16, x); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
	}
	for _, typ := range []Type{Q8_0, Q4_K, Q5_K, Q6_K} {
		for _, c := range []struct {
			name   string
			quant  func(Type, []byte, []byte) error
			src    []byte
			decode func([]float32, []byte) error
		}{
			{"BF16", QuantizeRowBF16, bf, half.DecodeBF16},
			{"F16", QuantizeRowF16, f16, half.DecodeF16},
			{"F32", QuantizeRowF32, f32, func(d []float32, s []byte) error { copy(d, x); return nil }},
		} {
			t.Run(typ.String()+"/"+c.name, func(t *testing.T) {
				got := make([]byte, typ.RowBytes(len(x)))
				if err := c.quant(typ, got, c.src); err != nil {
					t.Fatal(err)
				}
				dec := make([]float32, len(x))
				if err := c.decode(dec, c.src); err != nil {
					t.Fatal(err)
				}
				if want := quantized(t, typ, dec); string(got) != string(want) {
					t.Error("differs from QuantizeRow of the decoded values")
				}
				if err := c.quant(typ, got, c.src[1:]); err == nil {
					t.Error("a truncated source gave no error")
				}
			})
		}
	}
}

func TestQuantizeRowErrors(t *testing.T) {
	for _, c := range []struct {
		t    Type
		n, b int
	}{{Q8_0, 33, 34}, {Q8_0, 32, 35}, {Q4_K, 128, 72}, {Q6_K, 256, 209}, {Q5_K, 256, 175}, {Keep, 256, 0}} {
		if err := QuantizeRow(c.t, make([]byte, c.b), make([]float32, c.n)); err == nil {
			t.Errorf("%v: %d values into %d bytes: no error", c.t, c.n, c.b)
		}
	}
}

// specialRows are inputs a quantizer must survive: zeros, NaN, infinities,
// huge and tiny magnitudes, constants, one-signed rows.
func specialRows() map[string][]float32 {
	const n = 512
	fill := func(f func(i int) float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	return map[string][]float32{
		"zero":          fill(func(int) float32 { return 0 }),
		"negative zero": fill(func(int) float32 { return float32(math.Copysign(0, -1)) }),
		"all NaN":       fill(func(int) float32 { return nan }),
		"one NaN":       fill(func(i int) float32 { return map[bool]float32{true: nan, false: float32(i%7) - 3}[i == 77] }),
		"+Inf":          fill(func(i int) float32 { return map[bool]float32{true: inf, false: 0.1}[i%50 == 3] }),
		"-Inf":          fill(func(i int) float32 { return map[bool]float32{true: -inf, false: 0.1}[i%50 == 3] }),
		"±Inf":          fill(func(i int) float32 { return float32(1-2*(i%2)) * inf }),
		"huge":          fill(func(i int) float32 { return float32(1-2*(i%3%2)) * 3e38 }),
		"huge mixed":    fill(func(i int) float32 { return map[bool]float32{true: 3.4e38, false: -1e-3}[i%9 == 0] }),
		"subnormal":     fill(func(i int) float32 { return float32(i%5-2) * 1e-40 }),
		"tiny":          fill(func(i int) float32 { return float32(i%5-2) * 1e-20 }),
		"constant":      fill(func(int) float32 { return 0.25 }),
		"positive":      fill(func(i int) float32 { return 1 + float32(i%13) }),
		"negative":      fill(func(i int) float32 { return -1 - float32(i%13) }),
		"max float16":   fill(func(i int) float32 { return float32(1-2*(i%2)) * 65504 * 127 }),
	}
}

// quantizeAll runs every quantizer, dequantizer and dot on x (a multiple of
// 256 values); it must not panic.
func quantizeAll(t testing.TB, x []float32) {
	for _, typ := range []Type{Q8_0, Q4_K, Q5_K, Q6_K} {
		w := make([]byte, typ.RowBytes(len(x)))
		if err := QuantizeRow(typ, w, x); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := DequantizeRow(typ, y, w); err != nil {
			t.Fatal(err)
		}
		Dot(typ, w, x)
		MatVecQ8(typ, y[:1], w, 1, len(x), x)
	}
	QuantizeQ8_0(make([]BlockQ8_0, len(x)/32), x)
	QuantizeQ8K(make([]BlockQ8K, len(x)/256), x)
}

func TestQuantizeSpecialInputs(t *testing.T) {
	for name, x := range specialRows() {
		t.Run(name, func(t *testing.T) {
			quantizeAll(t, x)
			finite := true
			for _, v := range x {
				finite = finite && !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
			}
			if !finite {
				return
			}
			// All-zero rows give all-zero blocks; finite Q8_0 rows whose d fits
			// fp16 (max|x| ≤ 127·65504) reconstruct finite values.
			zero, amax := true, 0.0
			for _, v := range x {
				zero = zero && v == 0
				amax = max(amax, math.Abs(float64(v)))
			}
			for _, typ := range []Type{Q8_0, Q4_K, Q5_K, Q6_K} {
				w := quantized(t, typ, x)
				for i, b := range w {
					if zero && b != 0 {
						t.Errorf("%v: byte %d of a zero row is %#x", typ, i, b)
						break
					}
				}
				if typ == Q8_0 && amax <= 127*65504 {
					y := make([]float32, len(x))
					if err := DequantizeRow(typ, y, w); err != nil {
						t.Fatal(err)
					}
					for i, v := range y {
						if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("Q8_0 value %d of a finite row is %v", i, v)
						}
					}
				}
			}
		})
	}
}

// TestQuantizeRandomSpecials mixes special values into random rows.
func TestQuantizeRandomSpecials(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	specials := []float32{0, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 3.4e38, -3.4e38, 1e-45, 65504, 1e-8}
	for i := range 200 {
		x := randRow(rng, 256, math.Pow(10, float64(rng.IntN(12)-6)))
		for range rng.IntN(8) {
			x[rng.IntN(len(x))] = specials[rng.IntN(len(specials))]
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { quantizeAll(t, x) })
	}
}

// FuzzQuantize feeds arbitrary bytes, read as float32 values, to every
// quantizer: nothing may panic.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0xc0, 0x7f})             // NaN
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0, 0}) // +Inf, 0
	f.Add([]byte{0xff, 0xff, 0x7f, 0x7f, 1, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		x := make([]float32, 256)
		for i := range x {
			j := 4 * i % (len(data) - len(data)%4)
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[j:]))
		}
		quantizeAll(t, x)
	})
}
