package asm

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// Packed quantized weights. Kernel sets with AVX512_VNNI multiply Q8_0,
// Q4_K and Q6_K weights in a row-interleaved layout: the rows are taken 16
// at a time (the last group padded with rows of zero scales and values),
// and a group's weights are stored so that one 64-byte load holds four
// consecutive columns of every one of its 16 rows. VPDPBUSD then adds their
// products with four broadcast input bytes to one int32 lane per row, and
// after a block each lane holds that row's exact integer sums, which the
// float epilogue scales lane by lane as the Go twin does (quant/q8act.go):
// every element is bit for bit the twin's (DotQ8_0Q8_0, DotQ4KQ8K,
// DotQ6KQ8K), whatever n, rows and the row's place, and the same as
// MatMulQ's on GGML's layout. Q5_K has no packed layout.
//
// Q8_0: each block of 32 columns of the 16 rows is
//
//	16 × fp16 d                       the rows' scales (32 bytes)
//	8 steps × 16 rows × 4 bytes       step s: bytes 4s..4s+3 of each row, +128
//
// 544 bytes, as much as the 16 rows' GGML blocks.
//
// The K-quants: a group of 16 rows and B super-blocks of 256 columns is B
// packed super-blocks, each a quant part (64-byte vectors, each 16 rows × 4
// bytes, byte 4r+i of row r) followed by its side part (scales), so that a
// kernel reads one stream of memory (two streams, all quant parts then all
// side parts, read a third to a half slower from DRAM with one input):
//
//	Q6_K quants, 3072 bytes: per sub-block j of 16 columns three vectors
//	A, B, C; with q the 6-bit values (0..63) and c = 16j, byte i of row r is
//	  A: q[c+i]   | (q[c+12+i]&3)<<6
//	  B: q[c+4+i] | (q[c+12+i]>>2&3)<<6
//	  C: q[c+8+i] | (q[c+12+i]>>4)<<6
//	so q = A&63, B&63, C&63 for the first 12 columns and the last four are
//	put together from the top bits, once per group for all its inputs.
//	Q6_K side, 288 bytes: int8 scales [16 sub-blocks][16 rows], 16 × fp16 d.
//	3360 bytes, as much as the 16 rows' GGML blocks.
//
//	Q4_K quants, 2048 bytes: GGML's 128 nibble bytes of each row, 4 at a
//	time: vector v holds bytes 4v..4v+3, whose low nibbles are columns of
//	sub-block 2(v/8) and high nibbles those of sub-block 2(v/8)+1 (masked
//	with 0x0F or 0xF0, the latter weights 16q, which the even sub-blocks'
//	scales match by a factor 16 taken out of the integer sum at the end).
//	Q4_K side, 320 bytes: 6-bit scales as bytes [8 sub-blocks][16 rows],
//	mins as bytes [4 pairs][16 rows][2] (word pairs for VPDPWSSD),
//	16 × fp16 d, 16 × fp16 dmin.
//	2368 bytes against GGML's 2304 (the scales and mins unpacked).
//
// The inputs of packed products are packed too (PackInputs). Q8_0: per
// block of 32, the int8 values, d as float32 and −128·Σq as int32, 40
// bytes. QuantizeQ8_0 gives values in −127..127 but for a block holding a
// NaN, whose values wrap (ggml's rule); the AVX2 Q8_0 kernels rely on it,
// and MatMulQPacked gives an input holding −128 to the Go twin. The
// K-quants (one layout serves both, so one packing of an input
// feeds Q4_K and Q6_K products): per super-block of 256, the Q8_K int8
// values, d as float32, −32·Σq per sub-block of 16 as 16 int32 (which starts
// a Q6_K sub-block's integer sum: the weights stay unsigned) and the 8 sums
// over 32 values (Bsums[2j]+Bsums[2j+1], the Q4_K mins' factors) as int16,
// 340 bytes.
//
// The amd64 kernel sets without AVX512_VNNI multiply the same layouts on
// AVX2 (VPMADDUBSW for both: Q8_0 the weights' magnitudes by the inputs
// carrying the weights' signs, both halves of a group and up to four
// inputs at a time, and from qpWideMin inputs on VPMADDWD on inputs
// widened to words, matMulQ8_0Wide; the K-quants eight rows of a group
// and up to four inputs at a time; see internal/asmgen/qpack_avx2.go),
// with the same sums. Those with AVX-VNNI (VEX VPDPBUSD
// on ymm) run it instead: Q8_0 on both halves of a group at once, up to
// six inputs, the K-quants in the AVX2 kernels' shapes (see
// internal/asmgen/qpack_avxvnni.go).
//
// Against MatMulQ on GGML's layout with the AVX2 kernels (one thread, Zen 4):
// see the commits that added them; the layout costs one copy of the weights
// at load (PackQ), which a memory-mapped GGUF file pays too.

