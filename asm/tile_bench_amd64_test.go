//go:build !noasm

package asm

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkTileL1 runs the AVX2 bf16 tile kernels alone on operands that
// stay in L1: the micro-kernel's own speed, without the cache hierarchy.
func BenchmarkTileL1(b *testing.B) {
	if !DetectFeatures().AVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(1, 1))
	const k = 1024
	w := randU16(r, kinds[0], 4*k)
	x := randF32(r, 3*k)
	dst := make([]float32, 3*4)
	b.Run("unpacked4x2", func(b *testing.B) {
		for b.Loop() {
			tileBF16AVX2U(&dst[0], 4, &w[0], k, &x[0], k, k, 2)
		}
		b.ReportMetric(2*4*2*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("vpmovzx4x3", func(b *testing.B) {
		for b.Loop() {
			tileBF16AVX2(&dst[0], 4, &w[0], k, &x[0], k, k, 3)
		}
		b.ReportMetric(2*4*3*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
