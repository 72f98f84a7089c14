package computetest

// The conformance cases of SigmoidMul, SiLUMul and Add.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

func testSigmoidMul(e *Env) error {
	for k, xh := range headShapes {
		n := 1 + k%3
		x, err := e.randBuf(headsLen(xh, n), 1)
		if err != nil {
			return err
		}
		gh := compute.Heads{Off: 1, RowStride: xh.Count*xh.Dim*2 + 1, HeadStride: 2 * xh.Dim, Count: xh.Count, Dim: xh.Dim}
		g, err := e.randBuf(headsLen(gh, n), 4)
		if err != nil {
			return err
		}
		e.Ref.SigmoidMul(x.ref, xh, g.ref, gh, n)
		e.DUT.SigmoidMul(x.dut, xh, g.dut, gh, n)
		m := headTol(xh, n, func(r, hd, i, idx int) float64 {
			gv := float64(g.vals[gh.Head(r, hd)+i])
			return tol(math.Abs(float64(x.vals[idx])*sigmoid64(gv))*(1+math.Abs(gv)), 1)
		})
		if err := e.check(fmt.Sprintf("SigmoidMul %+v n=%d", xh, n), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x, g)
	}
	return nil
}

func testSiLUMul(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4097} {
		g, err := e.randBuf(n+1, 4)
		if err != nil {
			return err
		}
		u, err := e.randBuf(n+2, 1)
		if err != nil {
			return err
		}
		d, err := e.randBuf(n+3, 1)
		if err != nil {
			return err
		}
		e.Ref.SiLUMul(d.ref, g.ref, u.ref, n)
		e.DUT.SiLUMul(d.dut, g.dut, u.dut, n)
		err = e.check(fmt.Sprintf("SiLUMul n=%d", n), d, func(i int) float64 {
			if i >= n {
				return 0
			}
			gv := float64(g.vals[i])
			return tol(math.Abs(gv*sigmoid64(gv)*float64(u.vals[i]))*(1+math.Abs(gv)), 1)
		})
		if err != nil {
			return err
		}
		e.free(g, u, d)
	}
	return nil
}

func testAdd(e *Env) error {
	for _, n := range []int{1, 3, 17, 64, 65, 1000, 4097} {
		x, err := e.randBuf(n+1, 1)
		if err != nil {
			return err
		}
		d, err := e.randBuf(n+2, 1)
		if err != nil {
			return err
		}
		e.Ref.Add(d.ref, x.ref, n)
		e.DUT.Add(d.dut, x.dut, n)
		// A float32 addition is correctly rounded everywhere: exact match.
		if err := e.check(fmt.Sprintf("Add n=%d", n), d, nil); err != nil {
			return err
		}
		e.free(x, d)
	}
	return nil
}
