package computetest

// The conformance cases of Rope.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// ropeTable returns n rows of [cos | sin] for rotaryDim at positions pos0...
func ropeTable(n, rotaryDim, pos0 int) []float32 {
	half := rotaryDim / 2
	t := make([]float32, n*rotaryDim)
	for r := 0; r < n; r++ {
		for i := 0; i < half; i++ {
			theta := float64(pos0+r) * math.Pow(10000, -2*float64(i)/float64(rotaryDim))
			t[r*rotaryDim+i] = float32(math.Cos(theta))
			t[r*rotaryDim+half+i] = float32(math.Sin(theta))
		}
	}
	return t
}

func testRope(e *Env) error {
	cases := []struct {
		h         compute.Heads
		n, rotary int
	}{
		{compute.Heads{Off: 0, RowStride: 2, HeadStride: 2, Count: 1, Dim: 2}, 1, 2},
		{compute.Heads{Off: 3, RowStride: 40, HeadStride: 17, Count: 2, Dim: 16}, 3, 16},
		{compute.Heads{Off: 0, RowStride: 3 * 256, HeadStride: 256, Count: 3, Dim: 256}, 5, 64},
		{compute.Heads{Off: 5, RowStride: 4*130 + 7, HeadStride: 130, Count: 4, Dim: 128}, 17, 32},
		{compute.Heads{Off: 1, RowStride: 2*64 + 1, HeadStride: 64, Count: 2, Dim: 64}, 2, 64},
		{compute.Heads{Off: 0, RowStride: 8 * 32, HeadStride: 32, Count: 8, Dim: 32}, 9, 26},
	}
	for _, c := range cases {
		x, err := e.randBuf(headsLen(c.h, c.n), 1)
		if err != nil {
			return err
		}
		table := ropeTable(c.n, c.rotary, 1000)
		e.Ref.Rope(x.ref, c.h, c.n, table, c.rotary)
		e.DUT.Rope(x.dut, c.h, c.n, table, c.rotary)
		for i := range table {
			table[i] = 99 // the backend must have copied the table
		}
		half := c.rotary / 2
		ref := ropeTable(c.n, c.rotary, 1000)
		m := headTol(c.h, c.n, func(r, hd, i, idx int) float64 {
			if i >= c.rotary {
				return 0
			}
			j := i % half
			cs, sn := float64(ref[r*c.rotary+j]), float64(ref[r*c.rotary+half+j])
			base := c.h.Head(r, hd)
			a, b := float64(x.vals[base+j]), float64(x.vals[base+j+half])
			return tol(math.Abs(a*cs)+math.Abs(b*sn)+math.Abs(a*sn)+math.Abs(b*cs), 2)
		})
		if err := e.check(fmt.Sprintf("Rope %+v n=%d rotary=%d", c.h, c.n, c.rotary), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x)
	}
	return nil
}
