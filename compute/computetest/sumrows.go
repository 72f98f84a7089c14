package computetest

// The conformance cases of SumRows.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// testSumRows sums random terms (none to five per row, weight-1 gathers
// among them) of sources of awkward widths, and checks that the elements
// after the result rows are left as they were.
func testSumRows(e *Env) error {
	for _, c := range []struct{ rows, srcRows, dim int }{{1, 1, 1}, {3, 5, 17}, {7, 20, 64}, {33, 9, 129}, {130, 300, 40}} {
		s := compute.RowSums{Start: []int32{0}}
		for r := range c.rows {
			terms := e.Rng.IntN(6)
			for range terms {
				s.Src = append(s.Src, int32(e.Rng.IntN(c.srcRows)))
				w := float32(e.Rng.Float64()*2 - 1)
				if r%4 == 1 {
					w = 1 // a gather
				}
				s.Weight = append(s.Weight, w)
			}
			s.Start = append(s.Start, int32(len(s.Src)))
		}
		src, err := e.randBuf(c.srcRows*c.dim, 1)
		if err != nil {
			return err
		}
		dst, err := e.randBuf(c.rows*c.dim+c.dim+3, 1)
		if err != nil {
			return err
		}
		e.Ref.SumRows(dst.ref, src.ref, c.dim, s)
		e.DUT.SumRows(dst.dut, src.dut, c.dim, s)
		err = e.check(fmt.Sprintf("SumRows %d rows of %d from %d", c.rows, c.dim, c.srcRows), dst, func(i int) float64 {
			r, col := i/c.dim, i%c.dim
			if r >= c.rows {
				return 0
			}
			var mag float64
			for j := s.Start[r]; j < s.Start[r+1]; j++ {
				mag += math.Abs(float64(s.Weight[j]) * float64(src.vals[int(s.Src[j])*c.dim+col]))
			}
			return tol(mag, int(s.Start[r+1]-s.Start[r]))
		})
		if err != nil {
			return err
		}
		e.free(src, dst)
	}
	return nil
}

// testSwiGLU checks the SiLU-gated product of the two halves of rows, and
// that the elements after the result rows are left as they were.
func testSwiGLU(e *Env) error {
	for _, c := range []struct{ n, width int }{{1, 1}, {1, 512}, {3, 17}, {9, 130}, {33, 64}} {
		x, err := e.randBuf(2*c.n*c.width+5, 4)
		if err != nil {
			return err
		}
		d, err := e.randBuf(c.n*c.width+7, 1)
		if err != nil {
			return err
		}
		e.Ref.SwiGLU(d.ref, x.ref, c.n, c.width)
		e.DUT.SwiGLU(d.dut, x.dut, c.n, c.width)
		err = e.check(fmt.Sprintf("SwiGLU %d rows of %d", c.n, c.width), d, func(i int) float64 {
			if i >= c.n*c.width {
				return 0
			}
			r, col := i/c.width, i%c.width
			g := float64(x.vals[2*r*c.width+col])
			u := float64(x.vals[2*r*c.width+c.width+col])
			return tol(math.Abs(g*sigmoid64(g)*u)*(1+math.Abs(g)), 1)
		})
		if err != nil {
			return err
		}
		e.free(x, d)
	}
	return nil
}
