package asm

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/quant"
	"github.com/klauspost/cpuid/v2"
)

// Kernels is one set of kernel implementations. Build it with [New], [Detect]
// or [Generic]; the zero value is not usable. A Kernels value is immutable and
// safe for concurrent use; its methods do not allocate in steady state (the matrix-matrix products
// reuse pooled scratch buffers) except to report an error.
type Kernels struct {
	impl
	features Features
}

// impl holds the function values of a kernel set. The methods of Kernels
// validate arguments and then call these, so implementations may assume
// consistent lengths (see the Go twins for each contract).
type impl struct {
	name string

	dotBF16 func(w []uint16, x []float32) float32
	dotF16  func(w []uint16, x []float32) float32
	dotF32  func(w, x []float32) float32
	axpy    func(a float32, x, y []float32)
	scale   func(a float32, x []float32)

	exp        func(dst, x []float32)
	sigmoid    func(dst, x []float32)
	silu       func(dst, x []float32)
	siluMul    func(dst, gate, up []float32)
	sigmoidMul func(dst, x, gate []float32)

	matVecBF16 func(dst []float32, w []uint16, rows, cols int, x []float32)
	matVecF16  func(dst []float32, w []uint16, rows, cols int, x []float32)
	matVecF32  func(dst []float32, w []float32, rows, cols int, x []float32)

	matMulBF16 func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int)
	matMulF16  func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int)
	matMulF32  func(dst []float32, ldd int, w []float32, ldw, rows, cols int, x []float32, n int)
	gemmBF16   func(dst []float32, ldd int, w []uint16, rows, cols int, x []uint16, n int)

	// matMulBF16Tiles is MatMulBF16Tiles on tiles (nil: the Go twin).
	matMulBF16Tiles func(dst []float32, ldd int, w []uint16, rows, cols int, xp []uint16, n, parts int)
	// matMulBF16TilesFMA is MatMulBF16TilesFMA in assembly (nil: the Go
	// twin).
	matMulBF16TilesFMA func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int)
	// matMulBF16TilesOP is MatMulBF16TilesOP in assembly (nil: the Go
	// twin).
	matMulBF16TilesOP func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int)
	// packTileBF16 packs one input for the tile products (nil: the Go
	// twin): steps steps of 32 values at x, in parts parts, step t's part
	// p at dst + (t·parts + p)·1 KiB.
	packTileBF16 func(dst *uint16, x *float32, steps, parts int)

	// gemm holds the GemmF32 tiles (nil: the Go twin).
	gemm   *gemmTiles
	maxF32 func(dst, x []float32)

	matMulQ  func(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int)
	quantQ8K func(dst []quant.BlockQ8K, x []float32)
	quantQ80 func(dst []quant.BlockQ8_0, x []float32)

	// qpQ8_0, qpQ4_K and qpQ6_K are the packed kernels of 1..8 inputs
	// (nil: none).
	qpQ8_0, qpQ4_K, qpQ6_K *[maxPackInputs]qpKernel
	// qpQ8_0NoMinus128 says that the qpQ8_0 kernels need inputs without
	// the value −128 (the AVX2 ones): MatMulQPacked multiplies an input
	// holding one on the Go twin (only a block with a NaN quantizes to
	// it, by QuantizeQ8_0's rule).
	qpQ8_0NoMinus128 bool
	// qpQ8_0Wide are Q8_0 packed kernels of 1..8 inputs widened to words
	// (WidenQ8_0Inputs; nil: none), which MatMulQPacked runs from
	// qpWideMin inputs on, each chunk of inputs widened by widenQ8_0
	// (blocks blocks of one or more rows; nil: the Go twin).
	qpQ8_0Wide *[maxPackInputs]qpKernel
	widenQ8_0  func(dst, src []byte, blocks int)
	// qpGroupsQ4_K and qpGroupsQ6_K are the one-input kernels of two and
	// four groups at once (nil: none, or not Features.multiStream), whose
	// several weight streams decode faster than one on some CPUs (see
	// matMulQPackedTiles).
	qpGroupsQ4_K, qpGroupsQ6_K *qpGroupKernels
	// qpInputBytes is the bytes of packed inputs a packed product takes
	// at a time (qpInputBytes).
	qpInputBytes int
}

