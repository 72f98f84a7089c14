package asm

import (
	"sync"

	"github.com/govinfer/govinfer/quant"
)

// This file holds the Go glue shared by the assembly kernel sets: each
// assembly routine handles an aligned main part and the Go twins finish the
// ragged edges. The functions are generic so one driver serves every element type.

// dotTail computes a dot product with the assembly routine f over the longest
// prefix of w whose length is a multiple of align, and the Go twin over the rest.
// It needs len(x) >= len(w).
func dotTail[W, X any](f func(w *W, x *X, n int) float32, align int, twin func([]W, []X) float32, w []W, x []X) float32 {
	n := len(w)
	m := n - n%align
	var s float32
	if m > 0 {
		s = f(&w[0], &x[0], m)
	}
	if m < n {
		s += twin(w[m:], x[m:n])
	}
	return s
}

// matVec4 runs the four-row assembly routine mv over the rows in groups of four
// and the columns up to a multiple of align, then adds the remaining columns
// with dot (which takes any length). Every output, the last rows' included,
// is summed exactly as the tiler sums one element of a matrix-matrix
// product: per segment of kBlock columns, then the ragged columns. A
// product's result for one input therefore depends neither on how many
// inputs share the call nor on which other rows do.
//
// Weight row r starts at w[r*ldw] (ldw >= cols).
func matVec4[W any](mv func(dst *float32, w *W, x *float32, groups, cols, n, kblock int), align int,
	dot func([]W, []float32) float32, dst []float32, w []W, ldw, rows, cols int, x []float32) {
	groups := rows / 4
	m := cols - cols%align
	if m == 0 {
		clear(dst[:rows])
	} else {
		if groups > 0 {
			mv(&dst[0], &w[0], &x[0], groups, ldw, m, kBlock)
		}
		switch rest := rows - groups*4; {
		case rest > 0 && groups > 0:
			// The last four rows again: each row's sum is the same in
			// any group, so the rows computed twice get the same values.
			mv(&dst[rows-4], &w[(rows-4)*ldw], &x[0], 1, ldw, m, kBlock)
		case rest > 0:
			// Fewer than four rows: each as a group of four copies of
			// itself (a row stride of zero).
			out := make([]float32, 4)
			for r := range rows {
				mv(&out[0], &w[r*ldw], &x[0], 1, 0, m, kBlock)
				dst[r] = out[0]
			}
		}
	}
	if m < cols {
		for r := range rows {
			dst[r] += dot(w[r*ldw+m:r*ldw+cols], x[m:cols])
		}
	}
}

// tiler describes a register-tiled matrix-matrix micro-kernel.
type tiler[W, X any] struct {
	// tile adds to dst[j*ldd+r], for r < 4 and j < nb, the dot product of
	// weight row r (w[r*ldw:]) with input j (x[j*ldx:]) over k values.
	// k is a positive multiple of align and 1 <= nb <= maxN; strides count elements.
	tile  func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int)
	maxN  int
	align int
	// dot is a dot product of any length, used for the ragged edges.
	dot func([]W, []X) float32
	// pad is the number of X elements that make 64 bytes.
	pad int
	// pack, when set, stores a block of inputs in the order tile reads
	// (len(src) a multiple of align); nil means a plain copy.
	pack func(dst, src []X)
	// nBlock is the number of inputs of a block, a multiple of maxN.
	nBlock int
	// small, when set, replaces tile in products of at most smallN inputs
	// (a variant that differs in speed only, not in any result).
	small  func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int)
	smallN int
	// one, when set, replaces tile and small in products of one input.
	one func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int)
	// kBlock is the columns of a segment (see matMul): the package's
	// kBlock, or twice it for 2-byte inputs (newTilerK).
	kBlock int
	// pool holds the *tileScratch[X] of matMul calls.
	pool *sync.Pool
}

// tileScratch is the memory of one matMul call.
type tileScratch[X any] struct {
	x   []X // (nBlock+maxN)*(t.kBlock+pad) elements: the repacked input block
	out [4 * maxTileN]float32
}

