package cpu

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/machine"
	"github.com/govinfer/govinfer/quant"
)

// benchQuantWeight returns rows×cols random dt weights in GGML's layout.
func benchQuantWeight(tb testing.TB, r *rand.Rand, dt compute.DType, rows, cols int) []byte {
	rb := dt.RowBytes(cols)
	data := make([]byte, rows*rb)
	row := make([]float32, cols)
	for i := range rows {
		for j := range row {
			row[j] = float32(r.NormFloat64())
		}
		if err := quant.QuantizeRow(dt.Quant(), data[i*rb:(i+1)*rb], row); err != nil {
			tb.Fatal(err)
		}
	}
	return data
}

// BenchmarkDecodeProducts runs the one-input products of a decode step of
// Qwen3.5-35B-A3B's widths (llama.cpp's Q4_K_M and Q8_0 files) on two
// threads, each shape over distinct matrices of unique weights so that
// every product reads DRAM, and reports GB/s of weights against the
// two-thread read loop measured between the timed runs: lm_head (a
// quarter of its 248320 rows), in_proj_qkv, in_proj_z and the experts'
// up and down projections, eight products an op as a token's experts.
// Run with -benchtime 5x or so; the machines are shared, so compare the
// %read of the shapes within a run.
func BenchmarkDecodeProducts(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	rb := machine.NewReadBuffer(1 << 30)
	be := New(Options{Threads: 2})
	defer be.Close()
	for _, s := range []struct {
		name       string
		dt         compute.DType
		rows, cols int
		mats       int // distinct matrices taken in turn
		per        int // products an op
	}{
		{"lm_head/Q6_K", compute.Q6_K, 248320 / 4, 2048, 1, 1},
		{"lm_head/Q8_0", compute.Q8_0, 248320 / 4, 2048, 1, 1},
		{"in_proj_qkv/Q4_K", compute.Q4_K, 8192, 2048, 8, 1},
		{"in_proj_z/Q4_K", compute.Q4_K, 4096, 2048, 16, 1},
		{"expert_up/Q4_K", compute.Q4_K, 512, 2048, 64, 8},
		{"expert_down/Q4_K", compute.Q4_K, 2048, 512, 64, 8},
		{"expert_down/Q6_K", compute.Q6_K, 2048, 512, 64, 8},
		{"expert_up/Q8_0", compute.Q8_0, 512, 2048, 64, 8},
	} {
		b.Run(s.name, func(b *testing.B) {
			ws := make([]compute.Weight, s.mats)
			for i := range ws {
				w, err := be.LoadWeight("w", s.dt, s.rows, s.cols, benchQuantWeight(b, r, s.dt, s.rows, s.cols))
				if err != nil {
					b.Fatal(err)
				}
				ws[i] = w
			}
			x, _ := be.NewBuffer(s.cols)
			for i := range Data(x) {
				Data(x)[i] = float32(r.NormFloat64())
			}
			dst, _ := be.NewBuffer(s.rows)
			var took time.Duration
			read, ops, i := 0.0, 0, 0
			for b.Loop() {
				start := time.Now()
				for range s.per {
					be.MatMul(dst, x, ws[i%s.mats], 1)
					i++
				}
				took += time.Since(start)
				ops++
				read = max(read, rb.Bandwidth(2, 1, 0).Value)
			}
			gbs := float64(s.dt.RowBytes(s.cols)*s.rows*s.per*ops) / took.Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(read, "read-GB/s")
			b.ReportMetric(100*gbs/read, "%read")
			b.ReportMetric(float64(took.Microseconds())/float64(ops), "us/op")
		})
	}
}

// BenchmarkDecodeExperts runs a decode step's eight experts of the
// 35B-A3B widths (gate and up [512, 2048], down [2048, 512]), chosen
// from 64 so that every step reads DRAM, on two threads: as two batches
// of products (MatMuls: gates and ups, then downs) and one product at a
// time, in turns, reporting each one's GB/s of weights.
func BenchmarkDecodeExperts(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	be := New(Options{Threads: 2})
	defer be.Close()
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_K} {
		const experts, k, h, width = 64, 8, 2048, 512
		gate, up, down := make([]compute.Weight, experts), make([]compute.Weight, experts), make([]compute.Weight, experts)
		load := func(rows, cols int) compute.Weight {
			w, err := be.LoadWeight("w", dt, rows, cols, benchQuantWeight(b, r, dt, rows, cols))
			if err != nil {
				b.Fatal(err)
			}
			return w
		}
		for e := range experts {
			gate[e], up[e], down[e] = load(width, h), load(width, h), load(h, width)
		}
		x, _ := be.NewBuffer(h)
		for i := range Data(x) {
			Data(x)[i] = float32(r.NormFloat64())
		}
		g, _ := be.NewBuffer(k * width)
		u, _ := be.NewBuffer(k * width)
		o, _ := be.NewBuffer(k * h)
		bytes := float64(k * (2*dt.RowBytes(h)*width + dt.RowBytes(width)*h))
		step := 0
		batched := func() {
			var ups, downs []compute.MatMulPart
			for j := range k {
				e := (step*k + j) % experts
				ups = append(ups, compute.MatMulPart{Dst: g, DstOff: j * width, X: x, W: gate[e], N: 1},
					compute.MatMulPart{Dst: u, DstOff: j * width, X: x, W: up[e], N: 1})
				downs = append(downs, compute.MatMulPart{Dst: o, DstOff: j * h, X: g, XOff: j * width, W: down[e], N: 1})
			}
			be.MatMuls(ups)
			be.MatMuls(downs)
		}
		each := func() {
			for j := range k {
				e := (step*k + j) % experts
				be.MatMul(g, x, gate[e], 1)
				be.MatMul(u, x, up[e], 1)
				be.MatMul(o, g, down[e], 1)
			}
		}
		b.Run(dt.String(), func(b *testing.B) {
			// Each kind in turn within the run, so that they meet the
			// same memory (shared machines' bandwidth swings).
			kinds := []struct {
				name string
				run  func()
			}{{"each", each}, {"batched", batched}}
			took := make([]time.Duration, len(kinds))
			i := 0
			for b.Loop() {
				c := kinds[i%len(kinds)]
				start := time.Now()
				c.run()
				took[i%len(kinds)] += time.Since(start)
				step++
				i++
			}
			for j, c := range kinds {
				b.ReportMetric(bytes*float64(i/len(kinds))/took[j].Seconds()/1e9, c.name+"-GB/s")
			}
		})
	}
}
