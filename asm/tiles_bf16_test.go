package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
)

// tileCase is one shape of the tile product tests.
type tileCase struct{ rows, cols, n int }

var tileCases = []tileCase{
	{1, 32, 1}, {16, 32, 16}, {17, 64, 5}, {31, 96, 17}, {32, 32, 32}, {33, 128, 33},
	{70, 320, 40}, {130, 64, 3}, {48, 1024, 20}, {5, 2048, 1}, {160, 64, 70}, {40, 1088, 33}, {20, 64, 2100}, {66, 96, 2}, {64, 64, 4}, {200, 1088, 9},
}

// packTiles packs x for a tile product, in two calls where there are
// several inputs, as parallel callers do.
func packTiles(t *testing.T, k *Kernels, x []float32, n, cols, parts int) []uint16 {
	t.Helper()
	xp := make([]uint16, TileBF16InputLen(n, cols, parts))
	for i := range xp {
		xp[i] = 0xFFFF // NaN: a value the packing forgets shows
	}
	if err := k.PackTileBF16(xp, x, n, cols, parts, 0, n/2); err != nil {
		t.Fatal(err)
	}
	if err := k.PackTileBF16(xp, x, n, cols, parts, n/2, n); err != nil {
		t.Fatal(err)
	}
	return xp
}

// packWeights packs w in the tile layout.
func packWeights(t testing.TB, w []uint16, rows, cols int) []uint16 {
	t.Helper()
	wp := make([]uint16, TileBF16WeightLen(rows, cols))
	if err := PackTileBF16Weights(wp, w, rows, cols); err != nil {
		t.Fatal(err)
	}
	return wp
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
			wp := packWeights(t, w, c.rows, c.cols)
			x := randF32(r, c.n*c.cols)
			for parts := 1; parts <= MaxTileParts; parts++ {
				what := fmt.Sprintf("%s %dx%d n=%d parts=%d", k.Name(), c.rows, c.cols, c.n, parts)
				xp := packTiles(t, k, x, c.n, c.cols, parts)
				ldd := c.rows + 3
				buf, dst := guarded((c.n-1)*ldd + c.rows)
				for i := range dst {
					dst[i] = sentinel
				}
				if err := k.MatMulBF16Tiles(dst, ldd, wp, c.rows, c.cols, xp, c.n, parts); err != nil {
					t.Fatal(err)
				}
				checkGuards(t, what, buf)
				for i := range c.n {
					for row := c.rows; row < ldd && i+1 < c.n; row++ {
						if dst[i*ldd+row] != sentinel {
							t.Fatalf("%s: input %d: wrote past the rows, at %d", what, i, row)
						}
					}
					for row := range c.rows {
						var want, abs float64
						for col := range c.cols {
							xv := float64(x[i*c.cols+col])
							if parts == 1 {
								xv = float64(half.BF16ToF32(f32ToBF16(x[i*c.cols+col])))
							}
							p := float64(half.BF16ToF32(w[row*c.cols+col])) * xv
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
					}
				}
			}
		}
	}
}

