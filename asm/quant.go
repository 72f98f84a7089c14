package asm

import (
	"fmt"
	"unsafe"

	"github.com/govinfer/govinfer/quant"
)

// Products with quantized weights (GGML's block layouts, package quant) run
// as GGML's CPU backend runs them: each input row is first quantized to
// 8-bit blocks (Q8_0 blocks for Q8_0 weights, Q8_K blocks for the K-quants)
// and every block pair is an integer dot product, exact in int32, scaled in
// float32 once per block and added to the row's sum in block order. The
// result is a function of the weight row and the quantized input row alone,
// so it is the same whatever n, rows or the row's place in the matrix: the
// Go twins in package quant (DotQ8_0Q8_0, DotQ4KQ8K, DotQ5KQ8K, DotQ6KQ8K) define it
// bit for bit.

// InputType returns the block type inputs are quantized to for products
// with weights of type t (Q8_0 for Q8_0, Q8_K for Q4_K, Q5_K and Q6_K) and whether
// the kernels take weights of type t at all.
func InputType(t quant.Type) (q8K bool, ok bool) {
	switch t {
	case quant.Q8_0:
		return false, true
	case quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return true, true
	}
	return false, false
}

// InputRowBytes returns the bytes of one input row of cols values quantized
// for products with weights of type t, or 0 when the kernels do not take t
// or cols is not a multiple of t's block.
func InputRowBytes(t quant.Type, cols int) int {
	q8K, ok := InputType(t)
	if !ok || !t.Fits(cols) {
		return 0
	}
	if q8K {
		return cols / 256 * int(unsafe.Sizeof(quant.BlockQ8K{}))
	}
	return cols / 32 * int(unsafe.Sizeof(quant.BlockQ8_0{}))
}

// inputAlign is the alignment quantized input rows need: 4 bytes for Q8_K
// blocks (a float32 scale), 2 for Q8_0 blocks (an fp16 one).
func inputAlign(t quant.Type) uintptr {
	if q8K, _ := InputType(t); q8K {
		return 4
	}
	return 2
}

// QuantizeInputs quantizes n input rows of cols values (x, row-major) into
// dst, n rows of InputRowBytes(t, cols) bytes, for products with weights of
// type t. dst must be 4-byte aligned for K-quant weights, 2-byte aligned for
// Q8_0 (any whole row of a buffer from InputBuffer is). The bytes are those
// of package quant's QuantizeQ8_0 or QuantizeQ8K in every kernel set.
func (k *Kernels) QuantizeInputs(t quant.Type, dst []byte, x []float32, n, cols int) error {
	rb := InputRowBytes(t, cols)
	switch {
	case rb == 0:
		return fmt.Errorf("asm: QuantizeInputs: %v weights with %d columns are not supported", t, cols)
	case n < 0 || len(x) < n*cols || len(dst) < n*rb:
		return fmt.Errorf("asm: QuantizeInputs: %d rows of %d need %d inputs and %d bytes, have %d and %d",
			n, cols, n*cols, n*rb, len(x), len(dst))
	case n > 0 && uintptr(unsafe.Pointer(&dst[0]))%inputAlign(t) != 0:
		return fmt.Errorf("asm: QuantizeInputs: output not %d-byte aligned", inputAlign(t))
	}
	q8K, _ := InputType(t)
	for i := range n {
		row := x[i*cols : (i+1)*cols]
		if q8K {
			k.quantQ8K(q8KBlocks(dst[i*rb:(i+1)*rb]), row)
		} else {
			k.quantQ80(q80Blocks(dst[i*rb:(i+1)*rb]), row)
		}
	}
	return nil
}

// MatMulQ multiplies n quantized input rows (xq, made by QuantizeInputs for
// t and cols) by the quantized weight matrix w, rows rows of
// t.RowBytes(cols) bytes: dst[i*ldd+r] = Σ_c w[r,c]·x[i,c] for r < rows and
// i < n, each element computed as the package quant twin computes it (see
// above), so bit for bit independent of n, rows and the row's place.
func (k *Kernels) MatMulQ(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) error {
	rb, xb := 0, InputRowBytes(t, cols)
	if xb > 0 {
		rb = t.RowBytes(cols)
	}
	switch {
	case xb == 0:
		return fmt.Errorf("asm: MatMulQ: %v weights with %d columns are not supported", t, cols)
	case rows < 0 || n < 0:
		return fmt.Errorf("asm: MatMulQ: negative shape rows=%d n=%d", rows, n)
	case len(w) < rows*rb:
		return fmt.Errorf("asm: MatMulQ: weights have %d bytes, need %d rows of %d", len(w), rows, rb)
	case len(xq) < n*xb:
		return fmt.Errorf("asm: MatMulQ: inputs have %d bytes, need %d rows of %d", len(xq), n, xb)
	case n > 0 && uintptr(unsafe.Pointer(&xq[0]))%inputAlign(t) != 0:
		return fmt.Errorf("asm: MatMulQ: inputs not %d-byte aligned", inputAlign(t))
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if ldd < rows || len(dst) < (n-1)*ldd+rows {
		return fmt.Errorf("asm: MatMulQ: output of %d values with stride %d cannot hold %d rows of %d", len(dst), ldd, n, rows)
	}
	k.matMulQ(t, dst, ldd, w[:rows*rb], rows, cols, xq[:n*xb], n)
	return nil
}

// matMulQGo is the Go twin of MatMulQ.
func matMulQGo(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) {
	rb, xb := t.RowBytes(cols), InputRowBytes(t, cols)
	for i := range n {
		in := xq[i*xb : (i+1)*xb]
		for r := range rows {
			row := w[r*rb : (r+1)*rb]
			var s float32
			switch t {
			case quant.Q8_0:
				s = quant.DotQ8_0Q8_0(row, q80Blocks(in))
			case quant.Q4_K:
				s = quant.DotQ4KQ8K(row, q8KBlocks(in))
			case quant.Q5_K:
				s = quant.DotQ5KQ8K(row, q8KBlocks(in))
			case quant.Q6_K:
				s = quant.DotQ6KQ8K(row, q8KBlocks(in))
			}
			dst[i*ldd+r] = s
		}
	}
}

// q80Blocks views b (a whole number of blocks) as Q8_0 activation blocks.
func q80Blocks(b []byte) []quant.BlockQ8_0 {
	n := len(b) / int(unsafe.Sizeof(quant.BlockQ8_0{}))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*quant.BlockQ8_0)(unsafe.Pointer(&b[0])), n)
}

// q8KBlocks views b (4-byte aligned, a whole number of blocks) as Q8_K
// activation blocks.
func q8KBlocks(b []byte) []quant.BlockQ8K {
	n := len(b) / int(unsafe.Sizeof(quant.BlockQ8K{}))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*quant.BlockQ8K)(unsafe.Pointer(&b[0])), n)
}

// InputBuffer returns n zero bytes starting at a 4-byte boundary, as
// QuantizeInputs and MatMulQ want them.
func InputBuffer(n int) []byte {
	if n <= 0 {
		return nil
	}
	u := make([]uint32, (n+3)/4)
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), n)
}
