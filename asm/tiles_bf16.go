package asm

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/govinfer/govinfer/internal/half"
)

// Tile products of bf16 weights. On CPUs with AMX (Features.AMXBF16) a
// TDPBF16PS multiplies a tile of up to 16 inputs × 32 columns by a tile of
// the same 32 columns of 16 weight rows, adding the bf16 products in
// float32 to a tile of up to 16×16 sums: 8192 multiply-adds an
// instruction, sixteen times a 512-bit VDPBF16PS.
//
// The weights are packed once (PackTileBF16Weights): per group of 16 rows
// (the last padded with zero rows) and step of 32 columns, a 1 KiB tile of
// 16 lines, line p holding the columns 2p and 2p+1 of each of the 16 rows.
// A product then streams its weights front to back, as decode needs.
//
// The inputs are packed per product (PackTileBF16), as 1 KiB tiles too:
// per tile of 16 inputs (the last padded with zero inputs), step of 32
// columns and part, 16 lines of the 32 columns of one input each. A tile
// load then reads 1 KiB in a row: loads of 16 input rows 2·cols bytes
// apart fell into the same L1 sets, and three parts ran 5.7 times as long
// as one (n=512, 4096×4096). Inputs are float32 and the tiles take bf16,
// so each input x
// is written as parts bf16 values whose sum is x or nearly: the bf16
// rounding h of x, then (parts ≥ 2) the rounding l of x−h (exact in
// float32), then (parts = 3) the rounding of x−h−l. One part keeps 8
// significant bits of x (as GemmBF16 takes its inputs), two keep 17, three
// keep more than float32's 24 (x−h−l−l' is below 2^-26·|x|), so the
// products are exact and only the float32 sums round, as in MatMulBF16.
// Two parts are not enough for the goldens: on the tiny checkpoint a
// greedy step's logits moved by 1.27e-4 of the largest (the bound is
// 1e-4), with the Go twin as with the AMX tiles. A part that would be a
// subnormal bf16 is zero (the tiles treat subnormal inputs as zero).
//
// Each element is summed over the columns in the same order whatever n
// and rows, the element's place among them and the blocks a caller cuts a
// product into: a step of 32 columns at a time, and in each step the
// parts' products in order. The order of the additions inside one
// TDPBF16PS is the hardware's, so the AMX sums are not bit for bit the Go
// twin's (which adds the pairs in order); both are within the bounds the
// tests check against exact sums.

// tileCols is the columns of one tile step, and tileRows the weight rows
// of a packed group and the inputs of a tile.
const (
	tileCols = 32
	tileRows = 16
)

// MaxTileParts is the most bf16 parts an input is split into for the tile
// products.
const MaxTileParts = 3

// TileBF16WeightLen returns the uint16 values of a rows×cols bf16 matrix
// in the tile layout, or 0 when cols is not a multiple of 32.
func TileBF16WeightLen(rows, cols int) int {
	if cols%tileCols != 0 || rows < 0 || cols < 0 {
		return 0
	}
	return (rows + tileRows - 1) / tileRows * tileRows * cols
}

// TileBF16Layout names the tile layout of PackTileBF16Weights and its
// version: a cache of packed weights keeps them under this name, so it
// must change whenever the layout does.
const TileBF16Layout = "tiles16x32-bf16/1"

// PackTileBF16Weights writes the rows×cols bf16 matrix w (row-major) into
// dst, TileBF16WeightLen(rows, cols) values, in the tile layout. Groups of
// 16 rows pack independently: callers may pack the rows [16a, 16b) of a
// matrix, as a matrix of their own, into dst[16a·cols:16b·cols] in
// parallel. Every value of dst is written, the padding rows' zeros too.
func PackTileBF16Weights(dst, w []uint16, rows, cols int) error {
	size := TileBF16WeightLen(rows, cols)
	switch {
	case size == 0 && rows > 0:
		return fmt.Errorf("asm: PackTileBF16Weights: %d columns are not a multiple of %d", cols, tileCols)
	case len(w) != rows*cols || len(dst) != size:
		return fmt.Errorf("asm: PackTileBF16Weights: %d weights and %d packed for %d×%d, want %d and %d", len(w), len(dst), rows, cols, rows*cols, size)
	case size == 0:
		return nil
	}
	if uintptr(unsafe.Pointer(&w[0]))%4 == 0 && uintptr(unsafe.Pointer(&dst[0]))%4 == 0 {
		// A column pair is one uint32 moved whole: a tile is the
		// transpose of its 16 rows' 16 pairs.
		packTilePairs(unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), size/2),
			unsafe.Slice((*uint32)(unsafe.Pointer(&w[0])), rows*cols/2), rows, cols/2)
		return nil
	}
	const tileLen = tileCols * tileRows
	steps := cols / tileCols
	var zero []uint16 // the padding rows of the last group
	if size > rows*cols {
		zero = make([]uint16, cols)
	}
	for r := range size / cols {
		group := dst[r/tileRows*steps*tileLen:][:steps*tileLen]
		lane := 2 * (r % tileRows)
		row := zero
		if r < rows {
			row = w[r*cols:][:cols]
		}
		for t := range steps {
			tile, src := group[t*tileLen:][:tileLen], row[t*tileCols:][:tileCols]
			for p := range tileCols / 2 {
				tile[p*2*tileRows+lane], tile[p*2*tileRows+lane+1] = src[2*p], src[2*p+1]
			}
		}
	}
	return nil
}