// goImpl is the pure-Go kernel set.
func goImpl() impl {
	return impl{
		name:       "go",
		dotBF16:    dotBF16Go,
		dotF16:     dotF16Go,
		dotF32:     dotF32Go,
		axpy:       axpyGo,
		scale:      scaleGo,
		exp:        expGo,
		sigmoid:    sigmoidGo,
		silu:       siluGo,
		siluMul:    siluMulGo,
		sigmoidMul: sigmoidMulGo,
		matVecBF16: matVecBF16Go,
		matVecF16:  matVecF16Go,
		matVecF32:  matVecF32Go,
		matMulBF16: matMulBF16Go,
		matMulF16:  matMulF16Go,
		matMulF32:  matMulF32Go,
		gemmBF16:   gemmBF16Go,
		maxF32:     maxF32Go,
		matMulQ:    matMulQGo,
		quantQ8K:   quant.QuantizeQ8K,
		quantQ80:   quant.QuantizeQ8_0,
	}
}

// New returns the kernel set that uses the capabilities in want that the
// running CPU also has (see [DetectFeatures]). New(Features{}) is the pure-Go set.
//
// The products' cache blocking follows the CPU's L2 size as
// github.com/klauspost/cpuid/v2 reports it.
func New(want Features) *Kernels {
	return newBlocked(want, inputBlock(cpuid.CPU.Cache.L2))
}

// newBlocked is New with nBlock inputs per block of the tiled products.
func newBlocked(want Features, nBlock int) *Kernels {
	f := want.and(DetectFeatures())
	k := &Kernels{impl: goImpl()}
	k.qpInputBytes = qpInputBytes(cpuid.CPU.Cache.L2)
	k.features = archImpl(&k.impl, f, nBlock)
	return k
}

// Detect returns the fastest kernel set for the running CPU.
func Detect() *Kernels { return New(DetectFeatures()) }

// Generic returns the pure-Go kernel set.
func Generic() *Kernels { return New(Features{}) }

// Name names the kernel set, such as "go", "avx2", "avx512", "avx512bf16", "neon" or
// "neondot" (NEON with SDOT for the quantized products); the AVX-512 sets
// end in "-vnni" where they have the AVX512_VNNI packed quantized products
// (PacksQ), then in "-amx" where they have AMX tile products (TilesBF16);
// the sets without AVX512_VNNI end in "-avxvnni" where their packed
// products use AVX-VNNI ("avx2-avxvnni").
func (k *Kernels) Name() string { return k.name }

// Features reports the capabilities the kernel set actually uses.
func (k *Kernels) Features() Features { return k.features }

// DotBF16 returns sum_i w[i]*x[i] over i < min(len(w), len(x)), with w in bf16,
// accumulated in float32 (the order of the additions is unspecified).
func (k *Kernels) DotBF16(w []uint16, x []float32) float32 {
	n := min(len(w), len(x))
	return k.dotBF16(w[:n], x[:n])
}

// DotF16 returns sum_i w[i]*x[i] over i < min(len(w), len(x)), with w in IEEE
// half precision, accumulated in float32 (the order of the additions is unspecified).
func (k *Kernels) DotF16(w []uint16, x []float32) float32 {
	n := min(len(w), len(x))
	return k.dotF16(w[:n], x[:n])
}

// DotF32 returns sum_i w[i]*x[i] over i < min(len(w), len(x)), accumulated in
// float32 (the order of the additions is unspecified).
func (k *Kernels) DotF32(w, x []float32) float32 {
	n := min(len(w), len(x))
	return k.dotF32(w[:n], x[:n])
}

// Axpy sets y[i] += a*x[i] for i < min(len(x), len(y)). The product and sum
// may be fused (one rounding).
func (k *Kernels) Axpy(a float32, x, y []float32) {
	n := min(len(x), len(y))
	k.axpy(a, x[:n], y[:n])
}

// Scale sets x[i] *= a for every i.
func (k *Kernels) Scale(a float32, x []float32) { k.scale(a, x) }

// Exp sets dst[i] = e^x[i] for i < min(len(dst), len(x)); dst may be x. The
// relative error is below 4e-7 (about 1 ulp) for results in the normal range;
// results beyond the float32 range are +Inf, results below it are correctly
// rounded subnormals or 0, and NaN stays NaN.
func (k *Kernels) Exp(dst, x []float32) {
	n := min(len(dst), len(x))
	k.exp(dst[:n], x[:n])
}

