package asm

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/internal/half"
)

// Tile products of bf16 weights. On CPUs with AMX (Features.AMXBF16) a
// TDPBF16PS multiplies a tile of 16 weight rows × 32 columns by a tile of
// the same 32 columns of 16 inputs, adding the bf16 products in float32 to
// a 16×16 tile of sums: 8192 multiply-adds an instruction, sixteen times a
// 512-bit VDPBF16PS. The weights are read as stored (row-major, the rows
// of a tile cols values apart); the inputs are packed for the tiles once
// per product (PackTileBF16): per group of 16 inputs and step of 32
// columns, 16 rows of 16 inputs × 2 columns, the column pairs (2p, 2p+1)
// of row p, a 1 KiB tile.
//
// Inputs are float32 and the tiles take bf16, so PackTileBF16 writes
// each input x as parts bf16 values whose sum is x or nearly: the bf16
// rounding h of x, then (parts ≥ 2) the rounding l of x−h (exact in
// float32), then (parts = 3) the rounding of x−h−l; MatMulBF16Tiles adds
// every part's products. One part keeps 8 significant bits of x (as
// GemmBF16 takes its inputs), two keep 17 (x−h−l is below 2^-17·|x|),
// three keep more than float32's 24 (below 2^-26·|x|), so the products
// are exact and only the float32 sums round, as in MatMulBF16. Two parts
// are not enough for the goldens: on the tiny checkpoint a greedy step's
// logits moved by 1.27e-4 of the largest (the bound is 1e-4), with the Go
// twin as with the AMX tiles.
//
// Each element is summed over the columns in the same order whatever n
// and rows, the element's place among them and the blocks a caller cuts a
// product into: a step of 32 columns at a time, and in each step the
// parts' products in order. The order of the additions inside one TDPBF16PS is the
// hardware's, so the AMX sums are not bit for bit the Go twin's (which
// adds the pairs in order); both are within the bounds the tests check
// against exact sums.

// tileCols is the columns of one tile step, and tileInputs the inputs of
// one packed group.
const (
	tileCols   = 32
	tileInputs = 16
)

// MaxTileParts is the most bf16 parts an input is split into for the tile
// products (see the package doc's tile products).
const MaxTileParts = 3

// TileBF16InputLen returns the uint16 values of n inputs of cols values
// packed in parts bf16 parts for MatMulBF16Tiles, or 0 when cols is not a
// multiple of 32 or parts is not 1, 2 or 3.
func TileBF16InputLen(n, cols, parts int) int {
	if cols%tileCols != 0 || n < 0 || cols < 0 || parts < 1 || parts > MaxTileParts {
		return 0
	}
	return (n + tileInputs - 1) / tileInputs * tileInputs * cols * parts
}

// PackTileBF16 packs inputs lo..hi-1 of the n inputs x (row-major, cols
// values each) in parts parts into dst, TileBF16InputLen(n, cols, parts)
// values, one part after the other, for
// MatMulBF16Tiles; lo and hi must be multiples of 16 (hi may be n). The
// groups of 16 are independent, so callers may pack them in parallel; the
// inputs from n up to the next multiple of 16 are packed as zeros with the
// group that holds input n-1.
func PackTileBF16(dst []uint16, x []float32, n, cols, parts int, lo, hi int) error {
	size := TileBF16InputLen(n, cols, parts)
	switch {
	case size == 0 && n > 0:
		return fmt.Errorf("asm: PackTileBF16: %d columns in %d parts have no tile layout", cols, parts)
	case len(dst) != size || len(x) < n*cols:
		return fmt.Errorf("asm: PackTileBF16: %d inputs of %d need %d values and %d packed, have %d and %d", n, cols, n*cols, size, len(x), len(dst))
	case lo < 0 || lo > hi || hi > n || lo%tileInputs != 0 || hi%tileInputs != 0 && hi != n:
		return fmt.Errorf("asm: PackTileBF16: inputs [%d, %d) of %d are not whole groups of %d", lo, hi, n, tileInputs)
	}
	steps := cols / tileCols
	groupLen := steps * tileCols * tileInputs
	partLen := size / parts
	for i := lo; i < (hi+tileInputs-1)/tileInputs*tileInputs; i++ {
		g, slot := i/tileInputs, i%tileInputs
		for t := range steps {
			base := g*groupLen + t*tileCols*tileInputs + 2*slot
			for c := range tileCols {
				o := base + c/2*2*tileInputs + c%2
				var v float32
				if i < n {
					v = x[i*cols+t*tileCols+c]
				}
				for p := range parts {
					var h uint16
					h, v = splitBF16(v)
					dst[p*partLen+o] = h
				}
			}
		}
	}
	return nil
}