// packRows is the number of weight rows a packed group interleaves.
const packRows = 16

// q8PackBlock is the bytes of a packed Q8_0 block of packRows rows, and
// q8PackInput those of a packed Q8_0 input block.
const (
	q8PackBlock = packRows * 34
	q8PackInput = 40
)

// The K-quants' packed super-blocks of packRows rows: the quant part and
// the side part (scales) of each type, and the packed input super-block.
const (
	q6KPackQuants = 3072
	q6KPackSide   = 288
	q4KPackQuants = 2048
	q4KPackSide   = 320
	qKPackInput   = 340
)

// qKInputCorr and qKInputBsum32 are the offsets in a packed K-quant input
// super-block of the 16 int32 −32·Σq and the 8 int16 sums of 32 values;
// the values are at 0 and d at 256.
const (
	qKInputCorr   = 260
	qKInputBsum32 = 324
)

// qpKernel is a packed kernel: dst[j*ldd+r] for r < 16 and each of its
// inputs j, the product of packed group w (blocks blocks) and packed input
// j (x + j*ldx bytes).
type qpKernel func(dst *float32, ldd int, w *byte, x *byte, ldx int, blocks int)

// packBlock returns the columns of one block of t and the bytes of a
// packed block of packRows rows, or 0, 0 when t has no packed layout.
func packBlock(t quant.Type) (cols, bytes int) {
	switch t {
	case quant.Q8_0:
		return 32, q8PackBlock
	case quant.Q4_K:
		return 256, q4KPackQuants + q4KPackSide
	case quant.Q6_K:
		return 256, q6KPackQuants + q6KPackSide
	}
	return 0, 0
}

// qpKernels returns k's packed kernels for t, or nil: kern[m-1] takes m
// inputs, for m up to the last non-nil kernel.
func (k *impl) qpKernels(t quant.Type) *[maxPackInputs]qpKernel {
	switch t {
	case quant.Q8_0:
		return k.qpQ8_0
	case quant.Q4_K:
		return k.qpQ4_K
	case quant.Q6_K:
		return k.qpQ6_K
	}
	return nil
}

// PacksQ reports whether k has kernels for t weights in the packed layout
// (PackQ, PackInputs, MatMulQPacked): Q8_0, Q4_K and Q6_K with
// AVX512_VNNI or, on the other amd64 sets, AVX2. When it does not, MatMulQ
// on GGML's layout is k's product for t (MatMulQPacked still works where t
// has a packed layout, on the Go twin).
func (k *Kernels) PacksQ(t quant.Type) bool { return k.qpKernels(t) != nil }

// PackedQLayout names the packed layout of PackQ and its version: a cache
// of packed weights keeps them under this name (with the type's), so it
// must change whenever the layout of any type does.
const PackedQLayout = "qpack16/1"

// PackedQBytes returns the bytes of a rows×cols matrix of t weights in the
// packed layout, or 0 when t has none (it has for Q8_0, Q4_K and Q6_K) or
// cols is not a multiple of t's block.
func PackedQBytes(t quant.Type, rows, cols int) int {
	bc, bb := packBlock(t)
	if bc == 0 || !t.Fits(cols) || rows < 0 {
		return 0
	}
	return (rows + packRows - 1) / packRows * (cols / bc) * bb
}

