package asm

import "github.com/govinfer/govinfer/internal/half"

// F32ToBF16Slice rounds src[i] to bf16 into dst[i] for i < min(len(dst), len(src)),
// as half.F32ToBF16 does (nearest, ties to even), and returns the number of
// values converted. It prepares the inputs of [Kernels.GemmBF16].
func F32ToBF16Slice(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	for i, f := range src[:n] {
		dst[i] = half.F32ToBF16(f)
	}
	return n
}
