package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Run with, for example:
//
//	go test ./asm/ -run X -bench . -benchtime 3x
//
// Weight-streaming benchmarks report MB/s of weights read (b.SetBytes) and
// matrix-matrix benchmarks report GFLOP/s; BenchmarkMemRead is the plain
// memory-read baseline to divide by, and each benchmark also runs the pure-Go set.

// BenchmarkMemRead sums a 256 MiB buffer of uint64 with a plain Go loop: the
// single-thread memory bandwidth baseline.
func BenchmarkMemRead(b *testing.B) {
	buf := make([]uint64, 256<<20/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	b.SetBytes(int64(len(buf) * 8))
	var s uint64
	for b.Loop() {
		var s0, s1, s2, s3 uint64
		for i := 0; i+4 <= len(buf); i += 4 {
			s0 += buf[i]
			s1 += buf[i+1]
			s2 += buf[i+2]
			s3 += buf[i+3]
		}
		s += s0 + s1 + s2 + s3
	}
	if s == 1 {
		b.Log(s)
	}
}

func benchSets(b *testing.B) []*Kernels {
	return kernelSets(b)
}

func BenchmarkMatVecBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, shape := range [][2]int{{4096, 4096}, {12288, 4096}} {
		rows, cols := shape[0], shape[1]
		w := randU16(r, kinds[0], rows*cols)
		x := randF32(r, cols)
		dst := make([]float32, rows)
		for _, k := range benchSets(b) {
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, k.Name()), func(b *testing.B) {
				b.SetBytes(int64(rows * cols * 2))
				for b.Loop() {
					if err := k.MatVecBF16(dst, w, rows, cols, x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMatMulBF16 is batched decode: n inputs per weight pass, 4096×4096.
func BenchmarkMatMulBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	const rows, cols = 4096, 4096
	w := randU16(r, kinds[0], rows*cols)
	for _, n := range []int{1, 4, 8, 16} {
		x := randF32(r, n*cols)
		dst := make([]float32, n*rows)
		for _, k := range benchSets(b) {
			b.Run(fmt.Sprintf("n=%d/%s", n, k.Name()), func(b *testing.B) {
				b.SetBytes(int64(rows * cols * 2))
				for b.Loop() {
					if err := k.MatMulBF16(dst, rows, w, rows, cols, x, n); err != nil {
						b.Fatal(err)
					}
				}
				reportFlops(b, rows, cols, n)
			})
		}
	}
}

// BenchmarkPrefill is the prefill product: n=512 inputs times a 4096×4096
// bf16 matrix, with f32 inputs (MatMulBF16) and bf16 inputs (GemmBF16). The
// pure-Go set runs a 64-input slice of it to keep the run short.
func BenchmarkPrefill(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	const rows, cols = 4096, 4096
	w := randU16(r, kinds[0], rows*cols)
	x := randF32(r, 512*cols)
	xb := make([]uint16, len(x))
	F32ToBF16Slice(xb, x)
	dst := make([]float32, 512*rows)
	for _, k := range benchSets(b) {
		n := 512
		if k.Name() == "go" {
			n = 64
		}
		b.Run(fmt.Sprintf("MatMulBF16/n=%d/%s", n, k.Name()), func(b *testing.B) {
			for b.Loop() {
				if err := k.MatMulBF16(dst, rows, w, rows, cols, x, n); err != nil {
					b.Fatal(err)
				}
			}
			reportFlops(b, rows, cols, n)
		})
		b.Run(fmt.Sprintf("GemmBF16/n=%d/%s", n, k.Name()), func(b *testing.B) {
			for b.Loop() {
				if err := k.GemmBF16(dst, rows, w, rows, cols, xb, n); err != nil {
					b.Fatal(err)
				}
			}
			reportFlops(b, rows, cols, n)
		})
	}
}

func reportFlops(b *testing.B, rows, cols, n int) {
	b.ReportMetric(2*float64(rows)*float64(cols)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