// PackQ writes the rows×cols matrix w of t weights (rows of
// t.RowBytes(cols) bytes, GGML's layout) into dst, PackedQBytes(t, rows,
// cols) bytes, in the packed layout. Groups of 16 rows pack independently:
// callers may pack the rows [16a, 16b) of a matrix, as a matrix of their
// own, into the bytes PackedQBytes(t, 16a, cols) to PackedQBytes(t, 16b,
// cols) of dst in parallel.
func PackQ(t quant.Type, dst, w []byte, rows, cols int) error {
	size := PackedQBytes(t, rows, cols)
	switch {
	case size == 0 && rows != 0:
		return fmt.Errorf("asm: PackQ: no packed layout for %v weights with %d columns", t, cols)
	case len(w) != rows*t.RowBytes(cols):
		return fmt.Errorf("asm: PackQ: %d bytes for %d rows of %d %v values", len(w), rows, cols, t)
	case len(dst) != size:
		return fmt.Errorf("asm: PackQ: output of %d bytes, want %d", len(dst), size)
	}
	if t != quant.Q8_0 {
		packK(t, dst, w, rows, cols)
		return nil
	}
	rb, blocks := t.RowBytes(cols), cols/32
	for g := 0; g*packRows < rows; g++ {
		for b := range blocks {
			out := dst[(g*blocks+b)*q8PackBlock:][:q8PackBlock]
			for r := range packRows {
				row := g*packRows + r
				if row >= rows {
					out[2*r], out[2*r+1] = 0, 0
					for s := range 8 {
						copy(out[32+64*s+4*r:][:4], []byte{0x80, 0x80, 0x80, 0x80})
					}
					continue
				}
				src := w[row*rb+b*34:][:34]
				out[2*r], out[2*r+1] = src[0], src[1]
				for s := range 8 {
					for i := range 4 {
						out[32+64*s+4*r+i] = src[2+4*s+i] ^ 0x80
					}
				}
			}
		}
	}
	return nil
}

// UnpackQRow writes row r of a packed rows×cols matrix of t weights into
// dst, t.RowBytes(cols) bytes, in GGML's layout.
func UnpackQRow(t quant.Type, dst, packed []byte, rows, cols, r int) error {
	switch {
	case PackedQBytes(t, rows, cols) == 0 || len(packed) != PackedQBytes(t, rows, cols):
		return fmt.Errorf("asm: UnpackQRow: %d bytes are no packed %d×%d %v matrix", len(packed), rows, cols, t)
	case r < 0 || r >= rows:
		return fmt.Errorf("asm: UnpackQRow: row %d of %d", r, rows)
	case len(dst) != t.RowBytes(cols):
		return fmt.Errorf("asm: UnpackQRow: output of %d bytes, want %d", len(dst), t.RowBytes(cols))
	}
	if t != quant.Q8_0 {
		unpackKRow(t, dst, packed, cols, r)
		return nil
	}
	g, lane, blocks := r/packRows, r%packRows, cols/32
	for b := range blocks {
		in := packed[(g*blocks+b)*q8PackBlock:][:q8PackBlock]
		out := dst[b*34:][:34]
		out[0], out[1] = in[2*lane], in[2*lane+1]
		for s := range 8 {
			for i := range 4 {
				out[2+4*s+i] = in[32+64*s+4*lane+i] ^ 0x80
			}
		}
	}
	return nil
}

// PackedInputRowBytes returns the bytes of one packed input row of cols
// values for products with packed t weights, or 0 when t has no packed
// layout or cols is not a multiple of its block. Q4_K and Q6_K share one
// input layout: the same packed row serves products with either.
func PackedInputRowBytes(t quant.Type, cols int) int {
	bc, _ := packBlock(t)
	switch {
	case bc == 0 || !t.Fits(cols):
		return 0
	case t == quant.Q8_0:
		return cols / 32 * q8PackInput
	}
	return cols / 256 * qKPackInput
}

