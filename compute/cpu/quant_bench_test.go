package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// BenchmarkMatMulQuant measures MatMul with a 4096×4096 quantized weight
// (Q8_0, Q4_K, Q6_K) on the AVX2 kernel set and, where the CPU has
// AVX-VNNI, on the AVX2+AVX-VNNI one, packed (asm.PackQ) and in GGML's
// layout (Options.NoPackedQuant), at 1 and 2 threads, for n = 1, 8, 64
// and 512 inputs, inputs quantized in the call as in a forward pass:
// GFLOP/s as 2·rows·cols·n.
func BenchmarkMatMulQuant(b *testing.B) {
	sets := []*asm.Kernels{asm.New(asm.Features{AVX2: true})}
	if !sets[0].Features().AVX2 {
		b.Skip("no AVX2")
	}
	if k := asm.New(asm.Features{AVX2: true, AVXVNNI: true}); k.Features().AVXVNNI {
		sets = append(sets, k)
	}
	const rows, cols = 4096, 4096
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_K, compute.Q6_K} {
		rb := dt.RowBytes(cols)
		data := make([]byte, rows*rb)
		row := make([]float32, cols)
		for i := range rows {
			for j := range row {
				row[j] = float32(r.NormFloat64())
			}
			if err := quant.QuantizeRow(dt.Quant(), data[i*rb:(i+1)*rb], row); err != nil {
				b.Fatal(err)
			}
		}
		for _, threads := range []int{1, 2} {
			for _, n := range []int{1, 8, 64, 512} {
				for _, layout := range []string{"ggml", "packed"} {
					for _, k := range sets {
						b.Run(fmt.Sprintf("%v/threads=%d/n=%d/%s/%s", dt, threads, n, layout, k.Name()), func(b *testing.B) {
							be := New(Options{Threads: threads, Kernels: k, NoPackedQuant: layout == "ggml"})
							defer be.Close()
							w, err := be.LoadWeight("w", dt, rows, cols, data)
							if err != nil {
								b.Fatal(err)
							}
							x, _ := be.NewBuffer(n * cols)
							for i := range Data(x) {
								Data(x)[i] = float32(r.NormFloat64())
							}
							dst, _ := be.NewBuffer(n * rows)
							for b.Loop() {
								be.MatMul(dst, x, w, n)
							}
							b.ReportMetric(2*float64(rows)*cols*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						})
					}
				}
			}
		}
	}
}