// Sigmoid sets dst[i] = 1/(1+e^-x[i]) for i < min(len(dst), len(x)); dst may
// be x. The relative error is below 4e-7 (results in the subnormal range, for
// x below about -87.3, are within one subnormal step); large inputs saturate
// to exactly 0 and 1, and NaN stays NaN.
func (k *Kernels) Sigmoid(dst, x []float32) {
	n := min(len(dst), len(x))
	k.sigmoid(dst[:n], x[:n])
}

// SiLU sets x[i] = x[i]*sigmoid(x[i]) (the swish activation) for every i,
// with the accuracy of [Kernels.Sigmoid]; SiLU(-Inf) is -0, the limit.
func (k *Kernels) SiLU(x []float32) { k.silu(x, x) }

// SiLUMul sets dst[i] = silu(gate[i]) * up[i], the gated activation of a SwiGLU
// MLP, for i < min(len(dst), len(gate), len(up)). dst may be gate or up but
// must not otherwise overlap them. The relative error is below 4e-7 (plus one
// subnormal step times |up[i]| for results that tiny).
func (k *Kernels) SiLUMul(dst, gate, up []float32) {
	n := min(len(dst), len(gate), len(up))
	k.siluMul(dst[:n], gate[:n], up[:n])
}

// SigmoidMul sets x[i] *= sigmoid(gate[i]) for i < min(len(x), len(gate)),
// the output gate of gated attention. The relative error is below 4e-7 (plus
// one subnormal step times |x[i]| for results that tiny).
func (k *Kernels) SigmoidMul(x, gate []float32) {
	n := min(len(x), len(gate))
	k.sigmoidMul(x[:n], x[:n], gate[:n])
}

// MatVecBF16 sets dst[r] = sum_c w[r*cols+c]*x[c] for r < rows, with w in bf16
// (row-major, rows×cols). It needs len(dst) >= rows, len(w) >= rows*cols and
// len(x) >= cols. Rows are processed several at a time so loads of x are shared.
func (k *Kernels) MatVecBF16(dst []float32, w []uint16, rows, cols int, x []float32) error {
	if err := checkMat("MatVecBF16", len(dst), rows, len(w), rows, cols, len(x), 1); err != nil {
		return err
	}
	k.matVecBF16(dst[:rows], w[:rows*cols], rows, cols, x[:cols])
	return nil
}

// MatVecF16 is [Kernels.MatVecBF16] with w in IEEE half precision.
func (k *Kernels) MatVecF16(dst []float32, w []uint16, rows, cols int, x []float32) error {
	if err := checkMat("MatVecF16", len(dst), rows, len(w), rows, cols, len(x), 1); err != nil {
		return err
	}
	k.matVecF16(dst[:rows], w[:rows*cols], rows, cols, x[:cols])
	return nil
}

// MatVecF32 is [Kernels.MatVecBF16] with w in float32.
func (k *Kernels) MatVecF32(dst []float32, w []float32, rows, cols int, x []float32) error {
	if err := checkMat("MatVecF32", len(dst), rows, len(w), rows, cols, len(x), 1); err != nil {
		return err
	}
	k.matVecF32(dst[:rows], w[:rows*cols], rows, cols, x[:cols])
	return nil
}

