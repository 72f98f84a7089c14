package asm

// scaleGo sets x[i] *= a for every i.
func scaleGo(a float32, x []float32) {
	for i := range x {
		x[i] *= a
	}
}