// TestMatMulBF16TilesInvariant checks that an element of a tile product
// does not depend on the rest of the call: the product of one input alone,
// of any run of inputs (packed from its own start), or of any run of
// whole groups of rows gives the same bits.
func TestMatMulBF16TilesInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const rows, cols, n = 75, 1088, 37
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(t, w, rows, cols)
	x := randF32(r, n*cols)
	for _, k := range kernelSets(t) {
		for parts := 1; parts <= MaxTileParts; parts++ {
			all := make([]float32, n*rows)
			if err := k.MatMulBF16Tiles(all, rows, wp, rows, cols, packTiles(t, k, x, n, cols, parts), n, parts); err != nil {
				t.Fatal(err)
			}
			runs := [][2]int{{0, 1}, {5, 6}, {36, 37}, {3, 20}, {17, 37}, {1, 36}}
			for _, in := range runs {
				m := in[1] - in[0]
				xp := packTiles(t, k, x[in[0]*cols:in[1]*cols], m, cols, parts)
				for _, rr := range [][2]int{{0, rows}, {0, 1}, {16, 40}, {32, 75}, {64, 75}, {48, 64}} {
					got := make([]float32, m*rows)
					if err := k.MatMulBF16Tiles(got[rr[0]:], rows, wp[rr[0]*cols:], rr[1]-rr[0], cols, xp, m, parts); err != nil {
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

// TestTileBF16Weights checks the weight layout: every row unpacks to
// itself, padding rows are zero, and each tile line holds its columns.
func TestTileBF16Weights(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	const rows, cols = 21, 96
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(t, w, rows, cols)
	row := make([]uint16, cols)
	for i := range rows {
		if err := UnpackTileBF16Row(row, wp, rows, cols, i); err != nil {
			t.Fatal(err)
		}
		for c, v := range row {
			if v != w[i*cols+c] {
				t.Fatalf("row %d col %d: unpacked %#x, want %#x", i, c, v, w[i*cols+c])
			}
			g, lane, st := i/16, i%16, c/32
			if got := wp[(g*3+st)*512+c%32/2*32+2*lane+c%2]; got != v {
				t.Fatalf("row %d col %d: packed %#x, want %#x", i, c, got, v)
			}
		}
	}
	for i := rows * cols; i < len(wp); i++ {
		if g, lane := i/(3*512), i%32/2; g == 1 && lane >= rows-16 && wp[i] != 0 {
			t.Fatalf("padding value %d is %#x", i, wp[i])
		}
	}
	if err := PackTileBF16Weights(wp, w[:10], rows, cols); err == nil {
		t.Fatal("a short matrix was accepted")
	}
	if err := UnpackTileBF16Row(row, wp, rows, cols, rows); err == nil {
		t.Fatal("a row past the end was unpacked")
	}
	if TileBF16WeightLen(2, 48) != 0 {
		t.Fatal("48 columns have a tile layout")
	}
}

// TestPackTileBF16WeightsAlignment checks that the pair-wise packing of
// aligned slices and the value-wise one of a matrix or output 2 bytes off
// a 4-byte boundary lay out the same values, padding zeros written over
// whatever the output held.
func TestPackTileBF16WeightsAlignment(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 40))
	for _, c := range []struct{ rows, cols int }{{1, 32}, {16, 64}, {21, 96}, {35, 1024}} {
		w := randU16(r, kinds[0], c.rows*c.cols+1)
		want := packWeights(t, w[:c.rows*c.cols], c.rows, c.cols)
		for _, off := range []struct{ w, dst int }{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
			src := w[off.w:][:c.rows*c.cols]
			copy(src, w[:c.rows*c.cols])
			buf := make([]uint16, len(want)+1)
			for i := range buf {
				buf[i] = 0xFFFF
			}
			dst := buf[off.dst:][:len(want)]
			if err := PackTileBF16Weights(dst, src, c.rows, c.cols); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if dst[i] != want[i] {
					t.Fatalf("%d×%d, offsets %+v: value %d is %#x, want %#x", c.rows, c.cols, off, i, dst[i], want[i])
				}
			}
			copy(w, src) // w[:rows*cols] again for the next offsets
		}
	}
}

// TestPackTileBF16 checks the packed inputs of every kernel set against
// the Go twin's, bit for bit, and the layout: 1 KiB tiles of 16 inputs'
// 32 columns per step and part, zero padding inputs, and parts that add
// up to the input within 2^-8, 2^-17 or 2^-26 of it. The inputs include
// zeros, subnormals, values that round up to the next power of two and
// the largest finite ones.
func TestPackTileBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	const n, cols = 21, 96
	x := randF32(r, n*cols)
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-40, 1e-45, 0x1.ffffffp+0, -0x1.ff8p-3,
		math.MaxFloat32, -3e38, 0x1.fe01p+127, 1.17549435e-38, 65504}
	for i, v := range special {
		x[5*i+3] = v
	}
	steps := cols / tileCols
	sets := kernelSets(t)
	for parts := 1; parts <= MaxTileParts; parts++ {
		want := packTiles(t, sets[0], x, n, cols, parts)
		for _, k := range sets[1:] {
			got := packTiles(t, k, x, n, cols, parts)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s: %d parts: value %d is %#x, the twin's %#x", k.Name(), parts, i, got[i], want[i])
				}
			}
		}
		for i := range 32 {
			for c := range cols {
				var sum float64
				for q := range parts {
					v := half.BF16ToF32(want[tileInputAt(i, c/32, q, steps, parts)+c%32])
					if i >= n && v != 0 {
						t.Fatalf("padding input %d col %d part %d: %g", i, c, q, v)
					}
					sum += float64(v)
				}
				if i >= n {
					continue
				}
				v := float64(x[i*cols+c])
				if math.Abs(v) > 0x1.fefp+127 || math.Abs(v) < 0x1p-126 {
					continue // rounds to infinity, or a subnormal read as zero
				}
				if d := math.Abs(v - sum); d > math.Ldexp(math.Abs(v), 1-9*parts) {
					t.Fatalf("%d parts: input %d col %d: %g split into parts summing to %g", parts, i, c, v, sum)
				}
			}
		}
	}
	k := Generic()
	xp := make([]uint16, TileBF16InputLen(n, cols, 3))
	if err := k.PackTileBF16(xp, x, n, cols, 3, 5, 3); err == nil {
		t.Fatal("an empty run backwards was accepted")
	}
	if err := k.PackTileBF16(xp[:10], x, n, cols, 3, 0, n); err == nil {
		t.Fatal("a short output was accepted")
	}
	if TileBF16InputLen(2, 48, 1) != 0 || TileBF16InputLen(2, 64, 4) != 0 || TileBF16InputLen(2, 64, 0) != 0 {
		t.Fatal("a tile layout for 48 columns or 0 or 4 parts")
	}
}

