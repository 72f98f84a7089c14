package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// TestQuantizedWeights checks quantized weights on the CPU backend, with the
// detected kernel set and the AVX2 one (packed where the kernels pack the
// format, unless Options.NoPackedQuant; a last group of 5 rows): Embed
// gathers exactly the dequantized rows; MatMul with n inputs equals the
// package quant twin (8-bit inputs, integer block sums) bit for bit, for
// decode and batches, whatever the threads; bad shapes are errors.
func TestQuantizedWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		threads int
		k       *asm.Kernels
		noPack  bool
	}{{1, nil, false}, {3, nil, false}, {1, asm.New(asm.Features{AVX2: true}), false}, {3, asm.New(asm.Features{AVX2: true}), false},
		{3, asm.New(asm.Features{AVX2: true, AVXVNNI: true}), false}, {3, nil, true}} {
		threads := c.threads
		b := New(Options{Threads: threads, Kernels: c.k, NoPackedQuant: c.noPack})
		for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q5_K, compute.Q6_K} {
			qt := dt.Quant()
			const rows, cols = 37, 512
			rb := dt.RowBytes(cols)
			data := make([]byte, rows*rb)
			for i := range rows {
				row := make([]float32, cols)
				for j := range row {
					row[j] = float32(r.NormFloat64())
				}
				if err := quant.QuantizeRow(qt, data[i*rb:(i+1)*rb], row); err != nil {
					t.Fatal(err)
				}
			}
			w, err := b.LoadWeight("w", dt, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			// Packed weights (asm.PackQ) are the backend's own copy.
			if got := w.(compute.DataOwner).OwnsData(); got != (b.Kernels().PacksQ(qt) && !c.noPack) {
				t.Errorf("%v on %s kernels: OwnsData %v", dt, b.Kernels().Name(), got)
			}
			// Embed.
			out, _ := b.NewBuffer(2 * cols)
			b.Embed(out, w, []int32{5, 36})
			for i, id := range []int{5, 36} {
				want := make([]float32, cols)
				if err := quant.DequantizeRow(qt, want, data[id*rb:(id+1)*rb]); err != nil {
					t.Fatal(err)
				}
				for j, v := range Data(out)[i*cols : (i+1)*cols] {
					if v != want[j] {
						t.Fatalf("%v Embed row %d [%d] = %v, want %v", dt, id, j, v, want[j])
					}
				}
			}
			// MatMul.
			for _, n := range []int{1, 2, 9} {
				xs := make([]float32, n*cols)
				for i := range xs {
					xs[i] = float32(r.NormFloat64())
				}
				x, _ := b.NewBuffer(n * cols)
				copy(Data(x), xs)
				dst, _ := b.NewBuffer(n * rows)
				b.MatMul(dst, x, w, n)
				for i := range n {
					want := make([]float32, rows)
					quant.MatVecQ8(qt, want, data, rows, cols, xs[i*cols:(i+1)*cols])
					for row, v := range Data(dst)[i*rows : (i+1)*rows] {
						if math.Float32bits(v) != math.Float32bits(want[row]) {
							t.Fatalf("%v MatMul n=%d threads=%d: [%d, %d] = %v, twin %v", dt, n, threads, i, row, v, want[row])
						}
					}
				}
			}
		}
		for _, c := range []struct {
			dt   compute.DType
			cols int
			n    int
		}{
			{compute.Q4_K, 100, 2 * 144},      // not whole blocks
			{compute.Q8_0, 64, 2*68 - 1},      // short data
			{compute.Q5_K, 256, 2*176 - 1},    // short data
			{compute.DType(99), 256, 2 * 256}, // unknown
		} {
			if _, err := b.LoadWeight("bad", c.dt, 2, c.cols, make([]byte, c.n)); err == nil {
				t.Errorf("LoadWeight %v [2, %d] with %d bytes: no error", c.dt, c.cols, c.n)
			}
		}
		b.Close()
	}
}
