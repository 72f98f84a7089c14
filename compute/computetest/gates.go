package computetest

// The conformance cases of GDNGates.

import (
	"fmt"
	"math"
)

func testGates(e *Env) error {
	for k, sh := range [][2]int{{1, 1}, {3, 16}, {17, 32}, {5, 48}, {65, 3}} {
		n, heads := sh[0], sh[1]
		dt := dtypes[k%len(dtypes)]
		aLog, err := e.weight("A_log", dt, 1, heads, func() float64 { return e.Rng.Float64()*4 - 2 })
		if err != nil {
			return err
		}
		dtBias, err := e.weight("dt_bias", dt, 1, heads, e.normal(1))
		if err != nil {
			return err
		}
		// Spread a over the softplus regimes, including past its threshold.
		av := e.randVals(n*heads, 8)
		av[0] = 25
		a, err := e.buf(av)
		if err != nil {
			return err
		}
		b, err := e.randBuf(n*heads, 4)
		if err != nil {
			return err
		}
		g, err := e.randBuf(n*heads+1, 1)
		if err != nil {
			return err
		}
		beta, err := e.randBuf(n*heads+2, 1)
		if err != nil {
			return err
		}
		e.Ref.GDNGates(g.ref, beta.ref, a.ref, b.ref, aLog.ref, dtBias.ref, n, heads)
		e.DUT.GDNGates(g.dut, beta.dut, a.dut, b.dut, aLog.dut, dtBias.dut, n, heads)
		what := fmt.Sprintf("GDNGates %v n=%d heads=%d", dt, n, heads)
		err = e.check(what+" g", g, func(i int) float64 {
			if i >= n*heads {
				return 0
			}
			h := i % heads
			x := float64(av[i]) + dtBias.vals[h]
			sp := x
			if x <= 20 {
				sp = math.Log1p(math.Exp(x))
			}
			ea := math.Exp(aLog.vals[h])
			// exp's error grows with |aLog| (3+2|x| ulp allowed by Vulkan).
			return tol(ea*sp*(1+math.Abs(aLog.vals[h]))+ea*(math.Abs(float64(av[i]))+math.Abs(dtBias.vals[h])), 2)
		})
		if err != nil {
			return err
		}
		err = e.check(what+" beta", beta, func(i int) float64 {
			if i >= n*heads {
				return 0
			}
			x := float64(b.vals[i])
			return tol(sigmoid64(x)*(1+math.Abs(x)), 1)
		})
		if err != nil {
			return err
		}
		e.free(a, b, g, beta)
	}
	return nil
}
