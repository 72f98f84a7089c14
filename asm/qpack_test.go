package asm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// packedTypes are the weight types with a packed layout, and packCols
// column counts to test each with.
var packedTypes = []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K}

func packCols(qt quant.Type, small bool) []int {
	switch {
	case qt == quant.Q8_0 && small:
		return []int{32, 96, 512}
	case qt == quant.Q8_0:
		return []int{32, 96, 1024}
	}
	return []int{256, 768, 1024}
}

// TestPackQRoundTrip checks that UnpackQRow gives back every row PackQ
// packed, for row counts around the group of 16, and that the padding
// rows of a last group are zero weights.
func TestPackQRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, qt := range packedTypes {
		testPackQRoundTrip(t, r, qt)
	}
}

func testPackQRoundTrip(t *testing.T, r *rand.Rand, qt quant.Type) {
	for _, rows := range []int{1, 15, 16, 17, 40} {
		for _, cols := range packCols(qt, true) {
			rb := qt.RowBytes(cols)
			w := make([]byte, rows*rb)
			for i := range rows {
				weightRow(r, qt, w[i*rb:(i+1)*rb], i%4)
			}
			p := make([]byte, PackedQBytes(qt, rows, cols))
			if err := PackQ(qt, p, w, rows, cols); err != nil {
				t.Fatal(err)
			}
			row := make([]byte, rb)
			for i := range rows {
				if err := UnpackQRow(qt, row, p, rows, cols, i); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(row, w[i*rb:(i+1)*rb]) {
					t.Fatalf("%v rows=%d cols=%d: row %d does not round-trip", qt, rows, cols, i)
				}
			}
			if pad := rows % packRows; pad != 0 && qt != quant.Q8_0 {
				// A padding lane unpacks to an all-zero row.
				unpackKRow(qt, row, p, cols, rows)
				if !bytes.Equal(row, make([]byte, rb)) {
					t.Errorf("%v rows=%d: padding row %d is not zero", qt, rows, pad)
				}
			} else if pad != 0 {
				// A padding lane: scale 0 and weight bytes 0 (stored as 0x80).
				last := p[len(p)-q8PackBlock:]
				if last[2*pad] != 0 || last[2*pad+1] != 0 || last[32+4*pad] != 0x80 {
					t.Errorf("rows=%d: padding row %d is not zero", rows, pad)
				}
			}
		}
	}
}

