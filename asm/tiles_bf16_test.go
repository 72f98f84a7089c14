package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// tileCase is one shape of the tile product tests.
type tileCase struct{ rows, cols, n int }

var tileCases = []tileCase{
	{1, 32, 1}, {16, 32, 16}, {17, 64, 5}, {31, 96, 17}, {32, 32, 32}, {33, 128, 33},
	{70, 320, 40}, {130, 64, 3}, {48, 1024, 20}, {5, 2048, 1},
}

// packTiles packs x for a tile product, in two calls of whole groups where
// there are several, as parallel callers do.
func packTiles(t *testing.T, x []float32, n, cols, parts int) []uint16 {
	t.Helper()
	xp := make([]uint16, TileBF16InputLen(n, cols, parts))
	for i := range xp {
		xp[i] = 0xFFFF // NaN: a value the packing forgets shows
	}
	mid := n / 2 / tileInputs * tileInputs
	if err := PackTileBF16(xp, x, n, cols, parts, 0, mid); err != nil {
		t.Fatal(err)
	}
	if err := PackTileBF16(xp, x, n, cols, parts, mid, n); err != nil {
		t.Fatal(err)
	}
	return xp
}

// TestMatMulBF16Tiles checks every kernel set's tile products against
// exact sums: the float32 accumulation may err by 2^-23 of the sum of
// magnitudes per column, and the inputs' parts by 2^-16 of it (two) or
// 2^-25 (three); with one part the reference rounds the inputs to bf16
// first. A product that dropped a part would err by about 2^-9 or 2^-17
// of the sum: the columns are few enough for the bound to see it.
func TestMatMulBF16Tiles(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, k := range kernelSets(t) {
		for _, c := range tileCases {
			w := randU16(r, kinds[0], c.rows*c.cols)
			x := randF32(r, c.n*c.cols)
			for parts := 1; parts <= MaxTileParts; parts++ {
				what := fmt.Sprintf("%s %dx%d n=%d parts=%d", k.Name(), c.rows, c.cols, c.n, parts)
				xp := packTiles(t, x, c.n, c.cols, parts)
				ldd := c.rows + 3
				buf, dst := guarded((c.n-1)*ldd + c.rows)
				if err := k.MatMulBF16Tiles(dst, ldd, w, c.rows, c.cols, xp, c.n, parts); err != nil {
					t.Fatal(err)
				}
				checkGuards(t, what, buf)
				for i := range c.n {
					for row := range c.rows {
						var want, abs float64
						for col := range c.cols {
							xv := float64(x[i*c.cols+col])
							if parts == 1 {
								xv = float64(bf16(f32ToBF16(x[i*c.cols+col])))
							}
							p := float64(bf16(w[row*c.cols+col])) * xv
							want += p
							abs += math.Abs(p)
						}
						tol := float64(c.cols) * 0x1p-23 * abs
						switch parts {
						case 2:
							tol += 0x1p-16 * abs
						case 3:
							tol += 0x1p-25 * abs
						}
						if d := math.Abs(float64(dst[i*ldd+row]) - want); !(d <= tol) {
							t.Fatalf("%s: input %d row %d: got %g, want %g (error %g, allowed %g)", what, i, row, dst[i*ldd+row], want, d, tol)
						}
						if i+1 < c.n {
							for g := row + 1; g < ldd && i*ldd+g < len(dst); g++ {
								if g >= c.rows && dst[i*ldd+g] != sentinel {
									t.Fatalf("%s: wrote past row %d of input %d", what, c.rows, i)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulBF16TilesInvariant checks that an element of a tile product
// does not depend on the rest of the call: the product of one input alone,
// of any run of inputs (packed from its own start), or of any run of rows
// gives the same bits.
func TestMatMulBF16TilesInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const rows, cols, n = 75, 256, 37
	w := randU16(r, kinds[0], rows*cols)
	x := randF32(r, n*cols)
	for _, k := range kernelSets(t) {
		for parts := 1; parts <= MaxTileParts; parts++ {
			all := make([]float32, n*rows)
			if err := k.MatMulBF16Tiles(all, rows, w, rows, cols, packTiles(t, x, n, cols, parts), n, parts); err != nil {
				t.Fatal(err)
			}
			runs := [][2]int{{0, 1}, {5, 6}, {36, 37}, {3, 20}, {17, 37}, {1, 36}}
			for _, in := range runs {
				m := in[1] - in[0]
				xs := x[in[0]*cols : in[1]*cols]
				for _, rr := range [][2]int{{0, rows}, {1, 2}, {7, 40}, {32, 75}, {74, 75}, {3, 70}} {
					got := make([]float32, m*rows)
					if err := k.MatMulBF16Tiles(got[rr[0]:], rows, w[rr[0]*cols:rr[1]*cols], rr[1]-rr[0], cols, packTiles(t, xs, m, cols, parts), m, parts); err != nil {
						t.Fatal(err)
					}
					for i := range m {
						for row := rr[0]; row < rr[1]; row++ {
							if a, b := all[(in[0]+i)*rows+row], got[i*rows+row]; math.Float32bits(a) != math.Float32bits(b) {
								t.Fatalf("%s parts=%d: input %d row %d: %g in the whole product, %g with inputs %v rows %v", k.Name(), parts, in[0]+i, row, a, b, in, rr)
							}
						}
					}
				}
			}
		}
	}
}

// TestPackTileBF16 checks the packed layout and the parts: each packed
// pair holds its input's two columns, the parts of padding inputs are
// zero, and the parts add up to the input within 2^-8, 2^-17 or 2^-26 of
// it.
func TestPackTileBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	const n, cols = 21, 96
	x := randF32(r, n*cols)
	x[7] = 1e-30
	x[8] = 3e38
	steps := cols / tileCols
	for parts := 1; parts <= MaxTileParts; parts++ {
		xp := packTiles(t, x, n, cols, parts)
		partLen := len(xp) / parts
		for i := range 32 {
			for c := range cols {
				g, slot, st, p, e := i/16, i%16, c/32, c%32/2, c%2
				o := g*steps*512 + st*512 + p*32 + 2*slot + e
				var sum float64
				for q := range parts {
					v := bf16(xp[q*partLen+o])
					if i >= n && v != 0 {
						t.Fatalf("padding input %d col %d part %d: %g", i, c, q, v)
					}
					sum += float64(v)
				}
				if i >= n {
					continue
				}
				v := float64(x[i*cols+c])
				if d := math.Abs(v - sum); d > math.Ldexp(math.Abs(v), 1-9*parts) {
					t.Fatalf("%d parts: input %d col %d: %g split into parts summing to %g", parts, i, c, v, sum)
				}
			}
		}
	}
	xp := make([]uint16, TileBF16InputLen(n, cols, 3))
	if err := PackTileBF16(xp, x, n, cols, 3, 3, n); err == nil {
		t.Fatal("a start inside a group was accepted")
	}
	if err := PackTileBF16(xp[:10], x, n, cols, 3, 0, n); err == nil {
		t.Fatal("a short output was accepted")
	}
	if TileBF16InputLen(2, 48, 1) != 0 || TileBF16InputLen(2, 64, 4) != 0 || TileBF16InputLen(2, 64, 0) != 0 {
		t.Fatal("a tile layout for 48 columns or 0 or 4 parts")
	}
}

// f32ToBF16 rounds to bf16 as the packing does.
func f32ToBF16(v float32) uint16 { h, _ := splitBF16(v); return h }