// MatMulBF16 multiplies n input vectors by a bf16 weight matrix: for i < n and
// r < rows it sets dst[i*ldd+r] = sum_c w[r*cols+c]*x[i*cols+c]. x is n×cols
// row-major, w is rows×cols row-major, and dst rows are ldd apart (ldd >= rows),
// so a caller may split the rows of a larger product across goroutines by
// passing a block of w rows and an offset dst slice. Only dst[i*ldd+r] with
// r < rows is written. Each weight tile is loaded once per block of inputs
// and the work is tiled for the caches, so this serves both batched decode
// (small n) and prefill (large n).
func (k *Kernels) MatMulBF16(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) error {
	if err := checkMat("MatMulBF16", len(dst), ldd, len(w), rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	k.matMulBF16(dst, ldd, w[:rows*cols], rows, cols, x[:n*cols], n)
	return nil
}

// MatMulF16 is [Kernels.MatMulBF16] with w in IEEE half precision.
func (k *Kernels) MatMulF16(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) error {
	if err := checkMat("MatMulF16", len(dst), ldd, len(w), rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	k.matMulF16(dst, ldd, w[:rows*cols], rows, cols, x[:n*cols], n)
	return nil
}

// MatMulF32 is [Kernels.MatMulBF16] with w in float32.
func (k *Kernels) MatMulF32(dst []float32, ldd int, w []float32, rows, cols int, x []float32, n int) error {
	if err := checkMat("MatMulF32", len(dst), ldd, len(w), rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	k.matMulF32(dst, ldd, w[:rows*cols], cols, rows, cols, x[:n*cols], n)
	return nil
}

// MatMulF32Strided is [Kernels.MatMulF32] with weight row r starting at
// w[r*ldw] (ldw >= cols): a block of rows inside a wider matrix, such as one
// head's keys in an attention cache. Each element is summed exactly as
// MatMulF32 sums it.
func (k *Kernels) MatMulF32Strided(dst []float32, ldd int, w []float32, ldw, rows, cols int, x []float32, n int) error {
	if ldw < cols || rows < 0 || cols < 0 || n < 0 {
		return fmt.Errorf("asm: MatMulF32Strided: weight stride %d with rows=%d cols=%d n=%d", ldw, rows, cols, n)
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if mulOverflows(rows-1, ldw) || len(w) < (rows-1)*ldw+cols {
		return fmt.Errorf("asm: MatMulF32Strided: weights have %d values, need (rows-1)*ldw+cols = %d*%d+%d", len(w), rows-1, ldw, cols)
	}
	if err := checkMat("MatMulF32Strided", len(dst), ldd, rows*cols, rows, cols, len(x), n); err != nil {
		return err
	}
	k.matMulF32(dst, ldd, w[:(rows-1)*ldw+cols], ldw, rows, cols, x[:n*cols], n)
	return nil
}

// GemmBF16 is [Kernels.MatMulBF16] with the inputs x also in bf16 (convert
// them with [F32ToBF16Slice]). Products of two bf16 values are exact in
// float32, so the result differs from the float64 product only by the float32
// accumulation; on CPUs with AVX512_BF16 it runs on VDPBF16PS, which may treat
// subnormal inputs and partial sums as zero. This is the prefill kernel.
func (k *Kernels) GemmBF16(dst []float32, ldd int, w []uint16, rows, cols int, x []uint16, n int) error {
	if err := checkMat("GemmBF16", len(dst), ldd, len(w), rows, cols, len(x), n); err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	k.gemmBF16(dst, ldd, w[:rows*cols], rows, cols, x[:n*cols], n)
	return nil
}

// checkMat validates the shapes of a matrix product with n inputs of cols
// values, rows outputs per input and output stride ldd.
func checkMat(op string, lenDst, ldd, lenW, rows, cols, lenX, n int) error {
	if rows < 0 || cols < 0 || n < 0 {
		return fmt.Errorf("asm: %s: negative shape rows=%d cols=%d n=%d", op, rows, cols, n)
	}
	if mulOverflows(rows, cols) || mulOverflows(n, cols) {
		return fmt.Errorf("asm: %s: shape rows=%d cols=%d n=%d overflows int", op, rows, cols, n)
	}
	if lenW < rows*cols {
		return fmt.Errorf("asm: %s: weights have %d values, need rows*cols = %d*%d", op, lenW, rows, cols)
	}
	if lenX < n*cols {
		return fmt.Errorf("asm: %s: input has %d values, need n*cols = %d*%d", op, lenX, n, cols)
	}
	if n == 0 || rows == 0 {
		return nil
	}
	if ldd < rows {
		return fmt.Errorf("asm: %s: output stride %d is less than rows %d", op, ldd, rows)
	}
	if mulOverflows(n-1, ldd) || (n-1)*ldd > math.MaxInt-rows {
		return fmt.Errorf("asm: %s: output stride %d with n=%d overflows int", op, ldd, n)
	}
	if need := (n-1)*ldd + rows; lenDst < need {
		return fmt.Errorf("asm: %s: output has %d values, need (n-1)*ldd+rows = %d", op, lenDst, need)
	}
	return nil
}

// mulOverflows reports whether a*b overflows int for non-negative a and b.
func mulOverflows(a, b int) bool {
	return a != 0 && b > math.MaxInt/a
}