// PackInputs quantizes n input rows of cols values (x, row-major) into
// dst, n packed rows of PackedInputRowBytes(t, cols) bytes, 4-byte aligned
// (InputBuffer's are), for MatMulQPacked. The values and scales are those
// of QuantizeInputs.
func (k *Kernels) PackInputs(t quant.Type, dst []byte, x []float32, n, cols int) error {
	rb := PackedInputRowBytes(t, cols)
	switch {
	case rb == 0:
		return fmt.Errorf("asm: PackInputs: no packed layout for %v weights with %d columns", t, cols)
	case n < 0 || len(x) < n*cols || len(dst) < n*rb:
		return fmt.Errorf("asm: PackInputs: %d rows of %d need %d inputs and %d bytes, have %d and %d",
			n, cols, n*cols, n*rb, len(x), len(dst))
	case n > 0 && uintptr(unsafe.Pointer(&dst[0]))%4 != 0:
		return fmt.Errorf("asm: PackInputs: output not 4-byte aligned")
	}
	if t == quant.Q8_0 {
		packInputs(&q80Pool, cols/32, k.quantQ80, packInputRow, dst, rb, x, n, cols)
	} else {
		packInputs(&q8KPool, cols/256, k.quantQ8K, packInputRowK, dst, rb, x, n, cols)
	}
	return nil
}

var (
	q80Pool = sync.Pool{New: func() any { return new([]quant.BlockQ8_0) }}
	q8KPool = sync.Pool{New: func() any { return new([]quant.BlockQ8K) }}
)

// packInputs quantizes each of n rows of cols values into blocks B blocks
// held in pool's scratch, then packs them into rb bytes of dst.
func packInputs[B any](pool *sync.Pool, blocks int, quantize func([]B, []float32), pack func([]byte, []B), dst []byte, rb int, x []float32, n, cols int) {
	p := pool.Get().(*[]B)
	if cap(*p) < blocks {
		*p = make([]B, blocks)
	}
	tmp := (*p)[:blocks]
	for i := range n {
		quantize(tmp, x[i*cols:(i+1)*cols])
		pack(dst[i*rb:(i+1)*rb], tmp)
	}
	pool.Put(p)
}

// packInputRow writes the Q8_0 blocks a as one packed input row.
func packInputRow(dst []byte, a []quant.BlockQ8_0) {
	for b := range a {
		out := dst[b*q8PackInput:][:q8PackInput]
		copy(out[:32], unsafe.Slice((*byte)(unsafe.Pointer(&a[b].Qs[0])), len(a[b].Qs)))
		s := sumInt8x32(&a[b].Qs)
		binary.LittleEndian.PutUint32(out[32:], math.Float32bits(half.F16ToF32(a[b].D)))
		binary.LittleEndian.PutUint32(out[36:], uint32(-128*s))
	}
}

// sumInt8x32 returns the sum of q, eight bytes at a time: the unsigned
// bytes summed in 16-bit lanes (at most 8·255 each), less 256 for every
// negative one.
func sumInt8x32(q *[32]int8) int32 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&q[0])), len(q))
	var u, neg uint64
	for i := 0; i < len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		u += v&0x00ff00ff00ff00ff + v>>8&0x00ff00ff00ff00ff
		neg += uint64(bits.OnesCount64(v & 0x8080808080808080))
	}
	return int32(u*0x0001000100010001>>48) - 256*int32(neg)
}

// unpackInputRow is packInputRow's inverse.
func unpackInputRow(dst []quant.BlockQ8_0, in []byte) {
	for b := range dst {
		blk := in[b*q8PackInput:][:q8PackInput]
		for i := range dst[b].Qs {
			dst[b].Qs[i] = int8(blk[i])
		}
		dst[b].D = half.F32ToF16(math.Float32frombits(binary.LittleEndian.Uint32(blk[32:])))
	}
}

