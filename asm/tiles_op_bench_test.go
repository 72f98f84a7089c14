package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/govinfer/govinfer/internal/machine"
)

// BenchmarkMatMulBF16TilesOP times one thread's products of a 4096×4096
// bf16 matrix on the AVX2 set (forced where the CPU has AVX-512): the
// outer-product kernel on the tile layout (op-tiles) against the
// row-major dot-product kernels (matmul: MatMulBF16, one input
// MatVecBF16), in GFLOP/s (two per multiply-add of the result) and as a
// share of one thread's float32 FMA peak (machine.FMAF32; on CPUs with
// AVX-512 that probe runs zmm, which on Zen 4 peaks as ymm does).
func BenchmarkMatMulBF16TilesOP(b *testing.B) {
	k := New(Features{AVX2: true})
	if !k.TilesOP() {
		b.Skip("no AVX2 outer-product tiles")
	}
	peak := machine.FMAF32(1, 3, 200*time.Millisecond)
	b.Logf("f32 FMA peak, 1 thread: %v", peak)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 4096, 4096
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(b, w, rows, cols)
	for _, n := range []int{1, 8, 64, 512} {
		x := randF32(r, n*cols)
		dst := make([]float32, n*rows)
		flops := func(b *testing.B) {
			g := 2 * float64(rows) * cols * float64(n) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(g, "GFLOP/s")
			b.ReportMetric(g/peak.Value, "peak-share")
			if n == 1 {
				b.ReportMetric(g, "GB/s") // two bytes of weights per multiply-add
			}
		}
		b.Run(fmt.Sprintf("op-tiles/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := k.MatMulBF16TilesOP(dst, rows, wp, rows, cols, x, n); err != nil {
					b.Fatal(err)
				}
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("matmul/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				var err error
				if n == 1 {
					err = k.MatVecBF16(dst, w, rows, cols, x)
				} else {
					err = k.MatMulBF16(dst, rows, w, rows, cols, x, n)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			flops(b)
		})
	}
}
