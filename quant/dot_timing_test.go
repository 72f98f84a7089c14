package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks of the Go twins, so that the assembly kernels can be compared
// with them. SetBytes is the weight bytes one call reads, so MB/s is the
// weight bandwidth a matvec would reach.

var benchSink float32

func BenchmarkDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		for _, n := range []int{4096, 12288} {
			w := quantized(b, typ, randRow(rng, n, 0.02))
			x := randRow(rng, n, 1)
			b.Run(fmt.Sprintf("%v/%d", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				b.ReportAllocs()
				for b.Loop() {
					benchSink += Dot(typ, w, x)
				}
			})
		}
	}
}

func BenchmarkDotQ8(b *testing.B) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		for _, n := range []int{4096, 12288} {
			w := quantized(b, typ, randRow(rng, n, 0.02))
			x := randRow(rng, n, 1)
			a0 := make([]BlockQ8_0, n/32)
			QuantizeQ8_0(a0, x)
			ak := make([]BlockQ8K, n/256)
			QuantizeQ8K(ak, x)
			b.Run(fmt.Sprintf("%v/%d", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				b.ReportAllocs()
				for b.Loop() {
					switch typ {
					case Q8_0:
						benchSink += DotQ8_0Q8_0(w, a0)
					case Q4_K:
						benchSink += DotQ4KQ8K(w, ak)
					case Q6_K:
						benchSink += DotQ6KQ8K(w, ak)
					}
				}
			})
		}
	}
}

func BenchmarkQuantizeActivations(b *testing.B) {
	rng := rand.New(rand.NewPCG(35, 36))
	x := randRow(rng, 4096, 1)
	b.Run("Q8_0/4096", func(b *testing.B) {
		a := make([]BlockQ8_0, len(x)/32)
		b.SetBytes(4 * int64(len(x)))
		for b.Loop() {
			QuantizeQ8_0(a, x)
		}
	})
	b.Run("Q8_K/4096", func(b *testing.B) {
		a := make([]BlockQ8K, len(x)/256)
		b.SetBytes(4 * int64(len(x)))
		for b.Loop() {
			QuantizeQ8K(a, x)
		}
	})
}

// BenchmarkQuantizeRow is the cost of writing a quantized checkpoint.
func BenchmarkQuantizeRow(b *testing.B) {
	rng := rand.New(rand.NewPCG(37, 38))
	x := randRow(rng, 4096, 0.02)
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		w := make([]byte, typ.RowBytes(len(x)))
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(4 * int64(len(x)))
			b.ReportAllocs()
			for b.Loop() {
				if err := QuantizeRow(typ, w, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
