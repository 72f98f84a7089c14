package computetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// The quantized-weight cases: MatMul and Embed with weights in GGML's block
// formats. The reference backend gets the dequantized values
// (quant.DequantizeRow) as an F32 weight, so it needs no quantized support;
// the backend under test gets the blocks. A backend that dequantizes to
// exactly those float32 values (as the reference dequantizer computes them)
// differs only by the order of the float32 accumulation, so MatMul has the
// float cases' tolerance (tol over Σ|x·w|) and Embed must match bit for bit.
//
// A backend that does not take a format at all says so by failing
// LoadWeight of a one-block weight of it; the case is then skipped for that
// backend (SkipError), the only failure that skips. Once that probe
// succeeds, every other LoadWeight error and every mismatch fails.

// SkipError is returned by a case that does not apply to the backend under
// test; Run reports it as a skip, not a failure.
type SkipError struct{ Reason string }

func (s *SkipError) Error() string { return "skipped: " + s.Reason }

// quantDTypes are the block formats the quantized cases run.
var quantDTypes = []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q5_K, compute.Q6_K}

// quantCases returns the quantized-weight cases, appended to Cases.
func quantCases() []Case {
	return []Case{
		{"EmbedQuant", testEmbedQuant},
		{"MatMulQuant", testMatMulQuant},
	}
}

// probeQuant reports, as a SkipError, that the backend under test rejects
// dt at LoadWeight (of one zero block).
func (e *Env) probeQuant(dt compute.DType) error {
	cols := dt.Quant().BlockSize()
	if _, err := e.DUT.LoadWeight("probe", dt, 1, cols, make([]byte, dt.RowBytes(cols))); err != nil {
		return &SkipError{fmt.Sprintf("the backend does not load %v weights: %v", dt, err)}
	}
	return nil
}

// fp16Fields are the byte offsets of the fp16 scales (d, dmin) in a block.
func fp16Fields(t quant.Type) []int {
	switch t {
	case quant.Q8_0:
		return []int{0}
	case quant.Q4_K, quant.Q5_K:
		return []int{0, 2}
	case quant.Q6_K:
		return []int{208}
	}
	return nil
}

// quantWeight makes a [rows, cols] weight of block format dt on both
// backends: the blocks on the backend under test, their dequantized values
// as F32 on the reference. With random set, the blocks are random bytes
// with finite scales of about scale/64, covering every bit of the scale and
// high-bit fields; otherwise they quantize normal values times scale.
func (e *Env) quantWeight(name string, dt compute.DType, rows, cols int, scale float64, random bool) (wpair, error) {
	t := dt.Quant()
	w := wpair{vals: make([]float64, rows*cols)}
	data := make([]byte, rows*dt.RowBytes(cols))
	if random {
		for i := range data {
			data[i] = byte(e.Rng.Uint32())
		}
		for b := 0; b < len(data); b += t.BlockBytes() {
			for _, o := range fp16Fields(t) {
				f := float32(math.Abs(e.Rng.NormFloat64()) * scale / 64)
				binary.LittleEndian.PutUint16(data[b+o:], half.F32ToF16(f))
			}
		}
	} else if err := quant.QuantizeRow(t, data, e.randVals(rows*cols, scale)); err != nil {
		return w, err
	}
	vals := make([]float32, rows*cols)
	if err := quant.DequantizeRow(t, vals, data); err != nil {
		return w, err
	}
	f32 := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
		w.vals[i] = float64(v)
	}
	var err error
	if w.ref, err = e.Ref.LoadWeight(name, compute.F32, rows, cols, f32); err != nil {
		return w, fmt.Errorf("reference LoadWeight %s: %w", name, err)
	}
	if w.dut, err = e.DUT.LoadWeight(name, dt, rows, cols, data); err != nil {
		return w, fmt.Errorf("LoadWeight %s [%d, %d] %v: %w", name, rows, cols, dt, err)
	}
	return w, nil
}