// MatMulQPacked multiplies n packed input rows (xq, from PackInputs for t
// and cols) by the packed rows×cols matrix wp of t weights (PackQ):
// dst[i*ldd+r] = Σ_c w[r,c]·x[i,c] for r < rows and i < n, each element bit
// for bit MatMulQ's on the same weights and inputs. A packed matrix's
// groups of 16 rows are consecutive, so rows [16g, 16g+m) of a larger one
// are wp[g*PackedQBytes(t, 16, cols):] with rows m.
func (k *Kernels) MatMulQPacked(t quant.Type, dst []float32, ldd int, wp []byte, rows, cols int, xq []byte, n int) error {
	wb, xb := PackedQBytes(t, rows, cols), PackedInputRowBytes(t, cols)
	switch {
	case xb == 0:
		return fmt.Errorf("asm: MatMulQPacked: no packed layout for %v weights with %d columns", t, cols)
	case rows < 0 || n < 0:
		return fmt.Errorf("asm: MatMulQPacked: negative shape rows=%d n=%d", rows, n)
	case len(wp) < wb:
		return fmt.Errorf("asm: MatMulQPacked: weights have %d bytes, need %d", len(wp), wb)
	case len(xq) < n*xb:
		return fmt.Errorf("asm: MatMulQPacked: inputs have %d bytes, need %d rows of %d", len(xq), n, xb)
	case n > 0 && uintptr(unsafe.Pointer(&xq[0]))%4 != 0:
		return fmt.Errorf("asm: MatMulQPacked: inputs not 4-byte aligned")
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if ldd < rows || len(dst) < (n-1)*ldd+rows {
		return fmt.Errorf("asm: MatMulQPacked: output of %d values with stride %d cannot hold %d rows of %d", len(dst), ldd, n, rows)
	}
	kern := k.qpKernels(t)
	if kern == nil {
		matMulQPackedGo(t, dst, ldd, wp[:wb], rows, cols, xq[:n*xb], n)
		return nil
	}
	var groups *qpGroupKernels
	switch t {
	case quant.Q4_K:
		groups = k.qpGroupsQ4_K
	case quant.Q6_K:
		groups = k.qpGroupsQ6_K
	}
	bc, _ := packBlock(t)
	gb := PackedQBytes(t, packRows, cols)
	if t == quant.Q8_0 && k.qpQ8_0Wide != nil && n >= qpWideMin {
		k.matMulQ8_0Wide(dst, ldd, wp[:wb], rows, cols, xq[:n*xb], n)
		return nil
	}
	if t != quant.Q8_0 || !k.qpQ8_0NoMinus128 {
		matMulQPackedTiles(kern, groups, gb, xb, cols/bc, k.qpInputBytes, dst, ldd, wp[:wb], rows, xq[:n*xb], n)
		return nil
	}
	// The kernels take inputs without −128: runs of those go to them, an
	// input with one to the Go twin (the same sums either way).
	lo := 0
	for i := range n + 1 {
		if i < n && !hasMinus128(xq[i*xb:(i+1)*xb]) {
			continue
		}
		if i > lo {
			matMulQPackedTiles(kern, groups, gb, xb, cols/bc, k.qpInputBytes, dst[lo*ldd:], ldd, wp[:wb], rows, xq[lo*xb:i*xb], i-lo)
		}
		if i < n {
			matMulQPackedGo(t, dst[i*ldd:], ldd, wp[:wb], rows, cols, xq[i*xb:(i+1)*xb], 1)
		}
		lo = i + 1
	}
	return nil
}

// qpWideMin is the fewest inputs a Q8_0 product runs on widened inputs
// (Kernels.qpQ8_0Wide) where a kernel set has them: with one or two the
// products wait on memory and widening would only add work.
const qpWideMin = 3

// q8WideInput is the bytes of a widened Q8_0 input block: the packed
// block's 32 values as int16, then its d and −128·Σq.
const q8WideInput = 72

// WidenQ8_0Inputs widens packed Q8_0 input rows (src, blocks of 40 bytes,
// from PackInputs) to the blocks of 72 bytes the word kernels read (dst,
// len(src)/40·72 bytes at least): each block's 32 values as int16, then
// its d and −128·Σq as they are.
func WidenQ8_0Inputs(dst, src []byte) {
	for b := 0; b+q8PackInput <= len(src); b += q8PackInput {
		in, out := src[b:b+q8PackInput], dst[b/q8PackInput*q8WideInput:][:q8WideInput]
		for i := range 32 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(int16(int8(in[i]))))
		}
		copy(out[64:], in[32:])
	}
}

