package cpu

import (
	"fmt"
	"testing"

	"github.com/govinfer/govinfer/compute"
)

// BenchmarkCausalConv1D runs one decode step of the convolution (one token
// per sequence) for 1 and 16 sequences at the small test model's width
// (512 channels) and the 9B one (8192), kernel 4.
func BenchmarkCausalConv1D(b *testing.B) {
	for _, channels := range []int{512, 8192} {
		for _, seqs := range []int{1, 16} {
			b.Run(fmt.Sprintf("channels=%d/seqs=%d", channels, seqs), func(b *testing.B) {
				be := New(Options{})
				defer be.Close()
				const kernel = 4
				w, err := be.LoadWeight("conv", compute.F32, channels, kernel, make([]byte, 4*channels*kernel))
				if err != nil {
					b.Fatal(err)
				}
				x, _ := be.NewBuffer(seqs * channels)
				cs := make([]compute.ConvSeq, seqs)
				for i := range cs {
					st, _ := be.NewBuffer((kernel - 1) * channels)
					cs[i] = compute.ConvSeq{Row: i, N: 1, State: st}
				}
				for b.Loop() {
					be.CausalConv1D(x, channels, channels, w, kernel, cs)
				}
			})
		}
	}
}