// TestPackQErrors checks the shape errors of the packing functions.
func TestPackQErrors(t *testing.T) {
	qt := quant.Q8_0
	w := make([]byte, 2*qt.RowBytes(64))
	p := make([]byte, PackedQBytes(qt, 2, 64))
	for name, err := range map[string]error{
		"Q5_K":        PackQ(quant.Q5_K, p, w, 2, 256),
		"Q6_K cols":   PackQ(quant.Q6_K, p, w, 2, 128),
		"Q4_K out":    PackQ(quant.Q4_K, p, make([]byte, 2*144), 2, 256),
		"short input": PackQ(qt, p, w[1:], 2, 64),
		"short out":   PackQ(qt, p[1:], w, 2, 64),
		"cols":        PackQ(qt, p, w, 2, 48),
		"row range":   UnpackQRow(qt, w[:qt.RowBytes(64)], p, 2, 64, 2),
		"unpack out":  UnpackQRow(qt, w, p, 2, 64, 0),
		"inputs":      Generic().PackInputs(qt, InputBuffer(80), make([]float32, 63), 1, 64),
		"matmul cols": Generic().MatMulQPacked(qt, make([]float32, 2), 2, p, 2, 48, InputBuffer(80), 1),
		"matmul w":    Generic().MatMulQPacked(qt, make([]float32, 2), 2, p[:10], 2, 64, InputBuffer(80), 1),
		"matmul dst":  Generic().MatMulQPacked(qt, make([]float32, 1), 2, p, 2, 64, InputBuffer(80), 1),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if PackedQBytes(quant.Q5_K, 16, 256) != 0 || PackedInputRowBytes(quant.Q5_K, 256) != 0 {
		t.Error("Q5_K has a packed layout")
	}
	if PackedQBytes(quant.Q6_K, 16, 512) != 2*3360 || PackedQBytes(quant.Q4_K, 17, 256) != 2*2368 {
		t.Error("K-quant packed sizes")
	}
	if PackedInputRowBytes(quant.Q4_K, 512) != 680 || PackedInputRowBytes(quant.Q6_K, 512) != 680 {
		t.Error("K-quant packed input sizes")
	}
	for _, k := range kernelSets(t) {
		if k.PacksQ(quant.Q5_K) || k.PacksQ(quant.Keep) {
			t.Errorf("%s packs Q5_K or Keep", k.Name())
		}
		for _, qt := range packedTypes {
			if want := k.Features().AVX512VNNI || k.Features().AVX2 && avx2Packs(qt); k.PacksQ(qt) != want {
				t.Errorf("%s: PacksQ(%v) = %v", k.Name(), qt, k.PacksQ(qt))
			}
		}
	}
}

// avx2Packs reports whether the kernel sets without AVX512_VNNI have
// packed kernels for t: every packed type.
func avx2Packs(t quant.Type) bool { return PackedQBytes(t, 16, 256) > 0 }

// TestPackInputs checks that every kernel set packs the inputs
// QuantizeInputs quantizes, with d as float32 and −128·Σq beside them
// (Q8_0), or d, −32·Σq per 16 and the sums of 32 (Q4_K and Q6_K).
func TestPackInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		for _, k := range kernelSets(t) {
			cols := []int{256, 768, 4096}
			if qt == quant.Q8_0 {
				cols = []int{32, 160, 4096}
			}
			for _, cols := range cols {
				n := 3
				x := randF32(r, n*cols)
				x[5] = 1e6
				x[cols+7] = -3e5
				raw := InputBuffer(n * InputRowBytes(qt, cols))
				if err := k.QuantizeInputs(qt, raw, x, n, cols); err != nil {
					t.Fatal(err)
				}
				xb := PackedInputRowBytes(qt, cols)
				got := InputBuffer(n * xb)
				if err := k.PackInputs(qt, got, x, n, cols); err != nil {
					t.Fatal(err)
				}
				if qt == quant.Q4_K || qt == quant.Q6_K {
					other := InputBuffer(n * xb)
					if err := k.PackInputs(quant.Q4_K, other, x, n, cols); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(other, got) {
						t.Fatalf("%s: Q4_K and Q6_K inputs differ", k.Name())
					}
				}
				for i := range n {
					rawRow := raw[i*InputRowBytes(qt, cols):][:InputRowBytes(qt, cols)]
					if qt == quant.Q8_0 {
						checkPackedQ80(t, k.Name(), cols, i, got[i*xb:][:xb], q80Blocks(rawRow))
					} else {
						checkPackedQ8K(t, k.Name(), cols, i, got[i*xb:][:xb], q8KBlocks(rawRow))
					}
				}
			}
		}
	}
}

