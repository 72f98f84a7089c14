//go:build !noasm

package asm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/quant"
)

// BenchmarkQKernL1 runs each AVX2 quantized kernel on four rows of 2048
// columns that stay in L1, for one and two inputs: the kernels' own speed,
// without memory (ns/32cols: per 32 columns of the four rows).
func BenchmarkQKernL1(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name     string
		qt       quant.Type
		one, two qTile
	}{{"Q8_0", quant.Q8_0, qdotQ8_0AVX2x1, qdotQ8_0AVX2x2}, {"Q4_K", quant.Q4_K, qdotQ4KAVX2x1, qdotQ4KAVX2x2}, {"Q5_K", quant.Q5_K, qdotQ5KAVX2x1, qdotQ5KAVX2x2}, {"Q6_K", quant.Q6_K, qdotQ6KAVX2x1, qdotQ6KAVX2x2}} {
		cols := 2048
		rb, xb := c.qt.RowBytes(cols), InputRowBytes(c.qt, cols)
		w := make([]byte, 4*rb)
		for i := range 4 {
			weightRow(r, c.qt, w[i*rb:(i+1)*rb], 0)
		}
		xq := InputBuffer(2 * xb)
		if err := Generic().QuantizeInputs(c.qt, xq, randF32(r, 2*cols), 2, cols); err != nil {
			b.Fatal(err)
		}
		var out [8]float32
		blocks := cols / c.qt.BlockSize()
		b.Run(c.name+"/x1", func(b *testing.B) {
			for b.Loop() {
				c.one(&out[0], 4, &w[0], rb, &xq[0], xb, blocks)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cols/32), "ns/32cols")
		})
		b.Run(c.name+"/x2", func(b *testing.B) {
			for b.Loop() {
				c.two(&out[0], 4, &w[0], rb, &xq[0], xb, blocks)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cols/32), "ns/32cols")
		})
	}
}

// BenchmarkQPackGroups runs the packed one-input K-quant kernels over a
// 16384x4096 matrix (in DRAM) one, two and four groups of 16 rows at a
// time, one thread: GB/s of weights (b.SetBytes). matMulQPackedTiles takes
// four, then two, then one.
func BenchmarkQPackGroups(b *testing.B) {
	f := DetectFeatures()
	f.multiStream = true // the group kernels, where the CPU's default leaves them out
	k := New(f)
	if k.qpGroupsQ4_K == nil {
		b.Skipf("%s kernels have no packed group kernels", k.Name())
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		qt     quant.Type
		one    qpKernel
		groups *qpGroupKernels
	}{{quant.Q4_K, k.qpQ4_K[0], k.qpGroupsQ4_K}, {quant.Q6_K, k.qpQ6_K[0], k.qpGroupsQ6_K}} {
		rows, cols := 16384, 4096
		rb := c.qt.RowBytes(cols)
		w := make([]byte, rows*rb)
		for i := range rows {
			weightRow(r, c.qt, w[i*rb:(i+1)*rb], 0)
		}
		p := make([]byte, PackedQBytes(c.qt, rows, cols))
		if err := PackQ(c.qt, p, w, rows, cols); err != nil {
			b.Fatal(err)
		}
		xq := InputBuffer(PackedInputRowBytes(c.qt, cols))
		if err := k.PackInputs(c.qt, xq, randF32(r, cols), 1, cols); err != nil {
			b.Fatal(err)
		}
		gb, blocks := PackedQBytes(c.qt, packRows, cols), cols/256
		dst := make([]float32, rows)
		for _, ng := range []int{1, 2, 4} {
			kern := c.one
			if ng > 1 {
				kern = c.groups[ng/4]
			}
			b.Run(fmt.Sprintf("%v/groups=%d", c.qt, ng), func(b *testing.B) {
				b.SetBytes(int64(len(p)))
				for b.Loop() {
					for g := 0; g < rows/packRows; g += ng {
						kern(&dst[g*packRows], packRows, &p[g*gb], &xq[0], gb, blocks)
					}
				}
			})
		}
	}
}
