package asm

// matVecGo sets dst[r] = dot(w[r*cols:(r+1)*cols], x) for r < rows. It is the
// contract of the MatVec kernels: len(dst) >= rows, len(w) >= rows*cols,
// len(x) >= cols.
func matVecGo[W any](dot func([]W, []float32) float32, dst []float32, w []W, rows, cols int, x []float32) {
	x = x[:cols]
	for r := range rows {
		dst[r] = dot(w[r*cols:(r+1)*cols], x)
	}
}

// matVecBF16Go is the Go twin of MatVecBF16.
func matVecBF16Go(dst []float32, w []uint16, rows, cols int, x []float32) {
	matVecGo(dotBF16Go, dst, w, rows, cols, x)
}

// matVecF16Go is the Go twin of MatVecF16.
func matVecF16Go(dst []float32, w []uint16, rows, cols int, x []float32) {
	matVecGo(dotF16Go, dst, w, rows, cols, x)
}

// matVecF32Go is the Go twin of MatVecF32.
func matVecF32Go(dst []float32, w []float32, rows, cols int, x []float32) {
	matVecGo(dotF32Go, dst, w, rows, cols, x)
}
