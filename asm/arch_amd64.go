//go:build !noasm

package asm

import (
	"sync"
	"unsafe"

	"github.com/govinfer/govinfer/quant"
)

// Assembly kernels, generated into *_amd64.s by internal/asmgen. The Go
// declarations document only the ABI; each .s file states its preconditions.

//go:noescape
func dotBF16AVX2(w *uint16, x *float32, n int) float32

//go:noescape
func dotF16AVX2(w *uint16, x *float32, n int) float32

//go:noescape
func dotF32AVX2(w *float32, x *float32, n int) float32

//go:noescape
func dotBF16AVX512(w *uint16, x *float32, n int) float32

//go:noescape
func dotF16AVX512(w *uint16, x *float32, n int) float32

//go:noescape
func dotF32AVX512(w *float32, x *float32, n int) float32

//go:noescape
func axpyAVX2(a float32, x, y *float32, n int)

//go:noescape
func scaleAVX2(a float32, x *float32, n int)

//go:noescape
func matVec4BF16AVX2(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F16AVX2(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F32AVX2(dst *float32, w *float32, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4BF16AVX512(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F16AVX512(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F32AVX512(dst *float32, w *float32, x *float32, groups, cols, n, kblock int)

//go:noescape
func tileBF16AVX2(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF16AVX2(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF32AVX2(dst *float32, ldd int, w *float32, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileBF16BF16AVX2(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)

//go:noescape
func tileBF16AVX512P(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF16AVX512P(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF32AVX512(dst *float32, ldd int, w *float32, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileBF16BF16AVX512(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)

//go:noescape
func tileBF16BF16AVX512BF16(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)

//go:noescape
func tileBF16BF16AVX512BF16P1(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)

//go:noescape
func tileBF16BF16AVX512BF16P(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)

//go:noescape
func tileBF16AVX2U(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileBF16AVX2UP(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func matVec4BF16AVX2U(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func expAVX2(dst, x *float32, n int)

//go:noescape
func sigmoidAVX2(dst, x *float32, n int)

//go:noescape
func siluAVX2(dst, x *float32, n int)

//go:noescape
func siluMulAVX2(dst, a, b *float32, n int)

//go:noescape
func sigmoidMulAVX2(dst, a, b *float32, n int)

//go:noescape
func expAVX512(dst, x *float32, n int)

//go:noescape
func sigmoidAVX512(dst, x *float32, n int)

//go:noescape
func siluAVX512(dst, x *float32, n int)

//go:noescape
func siluMulAVX512(dst, a, b *float32, n int)

//go:noescape
func sigmoidMulAVX512(dst, a, b *float32, n int)

//go:noescape
func qdotQ8_0AVX2x1(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ8_0AVX2x2(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ4KAVX2x1(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ4KAVX2x2(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ5KAVX2x1(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ5KAVX2x2(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ6KAVX2x1(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ6KAVX2x2(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func quantQ8KAVX2(dst *byte, x *float32, blocks int)

//go:noescape
func quantQ8_0AVX2(dst *byte, x *float32, blocks int) (nan bool)

//go:noescape
func qpQ8_0AVX2x1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2x2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2x3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2x4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2Wx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2Wx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2Wx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVX2Wx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func widenQ8_0AVX2(dst *byte, src *byte, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx5(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0AVXVNNIx6(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVXVNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVXVNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVXVNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVXVNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVXVNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVXVNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVXVNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVXVNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVX2x1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVX2x2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVX2x3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KAVX2x4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVX2x1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVX2x2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVX2x3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KAVX2x4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx5(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx6(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx7(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ8_0VNNIx8(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx5(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx6(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx7(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNIx8(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx1(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx2(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx3(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx4(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx5(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx6(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx7(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNIx8(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNI2g(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNI2g(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ4KVNNI4g(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func qpQ6KVNNI4g(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

//go:noescape
func gemmF32AVX2x1(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX2x2(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX2x3(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX2x4(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX2x5(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX2x6(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x1(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x2(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x3(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x4(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x5(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32AVX512x6(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func maxF32AVX2(dst, x *float32, n int)

// simd is one vector width's set of assembly routines for a kernel set.
type simd struct {
	lanes                 int
	dotBF16, dotF16       func(w *uint16, x *float32, n int) float32
	dotF32                func(w *float32, x *float32, n int) float32
	mvBF16, mvF16         func(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)
	mvF32                 func(dst *float32, w *float32, x *float32, groups, cols, n, kblock int)
	tileBF16, tileF16     func(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)
	tileF32               func(dst *float32, ldd int, w *float32, ldw int, x *float32, ldx int, k, nb int)
	tileBB                func(dst *float32, ldd int, w *uint16, ldw int, x *uint16, ldx int, k, nb int)
	maxN, maxNBB, alignBB int
	// unpacked selects the AVX2 bf16 kernels that widen weights with
	// VPUNPCKLWD/VPUNPCKHWD and read inputs in swapped-quad order.
	unpacked bool
	// bf16Dot selects VDPBF16PS for the products of bf16 inputs.
	bf16Dot bool
}

// archImpl installs the assembly kernels that f allows into k and returns the
// features actually used.
func archImpl(k *impl, f Features, nBlock int) Features {
	var s simd
	switch {
	case f.AVX512:
		s = simd{16, dotBF16AVX512, dotF16AVX512, dotF32AVX512,
			matVec4BF16AVX512, matVec4F16AVX512, matVec4F32AVX512,
			tileBF16AVX512P, tileF16AVX512P, tileF32AVX512, tileBF16BF16AVX512, 6, 6, 16, false, false}
		k.name = "avx512"
		if f.AVX512BF16 {
			s.tileBB, s.alignBB, s.bf16Dot = tileBF16BF16AVX512BF16, 32, true
			k.name = "avx512bf16"
		}
	case f.AVX2:
		s = simd{8, dotBF16AVX2, dotF16AVX2, dotF32AVX2,
			matVec4BF16AVX2, matVec4F16AVX2, matVec4F32AVX2,
			tileBF16AVX2, tileF16AVX2, tileF32AVX2, tileBF16BF16AVX2, 3, 2, 8, !f.packedBF16, false}
		k.name = "avx2"
		if f.packedBF16 {
			k.name = "avx2-vpmovzx"
		}
	default:
		return Features{}
	}
	f.NEON = false
	install(k, s, nBlock)
	installAct(k, f.AVX512)
	k.maxF32 = func(dst, x []float32) { unaryTail(maxF32AVX2, 8, maxF32Go, dst, x) }
	if f.AVX512 {
		k.gemm = &gemmTiles{rows: [gemmTileRows]gemmTile{gemmF32AVX512x1, gemmF32AVX512x2, gemmF32AVX512x3,
			gemmF32AVX512x4, gemmF32AVX512x5, gemmF32AVX512x6}, width: 64, masked: true}
	} else {
		k.gemm = &gemmTiles{rows: [gemmTileRows]gemmTile{gemmF32AVX2x1, gemmF32AVX2x2, gemmF32AVX2x3,
			gemmF32AVX2x4, gemmF32AVX2x5, gemmF32AVX2x6}, width: 16}
	}
	k.gemm.kBlock = gemmKBlock(k.gemm.width)
	// The AVX-512 sets run the AVX2 quantized kernels too.
	k.matMulQ = matMulQAVX2
	k.quantQ8K = func(dst []quant.BlockQ8K, x []float32) {
		if len(dst) > 0 {
			quantQ8KAVX2((*byte)(unsafe.Pointer(&dst[0])), &x[0], len(dst))
		}
	}
	k.quantQ80 = func(dst []quant.BlockQ8_0, x []float32) {
		if len(dst) > 0 && quantQ8_0AVX2((*byte)(unsafe.Pointer(&dst[0])), &x[0], len(dst)) {
			quant.QuantizeQ8_0(dst, x) // NaN: the twin's rule
		}
	}
	if f.AVX512VNNI {
		k.qpQ8_0 = &[maxPackInputs]qpKernel{qpQ8_0VNNIx1, qpQ8_0VNNIx2, qpQ8_0VNNIx3, qpQ8_0VNNIx4,
			qpQ8_0VNNIx5, qpQ8_0VNNIx6, qpQ8_0VNNIx7, qpQ8_0VNNIx8}
		k.qpQ4_K = &[maxPackInputs]qpKernel{qpQ4KVNNIx1, qpQ4KVNNIx2, qpQ4KVNNIx3, qpQ4KVNNIx4,
			qpQ4KVNNIx5, qpQ4KVNNIx6, qpQ4KVNNIx7, qpQ4KVNNIx8}
		k.qpQ6_K = &[maxPackInputs]qpKernel{qpQ6KVNNIx1, qpQ6KVNNIx2, qpQ6KVNNIx3, qpQ6KVNNIx4,
			qpQ6KVNNIx5, qpQ6KVNNIx6, qpQ6KVNNIx7, qpQ6KVNNIx8}
		if f.multiStream {
			k.qpGroupsQ4_K = &qpGroupKernels{qpQ4KVNNI2g, qpQ4KVNNI4g}
			k.qpGroupsQ6_K = &qpGroupKernels{qpQ6KVNNI2g, qpQ6KVNNI4g}
		}
		k.name += "-vnni"
		f.AVXVNNI = false // the AVX-512 kernels serve
	} else {
		f.multiStream = false // the group kernels are VNNI's
		// Without VNNI the packed products run on VPMADDUBSW (see
		// internal/asmgen/qpack_avx2.go), up to four inputs at a time.
		k.qpQ8_0 = &[maxPackInputs]qpKernel{qpQ8_0AVX2x1, qpQ8_0AVX2x2, qpQ8_0AVX2x3, qpQ8_0AVX2x4}
		k.qpQ8_0NoMinus128 = true
		// From qpWideMin inputs on, Q8_0 runs on inputs widened to
		// words (see x86QPackQ8_0AVX2W).
		k.qpQ8_0Wide = &[maxPackInputs]qpKernel{qpQ8_0AVX2Wx1, qpQ8_0AVX2Wx2, qpQ8_0AVX2Wx3, qpQ8_0AVX2Wx4}
		k.widenQ8_0 = func(dst, src []byte, blocks int) { widenQ8_0AVX2(&dst[0], &src[0], blocks) }
		k.qpQ4_K = &[maxPackInputs]qpKernel{qpQ4KAVX2x1, qpQ4KAVX2x2, qpQ4KAVX2x3, qpQ4KAVX2x4}
		k.qpQ6_K = &[maxPackInputs]qpKernel{qpQ6KAVX2x1, qpQ6KAVX2x2, qpQ6KAVX2x3, qpQ6KAVX2x4}
		f.AVXVNNI = f.AVXVNNI && f.AVX2
		if f.AVXVNNI {
			// AVX-VNNI (VEX VPDPBUSD on ymm; see
			// internal/asmgen/qpack_avxvnni.go): Q8_0 up to six inputs
			// at a time, the K-quants four. Against the AVX2 kernels
			// (4096x4096, one thread, shared Zen 5 class VM, medians of 3
			// alternating runs, noisy): Q8_0 1.7x at n=1, 2.7-3.2x at
			// n=8..512; Q6_K 1.3-2.3x; Q4_K 0.9-1.3x, no clear gain.
			k.qpQ8_0 = &[maxPackInputs]qpKernel{qpQ8_0AVXVNNIx1, qpQ8_0AVXVNNIx2, qpQ8_0AVXVNNIx3,
				qpQ8_0AVXVNNIx4, qpQ8_0AVXVNNIx5, qpQ8_0AVXVNNIx6}
			k.qpQ8_0NoMinus128 = false
			k.qpQ8_0Wide, k.widenQ8_0 = nil, nil
			k.qpQ4_K = &[maxPackInputs]qpKernel{qpQ4KAVXVNNIx1, qpQ4KAVXVNNIx2, qpQ4KAVXVNNIx3, qpQ4KAVXVNNIx4}
			k.qpQ6_K = &[maxPackInputs]qpKernel{qpQ6KAVXVNNIx1, qpQ6KAVXVNNIx2, qpQ6KAVXVNNIx3, qpQ6KAVXVNNIx4}
			k.name += "-avxvnni"
		}
	}
	if f.AVX512 {
		k.matMulBF16TilesFMA = matMulBF16TilesFMAAVX512
	} else {
		k.matMulBF16TilesOP = matMulBF16TilesOPAVX2
	}
	if f.AMXBF16 {
		k.matMulBF16Tiles = matMulBF16TilesAMX
		k.packTileBF16 = packTileBF16AVX512
		k.name += "-amx"
	}
	return f
}

// installAct installs the AVX2 activation kernels, run on 16 values at a
// time first when avx512 is set; the Go twins finish the last few values.
func installAct(k *impl, avx512 bool) {
	k.exp = func(dst, x []float32) { unaryTail(expAVX2, 8, expGo, dst, x) }
	k.sigmoid = func(dst, x []float32) { unaryTail(sigmoidAVX2, 8, sigmoidGo, dst, x) }
	k.silu = func(dst, x []float32) { unaryTail(siluAVX2, 8, siluGo, dst, x) }
	k.siluMul = func(dst, a, b []float32) { binaryTail(siluMulAVX2, 8, siluMulGo, dst, a, b) }
	k.sigmoidMul = func(dst, a, b []float32) { binaryTail(sigmoidMulAVX2, 8, sigmoidMulGo, dst, a, b) }
	if !avx512 {
		return
	}
	exp, sigmoid, silu, siluMul, sigmoidMul := k.exp, k.sigmoid, k.silu, k.siluMul, k.sigmoidMul
	k.exp = func(dst, x []float32) { unaryTail(expAVX512, 16, exp, dst, x) }
	k.sigmoid = func(dst, x []float32) { unaryTail(sigmoidAVX512, 16, sigmoid, dst, x) }
	k.silu = func(dst, x []float32) { unaryTail(siluAVX512, 16, silu, dst, x) }
	k.siluMul = func(dst, a, b []float32) { binaryTail(siluMulAVX512, 16, siluMul, dst, a, b) }
	k.sigmoidMul = func(dst, a, b []float32) { binaryTail(sigmoidMulAVX512, 16, sigmoidMul, dst, a, b) }
}

// install fills k from the routines in s.
func install(k *impl, s simd, nBlock int) {
	L := s.lanes
	k.dotBF16 = func(w []uint16, x []float32) float32 { return dotTail(s.dotBF16, L, dotBF16Go, w, x) }
	k.dotF16 = func(w []uint16, x []float32) float32 { return dotTail(s.dotF16, L, dotF16Go, w, x) }
	k.dotF32 = func(w, x []float32) float32 { return dotTail(s.dotF32, L, dotF32Go, w, x) }
	k.axpy = func(a float32, x, y []float32) {
		n := len(x)
		m := n - n%8
		if m > 0 {
			axpyAVX2(a, &x[0], &y[0], m)
		}
		axpyGo(a, x[m:], y[m:n])
	}
	k.scale = func(a float32, x []float32) {
		n := len(x)
		m := n - n%8
		if m > 0 {
			scaleAVX2(a, &x[0], m)
		}
		scaleGo(a, x[m:])
	}
	k.matVecBF16 = func(dst []float32, w []uint16, rows, cols int, x []float32) {
		matVec4(s.mvBF16, L, k.dotBF16, dst, w, cols, rows, cols, x)
	}
	tBF16 := newTiler(s.tileBF16, s.maxN, L, k.dotBF16, 16, nBlock)
	if s.unpacked {
		xs := &sync.Pool{New: func() any { return new([]float32) }}
		k.matVecBF16 = func(dst []float32, w []uint16, rows, cols int, x []float32) {
			p := xs.Get().(*[]float32)
			if cap(*p) < cols {
				*p = make([]float32, cols)
			}
			sx := (*p)[:cols]
			m := cols - cols%16
			swapQuads(sx[:m], x[:m])
			copy(sx[m:], x[m:cols])
			matVec4(matVec4BF16AVX2U, 16, k.dotBF16, dst, w, cols, rows, cols, sx)
			xs.Put(p)
		}
		tBF16 = newTiler(tileBF16AVX2U, 2, 16, k.dotBF16, 16, nBlock)
		tBF16.pack = swapQuads
		tBF16.small, tBF16.smallN = tileBF16AVX2UP, 8
	}
	k.matVecF16 = func(dst []float32, w []uint16, rows, cols int, x []float32) {
		matVec4(s.mvF16, L, k.dotF16, dst, w, cols, rows, cols, x)
	}
	k.matVecF32 = func(dst []float32, w []float32, rows, cols int, x []float32) {
		matVec4(s.mvF32, L, k.dotF32, dst, w, cols, rows, cols, x)
	}
	tF16 := newTiler(s.tileF16, s.maxN, L, k.dotF16, 16, nBlock)
	tF32 := newTiler(s.tileF32, s.maxN, L, k.dotF32, 16, nBlock)
	// bf16 inputs take half the bytes of float32 ones: segments and blocks
	// twice as long fill the caches alike, and halve the reductions (one
	// thread, 4096x4096, 512 inputs, AVX512_BF16: 133-142 to 154-159 GFLOP/s).
	tBB := newTilerK(s.tileBB, s.maxNBB, s.alignBB, dotBF16BF16Go, 32, 2*nBlock, 2*kBlock)
	if s.bf16Dot {
		tBB.small, tBB.smallN, tBB.one = tileBF16BF16AVX512BF16P, rowsOuterN, tileBF16BF16AVX512BF16P1
	}
	// One input on AVX-512 runs the prefetching tile too: its prefetch of
	// the next rows into L2 streams weights faster than the matrix-vector
	// kernel's (one thread, 24576x4096 bf16: 20.2-21.6 GB/s against
	// 13.2-14.3), with the same sums. On AVX2 both stream at 17.2 GB/s.
	tileOne := s.lanes == 16
	k.matMulBF16 = func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
		if n == 1 && !tileOne {
			k.matVecBF16(dst[:rows], w, rows, cols, x)
			return
		}
		tBF16.matMul(dst, ldd, w, cols, rows, cols, x, n)
	}
	k.matMulF16 = func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
		if n == 1 && !tileOne {
			k.matVecF16(dst[:rows], w, rows, cols, x)
			return
		}
		tF16.matMul(dst, ldd, w, cols, rows, cols, x, n)
	}
	k.matMulF32 = func(dst []float32, ldd int, w []float32, ldw, rows, cols int, x []float32, n int) {
		if n == 1 {
			matVec4(s.mvF32, L, k.dotF32, dst[:rows], w, ldw, rows, cols, x)
			return
		}
		tF32.matMul(dst, ldd, w, ldw, rows, cols, x, n)
	}
	k.gemmBF16 = func(dst []float32, ldd int, w []uint16, rows, cols int, x []uint16, n int) {
		tBB.matMul(dst, ldd, w, cols, rows, cols, x, n)
	}
}

// matMulQAVX2 is MatMulQ on the AVX2 quantized kernels.
func matMulQAVX2(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) {
	switch t {
	case quant.Q8_0:
		matMulQTiles(qdotQ8_0AVX2x1, qdotQ8_0AVX2x2, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q4_K:
		matMulQTiles(qdotQ4KAVX2x1, qdotQ4KAVX2x2, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q5_K:
		matMulQTiles(qdotQ5KAVX2x1, qdotQ5KAVX2x2, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q6_K:
		matMulQTiles(qdotQ6KAVX2x1, qdotQ6KAVX2x2, t, dst, ldd, w, rows, cols, xq, n)
	default:
		matMulQGo(t, dst, ldd, w, rows, cols, xq, n)
	}
}