// packTilePairs is PackTileBF16Weights on column pairs: w has rows rows of
// pairs pairs, dst the tile layout's (rows rounded up to 16)·pairs. Row r
// writes lane r%16 of every line of its group's tiles, rows in order: w is
// read front to back, and the writes stay within the group's 64·pairs
// bytes (384 KiB for the 9B's widest rows, in L2), 3 times the rate of the
// value-by-value loop.
func packTilePairs(dst, w []uint32, rows, pairs int) {
	const (
		linePairs = tileCols / 2 // pairs in a line of a tile, and lines in a tile
		tilePairs = linePairs * tileRows
	)
	steps := pairs / linePairs
	for g := 0; g*tileRows < rows; g++ {
		group := dst[g*steps*tilePairs:][:steps*tilePairs]
		for lane := range tileRows {
			r := g*tileRows + lane
			if r >= rows {
				for t := range steps {
					tile := (*[tilePairs]uint32)(group[t*tilePairs:])
					for p := range linePairs {
						tile[p*tileRows+lane] = 0
					}
				}
				continue
			}
			row := w[r*pairs:][:pairs]
			for t := range steps {
				tile, src := (*[tilePairs]uint32)(group[t*tilePairs:]), (*[linePairs]uint32)(row[t*linePairs:])
				for p := range linePairs {
					tile[p*tileRows+lane] = src[p]
				}
			}
		}
	}
}

// UnpackTileBF16Row writes row r of a rows×cols matrix in the tile layout
// into dst (cols values).
func UnpackTileBF16Row(dst, packed []uint16, rows, cols, r int) error {
	switch {
	case TileBF16WeightLen(rows, cols) == 0 || len(packed) != TileBF16WeightLen(rows, cols):
		return fmt.Errorf("asm: UnpackTileBF16Row: %d values are no %d×%d tile matrix", len(packed), rows, cols)
	case r < 0 || r >= rows || len(dst) != cols:
		return fmt.Errorf("asm: UnpackTileBF16Row: row %d of %d into %d values", r, rows, len(dst))
	}
	steps := cols / tileCols
	g, lane := r/tileRows, r%tileRows
	for t := range steps {
		tile := packed[(g*steps+t)*tileCols*tileRows:][:tileCols*tileRows]
		for c := range tileCols {
			dst[t*tileCols+c] = tile[c/2*2*tileRows+2*lane+c%2]
		}
	}
	return nil
}

// TileBF16InputLen returns the uint16 values of n inputs of cols values
// packed in parts bf16 parts for MatMulBF16Tiles, or 0 when cols is not a
// multiple of 32 or parts is not 1, 2 or 3.
func TileBF16InputLen(n, cols, parts int) int {
	if cols%tileCols != 0 || n < 0 || cols < 0 || parts < 1 || parts > MaxTileParts {
		return 0
	}
	return (n + tileRows - 1) / tileRows * tileRows * cols * parts
}

// PackTileBF16 packs inputs lo..hi-1 of the n inputs x (row-major, cols
// values each) in parts parts into dst, TileBF16InputLen(n, cols, parts)
// values, for MatMulBF16Tiles. Inputs are independent, so callers may pack
// runs of them in parallel; the padding rows after input n-1 are written
// by the call whose hi is n. The values are the Go twin's bit for bit
// (see splitBF16).
func (k *Kernels) PackTileBF16(dst []uint16, x []float32, n, cols, parts int, lo, hi int) error {
	size := TileBF16InputLen(n, cols, parts)
	switch {
	case size == 0 && n > 0:
		return fmt.Errorf("asm: PackTileBF16: %d columns in %d parts have no tile layout", cols, parts)
	case len(dst) != size || len(x) < n*cols:
		return fmt.Errorf("asm: PackTileBF16: %d inputs of %d need %d values and %d packed, have %d and %d", n, cols, n*cols, size, len(x), len(dst))
	case lo < 0 || lo > hi || hi > n:
		return fmt.Errorf("asm: PackTileBF16: inputs [%d, %d) of %d", lo, hi, n)
	}
	steps := cols / tileCols
	if hi == n {
		for i := n; i < (n+tileRows-1)/tileRows*tileRows; i++ {
			for t := range steps {
				for p := range parts {
					clear(dst[tileInputAt(i, t, p, steps, parts):][:tileCols])
				}
			}
		}
	}
	if k.packTileBF16 != nil {
		for i := lo; i < hi; i++ {
			k.packTileBF16(&dst[tileInputAt(i, 0, 0, steps, parts)], &x[i*cols], steps, parts)
		}
		return nil
	}
	for i := lo; i < hi; i++ {
		for t := range steps {
			for c, v := range x[i*cols+t*tileCols:][:tileCols] {
				for p := range parts {
					var h uint16
					h, v = splitBF16(v)
					dst[tileInputAt(i, t, p, steps, parts)+c] = h
				}
			}
		}
	}
	return nil
}

// tileInputAt returns where the 32 values of step t, part p of input i
// start in packed inputs of steps steps and parts parts.
func tileInputAt(i, t, p, steps, parts int) int {
	return ((i/tileRows*steps+t)*parts+p)*tileCols*tileRows + i%tileRows*tileCols
}

// splitBF16 returns x's bf16 rounding h, as VCVTNE2PS2BF16 rounds (to
// nearest even, a subnormal x to a zero of its sign), and the residual
// x−h, exact in float32 for finite h.
func splitBF16(x float32) (h uint16, r float32) {
	v := x
	if b := math.Float32bits(x); b&0x7F800000 == 0 {
		v = math.Float32frombits(b & 0x80000000)
	}
	h = half.F32ToBF16(v)
	return h, x - half.BF16ToF32(h)
}

// TilesBF16 reports whether k multiplies bf16 weights on AMX tiles
// (Features.AMXBF16). When it does not, MatMulBF16Tiles runs on the Go
// twin.
func (k *Kernels) TilesBF16() bool { return k.features.AMXBF16 }

// TilesFMA reports whether k runs MatMulBF16TilesFMA in assembly (the
// AVX-512 sets). When it does not, MatMulBF16TilesFMA runs on the Go twin.
func (k *Kernels) TilesFMA() bool { return k.matMulBF16TilesFMA != nil }