// newTiler returns a tiler of blocks of nBlock inputs, segments of kBlock
// columns, with its scratch pool.
func newTiler[W, X any](tile func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int),
	maxN, align int, dot func([]W, []X) float32, pad, nBlock int) *tiler[W, X] {
	return newTilerK(tile, maxN, align, dot, pad, nBlock, kBlock)
}

// newTilerK is newTiler with segments of kb columns (a multiple of align).
func newTilerK[W, X any](tile func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int),
	maxN, align int, dot func([]W, []X) float32, pad, nBlock, kb int) *tiler[W, X] {
	nBlock = max(maxN, nBlock-nBlock%maxN)
	size := (nBlock + maxN) * (kb + pad)
	return &tiler[W, X]{tile: tile, maxN: maxN, align: align, dot: dot, pad: pad, nBlock: nBlock, kBlock: kb,
		pool: &sync.Pool{New: func() any { return &tileScratch[X]{x: make([]X, size)} }}}
}

// Cache blocking of the tiled product: a block of kBlock columns of up to
// nBlock inputs is kept hot in the L2 cache while every four-row weight tile
// of that column block (4*kBlock elements) is streamed through it. kBlock
// also fixes the order in which every element is summed (see matMul), so it
// is the same on every machine; nBlock changes no result and follows the
// machine's L2 size (inputBlock).
const kBlock = 2048 // a multiple of every tiler's align

// inputBlock returns the inputs per block for an L2 cache of l2 bytes (0:
// unknown): as many float32 input rows of kBlock columns as fill half of
// it, between 12 and 120 (30 for the common 512 KiB).
func inputBlock(l2 int) int {
	if l2 <= 0 {
		l2 = 512 << 10
	}
	return min(120, max(12, l2/2/(kBlock*4)-2))
}

// matMul computes dst[i*ldd+r] = sum_c w[r*cols+c]*x[i*cols+c] for r < rows and
// i < n using the micro-kernel, with the loops blocked for the caches. Each
// block of inputs is first copied to a scratch buffer with rows kBlock+pad
// apart: input rows of a power-of-two length would otherwise all map to the
// same L1 cache sets as each other and as the weight rows, and the tile's
// ten streams would evict each other (measured 1.6x slower at 4096 columns).
//
// Every element is summed the same way, whatever n, rows and its place: per
// segment of kBlock columns one accumulator per (row, input), reduced and
// added in segment order, then the ragged columns with dot. The last rows%4
// rows run through the tile as four copies of themselves (a weight stride of
// zero). So one input's results do not depend on the other inputs of the
// call, which prefill resumed at a cut point and batches of sequences rely on.
//
// Weight row r starts at w[r*ldw] (ldw >= cols).
func (t *tiler[W, X]) matMul(dst []float32, ldd int, w []W, ldw, rows, cols int, x []X, n int) {
	m := cols - cols%t.align
	for i := range n {
		clear(dst[i*ldd : i*ldd+rows])
	}
	nb := t.nBlock
	tile := t.tile
	if t.small != nil && n <= t.smallN {
		tile = t.small
	}
	if t.one != nil && n == 1 {
		tile = t.one
	}
	if m > 0 && n <= rowsOuterN {
		t.rowsOuter(tile, dst, ldd, w, ldw, rows, cols, m, x, n)
	} else if m > 0 {
		sc := t.pool.Get().(*tileScratch[X])
		buf := sc.x
		ldx := t.kBlock + t.pad
		for k0 := 0; k0 < m; k0 += t.kBlock {
			kb := min(t.kBlock, m-k0)
			for i0 := 0; i0 < n; i0 += nb {
				i1 := min(i0+nb, n)
				for i := i0; i < i1; i++ {
					if t.pack != nil {
						t.pack(buf[(i-i0)*ldx:(i-i0)*ldx+kb], x[i*cols+k0:i*cols+k0+kb])
					} else {
						copy(buf[(i-i0)*ldx:(i-i0)*ldx+kb], x[i*cols+k0:i*cols+k0+kb])
					}
				}
				for r := 0; r < rows; r += 4 {
					t.inputs(tile, sc, dst[i0*ldd+r:], ldd, w[r*ldw+k0:], ldw, rows-r, buf, ldx, kb, i1-i0)
				}
			}
		}
		t.pool.Put(sc)
	}
	if m < cols {
		for r := range rows {
			for i := range n {
				dst[i*ldd+r] += t.dot(w[r*ldw+m:r*ldw+cols], x[i*cols+m:(i+1)*cols])
			}
		}
	}
}

