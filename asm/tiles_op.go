package asm

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/internal/half"
)

// Outer-product tile products of bf16 weights on AVX2. The weights are in
// the tile layout of PackTileBF16Weights, whose line p of a tile holds
// columns 2p and 2p+1 of 16 rows: on AVX2 the even column's bf16 shifted
// left by 16 bits and the odd one's masked are that column's 16 float32
// weights in two ymm registers. The kernel (BLIS's outer-product form,
// 16 rows × 6 inputs on the 16 ymm registers: 12 sums, 2 weights, a
// broadcast input and the mask) converts each weight once per 6 inputs,
// where the row-major dot-product kernels convert each weight line once
// per 3 inputs and sum 4 rows × 3 inputs.

// tileOPInputs is the most groups × inputs of one pass of
// MatMulBF16TilesOP's assembly, and tileOPSegSteps the steps of 32
// columns of one of its segments.
const (
	tileOPInputs   = 6
	tileOPSegSteps = 8
)

// TilesOP reports whether k runs MatMulBF16TilesOP in assembly (the AVX2
// sets without AVX-512). When it does not, MatMulBF16TilesOP runs on the
// Go twin.
func (k *Kernels) TilesOP() bool { return k.matMulBF16TilesOP != nil }

// MatMulBF16TilesOP multiplies n float32 inputs (x, row-major, cols
// values each) by a rows×cols bf16 matrix in the tile layout (wp,
// PackTileBF16Weights) on float32 FMA: dst[i*ldd+r] = Σ_c w[r,c]·x[i,c].
// It is the AVX2 sets' kernel of such products (MatMulBF16TilesFMA's
// order of sums needs more registers than AVX2 has). Each element is
// summed in one order whatever n, rows and the element's place among
// them: per segment of 256 columns, the columns in order with a fused
// multiply-add each, from zero; the segments' sums added in order (the
// first one is the total as it is). A packed matrix's groups of 16 rows
// are consecutive, so rows [16g, 16g+m) of a larger one are wp[16g*cols:]
// with rows m.
func (k *Kernels) MatMulBF16TilesOP(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) error {
	wl := TileBF16WeightLen(rows, cols)
	switch {
	case wl == 0 && rows > 0:
		return fmt.Errorf("asm: MatMulBF16TilesOP: %d columns have no tile layout", cols)
	case len(wp) < wl:
		return fmt.Errorf("asm: MatMulBF16TilesOP: weights have %d values, need %d", len(wp), wl)
	}
	if err := checkMat("MatMulBF16TilesOP", len(dst), ldd, rows*cols, rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if k.matMulBF16TilesOP != nil {
		k.matMulBF16TilesOP(dst, ldd, wp[:wl], rows, cols, x, n)
		return nil
	}
	matMulBF16TilesOPGo(dst, ldd, wp[:wl], rows, cols, x, n)
	return nil
}

// matMulBF16TilesOPGo is the Go twin of MatMulBF16TilesOP, bit for bit:
// its order of additions, each fused multiply-add rounded once to float32
// (fma32).
func matMulBF16TilesOPGo(dst []float32, ldd int, wp []uint16, rows, cols int, x []float32, n int) {
	steps := cols / tileCols
	for r := range rows {
		g, lane := r/tileRows, r%tileRows
		for i := range n {
			in := x[i*cols : (i+1)*cols]
			var total float32
			for s0 := 0; s0 < steps; s0 += tileOPSegSteps {
				var s float32
				for t := s0; t < min(s0+tileOPSegSteps, steps); t++ {
					tile := wp[(g*steps+t)*tileCols*tileRows:][:tileCols*tileRows]
					for q := range tileCols / 2 {
						s = fma32(half.BF16ToF32(tile[q*2*tileRows+2*lane]), in[t*tileCols+2*q], s)
						s = fma32(half.BF16ToF32(tile[q*2*tileRows+2*lane+1]), in[t*tileCols+2*q+1], s)
					}
				}
				if s0 == 0 {
					total = s
				} else {
					total += s
				}
			}
			dst[i*ldd+r] = total
		}
	}
}

// fma32 returns a·b+c rounded once to float32, as VFMADD231PS computes
// it. The product is exact in float64 and the sum is too but for an error
// e that TwoSum finds; the float64 sum rounds to the float32 the exact
// one does except where it falls on a midpoint of two float32 values
// (double rounding), where e decides.
func fma32(a, b, c float32) float32 {
	p, z := float64(a)*float64(b), float64(c)
	s := p + z
	f := float32(s)
	if float64(f) == s || math.IsInf(s, 0) || math.IsNaN(s) {
		return f
	}
	v := s - p
	e := (p - (s - v)) + (z - v)
	if e == 0 {
		return f
	}
	// The neighbour of f on s's side, and the midpoint between them.
	g := math.Nextafter32(f, float32(math.Inf(1)))
	if s < float64(f) {
		g = math.Nextafter32(f, float32(math.Inf(-1)))
	}
	if math.IsInf(float64(g), 0) || s != (float64(f)+float64(g))/2 {
		return f
	}
	if (e > 0) == (g > f) {
		return g
	}
	return f
}