// MatMulBF16Tiles multiplies n inputs packed by PackTileBF16 (with the
// same n, cols and parts) by a rows×cols bf16 matrix in the tile layout
// (wp, PackTileBF16Weights): dst[i*ldd+r] = Σ_c w[r,c]·x[i,c] for i < n
// and r < rows, each element summed as the package doc's tile products
// sum it. A packed matrix's groups of 16 rows are consecutive, so rows
// [16g, 16g+m) of a larger one are wp[16g*cols:] with rows m.
func (k *Kernels) MatMulBF16Tiles(dst []float32, ldd int, wp []uint16, rows, cols int, xp []uint16, n, parts int) error {
	size := TileBF16InputLen(n, cols, parts)
	wl := TileBF16WeightLen(rows, cols)
	switch {
	case (size == 0 || wl == 0) && n > 0 && rows > 0:
		return fmt.Errorf("asm: MatMulBF16Tiles: %d columns in %d parts have no tile layout", cols, parts)
	case len(wp) < wl:
		return fmt.Errorf("asm: MatMulBF16Tiles: weights have %d values, need %d", len(wp), wl)
	case len(xp) != size:
		return fmt.Errorf("asm: MatMulBF16Tiles: packed inputs have %d values, want %d", len(xp), size)
	}
	if err := checkMat("MatMulBF16Tiles", len(dst), ldd, rows*cols, rows, cols, n*cols, n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if k.matMulBF16Tiles != nil {
		k.matMulBF16Tiles(dst, ldd, wp[:wl], rows, cols, xp, n, parts)
		return nil
	}
	matMulBF16TilesGo(dst, ldd, wp[:wl], rows, cols, xp, n, parts)
	return nil
}

// matMulBF16TilesGo is the Go twin of MatMulBF16Tiles: per step of 32
// columns and part, the pairs of columns in order, each pair's two exact
// products added and the pair added to the sum in float32.
func matMulBF16TilesGo(dst []float32, ldd int, wp []uint16, rows, cols int, xp []uint16, n, parts int) {
	steps := cols / tileCols
	for r := range rows {
		g, lane := r/tileRows, r%tileRows
		for i := range n {
			var s float32
			for t := range steps {
				tile := wp[(g*steps+t)*tileCols*tileRows:][:tileCols*tileRows]
				for p := range parts {
					in := xp[tileInputAt(i, t, p, steps, parts):][:tileCols]
					for q := range tileCols / 2 {
						w0, w1 := half.BF16ToF32(tile[q*2*tileRows+2*lane]), half.BF16ToF32(tile[q*2*tileRows+2*lane+1])
						s += float32(w0*half.BF16ToF32(in[2*q])) + float32(w1*half.BF16ToF32(in[2*q+1]))
					}
				}
			}
			dst[i*ldd+r] = s
		}
	}
}

// tileFMAInputs is the most inputs one pass of MatMulBF16TilesFMA's
// assembly takes over a group's weights, and tileFMASegSteps the steps of
// 32 columns of one of its segments (see MatMulBF16TilesFMA).
const (
	tileFMAInputs   = 8
	tileFMASegSteps = 8
)

// MatMulBF16TilesFMA multiplies n float32 inputs (x, row-major, cols
// values each) by a rows×cols bf16 matrix in the tile layout (wp,
// PackTileBF16Weights) on float32 FMA: dst[i*ldd+r] = Σ_c w[r,c]·x[i,c].
// It is the kernel for products of a few inputs, such as decode steps,
// which stream the weights: one input runs at the read rate of the FMA
// matrix-vector kernels, where MatMulBF16Tiles pays for three tile
// multiplies per 1 KiB of weights. On CPUs with AVX-512 but no AMX it is
// also the prefill kernel: many inputs are blocked for the caches, and
// one thread's product of 512 inputs with a 4096×4096 matrix ran at
// 84-104 GFLOP/s against 56-65 for MatMulBF16 on the row-major matrix (a
// Sapphire Rapids-class Xeon, f32 FMA peak about 125). Each element is
// summed in one order whatever n, rows and the element's place among
// them: per segment of 256 columns, the even and the odd columns apart,
// each in order with a fused multiply-add from zero; the segments'
// even+odd sums added in order. The sums are not those of MatMulBF16Tiles (the tiles add in
// their own order), only as close to the exact ones.
func (k *Kernels) MatMulBF16TilesFMA(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) error {
	wl := TileBF16WeightLen(rows, cols)
	switch {
	case wl == 0 && rows > 0:
		return fmt.Errorf("asm: MatMulBF16TilesFMA: %d columns have no tile layout", cols)
	case len(wp) < wl:
		return fmt.Errorf("asm: MatMulBF16TilesFMA: weights have %d values, need %d", len(wp), wl)
	}
	if err := checkMat("MatMulBF16TilesFMA", len(dst), ldd, rows*cols, rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if k.matMulBF16TilesFMA != nil {
		k.matMulBF16TilesFMA(dst, ldd, wp[:wl], rows, cols, x, n)
		return nil
	}
	matMulBF16TilesFMAGo(dst, ldd, wp[:wl], rows, cols, x, n)
	return nil
}

// matMulBF16TilesFMAGo is the Go twin of MatMulBF16TilesFMA, in its order
// of additions, with each fused multiply-add computed in float64 and
// rounded to float32 (which can differ from a float32 FMA in the last bit
// where the float64 result falls on a float32 tie).
func matMulBF16TilesFMAGo(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) {
	steps := cols / tileCols
	fma := func(w uint16, x, s float32) float32 {
		return float32(math.FMA(float64(half.BF16ToF32(w)), float64(x), float64(s)))
	}
	for r := range rows {
		g, lane := r/tileRows, r%tileRows
		for i := range n {
			in := x[i*cols : (i+1)*cols]
			var total float32
			for s0 := 0; s0 < steps; s0 += tileFMASegSteps {
				var even, odd float32
				for t := s0; t < min(s0+tileFMASegSteps, steps); t++ {
					tile := wp[(g*steps+t)*tileCols*tileRows:][:tileCols*tileRows]
					for q := range tileCols / 2 {
						even = fma(tile[q*2*tileRows+2*lane], in[t*tileCols+2*q], even)
						odd = fma(tile[q*2*tileRows+2*lane+1], in[t*tileCols+2*q+1], odd)
					}
				}
				total += even + odd
			}
			dst[i*ldd+r] = total
		}
	}
}