// splitBF16 returns x's bf16 rounding h and the residual x−h, exact in
// float32 (0 where x is not finite).
func splitBF16(x float32) (h uint16, r float32) {
	h = half.F32ToBF16(x)
	r = x - math.Float32frombits(uint32(h)<<16)
	if math.IsNaN(float64(r)) || math.IsInf(float64(x), 0) {
		r = 0
	}
	return h, r
}

// TilesBF16 reports whether k multiplies bf16 weights on AMX tiles
// (Features.AMXBF16). When it does not, MatMulBF16Tiles runs on the Go
// twin.
func (k *Kernels) TilesBF16() bool { return k.features.AMXBF16 }

// MatMulBF16Tiles is MatMulBF16 on inputs packed by PackTileBF16 (with
// the same n, cols and parts): dst[i*ldd+r] = Σ_c w[r*cols+c]·x[i,c] for
// i < n and r < rows, each element summed as the package doc's tile
// products sum it. cols must be a multiple of 32.
func (k *Kernels) MatMulBF16Tiles(dst []float32, ldd int, w []uint16, rows, cols int, xp []uint16, n, parts int) error {
	size := TileBF16InputLen(n, cols, parts)
	if size == 0 && n > 0 {
		return fmt.Errorf("asm: MatMulBF16Tiles: %d columns in %d parts have no tile layout", cols, parts)
	}
	if err := checkMat("MatMulBF16Tiles", len(dst), ldd, len(w), rows, cols, n*cols, n); err != nil {
		return err
	}
	if len(xp) != size {
		return fmt.Errorf("asm: MatMulBF16Tiles: packed inputs have %d values, want %d", len(xp), size)
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if k.matMulBF16Tiles != nil {
		k.matMulBF16Tiles(dst, ldd, w[:rows*cols], rows, cols, xp, n, parts)
		return nil
	}
	matMulBF16TilesGo(dst, ldd, w[:rows*cols], rows, cols, xp, n, parts)
	return nil
}

// matMulBF16TilesGo is the Go twin of MatMulBF16Tiles: per step of 32
// columns and part, the pairs of columns in order, each pair's two exact
// products added and the pair added to the sum in float32.
func matMulBF16TilesGo(dst []float32, ldd int, w []uint16, rows, cols int, xp []uint16, n, parts int) {
	steps := cols / tileCols
	groupLen := steps * tileCols * tileInputs
	partLen := len(xp) / parts
	for i := range n {
		g, slot := i/tileInputs, i%tileInputs
		for r := range rows {
			row := w[r*cols : (r+1)*cols]
			var s float32
			for t := range steps {
				for part := range parts {
					base := part*partLen + g*groupLen + t*tileCols*tileInputs + 2*slot
					for p := range tileCols / 2 {
						o := base + p*2*tileInputs
						w0, w1 := bf16(row[t*tileCols+2*p]), bf16(row[t*tileCols+2*p+1])
						s += float32(w0*bf16(xp[o])) + float32(w1*bf16(xp[o+1]))
					}
				}
			}
			dst[i*ldd+r] = s
		}
	}
}

// bf16 widens a bf16 value to float32.
func bf16(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }
