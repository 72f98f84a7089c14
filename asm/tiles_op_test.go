package asm

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

// TestMatMulBF16TilesOP checks every kernel set's outer-product tile
// products against the Go twin bit for bit and against exact sums: each
// fused multiply-add rounds once (2^-24 of the sum of magnitudes so far),
// a chain of at most 256 columns per segment and the segments' sums.
// The shapes have rows that are not multiples of 16 (the last group in
// scratch), columns that are not multiples of the 256 of a segment or
// the 512 of a run, every n from 1 to 40 on some, and n past the 30 from
// which the product runs blocked.
func TestMatMulBF16TilesOP(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	cases := append([]tileCase(nil), tileCases...)
	cases = append(cases, tileCase{36, 2112, 130}, tileCase{100, 544, 61}, tileCase{97, 800, 67})
	for n := 1; n <= 40; n++ {
		cases = append(cases, tileCase{16*(1+n%7) + n%3*5, 32 * (1 + n%11), n})
	}
	seg := tileOPSegSteps * tileCols
	for _, k := range kernelSets(t) {
		for _, c := range cases {
			chain := min(c.cols, seg) + 1 + (c.cols+seg-1)/seg
			checkTileProduct(t, r, k, c, (*Kernels).MatMulBF16TilesOP, matMulBF16TilesOPGo, chain)
		}
	}
}

// TestMatMulBF16TilesOPInvariant checks that an element of an
// outer-product tile product does not depend on the rest of the call: one
// input alone, any run of inputs and any run of whole groups of rows give
// the same bits, also where the whole product runs blocked (over 30
// inputs) and its parts do not, and where a prompt is cut at 64.
func TestMatMulBF16TilesOPInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	for _, c := range []tileCase{{75, 1088, 19}, {75, 2112, 100}, {107, 544, 130}} {
		w := randU16(r, kinds[0], c.rows*c.cols)
		wp := packWeights(t, w, c.rows, c.cols)
		x := randF32(r, c.n*c.cols)
		rows, cols, n := c.rows, c.cols, c.n
		for _, k := range kernelSets(t) {
			all := make([]float32, n*rows)
			if err := k.MatMulBF16TilesOP(all, rows, wp, rows, cols, x, n); err != nil {
				t.Fatal(err)
			}
			for _, in := range [][2]int{{0, 1}, {5, 6}, {n - 1, n}, {3, 12}, {9, n}, {1, n - 1}, {n / 3, n}, {0, min(64, n)}, {min(64, n-1), n}, {2, 9}} {
				m := in[1] - in[0]
				for _, rr := range [][2]int{{0, rows}, {0, 1}, {16, 40}, {32, 75}, {64, 75}, {48, 64}, {96, 107}} {
					if rr[1] > rows {
						continue
					}
					got := make([]float32, m*rows)
					if err := k.MatMulBF16TilesOP(got[rr[0]:], rows, wp[rr[0]*cols:], rr[1]-rr[0], cols, x[in[0]*cols:in[1]*cols], m); err != nil {
						t.Fatal(err)
					}
					for i := range m {
						for row := rr[0]; row < rr[1]; row++ {
							if a, b := all[(in[0]+i)*rows+row], got[i*rows+row]; math.Float32bits(a) != math.Float32bits(b) {
								t.Fatalf("%s %dx%d: input %d row %d: %g in the whole product, %g with inputs %v rows %v", k.Name(), rows, cols, in[0]+i, row, a, b, in, rr)
							}
						}
					}
				}
			}
		}
	}
	if err := Generic().MatMulBF16TilesOP(make([]float32, 16), 16, make([]uint16, 10), 16, 32, make([]float32, 32), 1); err == nil {
		t.Fatal("short weights were accepted")
	}
	if err := Generic().MatMulBF16TilesOP(make([]float32, 16), 16, make([]uint16, 16*48), 16, 48, make([]float32, 48), 1); err == nil {
		t.Fatal("48 columns were accepted")
	}
}

// TestFMA32 checks fma32 against a·b+c rounded once from the exact sum
// (math/big), on random operands and on ones whose float64 sum falls on
// a midpoint of two float32 values.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(75, 76))
	exact := func(a, b, c float32) float32 {
		var p, s big.Float
		p.SetPrec(1000).Mul(new(big.Float).SetFloat64(float64(a)), new(big.Float).SetFloat64(float64(b)))
		s.SetPrec(1000).Add(&p, new(big.Float).SetFloat64(float64(c)))
		f, _ := s.Float32()
		return f
	}
	check := func(a, b, c float32) {
		t.Helper()
		if got, want := fma32(a, b, c), exact(a, b, c); math.Float32bits(got) != math.Float32bits(want) && got != want {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
	for range 200000 {
		a := half.BF16ToF32(uint16(r.Uint32()))
		b, c := math.Float32frombits(r.Uint32()), math.Float32frombits(r.Uint32())
		if isFinite32(a) && isFinite32(b) && isFinite32(c) && isFinite32(a*b) {
			check(a, b, c)
		}
	}
	// 1 + 2^-24 + tiny: the float64 sum is the midpoint 1 + 2^-24, the
	// exact one above it; the same below 1 + 2^-24 with a negative tail.
	for _, k := range []int{30, 31, 40, 50} {
		tiny := math.Ldexp(1, -24) * (1 + math.Ldexp(1, -k))
		a := float32(math.Ldexp(1, -24))
		b := float32(1 + math.Ldexp(1, -k))
		if float64(a)*float64(b) != tiny {
			continue
		}
		check(a, b, 1)
		check(-a, b, -1)
		check(a, -b, 1+0x1p-23)
	}
	for range 100000 {
		// c large, a·b just past half an ulp of c, with bits far below.
		c := math.Float32frombits(0x3f800000 | r.Uint32()&0x7fffff)
		e := math.Ilogb(float64(c)) - 24
		a := half.BF16ToF32(0x3f80 | uint16(r.Uint32()&0x7f))
		b := float32(math.Ldexp(float64(1+float32(r.Uint32()&0xffffff)/(1<<24)), e-math.Ilogb(float64(a))))
		check(a, b, c)
		check(a, -b, c)
	}
}

func isFinite32(f float32) bool { return !math.IsInf(float64(f), 0) && !math.IsNaN(float64(f)) }