// f32ToBF16 rounds to bf16 as the packing does.
func f32ToBF16(v float32) uint16 { h, _ := splitBF16(v); return h }

// TestMatMulBF16TilesFMA checks every kernel set's FMA products of
// tile-layout weights bit for bit against the Go twin (whose float64 FMA
// could differ from a float32 one only where a result falls on a float32
// tie, which the fixed inputs here do not meet), so the order of the
// additions is the documented one, and against exact sums: a chain of at
// most 128 fused products per segment, then the segments, each
// rounding by at most 2^-24 of the sum of magnitudes.
func TestMatMulBF16TilesFMA(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, k := range kernelSets(t) {
		// Over 32 inputs run blocked by 1024 columns and 64 inputs.
		for _, c := range append(tileCases, tileCase{36, 2112, 130}) {
			chain := min(c.cols/2, tileFMASegSteps*tileCols/2) + 2 + c.cols/(tileFMASegSteps*tileCols)
			checkTileProduct(t, r, k, c, (*Kernels).MatMulBF16TilesFMA, matMulBF16TilesFMAGo, chain)
		}
	}
}

// tileProduct is a product of tile-layout bf16 weights (a kernel or its Go
// twin): dst rows ldd apart, n inputs.
type tileProduct func(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int)

// checkTileProduct runs kernel on random weights and inputs of the shape c
// and checks that it writes neither past the rows nor past dst, that it
// gives its Go twin's bits, and that each element is within
// chain * 2^-24 * sum|w*x| of the exact sum (chain: the longest run of
// roundings an element's sum goes through).
func checkTileProduct(t *testing.T, r *rand.Rand, k *Kernels, c tileCase, kernel func(*Kernels, []float32, int, []uint16, int, int, []float32, int) error, twin tileProduct, chain int) {
	t.Helper()
	c.n = min(c.n, 150)
	what := fmt.Sprintf("%s %dx%d n=%d", k.Name(), c.rows, c.cols, c.n)
	w := randU16(r, kinds[0], c.rows*c.cols)
	wp := packWeights(t, w, c.rows, c.cols)
	x := randF32(r, c.n*c.cols)
	ldd := c.rows + 3
	buf, dst := guarded((c.n-1)*ldd + c.rows)
	for i := range dst {
		dst[i] = sentinel
	}
	if err := kernel(k, dst, ldd, wp, c.rows, c.cols, x, c.n); err != nil {
		t.Fatal(err)
	}
	checkGuards(t, what, buf)
	want := make([]float32, len(dst))
	twin(want, ldd, wp, c.rows, c.cols, x, c.n)
	for i := range c.n {
		for row := c.rows; row < ldd && i+1 < c.n; row++ {
			if dst[i*ldd+row] != sentinel {
				t.Fatalf("%s: input %d: wrote past the rows, at %d", what, i, row)
			}
		}
		for row := range c.rows {
			got := dst[i*ldd+row]
			if math.Float32bits(got) != math.Float32bits(want[i*ldd+row]) {
				t.Fatalf("%s: input %d row %d: %g, the twin's %g", what, i, row, got, want[i*ldd+row])
			}
			var exact, abs float64
			for col := range c.cols {
				p := float64(half.BF16ToF32(w[row*c.cols+col])) * float64(x[i*c.cols+col])
				exact += p
				abs += math.Abs(p)
			}
			tol := float64(chain) * 0x1p-24 * abs
			if d := math.Abs(float64(got) - exact); !(d <= tol) {
				t.Fatalf("%s: input %d row %d: got %g, want %g (error %g, allowed %g)", what, i, row, got, exact, d, tol)
			}
		}
	}
}

