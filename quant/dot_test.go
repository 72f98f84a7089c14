package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randRow returns n values of a roughly Gaussian weight or activation row,
// with a few outliers as real checkpoints have.
func randRow(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := rng.NormFloat64() * scale
		if rng.IntN(97) == 0 {
			v *= 8
		}
		x[i] = float32(v)
	}
	return x
}

func quantized(t testing.TB, typ Type, x []float32) []byte {
	w := make([]byte, typ.RowBytes(len(x)))
	if err := QuantizeRow(typ, w, x); err != nil {
		t.Fatal(err)
	}
	return w
}

var dotTypes = []struct {
	t       Type
	dot     func([]byte, []float32) float32
	lengths []int
}{
	{Q8_0, DotQ8_0, []int{32, 64, 96, 288, 1024, 4096, 12288}},
	{Q4_K, DotQ4K, []int{256, 512, 1280, 4096, 12288}},
	{Q6_K, DotQ6K, []int{256, 512, 1280, 4096, 12288}},
	{Q5_K, func(w []byte, x []float32) float32 { return Dot(Q5_K, w, x) }, []int{256, 768}},
}

// randBlocks returns a row of t blocks: quantized random values, except
// for Q5_K random bytes (every bit pattern of scales and qh) with sane fp16
// d and dmin.
func randBlocks(t testing.TB, rng *rand.Rand, typ Type, n int) []byte {
	if typ != Q5_K {
		return quantized(t, typ, randRow(rng, n, 0.02))
	}
	w := make([]byte, typ.RowBytes(n))
	for i := range w {
		w[i] = byte(rng.IntN(256))
	}
	for b := 0; b < len(w); b += q5KBytes {
		putF16(w[b:], float32(rng.Float64()*1e-3))
		putF16(w[b+2:], float32(rng.Float64()*1e-3))
	}
	return w
}

// TestDotTwins checks each float dot product against a float64 dot of the
// dequantized row, within the rounding bound of its documented order: n/8
// additions per lane, 3 in the reduction and the product's own rounding, so
// |err| ≤ (n/8 + 4)·2⁻²⁴·Σ|w·x|. It also checks the documented order
// itself: a plain loop over lane i mod 8 gives the same bits.
func TestDotTwins(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range dotTypes {
		for _, n := range dt.lengths {
			t.Run(fmt.Sprintf("%v/%d", dt.t, n), func(t *testing.T) {
				var worst float64
				for range 20 {
					w := randBlocks(t, rng, dt.t, n)
					x := randRow(rng, n, 1)
					deq := make([]float32, n)
					if err := DequantizeRow(dt.t, deq, w); err != nil {
						t.Fatal(err)
					}
					var ref, mag float64
					var lane [8]float32
					for i := range deq {
						p := float64(deq[i]) * float64(x[i])
						ref += p
						mag += math.Abs(p)
						lane[i%8] += float32(deq[i] * x[i])
					}
					got := dt.dot(w, x)
					if want := ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7])); got != want {
						t.Fatalf("dot = %v, the documented order gives %v", got, want)
					}
					if g := Dot(dt.t, w, x); g != got {
						t.Fatalf("Dot = %v, want %v", g, got)
					}
					bound := float64(n/8+4) * 0x1p-24 * mag
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

func TestMatVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []Type{Q8_0, Q4_K, Q5_K, Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			const rows, cols = 5, 512
			w := quantized(t, typ, randRow(rng, rows*cols, 0.05))
			x := randRow(rng, cols, 1)
			dst := make([]float32, rows)
			MatVec(typ, dst, w, rows, cols, x)
			rb := typ.RowBytes(cols)
			for r := range rows {
				if want := Dot(typ, w[r*rb:(r+1)*rb], x); dst[r] != want {
					t.Errorf("row %d = %v, want %v", r, dst[r], want)
				}
			}
			for _, bad := range []func(){
				func() { MatVec(typ, dst, w, rows, cols+1, x) },
				func() { MatVec(typ, dst[:4], w, rows, cols, x) },
				func() { MatVec(typ, dst, w[1:], rows, cols, x) },
				func() { MatVec(typ, dst, w, rows, cols, x[1:]) },
				func() { Dot(typ, w[:rb-1], x) },
			} {
				if !panics(bad) {
					t.Error("a bad shape did not panic")
				}
			}
		})
	}
	if !panics(func() { Dot(Keep, nil, nil) }) {
		t.Error("Dot(Keep) did not panic")
	}
}

func panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}