// TestHasMinus128 checks the scan that routes Q8_0 inputs holding −128
// away from the AVX2 kernels against a plain loop: single 0x80 bytes at
// every value position, and 0x80 bytes in d and −128·Σq, which are no
// values.
func TestHasMinus128(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const blocks = 5
	row := make([]byte, blocks*q8PackInput)
	plain := func() bool {
		for b := range blocks {
			for _, v := range row[b*q8PackInput : b*q8PackInput+32] {
				if v == 0x80 {
					return true
				}
			}
		}
		return false
	}
	fill := func() {
		for i := range row {
			row[i] = byte(r.IntN(256))
			if row[i] == 0x80 {
				row[i] = 0x7f
			}
		}
	}
	for pos := range len(row) {
		fill()
		row[pos] = 0x80
		if got, want := hasMinus128(row), plain(); got != want || want != (pos%q8PackInput < 32) {
			t.Fatalf("0x80 at byte %d: hasMinus128 %v, plain loop %v", pos, got, want)
		}
	}
	fill()
	if hasMinus128(row) {
		t.Fatal("a row without 0x80 reported")
	}
	for _, b := range []byte{0x00, 0x01, 0x7f, 0x81, 0xff} {
		for i := range row {
			row[i] = b
		}
		if hasMinus128(row) {
			t.Fatalf("a row of 0x%02x reported", b)
		}
	}
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// checkPackedQ80 checks a packed Q8_0 input row against blocks blks.
func checkPackedQ80(t *testing.T, name string, cols, i int, row []byte, blks []quant.BlockQ8_0) {
	t.Helper()
	for b, blk := range blks {
		in := row[b*q8PackInput:][:q8PackInput]
		var s int32
		for j, q := range blk.Qs {
			if int8(in[j]) != q {
				t.Fatalf("%s cols=%d row %d block %d: value %d is %d, want %d", name, cols, i, b, j, int8(in[j]), q)
			}
			s += int32(q)
		}
		d := math.Float32frombits(le32(in[32:]))
		c := int32(le32(in[36:]))
		if math.Float32bits(d) != math.Float32bits(half.F16ToF32(blk.D)) || c != -128*s {
			t.Fatalf("%s cols=%d row %d block %d: d %g c %d, want %g and %d", name, cols, i, b, d, c, half.F16ToF32(blk.D), -128*s)
		}
	}
}

// checkPackedQ8K checks a packed K-quant input row against blocks blks.
func checkPackedQ8K(t *testing.T, name string, cols, i int, row []byte, blks []quant.BlockQ8K) {
	t.Helper()
	for b := range blks {
		blk := &blks[b]
		in := row[b*qKPackInput:][:qKPackInput]
		for j, q := range blk.Qs {
			if int8(in[j]) != q {
				t.Fatalf("%s cols=%d row %d block %d: value %d is %d, want %d", name, cols, i, b, j, int8(in[j]), q)
			}
		}
		if d := math.Float32frombits(le32(in[256:])); math.Float32bits(d) != math.Float32bits(blk.D) {
			t.Fatalf("%s cols=%d row %d block %d: d %g, want %g", name, cols, i, b, d, blk.D)
		}
		for j := range 16 {
			var s int32
			for _, q := range blk.Qs[16*j : 16*j+16] {
				s += int32(q)
			}
			if c := int32(le32(in[qKInputCorr+4*j:])); c != -32*s {
				t.Fatalf("%s cols=%d row %d block %d: sub-block %d correction %d, want %d", name, cols, i, b, j, c, -32*s)
			}
		}
		for j := range 8 {
			got := int16(uint16(in[qKInputBsum32+2*j]) | uint16(in[qKInputBsum32+2*j+1])<<8)
			if want := blk.Bsums[2*j] + blk.Bsums[2*j+1]; got != want {
				t.Fatalf("%s cols=%d row %d block %d: sum of 32 #%d is %d, want %d", name, cols, i, b, j, got, want)
			}
		}
	}
}

// TestMatMulQPacked checks every kernel set's packed product against
// MatMulQ's Go twin on GGML's layout, bit for bit, over row counts around
// the group of 16 (sub-matrices taken at group boundaries), 1 to 19
// inputs and guard bands around and between dst's rows; weights mix
// quantized values, random bytes and extreme blocks (−128 bytes and
// scales included), inputs quantized values and extreme blocks (−128
// values, extreme scales).
func TestMatMulQPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, qt := range packedTypes {
		testMatMulQPacked(t, r, qt)
	}
}

