package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatMulBF16Tiles times one thread's tile product of a 4096×4096
// bf16 matrix, packing included, against MatMulBF16 on the same kernel set
// (GFLOP/s: two per multiply-add of the result).
func BenchmarkMatMulBF16Tiles(b *testing.B) {
	k := Detect()
	if !k.TilesBF16() {
		b.Skip("no AMX tiles on this CPU")
	}
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 4096, 4096
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(b, w, rows, cols)
	for _, n := range []int{1, 16, 128, 512} {
		x := randF32(r, n*cols)
		dst := make([]float32, n*rows)
		flops := func(b *testing.B) {
			b.ReportMetric(2*float64(rows)*cols*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		for parts := 1; parts <= MaxTileParts; parts++ {
			b.Run(fmt.Sprintf("tiles/n=%d/parts=%d", n, parts), func(b *testing.B) {
				xp := make([]uint16, TileBF16InputLen(n, cols, parts))
				for b.Loop() {
					if err := k.PackTileBF16(xp, x, n, cols, parts, 0, n); err != nil {
						b.Fatal(err)
					}
					if err := k.MatMulBF16Tiles(dst, rows, wp, rows, cols, xp, n, parts); err != nil {
						b.Fatal(err)
					}
				}
				flops(b)
			})
		}
		b.Run(fmt.Sprintf("matmul/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := k.MatMulBF16(dst, rows, w, rows, cols, x, n); err != nil {
					b.Fatal(err)
				}
			}
			flops(b)
		})
	}
}

// BenchmarkMatMulBF16TilesFMA times one thread's FMA product of a bf16
// matrix in the tile layout with a few inputs, as decode runs it, against
// MatMulBF16 on the row-major matrix and MatMulBF16Tiles (three parts) on
// the same kernel set: a 4096×4096 matrix (32 MiB, read from memory) and
// a 512×4096 one (4 MiB, from L2 and L3). GB/s: weight bytes read.
func BenchmarkMatMulBF16TilesFMA(b *testing.B) {
	k := Detect()
	r := rand.New(rand.NewPCG(3, 4))
	for _, rows := range []int{4096, 512} {
		const cols = 4096
		w := randU16(r, kinds[0], rows*cols)
		wp := packWeights(b, w, rows, cols)
		for _, n := range []int{1, 4, 8} {
			x := randF32(r, n*cols)
			dst := make([]float32, n*rows)
			rate := func(b *testing.B) {
				b.ReportMetric(2*float64(rows)*cols*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			}
			b.Run(fmt.Sprintf("%dx%d/fma-tiles/n=%d", rows, cols, n), func(b *testing.B) {
				for b.Loop() {
					if err := k.MatMulBF16TilesFMA(dst, rows, wp, rows, cols, x, n); err != nil {
						b.Fatal(err)
					}
				}
				rate(b)
			})
			b.Run(fmt.Sprintf("%dx%d/matmul/n=%d", rows, cols, n), func(b *testing.B) {
				for b.Loop() {
					if err := k.MatMulBF16(dst, rows, w, rows, cols, x, n); err != nil {
						b.Fatal(err)
					}
				}
				rate(b)
			})
			if !k.TilesBF16() {
				continue
			}
			b.Run(fmt.Sprintf("%dx%d/amx-tiles/n=%d", rows, cols, n), func(b *testing.B) {
				xp := make([]uint16, TileBF16InputLen(n, cols, MaxTileParts))
				for b.Loop() {
					if err := k.PackTileBF16(xp, x, n, cols, MaxTileParts, 0, n); err != nil {
						b.Fatal(err)
					}
					if err := k.MatMulBF16Tiles(dst, rows, wp, rows, cols, xp, n, MaxTileParts); err != nil {
						b.Fatal(err)
					}
				}
				rate(b)
			})
		}
	}
}

// BenchmarkMatMulBF16TilesFMAPrefill times one thread's FMA product of a
// 4096×4096 bf16 matrix in the tile layout with many inputs, as prefill
// runs it on CPUs without AMX, against MatMulBF16 on the row-major matrix
// (GFLOP/s: two per multiply-add of the result).
func BenchmarkMatMulBF16TilesFMAPrefill(b *testing.B) {
	k := Detect()
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 4096, 4096
	w := randU16(r, kinds[0], rows*cols)
	wp := packWeights(b, w, rows, cols)
	for _, n := range []int{16, 64, 512} {
		x := randF32(r, n*cols)
		dst := make([]float32, n*rows)
		flops := func(b *testing.B) {
			b.ReportMetric(2*float64(rows)*cols*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(fmt.Sprintf("fma-tiles/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := k.MatMulBF16TilesFMA(dst, rows, wp, rows, cols, x, n); err != nil {
					b.Fatal(err)
				}
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("matmul/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := k.MatMulBF16(dst, rows, w, rows, cols, x, n); err != nil {
					b.Fatal(err)
				}
			}
			flops(b)
		})
	}
}

// BenchmarkPackTileBF16Weights times packing a 4096×12288 bf16 matrix (an
// MLP projection of the 9B) into the tile layout, from a matrix on a
// 4-byte boundary (column pairs moved whole) and from one 2 bytes off it
// (value by value), both in memory already touched (GB/s of the matrix).
func BenchmarkPackTileBF16Weights(b *testing.B) {
	const rows, cols = 4096, 12288
	w := make([]uint16, rows*cols+1)
	for i := range w {
		w[i] = uint16(i * 2654435761 >> 16)
	}
	dst := make([]uint16, TileBF16WeightLen(rows, cols))
	for _, off := range []int{0, 1} {
		name := map[int]string{0: "pairs", 1: "values"}[off]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := PackTileBF16Weights(dst, w[off:][:rows*cols], rows, cols); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*float64(rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