// TestMatMulBF16TilesFMAInvariant checks that an element of an FMA tile
// product does not depend on the rest of the call: one input alone, any
// run of inputs and any run of whole groups of rows give the same bits,
// also where the whole product runs blocked (over 32 inputs) and its
// parts do not.
func TestMatMulBF16TilesFMAInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, c := range []tileCase{{75, 1088, 19}, {75, 2112, 100}} {
		testTilesFMAInvariant(t, r, c.rows, c.cols, c.n)
	}
}

func testTilesFMAInvariant(t *testing.T, r *rand.Rand, rows, cols, n int) {
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(t, w, rows, cols)
	x := randF32(r, n*cols)
	for _, k := range kernelSets(t) {
		all := make([]float32, n*rows)
		if err := k.MatMulBF16TilesFMA(all, rows, wp, rows, cols, x, n); err != nil {
			t.Fatal(err)
		}
		for _, in := range [][2]int{{0, 1}, {5, 6}, {n - 1, n}, {3, 12}, {9, n}, {1, n - 1}, {n / 3, n}} {
			m := in[1] - in[0]
			for _, rr := range [][2]int{{0, rows}, {0, 1}, {16, 40}, {32, 75}, {64, 75}, {48, 64}} {
				got := make([]float32, m*rows)
				if err := k.MatMulBF16TilesFMA(got[rr[0]:], rows, wp[rr[0]*cols:], rr[1]-rr[0], cols, x[in[0]*cols:in[1]*cols], m); err != nil {
					t.Fatal(err)
				}
				for i := range m {
					for row := rr[0]; row < rr[1]; row++ {
						if a, b := all[(in[0]+i)*rows+row], got[i*rows+row]; math.Float32bits(a) != math.Float32bits(b) {
							t.Fatalf("%s: input %d row %d: %g in the whole product, %g with inputs %v rows %v", k.Name(), in[0]+i, row, a, b, in, rr)
						}
					}
				}
			}
		}
	}
	if err := Generic().MatMulBF16TilesFMA(make([]float32, rows), rows, wp[:10], rows, cols, x, 1); err == nil {
		t.Fatal("short weights were accepted")
	}
}