// matMulQ8_0Wide is MatMulQPacked for Q8_0 on the word kernels: the inputs
// are taken in chunks that fit the product's share of L2 once widened,
// each chunk widened into scratch and run as matMulQPackedTiles runs a
// block of inputs. The sums are the other kernels' bit for bit, for any
// input (−128 included).
func (k *Kernels) matMulQ8_0Wide(dst []float32, ldd int, wp []byte, rows, cols int, xq []byte, n int) {
	blocks := cols / 32
	xb, wb := blocks*q8PackInput, blocks*q8WideInput
	gb := PackedQBytes(quant.Q8_0, packRows, cols)
	kern := k.qpQ8_0Wide
	most, chunk := qpInputChunk(kern, k.qpInputBytes, wb)
	buf := wideScratch.Get().(*[]byte)
	if need := min(chunk, n) * wb; cap(*buf) < need {
		*buf = make([]byte, need)
	}
	wide := (*buf)[:cap(*buf)]
	for i0 := 0; i0 < n; i0 += chunk {
		m := min(chunk, n-i0)
		if k.widenQ8_0 != nil {
			k.widenQ8_0(wide, xq[i0*xb:], m*blocks)
		} else {
			WidenQ8_0Inputs(wide, xq[i0*xb:(i0+m)*xb])
		}
		qpGroups(kern, most, gb, wb, blocks, dst[i0*ldd:], ldd, wp, 0, rows, wide, m)
	}
	wideScratch.Put(buf)
}

// wideScratch holds the widened inputs of matMulQ8_0Wide.
var wideScratch = sync.Pool{New: func() any { return new([]byte) }}

// hasMinus128 reports whether a packed Q8_0 input row holds the value
// −128, eight values at a time: a byte of v^0x80… is zero where v's is
// 0x80.
func hasMinus128(row []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for b := 0; b+q8PackInput <= len(row); b += q8PackInput {
		for i := b; i < b+32; i += 8 {
			v := binary.LittleEndian.Uint64(row[i:]) ^ highs
			if (v-ones)&^v&highs != 0 {
				return true
			}
		}
	}
	return false
}

// matMulQPackedGo is the Go twin of MatMulQPacked: each row unpacked and
// multiplied as MatMulQ's twin multiplies it.
func matMulQPackedGo(t quant.Type, dst []float32, ldd int, wp []byte, rows, cols int, xq []byte, n int) {
	rb, xb := t.RowBytes(cols), PackedInputRowBytes(t, cols)
	row := make([]byte, rb)
	var in []quant.BlockQ8_0
	var inK []quant.BlockQ8K
	if t == quant.Q8_0 {
		in = make([]quant.BlockQ8_0, cols/32)
	} else {
		inK = make([]quant.BlockQ8K, cols/256)
	}
	for i := range n {
		if t == quant.Q8_0 {
			unpackInputRow(in, xq[i*xb:(i+1)*xb])
		} else {
			unpackInputRowK(inK, xq[i*xb:(i+1)*xb])
		}
		for r := range rows {
			if err := UnpackQRow(t, row, wp, rows, cols, r); err != nil {
				panic(err) // the shapes were checked
			}
			var s float32
			switch t {
			case quant.Q8_0:
				s = quant.DotQ8_0Q8_0(row, in)
			case quant.Q4_K:
				s = quant.DotQ4KQ8K(row, inK)
			case quant.Q6_K:
				s = quant.DotQ6KQ8K(row, inK)
			}
			dst[i*ldd+r] = s
		}
	}
}

// qpGroupKernels are one-input packed kernels of two and four groups: for
// h < 2 or 4, dst[16h+r] is the product of row r of the group at w +
// h*ldx bytes and input x.
type qpGroupKernels [2]qpKernel

// maxPackInputs is the most inputs one packed kernel takes.
const maxPackInputs = 8

