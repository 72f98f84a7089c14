package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulBatchInvariant checks that a matrix product's result for one
// input does not depend on the other inputs of the call: every column of a
// MatMul over n inputs equals, bit for bit, the MatMul of that input alone
// (the matrix-vector path), of any run of inputs that contains it, and
// MatVec, and that it does not depend on the other weight rows either: a
// product over any run of rows gives those rows' results bit for bit.
// Prefill that resumes from a cut point, and sequences batched with
// others, rely on it to reproduce a cold single-sequence run exactly.
func TestMatMulBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	shapes := []struct{ rows, cols int }{
		{1, 8}, {3, 24}, {4, 7}, {5, 64}, {8, 257}, {13, 100}, {36, 512},
		{12, kBlock}, {9, kBlock + 8}, {7, 2*kBlock + 40},
	}
	const n = 19
	for _, k := range kernelSets(t) {
		for _, s := range shapes {
			x := randF32(r, n*s.cols)
			wb := randU16(r, kinds[0], s.rows*s.cols)
			wh := randU16(r, kinds[1], s.rows*s.cols)
			wf := randF32(r, s.rows*s.cols)
			type product struct {
				name string
				mm   func(dst []float32, x []float32, n int) error
				mv   func(dst []float32, x []float32) error
				// mmRows computes rows [a, b) only, into dst[i*ldd+a:].
				mmRows func(dst []float32, ldd, a, b int, x []float32, n int) error
			}
			products := []product{
				{"BF16", func(d, x []float32, n int) error { return k.MatMulBF16(d, s.rows, wb, s.rows, s.cols, x, n) },
					func(d, x []float32) error { return k.MatVecBF16(d, wb, s.rows, s.cols, x) },
					func(d []float32, ldd, a, b int, x []float32, n int) error {
						return k.MatMulBF16(d[a:], ldd, wb[a*s.cols:b*s.cols], b-a, s.cols, x, n)
					}},
				{"F16", func(d, x []float32, n int) error { return k.MatMulF16(d, s.rows, wh, s.rows, s.cols, x, n) },
					func(d, x []float32) error { return k.MatVecF16(d, wh, s.rows, s.cols, x) },
					func(d []float32, ldd, a, b int, x []float32, n int) error {
						return k.MatMulF16(d[a:], ldd, wh[a*s.cols:b*s.cols], b-a, s.cols, x, n)
					}},
				{"F32", func(d, x []float32, n int) error { return k.MatMulF32(d, s.rows, wf, s.rows, s.cols, x, n) },
					func(d, x []float32) error { return k.MatVecF32(d, wf, s.rows, s.cols, x) },
					func(d []float32, ldd, a, b int, x []float32, n int) error {
						return k.MatMulF32(d[a:], ldd, wf[a*s.cols:b*s.cols], b-a, s.cols, x, n)
					}},
			}
			for _, p := range products {
				what := fmt.Sprintf("%s %s %dx%d", k.Name(), p.name, s.rows, s.cols)
				all := make([]float32, n*s.rows)
				if err := p.mm(all, x, n); err != nil {
					t.Fatal(err)
				}
				// Runs [i, j) of the inputs, including single inputs.
				for _, run := range [][2]int{{0, 1}, {5, 6}, {n - 1, n}, {1, 4}, {2, 9}, {0, 8}, {9, 13}, {12, 18}, {3, n}, {7, 15}} {
					i, j := run[0], run[1]
					got := make([]float32, (j-i)*s.rows)
					if err := p.mm(got, x[i*s.cols:j*s.cols], j-i); err != nil {
						t.Fatal(err)
					}
					for q := i; q < j; q++ {
						sameBits(t, fmt.Sprintf("%s MatMul of inputs [%d,%d)", what, i, j), q,
							got[(q-i)*s.rows:(q-i+1)*s.rows], all[q*s.rows:(q+1)*s.rows])
					}
				}
				for q := range n {
					got := make([]float32, s.rows)
					if err := p.mv(got, x[q*s.cols:(q+1)*s.cols]); err != nil {
						t.Fatal(err)
					}
					sameBits(t, what+" MatVec", q, got, all[q*s.rows:(q+1)*s.rows])
				}
				// Runs of weight rows, as the workers' shares of a product.
				for _, run := range [][2]int{{0, 1}, {s.rows - 1, s.rows}, {1, s.rows}, {0, s.rows - 1}, {s.rows / 3, s.rows/3 + 5}} {
					a, b := run[0], min(run[1], s.rows)
					if a >= b {
						continue
					}
					for _, m := range []int{1, 2, n} {
						got := make([]float32, m*s.rows)
						if err := p.mmRows(got, s.rows, a, b, x, m); err != nil {
							t.Fatal(err)
						}
						for q := range m {
							sameBits(t, fmt.Sprintf("%s rows [%d,%d) of %d inputs", what, a, b, m), q,
								got[q*s.rows+a:q*s.rows+b], all[q*s.rows+a:q*s.rows+b])
						}
					}
				}
			}
		}
	}
}

