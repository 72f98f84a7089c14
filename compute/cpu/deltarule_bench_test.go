package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// benchBuf returns a buffer of n values uniform in [-scale, scale).
func benchBuf(b *testing.B, be *cpu.Backend, rng *rand.Rand, n int, scale float32) compute.Buffer {
	b.Helper()
	buf, err := be.NewBuffer(n)
	if err != nil {
		b.Fatal(err)
	}
	d := cpu.Data(buf)
	for i := range d {
		d[i] = (2*rng.Float32() - 1) * scale
	}
	return buf
}

// BenchmarkGatedDeltaRule runs the delta rule at the Qwen3.5-9B widths (16
// key heads, 32 value heads of 128) for one decode token and a 512-token
// prompt, and reports tokens/s.
func BenchmarkGatedDeltaRule(b *testing.B) {
	const nk, nv, dk, dv = 16, 32, 128, 128
	for _, n := range []int{1, 512} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			be := cpu.New(cpu.Options{})
			defer be.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			stride := 2*nk*dk + nv*dv
			qkv := benchBuf(b, be, rng, n*stride, 1)
			// Unit q and k heads, as after the model's L2 norm.
			d := cpu.Data(qkv)
			for t := 0; t < n; t++ {
				for h := 0; h < 2*nk; h++ {
					seg := d[t*stride+h*dk : t*stride+(h+1)*dk]
					var ss float64
					for _, x := range seg {
						ss += float64(x) * float64(x)
					}
					for i := range seg {
						seg[i] = float32(float64(seg[i]) / math.Sqrt(ss))
					}
				}
			}
			g := benchBuf(b, be, rng, n*nv, 1)
			beta := benchBuf(b, be, rng, n*nv, 1)
			for i, x := range cpu.Data(g) {
				cpu.Data(g)[i] = -0.5 - 0.5*x // (-1, 0)
				cpu.Data(beta)[i] = 0.5 + 0.5*cpu.Data(beta)[i]
			}
			out := benchBuf(b, be, rng, n*nv*dv, 0)
			st := benchBuf(b, be, rng, nv*dk*dv, 0.1)
			p := compute.DeltaRule{
				Q:   compute.Heads{RowStride: stride, HeadStride: dk, Count: nk, Dim: dk},
				K:   compute.Heads{Off: nk * dk, RowStride: stride, HeadStride: dk, Count: nk, Dim: dk},
				V:   compute.Heads{Off: 2 * nk * dk, RowStride: stride, HeadStride: dv, Count: nv, Dim: dv},
				QKV: qkv, G: g, Beta: beta, Out: out, State: st, N: n,
				QScale: float32(1 / math.Sqrt(dk)), Nk: nk, Nv: nv, Dk: dk, Dv: dv,
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.GatedDeltaRule([]compute.DeltaRule{p})
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