// matMulQPackedTiles is MatMulQPacked on the packed kernels kern[m-1] of m
// inputs, with groups of gb bytes (blocks blocks) and input rows of xb
// bytes: the inputs are taken in blocks of at most inBytes (whole
// kernels' worth), and in each block every group of 16 rows meets the
// inputs up to eight at a time, or as many as the last non-nil kernel
// takes (split evenly), so the group's weights stay in L1 and L2 while
// the block's inputs, held in L2, stream. A last group of fewer than 16
// rows writes to scratch first. Each element is summed by one kernel
// call over all its blocks, so the blocking changes no bit.
//
// Without input blocks every group read all n inputs from the outer
// caches or DRAM (one thread, AVX2, Q8_0 4096x4096, 512 inputs: 57
// GFLOP/s against 118 at 64 inputs).
//
// One input with groups (one-input kernels of two and four groups at once,
// each group gb bytes after the one before; Features.multiStream) runs the
// groups four, then two at a time, with the same sums: more weight streams
// in flight. They were measured faster on a Zen 4 VM when the one-group
// kernels were slower (one thread, 16384x4096, one, two, four groups:
// Q4_K 16.0-17.7, 18.9-20.5, 20.9-22.6 GB/s). With today's one-group
// kernels, on the Zen 4 (EPYC) VMs these targets are measured on, one
// sequential stream per thread reads faster: one thread, 65536x2048 of
// unique weights, bytes per second of thread CPU time (the machine shared
// with other work), medians of 7 alternating runs, one/two/four groups:
// Q4_K 26.2 / 17.5 / 15.1 GB/s, Q6_K 23.9 / 18.5 / 17.3. So the AMD sets
// run one group at a time.
func matMulQPackedTiles(kern *[maxPackInputs]qpKernel, groups *qpGroupKernels, gb, xb, blocks, inBytes int, dst []float32, ldd int, wp []byte, rows int, xq []byte, n int) {
	most, nb := qpInputChunk(kern, inBytes, xb)
	g0 := 0
	if n == 1 && groups != nil {
		for ; (g0+4)*packRows <= rows; g0 += 4 {
			groups[1](&dst[g0*packRows], packRows, &wp[g0*gb], &xq[0], gb, blocks)
		}
		for ; (g0+2)*packRows <= rows; g0 += 2 {
			groups[0](&dst[g0*packRows], packRows, &wp[g0*gb], &xq[0], gb, blocks)
		}
	}
	for i0 := 0; i0 < n; i0 += nb {
		m := min(nb, n-i0)
		qpGroups(kern, most, gb, xb, blocks, dst[i0*ldd:], ldd, wp, g0, rows, xq[i0*xb:], m)
	}
}

// qpInputChunk returns the most inputs of one of the kernels kern (the
// last non-nil one) and the inputs of xb bytes a product takes at a time:
// whole kernels' worth within inBytes, at least one kernel's.
func qpInputChunk(kern *[maxPackInputs]qpKernel, inBytes, xb int) (most, chunk int) {
	most = maxPackInputs
	for kern[most-1] == nil {
		most--
	}
	return most, max(most, inBytes/xb/most*most)
}

// qpGroups runs the groups from g0 on over n inputs for matMulQPackedTiles,
// on kernels of at most most inputs.
func qpGroups(kern *[maxPackInputs]qpKernel, most, gb, xb, blocks int, dst []float32, ldd int, wp []byte, g0, rows int, xq []byte, n int) {
	chunks := (n + most - 1) / most
	for g := g0; g*packRows < rows; g++ {
		r0 := g * packRows
		for c, i := 0, 0; c < chunks; c++ {
			m := (n - i + chunks - c - 1) / (chunks - c)
			if r0+packRows <= rows {
				kern[m-1](&dst[i*ldd+r0], ldd, &wp[g*gb], &xq[i*xb], xb, blocks)
			} else {
				scratch := qpScratch.Get().(*[maxPackInputs * packRows]float32)
				kern[m-1](&scratch[0], packRows, &wp[g*gb], &xq[i*xb], xb, blocks)
				for j := range m {
					copy(dst[(i+j)*ldd+r0:(i+j)*ldd+rows], scratch[j*packRows:])
				}
				qpScratch.Put(scratch)
			}
			i += m
		}
	}
}

// qpInputBytes returns the bytes of packed inputs a product keeps in the L2
// cache of l2 bytes (0: unknown) at a time: a quarter of it, at least 64
// KiB, which leaves room for a group's weights (70 KiB of Q8_0 at 4096
// columns) and the core's other traffic.
func qpInputBytes(l2 int) int {
	if l2 <= 0 {
		l2 = 512 << 10
	}
	return max(64<<10, l2/4)
}

// qpScratch holds the outputs of a last group of fewer than 16 rows.
var qpScratch = sync.Pool{New: func() any { return new([maxPackInputs * packRows]float32) }}