// tileInputs returns the inputs of the next tile when left inputs remain:
// they go in the fewest tiles of at most maxN, as even as can be (eight
// inputs on a six-input tile run as 4+4, not 6+2). A tile of few inputs
// loads as many weight vectors for fewer products (measured in L1 at
// 2048 columns on AVX-512: 4+4 at 84-93 GFLOP/s, 6+2 at 80-82), and the
// sums are the same in any tile.
func (t *tiler[W, X]) tileInputs(left int) int {
	tiles := (left + t.maxN - 1) / t.maxN
	return (left + tiles - 1) / tiles
}

// rowsOuterN is the most inputs for which matMul walks the weights row
// group by row group, each over all its segments, rather than segment by
// segment: with a few inputs (decode, batched decode) the whole inputs stay
// in cache, and reading each weight row from start to end streams memory
// faster than reading the first kBlock columns of every row, then the next
// (model decode at the 9B widths, 2 threads, Zen 4, alternating runs:
// 29.5-31.3 GB/s against 26.1-28.6).
const rowsOuterN = 8

// rowsOuter is matMul's aligned part (m columns) for at most rowsOuterN
// inputs: the inputs are packed whole, rows m+pad apart, and every row
// group runs its segments in order, so each element is summed exactly as
// the segment-outer walk sums it.
func (t *tiler[W, X]) rowsOuter(tile func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int),
	dst []float32, ldd int, w []W, ldw, rows, cols, m int, x []X, n int) {
	sc := t.pool.Get().(*tileScratch[X])
	ldx := m + t.pad
	if len(sc.x) < n*ldx {
		sc.x = make([]X, n*ldx)
	}
	buf := sc.x
	for i := range n {
		if t.pack != nil {
			t.pack(buf[i*ldx:i*ldx+m], x[i*cols:i*cols+m])
		} else {
			copy(buf[i*ldx:i*ldx+m], x[i*cols:i*cols+m])
		}
	}
	for r := 0; r < rows; r += 4 {
		for k0 := 0; k0 < m; k0 += t.kBlock {
			t.inputs(tile, sc, dst[r:], ldd, w[r*ldw+k0:], ldw, rows-r, buf[k0:], ldx, min(t.kBlock, m-k0), n)
		}
	}
	t.pool.Put(sc)
}

// inputs adds one segment of k columns of the products of the weight rows
// from w on (rows of them left, ldw apart) with n packed inputs (x, ldx
// apart) to dst: the next four rows in tiles of tileInputs inputs, or, with
// fewer than four rows left, each row alone as four copies of itself
// (rowTile).
func (t *tiler[W, X]) inputs(tile func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int),
	sc *tileScratch[X], dst []float32, ldd int, w []W, ldw, rows int, x []X, ldx, k, n int) {
	for i, nb := 0, 0; i < n; i += nb {
		nb = t.tileInputs(n - i)
		if rows >= 4 {
			tile(&dst[i*ldd], ldd, &w[0], ldw, &x[i*ldx], ldx, k, nb)
			continue
		}
		for r := range rows {
			rowTile(tile, &sc.out, dst[i*ldd+r:], ldd, &w[r*ldw], &x[i*ldx], ldx, k, nb)
		}
	}
}

// maxTileN bounds the inputs of every tile kernel.
const maxTileN = 8

// rowTile adds one weight row's products with nb inputs to dst[j*ldd],
// running tile on four copies of the row so the sums are those of any
// row of a full tile. out is scratch.
func rowTile[W, X any](tile func(dst *float32, ldd int, w *W, ldw int, x *X, ldx int, k, nb int),
	out *[4 * maxTileN]float32, dst []float32, ldd int, w *W, x *X, ldx, k, nb int) {
	for j := range nb {
		out[4*j] = dst[j*ldd]
	}
	tile(&out[0], 4, w, 0, x, ldx, k, nb)
	for j := range nb {
		dst[j*ldd] = out[4*j]
	}
}

