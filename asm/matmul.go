package asm

import "github.com/govinfer/govinfer/internal/half"

// matMulGo sets dst[i*ldd+r] = dot(w row r, x row i) for r < rows, i < n, with
// w rows×cols and x n×cols row-major. It is the contract of the MatMul kernels.
// Each weight row is used for all n inputs while it is in cache.
func matMulGo[W, X any](dot func([]W, []X) float32, dst []float32, ldd int, w []W, ldw, rows, cols int, x []X, n int) {
	for r := range rows {
		row := w[r*ldw : r*ldw+cols]
		for i := range n {
			dst[i*ldd+r] = dot(row, x[i*cols:(i+1)*cols])
		}
	}
}

// matMulBF16Go is the Go twin of MatMulBF16.
func matMulBF16Go(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
	matMulGo(dotBF16Go, dst, ldd, w, cols, rows, cols, x, n)
}

// matMulF16Go is the Go twin of MatMulF16.
func matMulF16Go(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
	matMulGo(dotF16Go, dst, ldd, w, cols, rows, cols, x, n)
}

// matMulF32Go is the Go twin of MatMulF32 and MatMulF32Strided.
func matMulF32Go(dst []float32, ldd int, w []float32, ldw, rows, cols int, x []float32, n int) {
	matMulGo(dotF32Go, dst, ldd, w, ldw, rows, cols, x, n)
}

// dotBF16BF16Go returns sum_i w[i]*x[i] over i < len(w) with both operands in
// bf16, accumulating in float32 in index order (each product is exact).
func dotBF16BF16Go(w, x []uint16) float32 {
	x = x[:len(w)]
	var s float32
	for i, v := range w {
		s += half.BF16ToF32(v) * half.BF16ToF32(x[i])
	}
	return s
}

// gemmBF16Go is the Go twin of GemmBF16.
func gemmBF16Go(dst []float32, ldd int, w []uint16, rows, cols int, x []uint16, n int) {
	matMulGo(dotBF16BF16Go, dst, ldd, w, cols, rows, cols, x, n)
}
