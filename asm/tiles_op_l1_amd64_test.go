//go:build !noasm

package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTileOPL1 runs the AVX2 outer-product kernel alone on operands
// in L1 (16 rows × 512 columns of weights, 6 inputs): the micro-kernel's
// own speed, without the cache hierarchy.
func BenchmarkTileOPL1(b *testing.B) {
	if !DetectFeatures().AVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(1, 1))
	const cols = 512
	wp := packWeights(b, randU16(r, kinds[0], 16*cols), 16, cols)
	dst := make([]float32, 6*16)
	for _, ldx := range []int{cols, 4096} {
		x := randF32(r, 6*ldx)
		for _, nb := range []int{1, 3, 6} {
			b.Run(fmt.Sprintf("1x%d/ldx=%d", nb, ldx), func(b *testing.B) {
				for b.Loop() {
					tileBF16OP(&dst[0], 16, &wp[0], 2*16*cols, cols/32, &x[0], ldx, nb, 1, 0)
				}
				b.ReportMetric(2*16*float64(nb)*cols*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
