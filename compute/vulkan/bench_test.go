//go:build cgo

package vulkan

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/model"
)

// benchShapes are decode (n ≤ 8: matvec) and prefill (tiled matmul) sizes:
// small ones a CPU-emulated device finishes in seconds, and the 9B MLP's
// [12288, 4096] (100 MB of bf16, past any GPU cache), which only devices
// other than CPU ones run (gpu) on the GPU check.
var benchShapes = []struct {
	name          string
	n, rows, cols int
	gpu           bool
}{
	{"decode_n1_4096x1024", 1, 4096, 1024, false},
	{"decode_n4_4096x1024", 4, 4096, 1024, false},
	{"prefill_n128_2048x1024", 128, 2048, 1024, false},
	{"decode_n1_12288x4096", 1, 12288, 4096, true},
	{"prefill_n512_12288x4096", 512, 12288, 4096, true},
}

// BenchmarkMatMul times MatMul on bf16 weights on the CPU backend and on
// the Vulkan device in the same run, reporting weight GB/s and GFLOP/s.
// Each Vulkan iteration is one op plus a Sync, so it includes submission.
func BenchmarkMatMul(b *testing.B) {
	for _, sh := range benchShapes {
		rng := rand.New(rand.NewPCG(1, 2))
		data := make([]byte, sh.rows*sh.cols*2)
		for i := 0; i < sh.rows*sh.cols; i++ {
			h := half.F32ToBF16(float32(rng.NormFloat64()))
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
		}
		x := make([]float32, sh.n*sh.cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		// vulkan runs what the device picks (on CPU devices matvec passes
		// for prefill too); the tiled variants force the portable tiled
		// shader and the cooperative-matrix one, to compare the two.
		backends := []struct {
			name    string
			prefill bool // only for prefill shapes
			open    func() (compute.Backend, error)
		}{
			{"cpu", false, func() (compute.Backend, error) { return cpu.New(cpu.Options{}), nil }},
			{"vulkan", false, func() (compute.Backend, error) { return New(Options{}) }},
			{"vulkan-unroll2", false, func() (compute.Backend, error) {
				vb, err := New(Options{})
				if err == nil {
					vb.matvecUnroll = 2
				}
				return vb, err
			}},
			{"vulkan-tiled", true, func() (compute.Backend, error) {
				return New(Options{TiledFrom: maxBatch + 1, NoCooperativeMatrix: true})
			}},
			{"vulkan-coopmat", true, func() (compute.Backend, error) {
				vb, err := New(Options{TiledFrom: maxBatch + 1})
				if err == nil && vb.CooperativeMatrix() == 0 {
					vb.Close()
					return nil, fmt.Errorf("no cooperative matrix")
				}
				return vb, err
			}},
		}
		for _, be := range backends {
			if be.prefill && sh.n <= maxBatch {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", sh.name, be.name), func(b *testing.B) {
				bk, err := be.open()
				if err != nil {
					b.Skipf("no Vulkan device: %v", err)
				}
				defer bk.Close()
				if vb, ok := bk.(*Backend); sh.gpu && (!ok || vb.props.DeviceType == vk.PhysicalDeviceTypeCpu) {
					b.Skip("9B-sized shape: GPUs only")
				}
				w, err := bk.LoadWeight("w", compute.BF16, sh.rows, sh.cols, append([]byte(nil), data...))
				if err != nil {
					b.Fatal(err)
				}
				timeMatMul(b, bk, w, len(data), x, sh.n)
			})
		}
	}
}

// timeMatMul times MatMul of n inputs x by w (weightBytes bytes) on bk,
// each call waited for, after one warm-up call that creates the
// pipelines, and reports weight GB/s and GFLOP/s.
func timeMatMul(b *testing.B, bk compute.Backend, w compute.Weight, weightBytes int, x []float32, n int) {
	xb, _ := bk.NewBuffer(len(x))
	db, _ := bk.NewBuffer(n * w.Rows())
	if err := bk.Upload(xb, 0, x); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bk.MatMul(db, xb, w, n) // warm up (pipeline creation)
	if err := bk.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		bk.MatMul(db, xb, w, n)
		if err := bk.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(weightBytes)/sec/1e9, "weightGB/s")
	b.ReportMetric(2*float64(n*w.Rows()*w.Cols())/sec/1e9, "GFLOP/s")
}