func testMatMulQPacked(t *testing.T, r *rand.Rand, qt quant.Type) {
	ref := Generic()
	for _, k := range kernelSets(t) {
		for _, cols := range packCols(qt, false) {
			rb, xb, rawb := qt.RowBytes(cols), PackedInputRowBytes(qt, cols), InputRowBytes(qt, cols)
			const total = 121
			w := make([]byte, total*rb)
			for i := range total {
				weightRow(r, qt, w[i*rb:(i+1)*rb], r.IntN(4))
			}
			p := make([]byte, PackedQBytes(qt, total, cols))
			if err := PackQ(qt, p, w, total, cols); err != nil {
				t.Fatal(err)
			}
			const maxN = 19
			raw := InputBuffer(maxN * rawb)
			for i := range maxN {
				inputRow(r, qt, raw[i*rawb:(i+1)*rawb], r.IntN(4))
			}
			xq := InputBuffer(maxN * xb)
			for i := range maxN {
				if qt == quant.Q8_0 {
					packInputRow(xq[i*xb:(i+1)*xb], q80Blocks(raw[i*rawb:(i+1)*rawb]))
				} else {
					packInputRowK(xq[i*xb:(i+1)*xb], q8KBlocks(raw[i*rawb:(i+1)*rawb]))
				}
			}
			for _, g0 := range []int{0, 1, 2} {
				for _, rows := range []int{1, 7, 16, 17, 32, 64, 100, total - 16*g0} {
					if 16*g0+rows > total {
						continue
					}
					sub := w[16*g0*rb : (16*g0+rows)*rb]
					sp := p[g0*PackedQBytes(qt, 16, cols):]
					for _, n := range []int{1, 2, 3, 5, 8, 9, 16, 19} {
						want := make([]float32, n*rows)
						if err := ref.MatMulQ(qt, want, rows, sub, rows, cols, raw, n); err != nil {
							t.Fatal(err)
						}
						ldd := rows + 3
						out := make([]float32, 2*guard+n*ldd)
						for i := range out {
							out[i] = sentinel
						}
						if err := k.MatMulQPacked(qt, out[guard:], ldd, sp, rows, cols, xq, n); err != nil {
							t.Fatal(err)
						}
						for i := range out {
							in, j := (i-guard)/ldd, (i-guard)%ldd
							if i < guard || i >= guard+n*ldd || j >= rows {
								if out[i] != sentinel {
									t.Fatalf("%s %v cols=%d rows=%d n=%d: wrote outside the output at %d", k.Name(), qt, cols, rows, n, i-guard)
								}
								continue
							}
							got, wv := out[i], want[in*rows+j]
							if math.Float32bits(got) != math.Float32bits(wv) && !(got != got && wv != wv) {
								t.Fatalf("%s %v cols=%d group %d rows=%d n=%d: [%d][%d] = %g, want %g", k.Name(), qt, cols, g0, rows, n, in, j, got, wv)
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulQPackedNoAllocs checks that packed products and input packing
// do not allocate.
func TestMatMulQPackedNoAllocs(t *testing.T) {
	for _, qt := range packedTypes {
		rows, cols, n := 40, 512, 9
		p := make([]byte, PackedQBytes(qt, rows, cols))
		xq := InputBuffer(n * PackedInputRowBytes(qt, cols))
		x := make([]float32, n*cols)
		dst := make([]float32, n*rows)
		for _, k := range kernelSets(t) {
			if !k.PacksQ(qt) {
				continue
			}
			if a := testing.AllocsPerRun(20, func() {
				_ = k.PackInputs(qt, xq, x, n, cols)
				_ = k.MatMulQPacked(qt, dst, rows, p, rows, cols, xq, n)
			}); a != 0 {
				t.Errorf("%s %v: %v allocations per call", k.Name(), qt, a)
			}
		}
	}
}

// BenchmarkMatMulQPacked measures the packed product against MatMulQ on
// GGML's layout, same weights, same kernel set, one thread, for each
// packed type: decode (n=1, GB/s of weights) and prefill (n=8, 64 and 512,
// GFLOP/s as 2·rows·cols·n); on the detected kernel set and, where that
// is another, on the AVX2 one and the AVX2+AVX-VNNI one.
func BenchmarkMatMulQPacked(b *testing.B) {
	sets := []*Kernels{Detect()}
	for _, f := range []Features{{AVX2: true}, {AVX2: true, AVXVNNI: true}} {
		if k := New(f); !slices.ContainsFunc(sets, func(s *Kernels) bool { return s.Name() == k.Name() }) && k.Features().AVX2 {
			sets = append(sets, k)
		}
	}
	for _, k := range sets {
		for _, qt := range packedTypes {
			b.Run(k.Name()+"/"+qt.String(), func(b *testing.B) { benchMatMulQPacked(b, k, qt) })
		}
	}
}

func benchMatMulQPacked(b *testing.B, k *Kernels, qt quant.Type) {
	if !k.PacksQ(qt) {
		b.Skipf("%s kernels do not pack %v", k.Name(), qt)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, shape := range [][2]int{{4096, 4096}, {12288, 4096}} {
		rows, cols := shape[0], shape[1]
		rb := qt.RowBytes(cols)
		w := make([]byte, rows*rb)
		for i := range rows {
			weightRow(r, qt, w[i*rb:(i+1)*rb], 0)
		}
		p := make([]byte, PackedQBytes(qt, rows, cols))
		if err := PackQ(qt, p, w, rows, cols); err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8, 64, 512} {
			x := randF32(r, n*cols)
			raw := InputBuffer(n * InputRowBytes(qt, cols))
			xq := InputBuffer(n * PackedInputRowBytes(qt, cols))
			if err := k.QuantizeInputs(qt, raw, x, n, cols); err != nil {
				b.Fatal(err)
			}
			if err := k.PackInputs(qt, xq, x, n, cols); err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, n*rows)
			b.Run(fmt.Sprintf("%dx%d/n=%d/ggml", rows, cols, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					if err := k.MatMulQ(qt, dst, rows, w, rows, cols, raw, n); err != nil {
						b.Fatal(err)
					}
				}
				reportFlops(b, rows, cols, n)
			})
			b.Run(fmt.Sprintf("%dx%d/n=%d/packed", rows, cols, n), func(b *testing.B) {
				b.SetBytes(int64(len(p)))
				for b.Loop() {
					if err := k.MatMulQPacked(qt, dst, rows, p, rows, cols, xq, n); err != nil {
						b.Fatal(err)
					}
				}
				reportFlops(b, rows, cols, n)
			})
		}
	}
}

// TestSumInt8x32 checks the word-wise sum of 32 int8 against a plain loop
// on extreme and random blocks.
func TestSumInt8x32(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for c := range 200 {
		var q [32]int8
		for i := range q {
			switch c {
			case 0:
				q[i] = -128
			case 1:
				q[i] = 127
			case 2:
				q[i] = int8(-128 + 255*(i%2))
			default:
				q[i] = int8(r.Uint32())
			}
		}
		var want int32
		for _, v := range q {
			want += int32(v)
		}
		if got := sumInt8x32(&q); got != want {
			t.Fatalf("case %d: %d, want %d", c, got, want)
		}
	}
}

// TestWidenQ8_0Inputs checks WidenQ8_0Inputs on rows of random bytes (every
// value −128..127, d and the correction copied as they are) and each kernel
// set's widening against it, bit for bit.
func TestWidenQ8_0Inputs(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, blocks := range []int{1, 2, 7, 128} {
		src := make([]byte, blocks*q8PackInput)
		for i := range src {
			src[i] = byte(r.IntN(256))
		}
		want := make([]byte, blocks*q8WideInput)
		WidenQ8_0Inputs(want, src)
		for b := range blocks {
			in, out := src[b*q8PackInput:], want[b*q8WideInput:]
			for i := range 32 {
				if got := int16(binary.LittleEndian.Uint16(out[2*i:])); got != int16(int8(in[i])) {
					t.Fatalf("block %d value %d: %d, want %d", b, i, got, int8(in[i]))
				}
			}
			if !bytes.Equal(out[64:72], in[32:40]) {
				t.Fatalf("block %d: d and correction %x, want %x", b, out[64:72], in[32:40])
			}
		}
		for _, k := range kernelSets(t) {
			if k.widenQ8_0 == nil {
				continue
			}
			got := make([]byte, len(want)+8)
			got[len(want)] = 0xa5
			k.widenQ8_0(got, src, blocks)
			if !bytes.Equal(got[:len(want)], want) || got[len(want)] != 0xa5 {
				t.Fatalf("%s, %d blocks: widened rows differ from WidenQ8_0Inputs or wrote past them", k.Name(), blocks)
			}
		}
	}
}

// TestMatMulQ8_0Wide checks every word kernel of each kernel set that has
// them (chunks of 1..most inputs, fewer than MatMulQPacked ever gives
// them) against the Go twin bit for bit, on inputs full of −128 too,
// which the sign kernels cannot take.
func TestMatMulQ8_0Wide(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const rows, cols = 33, 256
	rb, xb := quant.Q8_0.RowBytes(cols), PackedInputRowBytes(quant.Q8_0, cols)
	w := make([]byte, rows*rb)
	for i := range rows {
		weightRow(r, quant.Q8_0, w[i*rb:(i+1)*rb], r.IntN(4))
	}
	p := make([]byte, PackedQBytes(quant.Q8_0, rows, cols))
	if err := PackQ(quant.Q8_0, p, w, rows, cols); err != nil {
		t.Fatal(err)
	}
	const maxN = 8
	xq := InputBuffer(maxN * xb)
	for i := range maxN {
		blk := make([]quant.BlockQ8_0, cols/32)
		for b := range blk {
			blk[b].D = half.F32ToF16(float32(r.NormFloat64()))
			for j := range blk[b].Qs {
				blk[b].Qs[j] = int8(r.IntN(256) - 128)
				if i%2 == 1 && j%3 == 0 {
					blk[b].Qs[j] = -128
				}
			}
		}
		packInputRow(xq[i*xb:(i+1)*xb], blk)
	}
	tested := false
	for _, k := range kernelSets(t) {
		if k.qpQ8_0Wide == nil {
			continue
		}
		for n := 1; n <= maxN; n++ {
			want := make([]float32, n*rows)
			matMulQPackedGo(quant.Q8_0, want, rows, p, rows, cols, xq, n)
			got := make([]float32, n*rows)
			k.matMulQ8_0Wide(got, rows, p, rows, cols, xq, n)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s n=%d: element %d (input %d, row %d) is %v, the Go twin's %v", k.Name(), n, i, i/rows, i%rows, got[i], want[i])
				}
			}
		}
		tested = true
	}
	if !tested {
		t.Skip("no kernel set with word kernels here")
	}
}
