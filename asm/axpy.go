package asm

// axpyGo sets y[i] += a * x[i] for i < len(x). It needs len(y) >= len(x).
func axpyGo(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}
