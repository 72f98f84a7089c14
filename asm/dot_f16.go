package asm

import "github.com/govinfer/govinfer/internal/half"

// dotF16Go returns sum_i half.F16ToF32(w[i]) * x[i] over i < len(w), accumulating
// in float32 in index order. It needs len(x) >= len(w).
func dotF16Go(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s float32
	for i, v := range w {
		s += half.F16ToF32(v) * x[i]
	}
	return s
}
