package computetest

// The conformance cases of MatMul.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// matmulTol returns tolerances for dst[n, rows] = x[n, cols] · wᵀ.
func matmulTol(x []float32, w []float64, n, rows, cols int) []float64 {
	t := make([]float64, n*rows)
	for i := 0; i < n; i++ {
		for r := 0; r < rows; r++ {
			var mag float64
			for c := 0; c < cols; c++ {
				mag += math.Abs(float64(x[i*cols+c]) * w[r*cols+c])
			}
			t[i*rows+r] = tol(mag, cols)
		}
	}
	return t
}

// bf16InputTol adds to t the error of inputs rounded to bf16 (a backend
// that QuantizesInputs(BF16)): an input x moves by at most half a bf16
// step, 2^-8·|x|, and one below the normal range (flushed to zero by
// VDPBF16PS) by at most 2^-126; each output moves by the sum of those
// times the weights' magnitudes.
func bf16InputTol(t []float64, x []float32, w []float64, n, rows, cols int) {
	for i := 0; i < n; i++ {
		for r := 0; r < rows; r++ {
			var s float64
			for c := 0; c < cols; c++ {
				s += math.Abs(w[r*cols+c]) * (0x1p-8*math.Abs(float64(x[i*cols+c])) + 0x1p-126)
			}
			t[i*rows+r] += s
		}
	}
}

// MatMulShapes lists the [n, rows, cols] shapes the MatMul case runs.
var matmulShapes = [][3]int{
	{1, 1, 1}, {1, 7, 5}, {1, 65, 129}, {1, 130, 256}, {1, 33, 1000},
	{2, 17, 64}, {3, 64, 65}, {5, 9, 4096}, {8, 100, 96},
	{9, 67, 130}, {17, 65, 64}, {33, 129, 257}, {64, 64, 64}, {65, 31, 33},
}

func testMatMul(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range matmulShapes {
			n, rows, cols := sh[0], sh[1], sh[2]
			if err := e.matmulOne(dt, n, rows, cols); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Env) matmulOne(dt compute.DType, n, rows, cols int) error {
	w, err := e.weight("w", dt, rows, cols, e.normal(0.5))
	if err != nil {
		return err
	}
	x, err := e.randBuf(n*cols+1, 1)
	if err != nil {
		return err
	}
	dst, err := e.randBuf(n*rows+2, 1) // the tail must stay untouched
	if err != nil {
		return err
	}
	e.Ref.MatMul(dst.ref, x.ref, w.ref, n)
	e.DUT.MatMul(dst.dut, x.dut, w.dut, n)
	t := matmulTol(x.vals, w.vals, n, rows, cols)
	if iq, ok := e.DUT.(InputQuantizer); ok && dt == compute.BF16 && iq.QuantizesInputs(dt) {
		bf16InputTol(t, x.vals, w.vals, n, rows, cols)
	}
	err = e.check(fmt.Sprintf("MatMul %v n=%d [%d, %d]", dt, n, rows, cols), dst, func(i int) float64 {
		if i < len(t) {
			return t[i]
		}
		return 0
	})
	e.free(x, dst)
	return err
}
