//go:build !noasm

package asm

import "github.com/govinfer/govinfer/quant"

// NEON kernels, generated into *_arm64.s by internal/asmgen.

//go:noescape
func dotBF16NEON(w *uint16, x *float32, n int) float32

//go:noescape
func dotF16NEON(w *uint16, x *float32, n int) float32

//go:noescape
func dotF32NEON(w *float32, x *float32, n int) float32

//go:noescape
func axpyNEON(a float32, x, y *float32, n int)

//go:noescape
func scaleNEON(a float32, x *float32, n int)

//go:noescape
func matVec4BF16NEON(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F16NEON(dst *float32, w *uint16, x *float32, groups, cols, n, kblock int)

//go:noescape
func matVec4F32NEON(dst *float32, w *float32, x *float32, groups, cols, n, kblock int)

//go:noescape
func tileBF16NEON(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF16NEON(dst *float32, ldd int, w *uint16, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func tileF32NEON(dst *float32, ldd int, w *float32, ldw int, x *float32, ldx int, k, nb int)

//go:noescape
func expNEON(dst, x *float32, n int)

//go:noescape
func sigmoidNEON(dst, x *float32, n int)

//go:noescape
func siluNEON(dst, x *float32, n int)

//go:noescape
func siluMulNEON(dst, a, b *float32, n int)

//go:noescape
func sigmoidMulNEON(dst, a, b *float32, n int)

//go:noescape
func qdotQ8_0NEON(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ8_0NEONDP(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ4KNEON(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ4KNEONDP(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ5KNEON(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ5KNEONDP(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ6KNEON(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func qdotQ6KNEONDP(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

//go:noescape
func gemmF32NEONx1(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32NEONx2(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32NEONx3(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32NEONx4(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32NEONx5(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

//go:noescape
func gemmF32NEONx6(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

// archImpl installs the NEON kernels when f allows them and returns the
// features actually used. The matrix-matrix products run the 4x4 NEON
// register tile (four weight rows by four inputs) inside the cache-blocked
// tiler; a single input takes the matrix-vector kernel.
func archImpl(k *impl, f Features, nBlock int) Features {
	if !f.NEON {
		return Features{}
	}
	k.name = "neon"
	const L = 8
	k.gemm = &gemmTiles{rows: [gemmTileRows]gemmTile{gemmF32NEONx1, gemmF32NEONx2, gemmF32NEONx3,
		gemmF32NEONx4, gemmF32NEONx5, gemmF32NEONx6}, width: 16}
	k.gemm.kBlock = gemmKBlock(k.gemm.width)
	k.dotBF16 = func(w []uint16, x []float32) float32 { return dotTail(dotBF16NEON, L, dotBF16Go, w, x) }
	k.dotF16 = func(w []uint16, x []float32) float32 { return dotTail(dotF16NEON, L, dotF16Go, w, x) }
	k.dotF32 = func(w, x []float32) float32 { return dotTail(dotF32NEON, L, dotF32Go, w, x) }
	k.axpy = func(a float32, x, y []float32) {
		n := len(x)
		m := n - n%L
		if m > 0 {
			axpyNEON(a, &x[0], &y[0], m)
		}
		axpyGo(a, x[m:], y[m:n])
	}
	k.scale = func(a float32, x []float32) {
		n := len(x)
		m := n - n%L
		if m > 0 {
			scaleNEON(a, &x[0], m)
		}
		scaleGo(a, x[m:])
	}
	k.exp = func(dst, x []float32) { unaryTail(expNEON, 4, expGo, dst, x) }
	k.sigmoid = func(dst, x []float32) { unaryTail(sigmoidNEON, 4, sigmoidGo, dst, x) }
	k.silu = func(dst, x []float32) { unaryTail(siluNEON, 4, siluGo, dst, x) }
	k.siluMul = func(dst, a, b []float32) { binaryTail(siluMulNEON, 4, siluMulGo, dst, a, b) }
	k.sigmoidMul = func(dst, a, b []float32) { binaryTail(sigmoidMulNEON, 4, sigmoidMulGo, dst, a, b) }
	k.matVecBF16 = func(dst []float32, w []uint16, rows, cols int, x []float32) {
		matVec4(matVec4BF16NEON, L, k.dotBF16, dst, w, cols, rows, cols, x)
	}
	k.matVecF16 = func(dst []float32, w []uint16, rows, cols int, x []float32) {
		matVec4(matVec4F16NEON, L, k.dotF16, dst, w, cols, rows, cols, x)
	}
	k.matVecF32 = func(dst []float32, w []float32, rows, cols int, x []float32) {
		matVec4(matVec4F32NEON, L, k.dotF32, dst, w, cols, rows, cols, x)
	}
	// pad: 16 float32 inputs make 64 bytes.
	tBF16 := newTiler(tileBF16NEON, 4, L, k.dotBF16, 16, nBlock)
	tF16 := newTiler(tileF16NEON, 4, L, k.dotF16, 16, nBlock)
	tF32 := newTiler(tileF32NEON, 4, L, k.dotF32, 16, nBlock)
	k.matMulBF16 = func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
		if n == 1 {
			k.matVecBF16(dst[:rows], w, rows, cols, x)
			return
		}
		tBF16.matMul(dst, ldd, w, cols, rows, cols, x, n)
	}
	k.matMulF16 = func(dst []float32, ldd int, w []uint16, rows, cols int, x []float32, n int) {
		if n == 1 {
			k.matVecF16(dst[:rows], w, rows, cols, x)
			return
		}
		tF16.matMul(dst, ldd, w, cols, rows, cols, x, n)
	}
	k.matMulF32 = func(dst []float32, ldd int, w []float32, ldw, rows, cols int, x []float32, n int) {
		if n == 1 {
			matVec4(matVec4F32NEON, L, k.dotF32, dst[:rows], w, ldw, rows, cols, x)
			return
		}
		tF32.matMul(dst, ldd, w, ldw, rows, cols, x, n)
	}
	k.matMulQ = matMulQNEON
	if f.DotProd {
		k.name = "neondot"
		k.matMulQ = matMulQNEONDP
	}
	return Features{NEON: true, DotProd: f.DotProd}
}

// matMulQNEON is MatMulQ on the base ASIMD quantized kernels.
func matMulQNEON(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) {
	switch t {
	case quant.Q8_0:
		matMulQTiles(qdotQ8_0NEON, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q4_K:
		matMulQTiles(qdotQ4KNEON, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q5_K:
		matMulQTiles(qdotQ5KNEON, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q6_K:
		matMulQTiles(qdotQ6KNEON, nil, t, dst, ldd, w, rows, cols, xq, n)
	default:
		matMulQGo(t, dst, ldd, w, rows, cols, xq, n)
	}
}

// matMulQNEONDP is MatMulQ on the SDOT quantized kernels.
func matMulQNEONDP(t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) {
	switch t {
	case quant.Q8_0:
		matMulQTiles(qdotQ8_0NEONDP, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q4_K:
		matMulQTiles(qdotQ4KNEONDP, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q5_K:
		matMulQTiles(qdotQ5KNEONDP, nil, t, dst, ldd, w, rows, cols, xq, n)
	case quant.Q6_K:
		matMulQTiles(qdotQ6KNEONDP, nil, t, dst, ldd, w, rows, cols, xq, n)
	default:
		matMulQGo(t, dst, ldd, w, rows, cols, xq, n)
	}
}