// BenchmarkRecord measures the host cost of recording one dispatch (an
// Add), the overhead a model step pays per operation before the device
// does any work.
func BenchmarkRecord(b *testing.B) {
	b.ReportAllocs()
	bk, err := New(Options{})
	if err != nil {
		b.Skipf("no Vulkan device: %v", err)
	}
	defer bk.Close()
	x, _ := bk.NewBuffer(16)
	ctx := context.Background()
	bk.Add(x, x, 1)
	if err := bk.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		bk.Add(x, x, 1)
		if n++; n%1000 == 0 {
			b.StopTimer()
			if err := bk.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	if err := bk.Sync(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAttention times CausalAttention at the 9B head layout (16 query
// heads over 4 KV heads of 256): one decode token after a long context,
// and a prefill block. Each iteration is one op plus a Sync.
func BenchmarkAttention(b *testing.B) {
	const heads, kvHeads, dim = 16, 4, 256
	for _, c := range []struct{ pos, n int }{{4095, 1}, {0, 256}} {
		b.Run(fmt.Sprintf("pos%d_n%d", c.pos, c.n), func(b *testing.B) {
			bk, err := New(Options{})
			if err != nil {
				b.Skipf("no Vulkan device: %v", err)
			}
			defer bk.Close()
			width := kvHeads * dim
			bufs := make([]compute.Buffer, 6)
			for i, n := range []int{c.n * heads * dim, c.n * width, c.n * width, (c.pos + c.n) * width, (c.pos + c.n) * width, c.n * heads * dim} {
				if bufs[i], err = bk.NewBuffer(n); err != nil {
					b.Fatal(err)
				}
			}
			p := compute.Attention{Q: compute.DenseHeads(heads, dim), QBuf: bufs[0], K: compute.DenseHeads(kvHeads, dim), KBuf: bufs[1],
				V: compute.DenseHeads(kvHeads, dim), VBuf: bufs[2], KCache: bufs[3], VCache: bufs[4], Out: bufs[5], Pos: c.pos, N: c.n, Scale: 0.0625}
			ctx := context.Background()
			bk.CausalAttention([]compute.Attention{p})
			if err := bk.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				bk.CausalAttention([]compute.Attention{p})
				if err := bk.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			kv := float64(c.pos+c.n) * float64(width) * 8 // K and V bytes read at least once
			b.ReportMetric(kv/(b.Elapsed().Seconds()/float64(b.N))/1e9, "kvGB/s")
		})
	}
}

// BenchmarkDeltaRule times GatedDeltaRule at the 9B model's widths (16 key
// heads, 32 value heads, dk = dv = 128) over a 512-token prompt with the
// recurrent shader (sequential over the tokens) and the chunked one
// (parallel over chunks of 64). Each iteration is one op plus a Sync.
func BenchmarkDeltaRule(b *testing.B) {
	const nk, nv, dk, dv, n = 16, 32, 128, 128, 512
	for _, form := range []struct {
		name     string
		chunkMin int
	}{{"recurrent", n + 1}, {"chunked", 1}} {
		b.Run(fmt.Sprintf("n%d/%s", n, form.name), func(b *testing.B) {
			bk, err := New(Options{})
			if err != nil {
				b.Skipf("no Vulkan device: %v", err)
			}
			defer bk.Close()
			bk.deltaChunkMin = form.chunkMin
			rng := rand.New(rand.NewPCG(3, 4))
			row := 2*nk*dk + nv*dv
			vals := func(m int, f func() float64) []float32 {
				v := make([]float32, m)
				for i := range v {
					v[i] = float32(f())
				}
				return v
			}
			norm := func() float64 { return rng.NormFloat64() / 11.3 } // |q|, |k| near 1
			bufs := make([]compute.Buffer, 5)
			data := [][]float32{vals(n*row, norm), vals(n*nv, func() float64 { return -rng.Float64() / 4 }),
				vals(n*nv, rng.Float64), make([]float32, n*nv*dv), make([]float32, nv*dk*dv)}
			for i, d := range data {
				if bufs[i], err = bk.NewBuffer(len(d)); err != nil {
					b.Fatal(err)
				}
				if err := bk.Upload(bufs[i], 0, d); err != nil {
					b.Fatal(err)
				}
			}
			p := compute.DeltaRule{Q: compute.Heads{RowStride: row, HeadStride: dk, Count: nk, Dim: dk},
				K:   compute.Heads{Off: nk * dk, RowStride: row, HeadStride: dk, Count: nk, Dim: dk},
				V:   compute.Heads{Off: 2 * nk * dk, RowStride: row, HeadStride: dv, Count: nv, Dim: dv},
				QKV: bufs[0], G: bufs[1], Beta: bufs[2], Out: bufs[3], State: bufs[4],
				N: n, QScale: float32(1 / math.Sqrt(dk)), Nk: nk, Nv: nv, Dk: dk, Dv: dv}
			ctx := context.Background()
			bk.GatedDeltaRule([]compute.DeltaRule{p}) // warm up (pipeline creation)
			if err := bk.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				bk.GatedDeltaRule([]compute.DeltaRule{p})
				if err := bk.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/(b.Elapsed().Seconds()/float64(b.N)), "tokens/s")
		})
	}
}

// BenchmarkDecodeSubmit times greedy decode steps of the small test model
// with each step recorded whole and submitted at its end, against
// submitting every defaultSubmitEvery dispatches so the device starts
// while the host records the rest of the step (the default on GPUs; CPU
// devices execute on the cores that record, so they record whole steps).
func BenchmarkDecodeSubmit(b *testing.B) {
	for _, every := range []int{0, defaultSubmitEvery} {
		name := "whole-step"
		if every > 0 {
			name = fmt.Sprintf("every-%d", every)
		}
		b.Run(name, func(b *testing.B) {
			bk, err := New(Options{})
			if err != nil {
				b.Skipf("no Vulkan device: %v", err)
			}
			defer bk.Close()
			bk.rec.submitEvery = every
			m, err := model.Open("../../testdata/models/small", model.Options{Backend: bk})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			seq, err := m.NewSequence()
			if err != nil {
				b.Fatal(err)
			}
			defer seq.Close()
			out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8}, Logits: model.LastArgmax}})
			if err != nil {
				b.Fatal(err)
			}
			tok := out[0].Argmax
			s0 := bk.rec.submissions
			for b.Loop() {
				out, err = m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{tok}, Logits: model.LastArgmax}})
				if err != nil {
					b.Fatal(err)
				}
				tok = out[0].Argmax
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(bk.rec.submissions-s0)/float64(b.N), "submits/token")
		})
	}
}
