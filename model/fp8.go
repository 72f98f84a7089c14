package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/govinfer/govinfer/internal/fp8"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/safetensors"
)

// Qwen's FP8 checkpoints (quantization_config quant_method "fp8", format
// e4m3) store most linear weights as F8_E4M3 with a scale per block of
// weight_block_size (128 × 128): name.weight_scale_inv, of shape
// [ceil(rows/128), ceil(cols/128)], BF16 or F32. The weight is the FP8
// value times its block's scale (multiplied, despite the name). They load
// here as BF16, each product rounded to nearest even: the size of the BF16
// release, and what --quantize then quantizes.

// fp8ScaleName returns the name of the scales of the FP8 weight name.
func fp8ScaleName(name string) string {
	return strings.TrimSuffix(name, ".weight") + ".weight_scale_inv"
}

// checkFP8 validates an F8_E4M3 tensor and its scales and returns the
// size it loads as (BF16).
func (s ckSource) checkFP8(b binding, info safetensors.TensorInfo) (int64, error) {
	if s.fp8Block == nil {
		return 0, fmt.Errorf("tensor %s is F8_E4M3, but config.json has no quantization_config of quant_method fp8", b.name)
	}
	rows, cols := matrixOf(info.Shape)
	scale := fp8ScaleName(b.name)
	si, err := s.ck.Info(scale)
	if err != nil {
		return 0, fmt.Errorf("tensor %s is F8_E4M3 without its scales: %w", b.name, err)
	}
	if want := fp8ScaleShape(rows, cols, s.fp8Block); len(si.Shape) != 2 || si.Shape[0] != want[0] || si.Shape[1] != want[1] {
		return 0, fmt.Errorf("tensor %s has shape %v, want %v: blocks of %v over %s's [%d, %d]", scale, si.Shape, want, s.fp8Block, b.name, rows, cols)
	}
	switch si.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return 0, fmt.Errorf("tensor %s has dtype %s; want BF16, F16 or F32 scales", scale, si.DType)
	}
	return int64(rows) * int64(cols) * 2, nil
}

// matrixOf returns the rows (every dimension but the last) and columns of
// a shape.
func matrixOf(shape []int) (rows, cols int) {
	rows, cols = 1, shape[len(shape)-1]
	for _, d := range shape[:len(shape)-1] {
		rows *= d
	}
	return rows, cols
}

// fp8ScaleShape returns the shape of the scales of a [rows, cols] weight
// in blocks of block.
func fp8ScaleShape(rows, cols int, block []int) [2]int {
	return [2]int{(rows + block[0] - 1) / block[0], (cols + block[1] - 1) / block[1]}
}

// loadFP8 returns the BF16 bytes of the F8_E4M3 tensor t times its
// block scales (checked by checkFP8).
func (s ckSource) loadFP8(b binding, t safetensors.Tensor) ([]byte, error) {
	st, err := s.ck.Tensor(fp8ScaleName(b.name))
	if err != nil {
		return nil, err
	}
	scales, err := st.ToFloat32()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", st.Name, err)
	}
	rows, cols := matrixOf(t.Shape)
	bh, bw := s.fp8Block[0], s.fp8Block[1]
	perRow := fp8ScaleShape(rows, cols, s.fp8Block)[1]
	out := make([]byte, 2*rows*cols)
	for r := range rows {
		src, sc := t.Data[r*cols:(r+1)*cols], scales[(r/bh)*perRow:]
		dst := out[2*r*cols:]
		for c, q := range src {
			v := fp8.E4M3(q) * sc[c/bw]
			if v != v || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("tensor %s: row %d column %d is %v", b.name, r, c, v)
			}
			h := half.F32ToBF16(v)
			dst[2*c], dst[2*c+1] = byte(h), byte(h>>8)
		}
	}
	return out, nil
}