// sameBits fails unless got and want are identical bit for bit.
func sameBits(t *testing.T, what string, input int, got, want []float32) {
	t.Helper()
	for r := range want {
		if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
			t.Fatalf("%s: input %d row %d: %v (%#x), with all inputs %v (%#x)", what, input, r,
				got[r], math.Float32bits(got[r]), want[r], math.Float32bits(want[r]))
		}
	}
}

// TestMatMulF32Strided checks that a product over rows embedded in a wider
// matrix equals, bit for bit, the product over the same rows packed.
func TestMatMulF32Strided(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, k := range kernelSets(t) {
		for _, s := range []struct{ rows, cols, pad, n int }{{1, 8, 3, 1}, {5, 64, 8, 3}, {7, 256, 768, 4}, {13, 100, 1, 2}} {
			ldw := s.cols + s.pad
			wide := randF32(r, s.rows*ldw)
			packed := make([]float32, s.rows*s.cols)
			for i := range s.rows {
				copy(packed[i*s.cols:(i+1)*s.cols], wide[i*ldw:i*ldw+s.cols])
			}
			x := randF32(r, s.n*s.cols)
			want := make([]float32, s.n*s.rows)
			got := make([]float32, s.n*s.rows)
			if err := k.MatMulF32(want, s.rows, packed, s.rows, s.cols, x, s.n); err != nil {
				t.Fatal(err)
			}
			if err := k.MatMulF32Strided(got, s.rows, wide[:(s.rows-1)*ldw+s.cols], ldw, s.rows, s.cols, x, s.n); err != nil {
				t.Fatal(err)
			}
			for q := range s.n {
				sameBits(t, fmt.Sprintf("%s strided %+v", k.Name(), s), q, got[q*s.rows:(q+1)*s.rows], want[q*s.rows:(q+1)*s.rows])
			}
		}
		if err := k.MatMulF32Strided(make([]float32, 2), 2, make([]float32, 10), 4, 2, 8, make([]float32, 8), 1); err == nil {
			t.Errorf("%s: stride below cols: no error", k.Name())
		}
	}
}

// TestInputBlockChangesNothing checks that the per-machine cache blocking
// (inputs per block, which follows the L2 size) changes no result bit.
func TestInputBlockChangesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	const rows, cols, n = 9, 2*kBlock + 24, 50
	w := randU16(r, kinds[0], rows*cols)
	x := randF32(r, n*cols)
	for _, f := range []Features{{}, {AVX2: true}, {AVX2: true, packedBF16: true}, {AVX2: true, AVX512: true}, {NEON: true}} {
		want := make([]float32, n*rows)
		if err := New(f).MatMulBF16(want, rows, w, rows, cols, x, n); err != nil {
			t.Fatal(err)
		}
		for _, nb := range []int{1, 6, 12, 120} {
			k := newBlocked(f, nb)
			got := make([]float32, n*rows)
			if err := k.MatMulBF16(got, rows, w, rows, cols, x, n); err != nil {
				t.Fatal(err)
			}
			for q := range n {
				sameBits(t, fmt.Sprintf("%s nBlock %d", k.Name(), nb), q, got[q*rows:(q+1)*rows], want[q*rows:(q+1)*rows])
			}
		}
	}
	if got := inputBlock(512 << 10); got != 30 {
		t.Errorf("inputBlock(512 KiB) = %d, want 30", got)
	}
	if a, b := inputBlock(0), inputBlock(64<<20); a != 30 || b != 120 {
		t.Errorf("inputBlock(unknown) = %d, inputBlock(64 MiB) = %d, want 30 and 120", a, b)
	}
}

// TestTileInputs checks the split of a block's inputs into tiles: the
// fewest tiles of at most maxN inputs, as even as can be.
func TestTileInputs(t *testing.T) {
	tl := &tiler[uint16, float32]{maxN: 6}
	for left, want := range map[int][]int{1: {1}, 6: {6}, 7: {4, 3}, 8: {4, 4}, 13: {5, 4, 4}, 30: {6, 6, 6, 6, 6}} {
		var got []int
		for l := left; l > 0; {
			nb := tl.tileInputs(l)
			got = append(got, nb)
			l -= nb
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%d inputs: tiles %v, want %v", left, got, want)
		}
	}
}

// TestGemmBF16BatchInvariant checks GemmBF16 as TestMatMulBatchInvariant
// checks MatMulBF16: one input's results, bit for bit, whichever inputs
// and weight rows share the call (one input runs a prefetching tile of
// its own on AVX512_BF16).
func TestGemmBF16BatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const n = 19
	for _, k := range kernelSets(t) {
		for _, s := range []struct{ rows, cols int }{{1, 8}, {5, 64}, {13, 100}, {12, kBlock}, {7, 2*kBlock + 40}} {
			w := randU16(r, kinds[0], s.rows*s.cols)
			x := make([]uint16, n*s.cols)
			F32ToBF16Slice(x, randF32(r, n*s.cols))
			all := make([]float32, n*s.rows)
			if err := k.GemmBF16(all, s.rows, w, s.rows, s.cols, x, n); err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s GemmBF16 %dx%d", k.Name(), s.rows, s.cols)
			for _, run := range [][2]int{{0, 1}, {5, 6}, {n - 1, n}, {1, 4}, {0, 8}, {3, n}} {
				i, j := run[0], run[1]
				got := make([]float32, (j-i)*s.rows)
				if err := k.GemmBF16(got, s.rows, w, s.rows, s.cols, x[i*s.cols:j*s.cols], j-i); err != nil {
					t.Fatal(err)
				}
				for q := i; q < j; q++ {
					sameBits(t, fmt.Sprintf("%s inputs [%d,%d)", what, i, j), q,
						got[(q-i)*s.rows:(q-i+1)*s.rows], all[q*s.rows:(q+1)*s.rows])
				}
			}
			for _, run := range [][2]int{{0, 1}, {s.rows - 1, s.rows}, {1, s.rows}} {
				a, b := run[0], run[1]
				if a >= b {
					continue
				}
				for _, m := range []int{1, n} {
					got := make([]float32, m*s.rows)
					if err := k.GemmBF16(got[a:], s.rows, w[a*s.cols:b*s.cols], b-a, s.cols, x, m); err != nil {
						t.Fatal(err)
					}
					for q := range m {
						sameBits(t, fmt.Sprintf("%s rows [%d,%d) of %d inputs", what, a, b, m), q,
							got[q*s.rows+a:q*s.rows+b], all[q*s.rows+a:q*s.rows+b])
					}
				}
			}
		}
	}
}
