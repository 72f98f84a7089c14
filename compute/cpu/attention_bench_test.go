package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// BenchmarkCausalAttention runs attention at the Qwen3.5-9B widths (16 query
// heads, 4 KV heads of 256) for one token after a 4096-token context and for
// a 512-token prompt at the start and at the end of an 8k context, and
// reports tokens/s and the products' GFLOP/s.
func BenchmarkCausalAttention(b *testing.B) {
	const nh, nkv, dim = 16, 4, 256
	for _, c := range []struct{ pos, n int }{{4096, 1}, {0, 512}, {7680, 512}} {
		b.Run(fmt.Sprintf("pos=%d/N=%d", c.pos, c.n), func(b *testing.B) {
			be := cpu.New(cpu.Options{})
			defer be.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			width := nkv * dim
			capacity := c.pos + c.n
			q := benchBuf(b, be, rng, c.n*nh*dim, 1)
			k := benchBuf(b, be, rng, c.n*width, 1)
			v := benchBuf(b, be, rng, c.n*width, 1)
			kc := benchBuf(b, be, rng, capacity*width, 1)
			vc := benchBuf(b, be, rng, capacity*width, 1)
			out := benchBuf(b, be, rng, c.n*nh*dim, 0)
			p := compute.Attention{
				Q: compute.DenseHeads(nh, dim), QBuf: q,
				K: compute.DenseHeads(nkv, dim), KBuf: k,
				V: compute.DenseHeads(nkv, dim), VBuf: v,
				KCache: kc, VCache: vc, Out: out,
				Pos: c.pos, N: c.n, Scale: float32(1 / math.Sqrt(dim)),
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.CausalAttention([]compute.Attention{p})
			}
			b.ReportMetric(float64(b.N*c.n)/b.Elapsed().Seconds(), "tokens/s")
			// Products: q·k and p·v, 2 flops each, over every visible position.
			ctx := float64(c.n)*float64(c.pos) + float64(c.n)*float64(c.n+1)/2
			b.ReportMetric(4*nh*dim*ctx*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