// quantMatMulShapes lists the [n, rows, blocks] shapes of MatMulQuant: a
// row is that many blocks (256 values for the K-quants, three times that
// many of 32 for Q8_0, so a lane of a matrix-vector shader takes several).
// Every third shape has random blocks.
var quantMatMulShapes = [][3]int{
	{1, 1, 1}, {1, 7, 2}, {1, 65, 3}, {2, 17, 1}, {3, 64, 4}, {5, 9, 16},
	{8, 100, 1}, {9, 67, 2}, {17, 65, 1}, {33, 129, 3}, {64, 64, 2}, {65, 31, 1},
}

// InputQuantizer is a backend that, like GGML's CPU code, quantizes the
// inputs of a MatMul to 8-bit blocks before multiplying them by weights of
// a block format (Q8_0 blocks of 32 for Q8_0 weights, Q8_K blocks of 256 for
// the K-quants), so that the products are integer dot products. The
// quantized cases then also allow for the inputs' rounding.
type InputQuantizer interface {
	QuantizesInputs(dt compute.DType) bool
}

// inputQuantTol adds to t the error 8-bit input blocks can make: an input
// in a block whose largest magnitude is m moves by at most half a step,
// m/254, plus the fp16 rounding of a Q8_0 block's scale (at most 127 steps
// times 2^-11 of one), so by at most 0.57·m/127; each output moves by the
// sum of those times the weights' magnitudes.
func inputQuantTol(t []float64, dt compute.DType, x []float32, w []float64, n, rows, cols int) {
	block := 256
	if dt == compute.Q8_0 {
		block = 32
	}
	e := make([]float64, cols)
	for i := 0; i < n; i++ {
		for b := 0; b < cols; b += block {
			var m float64
			for c := b; c < b+block; c++ {
				m = max(m, math.Abs(float64(x[i*cols+c])))
			}
			for c := b; c < b+block; c++ {
				e[c] = 0.57 * m / 127
			}
		}
		for r := 0; r < rows; r++ {
			var s float64
			for c := 0; c < cols; c++ {
				s += math.Abs(w[r*cols+c]) * e[c]
			}
			t[i*rows+r] += s
		}
	}
}

func testMatMulQuant(e *Env) error {
	tested := 0
	var skipped []string
	iq, _ := e.DUT.(InputQuantizer)
	for _, dt := range quantDTypes {
		if err := e.probeQuant(dt); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		tested++
		for i, sh := range quantMatMulShapes {
			n, rows, cols := sh[0], sh[1], sh[2]*dt.Quant().BlockSize()
			if dt == compute.Q8_0 {
				cols *= 3
			}
			w, err := e.quantWeight("w", dt, rows, cols, 0.5, i%3 == 2)
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
			if iq != nil && iq.QuantizesInputs(dt) {
				inputQuantTol(t, dt, x.vals, w.vals, n, rows, cols)
			}
			err = e.check(fmt.Sprintf("MatMul %v n=%d [%d, %d]", dt, n, rows, cols), dst, func(i int) float64 {
				if i < len(t) {
					return t[i]
				}
				return 0
			})
			e.free(x, dst)
			if err != nil {
				return err
			}
		}
	}
	if tested == 0 {
		return &SkipError{strings.Join(skipped, "; ")}
	}
	return nil
}

func testEmbedQuant(e *Env) error {
	tested := 0
	var skipped []string
	for _, dt := range quantDTypes {
		if err := e.probeQuant(dt); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		tested++
		for i, sh := range [][2]int{{1, 1}, {7, 3}, {50, 2}, {33, 1}, {130, 5}} {
			rows, cols := sh[0], sh[1]*dt.Quant().BlockSize()
			w, err := e.quantWeight("embed", dt, rows, cols, 1, i%2 == 1)
			if err != nil {
				return err
			}
			ids := []int32{int32(rows - 1), 0, int32(rows / 2), int32(rows - 1), int32(e.Rng.IntN(rows))}
			dst, err := e.randBuf(len(ids)*cols+3, 1)
			if err != nil {
				return err
			}
			e.Ref.Embed(dst.ref, w.ref, ids)
			e.DUT.Embed(dst.dut, w.dut, ids)
			ids[0] = 12345 // the backend must have copied ids
			err = e.check(fmt.Sprintf("Embed %v [%d, %d]", dt, rows, cols), dst, nil)
			e.free(dst)
			if err != nil {
				return err
			}
		}
	}
	if tested == 0 {
		return &SkipError{strings.Join(skipped, "; ")}
	}
	return nil
}
