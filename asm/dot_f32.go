package asm

// dotF32Go returns sum_i w[i] * x[i] over i < len(w), accumulating in float32
// in index order. It needs len(x) >= len(w).
func dotF32Go(w, x []float32) float32 {
	x = x[:len(w)]
	var s float32
	for i, v := range w {
		s += v * x[i]
	}
	return s
}
