package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmRef is GemmF32 in float64 with no fused steps, for the error bound.
func gemmRef(c []float32, ldc int, a []float32, rsa, csa int, b []float32, ldb, m, n, kk int, acc bool) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			if acc {
				s = float64(c[i*ldc+j])
			}
			for p := range kk {
				s += float64(a[i*rsa+p*csa]) * float64(b[p*ldb+j])
			}
			out[i*n+j] = s
		}
	}
	return out
}

// TestGemmF32 checks every kernel set against the Go twin bit for bit, on
// shapes around the tile sizes (rows 1..6 and beyond, columns around 16 and
// 64, steps around the k block), both strides of A, with and without
// accumulation, and checks that values outside the m×n block of C are left
// alone. The twin itself is checked against a float64 product.
func TestGemmF32(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	type shape struct{ m, n, k int }
	shapes := []shape{{1, 1, 1}, {1, 16, 3}, {2, 17, 5}, {3, 64, 64}, {4, 65, 7}, {5, 48, 130},
		{6, 128, 256}, {7, 31, 9}, {13, 100, 300}, {19, 256, 64}, {64, 128, 256}}
	for _, k := range kernelSets(t) {
		for _, s := range shapes {
			for _, transposed := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					ldc, ldb := s.n+3, s.n+5
					rsa, csa := s.k+2, 1
					if transposed {
						rsa, csa = 1, s.m+1
					}
					a := randF32(r, (s.m-1)*rsa+(s.k-1)*csa+1)
					b := randF32(r, (s.k-1)*ldb+s.n)
					c0 := randF32(r, (s.m-1)*ldc+s.n+2)
					got := append([]float32(nil), c0...)
					want := append([]float32(nil), c0...)
					if err := k.GemmF32(got, ldc, a, rsa, csa, b, ldb, s.m, s.n, s.k, acc); err != nil {
						t.Fatal(err)
					}
					gemmF32Go(want, ldc, a, rsa, csa, b, ldb, s.m, s.n, s.k, acc)
					what := fmt.Sprintf("%s GemmF32 %+v transposed=%v acc=%v", k.Name(), s, transposed, acc)
					sameBits(t, what, 0, got, want)
					ref := gemmRef(c0, ldc, a, rsa, csa, b, ldb, s.m, s.n, s.k, acc)
					for i := range s.m {
						for j := range s.n {
							// Each step rounds once, on sums of at most k+1
							// terms of magnitude below 1.
							bound := float64(s.k+1) * float64(s.k+1) * 0x1p-24
							if d := math.Abs(float64(got[i*ldc+j]) - ref[i*s.n+j]); d > bound {
								t.Fatalf("%s: c[%d,%d] = %v, float64 %v (bound %g)", what, i, j, got[i*ldc+j], ref[i*s.n+j], bound)
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmF32RowInvariant checks that a row of C does not depend on which
// other rows and columns the call computes: the property attention relies on
// for results independent of batch and prompt cuts.
func TestGemmF32RowInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	const m, n, kk = 23, 200, 140
	a := randF32(r, m*kk)
	b := randF32(r, kk*n)
	for _, k := range kernelSets(t) {
		all := make([]float32, m*n)
		if err := k.GemmF32(all, n, a, kk, 1, b, n, m, n, kk, false); err != nil {
			t.Fatal(err)
		}
		for _, cut := range []struct{ i0, i1, j0, j1 int }{{0, 1, 0, n}, {5, 12, 3, 70}, {22, 23, 199, 200}, {7, 23, 64, 128}} {
			part := make([]float32, (cut.i1-cut.i0)*n)
			if err := k.GemmF32(part[cut.j0:], n, a[cut.i0*kk:], kk, 1, b[cut.j0:], n, cut.i1-cut.i0, cut.j1-cut.j0, kk, false); err != nil {
				t.Fatal(err)
			}
			for i := cut.i0; i < cut.i1; i++ {
				sameBits(t, fmt.Sprintf("%s rows %d-%d cols %d-%d", k.Name(), cut.i0, cut.i1, cut.j0, cut.j1), i,
					part[(i-cut.i0)*n+cut.j0:(i-cut.i0)*n+cut.j1], all[i*n+cut.j0:i*n+cut.j1])
			}
		}
	}
}

// TestGemmF32Errors checks the argument checks.
func TestGemmF32Errors(t *testing.T) {
	k := Detect()
	c, a, b := make([]float32, 16), make([]float32, 16), make([]float32, 16)
	for _, tc := range []struct {
		name               string
		ldc, rsa, csa, ldb int
		m, n, kk           int
		c, a, b            []float32
	}{
		{"ldc below n", 2, 4, 1, 4, 2, 4, 4, c, a, b},
		{"short c", 4, 4, 1, 4, 5, 4, 1, c, a, b},
		{"short a", 4, 4, 1, 4, 4, 4, 5, c, a, b},
		{"short b", 4, 4, 1, 4, 4, 4, 4, c, a, b[:15]},
		{"negative stride", 4, -1, 1, 4, 2, 2, 2, c, a, b},
	} {
		if err := k.GemmF32(tc.c, tc.ldc, tc.a, tc.rsa, tc.csa, tc.b, tc.ldb, tc.m, tc.n, tc.kk, false); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	c[0] = 7
	if err := k.GemmF32(c, 4, a, 4, 1, b, 4, 1, 4, 0, false); err != nil || c[0] != 0 {
		t.Errorf("k=0 without accumulation: err %v, c[0] = %v, want 0", err, c[0])
	}
}

// TestMaxF32 checks every kernel set against the twin, NaN included.
func TestMaxF32(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	nan := float32(math.NaN())
	for _, k := range kernelSets(t) {
		for _, n := range []int{0, 1, 7, 8, 9, 33, 100} {
			x, d := randF32(r, n), randF32(r, n)
			if n > 3 {
				x[1], d[2], x[3], d[3] = nan, nan, float32(math.Inf(1)), float32(math.Inf(-1))
			}
			got, want := append([]float32(nil), d...), append([]float32(nil), d...)
			k.MaxF32(got, x)
			maxF32Go(want, x)
			sameBits(t, fmt.Sprintf("%s MaxF32 n=%d", k.Name(), n), 0, got, want)
		}
	}
}

// BenchmarkGemmF32 runs the shapes of blocked attention at the Qwen3.5-9B
// head size: scores of 64 keys for 128 query rows over 256 dimensions (A
// the key rows, Bᵀ the queries), and their weighted sum of values.
func BenchmarkGemmF32(b *testing.B) {
	r := rand.New(rand.NewPCG(47, 48))
	k := Detect()
	for _, s := range []struct {
		name     string
		m, n, kk int
		rsa, csa int
		ldb      int
	}{
		{"scores-64x128x256", 64, 128, 256, 1024, 1, 128},
		{"values-128x256x64", 128, 256, 64, 1, 128, 1024},
	} {
		b.Run(s.name, func(b *testing.B) {
			a := randF32(r, (s.m-1)*s.rsa+(s.kk-1)*s.csa+1)
			bm := randF32(r, (s.kk-1)*s.ldb+s.n)
			c := make([]float32, s.m*s.n)
			for b.Loop() {
				if err := k.GemmF32(c, s.n, a, s.rsa, s.csa, bm, s.ldb, s.m, s.n, s.kk, true); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*float64(s.m*s.n*s.kk)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