// unaryTail runs the assembly routine f over the longest prefix of x whose
// length is a multiple of align and rest over the remainder. It needs
// len(x) >= len(dst).
func unaryTail(f func(dst, x *float32, n int), align int, rest func(dst, x []float32), dst, x []float32) {
	n := len(dst)
	m := n - n%align
	if m > 0 {
		f(&dst[0], &x[0], m)
	}
	if m < n {
		rest(dst[m:], x[m:n])
	}
}

// binaryTail is unaryTail for routines with two inputs. It needs len(a),
// len(b) >= len(dst).
func binaryTail(f func(dst, a, b *float32, n int), align int, rest func(dst, a, b []float32), dst, a, b []float32) {
	n := len(dst)
	m := n - n%align
	if m > 0 {
		f(&dst[0], &a[0], &b[0], m)
	}
	if m < n {
		rest(dst[m:], a[m:n], b[m:n])
	}
}

// swapQuads copies src to dst, both of a length that is a multiple of 16,
// swapping the second and third four values of every 16: the order in
// which the unpacked AVX2 bf16 kernels pair inputs with weights.
func swapQuads(dst, src []float32) {
	for i := 0; i+16 <= len(src); i += 16 {
		s, d := src[i:i+16:i+16], dst[i:i+16:i+16]
		copy(d[0:4], s[0:4])
		copy(d[4:8], s[8:12])
		copy(d[8:12], s[4:8])
		copy(d[12:16], s[12:16])
	}
}

// qTile is a quantized four-row kernel: for r < 4 and each of its inputs j
// it continues the running sum dst[j*ldd+r] of weight row r (w + r*ldw
// bytes) times quantized input j (x + j*ldx bytes) over blocks blocks, in
// block order, as the package quant twin sums one row.
type qTile func(dst *float32, ldd int, w *byte, ldw int, x *byte, ldx int, blocks int)

// matMulQTiles is MatMulQ on the kernels one (one input) and two (two
// inputs; nil runs one per input): each group of four weight rows meets the inputs two at a time,
// so the group's rows stay in L1 while the inputs stream from L2 or L3.
// With rows%4 rows left over the last four rows run again (their sums are
// the same in any group); fewer than four rows run as four copies of
// themselves (a weight stride of zero) into scratch. Every lane sums one
// (row, input) pair alone, so every element is the twin's, whatever n,
// rows and its place.
func matMulQTiles(one, two qTile, t quant.Type, dst []float32, ldd int, w []byte, rows, cols int, xq []byte, n int) {
	rb, xb := t.RowBytes(cols), InputRowBytes(t, cols)
	blocks := cols / t.BlockSize()
	if rows < 4 {
		out := qScratch.Get().(*[8]float32)
		for r := range rows {
			for i := 0; i < n; {
				*out = [8]float32{}
				if two != nil && i+1 < n {
					two(&out[0], 4, &w[r*rb], 0, &xq[i*xb], xb, blocks)
					dst[i*ldd+r], dst[(i+1)*ldd+r] = out[0], out[4]
					i += 2
					continue
				}
				one(&out[0], 4, &w[r*rb], 0, &xq[i*xb], xb, blocks)
				dst[i*ldd+r] = out[0]
				i++
			}
		}
		qScratch.Put(out)
		return
	}
	group := func(r int) {
		for i := range n {
			clear(dst[i*ldd+r : i*ldd+r+4])
		}
		i := 0
		for ; two != nil && i+2 <= n; i += 2 {
			two(&dst[i*ldd+r], ldd, &w[r*rb], rb, &xq[i*xb], xb, blocks)
		}
		for ; i < n; i++ {
			one(&dst[i*ldd+r], ldd, &w[r*rb], rb, &xq[i*xb], xb, blocks)
		}
	}
	for r := 0; r+4 <= rows; r += 4 {
		group(r)
	}
	if rows%4 != 0 {
		group(rows - 4)
	}
}

// qScratch holds the outputs of matMulQTiles's rows when there are fewer
// than four.
var qScratch = sync.Pool{New: func() any { return new([8]float32) }}
