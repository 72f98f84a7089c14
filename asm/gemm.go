package asm

import (
	"fmt"
	"math"

	"github.com/klauspost/cpuid/v2"
)

// gemmTile is one assembly tile of GemmF32 (see internal/asmgen/gemm.go):
// mr rows of C by the kernel set's tile width, k ≥ 1 steps from C (acc ≠ 0)
// or from zero; on AVX-512 masks selects the columns of each 16-lane vector.
type gemmTile func(c *float32, ldc int, a *float32, rsa, csa int, b *float32, ldb, k int, masks uint64, acc int)

// gemmTiles is a kernel set's GemmF32 tiles: rows[mr-1] has mr rows; width
// columns; masked tiles take any column count up to width, others only
// width (the Go twin finishes the rest); kBlock steps per pass, so that a
// pass's columns of B stay in the L1 cache across the row tiles.
type gemmTiles struct {
	rows   [gemmTileRows]gemmTile
	width  int
	masked bool
	kBlock int
}

// gemmTileRows is the most rows of a GemmF32 tile.
const gemmTileRows = 6

// gemmKBlock returns the steps per pass of tiles width columns wide: as
// many as keep a pass's rows of B within half the L1 data cache (as
// github.com/klauspost/cpuid/v2 reports it; 32 KiB when unknown), a
// multiple of 16 and at least 16.
func gemmKBlock(width int) int {
	l1 := cpuid.CPU.Cache.L1D
	if l1 <= 0 {
		l1 = 32 << 10
	}
	return max(16, l1/2/(4*width)/16*16)
}

// GemmF32 sets, for i < m and j < n,
//
//	c[i*ldc+j] = c0 + Σ_{p<k} a[i*rsa+p*csa]·b[p*ldb+j]
//
// where c0 is c[i*ldc+j] when accumulate is set and 0 otherwise. A is read
// through two strides, so the same call multiplies by A (csa = 1) or by Aᵀ
// stored row-major (rsa = 1). Each element is one chain of fused
// multiply-adds in increasing p from c0: the result does not depend on m, n,
// the other rows or columns, or the kernel set (the Go twin rounds a
// float64 fused multiply-add to float32, which can differ from a float32 one
// in the last bit when that double rounding meets a tie). It returns an
// error when a slice is too short for the shape, a stride is negative, or
// ldc or ldb is below n.
func (k *Kernels) GemmF32(c []float32, ldc int, a []float32, rsa, csa int, b []float32, ldb int, m, n, kk int, accumulate bool) error {
	if m < 0 || n < 0 || kk < 0 || ldc < n || ldb < n || rsa < 0 || csa < 0 {
		return fmt.Errorf("asm: GemmF32: shape m=%d n=%d k=%d with ldc=%d ldb=%d rsa=%d csa=%d", m, n, kk, ldc, ldb, rsa, csa)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if mulOverflows(m-1, ldc) || len(c) < (m-1)*ldc+n {
		return fmt.Errorf("asm: GemmF32: c has %d values, need (m-1)*ldc+n = %d*%d+%d", len(c), m-1, ldc, n)
	}
	if kk == 0 {
		if !accumulate {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return nil
	}
	if mulOverflows(m-1, rsa) || mulOverflows(kk-1, csa) || len(a) <= (m-1)*rsa+(kk-1)*csa {
		return fmt.Errorf("asm: GemmF32: a has %d values, need (m-1)*rsa+(k-1)*csa+1 = %d*%d+%d*%d+1", len(a), m-1, rsa, kk-1, csa)
	}
	if mulOverflows(kk-1, ldb) || len(b) < (kk-1)*ldb+n {
		return fmt.Errorf("asm: GemmF32: b has %d values, need (k-1)*ldb+n = %d*%d+%d", len(b), kk-1, ldb, n)
	}
	if k.gemm == nil {
		gemmF32Go(c, ldc, a, rsa, csa, b, ldb, m, n, kk, accumulate)
		return nil
	}
	k.gemm.run(c, ldc, a, rsa, csa, b, ldb, m, n, kk, accumulate)
	return nil
}

// run is GemmF32 on the tiles, after the checks. Steps run in blocks of
// kBlock, each over all the column tiles: a block's rows of B are then read
// from memory once, and stay in the L1 cache for the row tiles of a column
// tile.
func (t *gemmTiles) run(c []float32, ldc int, a []float32, rsa, csa int, b []float32, ldb int, m, n, kk int, acc bool) {
	full := n
	if !t.masked {
		full = n - n%t.width
		if full < n {
			gemmF32Go(c[full:], ldc, a, rsa, csa, b[full:], ldb, m, n-full, kk, acc)
		}
	}
	for p0 := 0; p0 < kk; p0 += t.kBlock {
		steps := min(t.kBlock, kk-p0)
		from := 0
		if acc || p0 > 0 {
			from = 1
		}
		for j0 := 0; j0 < full; j0 += t.width {
			w := min(t.width, full-j0)
			var masks uint64
			for v := 0; v < 4; v++ {
				lanes := min(16, max(0, w-16*v))
				masks |= uint64(1<<lanes-1) << (16 * v)
			}
			for i0 := 0; i0 < m; i0 += gemmTileRows {
				mr := min(gemmTileRows, m-i0)
				t.rows[mr-1](&c[i0*ldc+j0], ldc, &a[i0*rsa+p0*csa], rsa, csa, &b[p0*ldb+j0], ldb, steps, masks, from)
			}
		}
	}
}

// gemmF32Go is the Go twin of GemmF32 (after its checks). It walks p in
// the middle loop, so each element's chain still runs in increasing p.
func gemmF32Go(c []float32, ldc int, a []float32, rsa, csa int, b []float32, ldb int, m, n, kk int, acc bool) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if !acc {
			clear(row)
		}
		for p := range kk {
			x := float64(a[i*rsa+p*csa])
			for j, y := range b[p*ldb : p*ldb+n] {
				row[j] = float32(math.FMA(x, float64(y), float64(row[j])))
			}
		}
	}
}

// MaxF32 sets dst[i] = x[i] when x[i] > dst[i], for i < min(len(dst),
// len(x)): the elementwise maximum, where a NaN in either keeps dst[i].
func (k *Kernels) MaxF32(dst, x []float32) {
	n := min(len(dst), len(x))
	k.maxF32(dst[:n], x[:n])
}

// maxF32Go is the Go twin of MaxF32.
func maxF32Go(dst, x []float32) {
	for i, v := range x {
		if v > dst[i] {
			dst[i] = v
		}
	}
}
