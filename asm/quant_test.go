package asm

import (
	"bytes"
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
		for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
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
		{"unsupported type", k.MatMulQ(quant.Keep, dst, 2, w, 2, 256, xq, 1)},
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

// qTwin returns the package quant twin of one (weight row, input row) pair.
func qTwin(qt quant.Type, w, in []byte) float32 {
	switch qt {
	case quant.Q8_0:
		return quant.DotQ8_0Q8_0(w, q80Blocks(in))
	case quant.Q4_K:
		return quant.DotQ4KQ8K(w, q8KBlocks(in))
	case quant.Q5_K:
		return quant.DotQ5KQ8K(w, q8KBlocks(in))
	default:
		return quant.DotQ6KQ8K(w, q8KBlocks(in))
	}
}

// finiteHalves are binary16 scales from the largest finite value down to
// the smallest subnormal, both signs, and zeros.
var finiteHalves = []uint16{0x7bff, 0x3c00, 0x2c00, 0x0400, 0x03ff, 0x0001, 0x0000, 0x8000, 0x8001, 0xbc00, 0xfbff}

// randHalf returns a random finite binary16 value.
func randHalf(r *rand.Rand) uint16 {
	if r.IntN(4) == 0 {
		return finiteHalves[r.IntN(len(finiteHalves))]
	}
	for {
		h := uint16(r.Uint32())
		if h&0x7c00 != 0x7c00 {
			return h
		}
	}
}

// setHalf stores h little-endian at b.
func setHalf(b []byte, h uint16) { b[0], b[1] = byte(h), byte(h>>8) }

// weightRow fills one weight row of qt: kind 0 quantizes random values,
// kind 1 is random bytes with finite scales, kind 2 and 3 are extreme blocks
// (every quant and scale byte 0xff, or 0x00 and 0x80), with extreme scales.
func weightRow(r *rand.Rand, qt quant.Type, row []byte, kind int) {
	cols := len(row) / qt.BlockBytes() * qt.BlockSize()
	switch kind {
	case 0:
		if err := quant.QuantizeRow(qt, row, randF32(r, cols)); err != nil {
			panic(err)
		}
		return
	case 1:
		for i := range row {
			row[i] = byte(r.Uint32())
		}
	case 2:
		for i := range row {
			row[i] = 0xff
		}
	case 3:
		for i := range row {
			row[i] = byte(i&1) << 7
		}
	}
	for b := 0; b < len(row); b += qt.BlockBytes() {
		blk := row[b : b+qt.BlockBytes()]
		h := randHalf(r)
		if kind >= 2 {
			h = finiteHalves[r.IntN(3)]
		}
		switch qt {
		case quant.Q8_0:
			setHalf(blk, h)
		case quant.Q4_K, quant.Q5_K:
			setHalf(blk, h)
			setHalf(blk[2:], randHalf(r))
		case quant.Q6_K:
			setHalf(blk[208:], h)
		}
	}
}

// inputRow fills one quantized input row for qt: kind 0 quantizes random
// values, kind 1 quantizes values with a few outliers, kind 2 and 3 are
// extreme blocks (every value -128, or every value 127 and -128
// alternating) with extreme scales.
func inputRow(r *rand.Rand, qt quant.Type, in []byte, kind int) {
	cols := 0
	if isK(qt) {
		cols = len(in) / 292 * 256
	} else {
		cols = len(in) / 34 * 32
	}
	if kind < 2 {
		x := randF32(r, cols)
		if kind == 1 {
			for range 3 {
				x[r.IntN(cols)] = (r.Float32() - 0.5) * 1e4
			}
		}
		tmp := InputBuffer(len(in))
		if err := Generic().QuantizeInputs(qt, tmp, x, 1, cols); err != nil {
			panic(err)
		}
		copy(in, tmp)
		return
	}
	q := func(i int) int8 {
		if kind == 2 || i%2 == 0 {
			return -128
		}
		return 127
	}
	if !isK(qt) {
		for b := range q80Blocks(in) {
			blk := &q80Blocks(in)[b]
			blk.D = finiteHalves[r.IntN(len(finiteHalves))]
			for i := range blk.Qs {
				blk.Qs[i] = q(i)
			}
		}
		return
	}
	scales := []float32{1, 1.0 / 127, 0x1p-126, 0x1p-149, 1e20, 0, -3}
	for b := range q8KBlocks(in) {
		blk := &q8KBlocks(in)[b]
		blk.D = scales[r.IntN(len(scales))]
		for i := range blk.Qs {
			blk.Qs[i] = q(i)
		}
		for j := range blk.Bsums {
			var s int16
			for _, v := range blk.Qs[16*j : 16*j+16] {
				s += int16(v)
			}
			blk.Bsums[j] = s
		}
	}
}

func isK(qt quant.Type) bool { return qt == quant.Q4_K || qt == quant.Q5_K || qt == quant.Q6_K }

// TestMatMulQShapes checks every kernel set against the twin bit for bit
// over cols of 1 to 8 blocks, 1 to 13 rows taken from any place of a 13-row
// matrix, 1 to 9 inputs, weights at byte offsets 0 to 3, and guard bands
// around and between dst's rows; weights and inputs mix quantized values,
// random bytes and extreme blocks.
func TestMatMulQShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const maxRows, maxN = 13, 9
	const sentinel = 0x7fc0dead
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for blocks := 1; blocks <= 8; blocks++ {
			cols := blocks * qt.BlockSize()
			rb, xb := qt.RowBytes(cols), InputRowBytes(qt, cols)
			w := make([]byte, maxRows*rb)
			for i := range maxRows {
				weightRow(r, qt, w[i*rb:(i+1)*rb], i%4)
			}
			xq := InputBuffer(maxN * xb)
			for i := range maxN {
				inputRow(r, qt, xq[i*xb:(i+1)*xb], []int{0, 0, 1, 2, 3, 0, 1, 0, 2}[i])
			}
			var want [maxN][maxRows]float32
			for i := range maxN {
				for row := range maxRows {
					want[i][row] = qTwin(qt, w[row*rb:(row+1)*rb], xq[i*xb:(i+1)*xb])
				}
			}
			for _, k := range kernelSets(t) {
				for rows := 1; rows <= maxRows; rows++ {
					for n := 1; n <= maxN; n++ {
						r0 := r.IntN(maxRows - rows + 1)
						i0 := r.IntN(maxN - n + 1)
						off := (rows + n + blocks) % 4
						wo := offset(w[r0*rb:(r0+rows)*rb], off)
						ldd := rows + n%3
						const guard = 5
						buf := make([]float32, guard+(n-1)*ldd+rows+guard)
						for i := range buf {
							buf[i] = math.Float32frombits(sentinel)
						}
						dst := buf[guard : guard+(n-1)*ldd+rows]
						in := InputBuffer(n * xb) // 4-byte aligned, as MatMulQ wants
						copy(in, xq[i0*xb:])
						if err := k.MatMulQ(qt, dst, ldd, wo, rows, cols, in, n); err != nil {
							t.Fatal(err)
						}
						for p, v := range buf {
							i, row := (p-guard)/ldd, (p-guard)%ldd
							if p >= guard && i < n && row < rows {
								if got, w := math.Float32bits(v), math.Float32bits(want[i0+i][r0+row]); got != w {
									t.Fatalf("%s %v cols=%d rows %d..%d inputs %d..%d off %d: input %d row %d: %v (%#x), twin %v (%#x)",
										k.Name(), qt, cols, r0, r0+rows, i0, i0+n, off, i0+i, r0+row, v, got, want[i0+i][r0+row], w)
								}
							} else if math.Float32bits(v) != sentinel {
								t.Fatalf("%s %v cols=%d rows=%d n=%d ldd=%d: wrote outside the output at %d", k.Name(), qt, cols, rows, n, ldd, p-guard)
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulQNoAllocs checks that QuantizeInputs and MatMulQ do not allocate.
func TestMatMulQNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols, n = 13, 512, 9
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		w := quantWeights(t, r, qt, rows, cols)
		x := randF32(r, n*cols)
		xq := InputBuffer(n * InputRowBytes(qt, cols))
		dst := make([]float32, n*rows)
		for _, k := range kernelSets(t) {
			for name, f := range map[string]func(){
				"QuantizeInputs": func() { _ = k.QuantizeInputs(qt, xq, x, n, cols) },
				"MatMulQ":        func() { _ = k.MatMulQ(qt, dst, rows, w, rows, cols, xq, n) },
				"MatMulQ n=1":    func() { _ = k.MatMulQ(qt, dst, rows, w, rows, cols, xq, 1) },
			} {
				if a := testing.AllocsPerRun(20, f); a != 0 {
					t.Errorf("%s %v %s: %v allocations per call", k.Name(), qt, name, a)
				}
			}
		}
	}
}

// BenchmarkMatMulQ measures MatMulQ for decode (n=1, GB/s of weights: compare
// BenchmarkMemRead and BenchmarkMatVecBF16) and prefill (n=64 and 512,
// GFLOP/s as 2·rows·cols·n), the Go twins against the detected set (the
// twins only up to n=64 at 4096×4096). The inputs are quantized beforehand;
// BenchmarkQuantizeInputs measures that step.
func BenchmarkMatMulQ(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for _, shape := range [][2]int{{4096, 4096}, {12288, 4096}} {
			rows, cols := shape[0], shape[1]
			rb := qt.RowBytes(cols)
			w := make([]byte, rows*rb)
			for i := range rows {
				weightRow(r, qt, w[i*rb:(i+1)*rb], 1)
			}
			for _, n := range []int{1, 64, 512} {
				xb := InputRowBytes(qt, cols)
				xq := InputBuffer(n * xb)
				if err := Generic().QuantizeInputs(qt, xq, randF32(r, n*cols), n, cols); err != nil {
					b.Fatal(err)
				}
				dst := make([]float32, n*rows)
				for _, k := range []*Kernels{Generic(), Detect()} {
					if k.Name() == "go" && (n > 64 || n > 1 && rows > 4096) {
						continue
					}
					b.Run(fmt.Sprintf("%v/%dx%d/n=%d/%s", qt, rows, cols, n, k.Name()), func(b *testing.B) {
						b.SetBytes(int64(len(w)))
						for b.Loop() {
							if err := k.MatMulQ(qt, dst, rows, w, rows, cols, xq, n); err != nil {
								b.Fatal(err)
							}
						}
						reportFlops(b, rows, cols, n)
					})
				}
			}
		}
	}
}

// BenchmarkQuantizeInputs measures the quantization of n rows of 4096
// activations (b.SetBytes: float32 input bytes).
func BenchmarkQuantizeInputs(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	const cols = 4096
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		for _, n := range []int{1, 64} {
			x := randF32(r, n*cols)
			xq := InputBuffer(n * InputRowBytes(qt, cols))
			k := Detect()
			b.Run(fmt.Sprintf("%v/n=%d/%s", qt, n, k.Name()), func(b *testing.B) {
				b.SetBytes(int64(4 * len(x)))
				for b.Loop() {
					if err := k.QuantizeInputs(qt, xq, x, n, cols); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// quantInputCases returns blocks of 256 activations that stress the
// quantizers: random values, zeros and negative zeros, NaN and infinities
// at the ends, ties of the rounding (iscale = 1 when the largest magnitude
// is -127), the largest magnitude twice with both signs, subnormals and
// values near the float32 limits.
func quantInputCases(r *rand.Rand) [][]float32 {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	blk := func(f func(i int) float32) []float32 {
		v := make([]float32, 256)
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	rnd := func(i int) float32 { return r.Float32()*2 - 1 }
	cases := [][]float32{
		blk(rnd),
		blk(func(int) float32 { return 0 }),
		blk(func(int) float32 { return float32(math.Copysign(0, -1)) }),
		blk(func(i int) float32 { return float32(i%2) * 0x1p-149 }),
		blk(func(i int) float32 { return (r.Float32() - 0.5) * 0x1p-130 }),
		blk(func(i int) float32 { return (r.Float32() - 0.5) * 3e38 }),
		blk(func(i int) float32 {
			if i%32 == 0 {
				return -127 // Q8_K: iscale 1; Q8_0: d = id = 1
			}
			return float32(r.IntN(254)-127) + 0.5 // rounding ties
		}),
		blk(func(i int) float32 {
			switch i {
			case 10:
				return 3
			case 200:
				return -3
			}
			return rnd(i)
		}),
		blk(func(i int) float32 {
			switch i {
			case 10:
				return -3
			case 200:
				return 3
			}
			return rnd(i)
		}),
	}
	for _, special := range []float32{nan, inf, -inf} {
		for _, at := range []int{0, 7, 130, 230, 231, 255} {
			v := blk(rnd)
			v[at] = special
			cases = append(cases, v)
		}
	}
	v := blk(rnd)
	v[3], v[100] = inf, -inf
	cases = append(cases, v, blk(func(int) float32 { return nan }))
	return cases
}

// TestQuantizeInputs checks that every kernel set quantizes activations to
// the bytes package quant's quantizers write, for Q8_0 and Q8_K inputs.
func TestQuantizeInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	cases := quantInputCases(r)
	var x []float32
	for _, c := range cases {
		x = append(x, c...)
	}
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		for _, cols := range []int{256, 768, len(x)} {
			n := len(x) / cols
			xb := InputRowBytes(qt, cols)
			want := InputBuffer(n * xb)
			if err := Generic().QuantizeInputs(qt, want, x, n, cols); err != nil {
				t.Fatal(err)
			}
			for _, k := range kernelSets(t) {
				got := InputBuffer(n * xb)
				if err := k.QuantizeInputs(qt, got, x, n, cols); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%s %v cols=%d: byte %d (row %d, offset %d) is %#x, want %#x", k.Name(), qt, cols, i, i/xb, i%xb, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
