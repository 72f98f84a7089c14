package asm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/quant"
)

// quantWeights returns rows random rows of cols values quantized to t.
func quantWeights(t *testing.T, r *rand.Rand, qt quant.Type, rows, cols int) []byte {
	t.Helper()
	rb := qt.RowBytes(cols)
	w := make([]byte, rows*rb)
	for i := range rows {
		if err := quant.QuantizeRow(qt, w[i*rb:(i+1)*rb], randF32(r, cols)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// TestMatMulQ checks every kernel set's quantized product against the
// package quant twin (quantized inputs, then MatVecQ8 per input), bit for
// bit, and that each input's results do not depend on the others.
func TestMatMulQ(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range kernelSets(t) {
		for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K} {
			for _, s := range []struct{ rows, cols, n int }{{1, 256, 1}, {5, 256, 3}, {8, 512, 2}, {13, 768, 7}, {4, 2048, 1}} {
				what := fmt.Sprintf("%s %v %dx%d n=%d", k.Name(), qt, s.rows, s.cols, s.n)
				w := quantWeights(t, r, qt, s.rows, s.cols)
				x := randF32(r, s.n*s.cols)
				xb := InputRowBytes(qt, s.cols)
				xq := InputBuffer(s.n * xb)
				if err := k.QuantizeInputs(qt, xq, x, s.n, s.cols); err != nil {
					t.Fatal(err)
				}
				ldd := s.rows + 2
				dst := make([]float32, (s.n-1)*ldd+s.rows)
				if err := k.MatMulQ(qt, dst, ldd, w, s.rows, s.cols, xq, s.n); err != nil {
					t.Fatal(err)
				}
				for i := range s.n {
					want := make([]float32, s.rows)
					quant.MatVecQ8(qt, want, w, s.rows, s.cols, x[i*s.cols:(i+1)*s.cols])
					one := make([]float32, s.rows)
					if err := k.MatMulQ(qt, one, s.rows, w, s.rows, s.cols, xq[i*xb:(i+1)*xb], 1); err != nil {
						t.Fatal(err)
					}
					for row := range s.rows {
						got := dst[i*ldd+row]
						if math.Float32bits(got) != math.Float32bits(want[row]) || math.Float32bits(one[row]) != math.Float32bits(want[row]) {
							t.Fatalf("%s: input %d row %d: %v (alone %v), twin %v", what, i, row, got, one[row], want[row])
						}
					}
				}
			}
		}
	}
}

func TestMatMulQErrors(t *testing.T) {
	k := Detect()
	w := make([]byte, 2*quant.Q8_0.RowBytes(64))
	xq := InputBuffer(InputRowBytes(quant.Q8_0, 64))
	dst := make([]float32, 2)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"columns not a block multiple", k.MatMulQ(quant.Q8_0, dst, 2, w, 2, 48, xq, 1)},
		{"unsupported type", k.MatMulQ(quant.Q5_K, dst, 2, w, 2, 256, xq, 1)},
		{"short weights", k.MatMulQ(quant.Q8_0, dst, 2, w[:10], 2, 64, xq, 1)},
		{"short inputs", k.MatMulQ(quant.Q8_0, dst, 2, w, 2, 64, xq[:10], 1)},
		{"short output", k.MatMulQ(quant.Q8_0, dst[:1], 2, w, 2, 64, xq, 1)},
		{"unaligned inputs", k.MatMulQ(quant.Q8_0, dst, 2, w, 2, 64, InputBuffer(len(xq) + 1)[1:], 1)},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}
