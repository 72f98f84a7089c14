package computetest

// The conformance cases of RMSNorm, AddRMSNorm, HeadRMSNorm, GatedRMSNorm and L2Norm.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// invRMS64 returns 1/sqrt(mean(v²)+eps) in float64.
func invRMS64(v []float32, eps float64) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return 1 / math.Sqrt(ss/float64(len(v))+eps)
}

// rmsNormShapes are the [n, dim] shapes of the RMSNorm cases.
var rmsNormShapes = [][2]int{{1, 1}, {1, 17}, {3, 64}, {2, 65}, {5, 1000}, {17, 256}, {2, 4096}}

// rmsNormTol returns the tolerances of dst = rmsnorm(x) * (1 + w) for n
// rows of dim (zero past them, where dst must stay untouched).
func rmsNormTol(x []float32, w []float64, n, dim int, eps float64) func(int) float64 {
	return func(i int) float64 {
		if i >= n*dim {
			return 0
		}
		r := i / dim
		inv := invRMS64(x[r*dim:(r+1)*dim], eps)
		return tol(math.Abs(float64(x[i])*inv)*(1+math.Abs(w[i%dim])), dim)
	}
}

// eachRMSNorm calls fn with every dtype and shape of the RMSNorm cases, a
// norm weight, an input of n*dim+1 elements and an output with one more.
func (e *Env) eachRMSNorm(fn func(dt compute.DType, n, dim int, w wpair, x, dst pair) error) error {
	for _, dt := range dtypes {
		for _, sh := range rmsNormShapes {
			n, dim := sh[0], sh[1]
			w, err := e.weight("norm", dt, 1, dim, e.normal(0.3))
			if err != nil {
				return err
			}
			x, err := e.randBuf(n*dim+1, 2) // the tails must stay untouched
			if err != nil {
				return err
			}
			dst, err := e.randBuf(n*dim+1, 1)
			if err != nil {
				return err
			}
			if err := fn(dt, n, dim, w, x, dst); err != nil {
				return err
			}
			e.free(x, dst)
		}
	}
	return nil
}

func testRMSNorm(e *Env) error {
	return e.eachRMSNorm(func(dt compute.DType, n, dim int, w wpair, x, dst pair) error {
		const eps = 1e-6
		e.Ref.RMSNorm(dst.ref, x.ref, w.ref, n, dim, eps)
		e.DUT.RMSNorm(dst.dut, x.dut, w.dut, n, dim, eps)
		return e.check(fmt.Sprintf("RMSNorm %v n=%d dim=%d", dt, n, dim), dst, rmsNormTol(x.vals, w.vals, n, dim, eps))
	})
}

func testAddRMSNorm(e *Env) error {
	return e.eachRMSNorm(func(dt compute.DType, n, dim int, w wpair, x, dst pair) error {
		y, err := e.randBuf(n*dim, 1)
		if err != nil {
			return err
		}
		defer e.free(y)
		const eps = 1e-6
		e.Ref.AddRMSNorm(x.ref, y.ref, dst.ref, w.ref, n, dim, eps)
		e.DUT.AddRMSNorm(x.dut, y.dut, dst.dut, w.dut, n, dim, eps)
		what := fmt.Sprintf("AddRMSNorm %v n=%d dim=%d", dt, n, dim)
		// The sums are one float32 addition each: exact up to rounding.
		sum := make([]float32, n*dim)
		for i := range sum {
			sum[i] = x.vals[i] + y.vals[i]
		}
		err = e.check(what+" sums", x, func(i int) float64 {
			if i >= n*dim {
				return 0
			}
			return unitRoundoff * (math.Abs(float64(x.vals[i])) + math.Abs(float64(y.vals[i])))
		})
		if err != nil {
			return err
		}
		return e.check(what, dst, rmsNormTol(sum, w.vals, n, dim, eps))
	})
}

// headTol builds a tolerance map over every element of every head of n rows.
func headTol(h compute.Heads, n int, f func(r, hd, i, idx int) float64) map[int]float64 {
	m := make(map[int]float64)
	for r := 0; r < n; r++ {
		for hd := 0; hd < h.Count; hd++ {
			for i := 0; i < h.Dim; i++ {
				idx := h.Head(r, hd) + i
				m[idx] = f(r, hd, i, idx)
			}
		}
	}
	return m
}

func testHeadRMSNorm(e *Env) error {
	for k, h := range headShapes {
		dt := dtypes[k%len(dtypes)]
		for _, n := range []int{1, 3} {
			w, err := e.weight("qnorm", dt, 1, h.Dim, e.normal(0.3))
			if err != nil {
				return err
			}
			x, err := e.randBuf(headsLen(h, n), 1.5)
			if err != nil {
				return err
			}
			const eps = 1e-6
			e.Ref.HeadRMSNorm(x.ref, h, n, w.ref, eps)
			e.DUT.HeadRMSNorm(x.dut, h, n, w.dut, eps)
			m := headTol(h, n, func(r, hd, i, idx int) float64 {
				inv := invRMS64(x.vals[h.Head(r, hd):h.Head(r, hd)+h.Dim], eps)
				return tol(math.Abs(float64(x.vals[idx])*inv)*(1+math.Abs(w.vals[i])), h.Dim)
			})
			if err := e.check(fmt.Sprintf("HeadRMSNorm %v %+v n=%d", dt, h, n), x, regionTol(m)); err != nil {
				return err
			}
			e.free(x)
		}
	}
	return nil
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func testGatedRMSNorm(e *Env) error {
	for k, h := range headShapes {
		dt := dtypes[k%len(dtypes)]
		n := 1 + k%3
		w, err := e.weight("gnorm", dt, 1, h.Dim, e.normal(1))
		if err != nil {
			return err
		}
		x, err := e.randBuf(headsLen(h, n), 1.5)
		if err != nil {
			return err
		}
		// z in its own layout: dense heads after an offset.
		zh := compute.Heads{Off: 7, RowStride: h.Count*h.Dim + 3, HeadStride: h.Dim, Count: h.Count, Dim: h.Dim}
		z, err := e.randBuf(headsLen(zh, n), 3)
		if err != nil {
			return err
		}
		const eps = 1e-6
		e.Ref.GatedRMSNorm(x.ref, h, z.ref, zh, n, w.ref, eps)
		e.DUT.GatedRMSNorm(x.dut, h, z.dut, zh, n, w.dut, eps)
		m := headTol(h, n, func(r, hd, i, idx int) float64 {
			inv := invRMS64(x.vals[h.Head(r, hd):h.Head(r, hd)+h.Dim], eps)
			zv := float64(z.vals[zh.Head(r, hd)+i])
			return tol(math.Abs(float64(x.vals[idx])*inv*w.vals[i]*zv*sigmoid64(zv))*(1+math.Abs(zv)), h.Dim)
		})
		if err := e.check(fmt.Sprintf("GatedRMSNorm %v %+v n=%d", dt, h, n), x, regionTol(m)); err != nil {
			return err
		}
		if err := e.check("GatedRMSNorm z untouched", z, nil); err != nil {
			return err
		}
		e.free(x, z)
	}
	return nil
}

func testL2Norm(e *Env) error {
	for k, h := range headShapes {
		n := 1 + k%4
		x, err := e.randBuf(headsLen(h, n), 2)
		if err != nil {
			return err
		}
		const eps = 1e-6
		e.Ref.L2Norm(x.ref, h, n, eps)
		e.DUT.L2Norm(x.dut, h, n, eps)
		m := headTol(h, n, func(r, hd, i, idx int) float64 {
			var ss float64
			for _, v := range x.vals[h.Head(r, hd) : h.Head(r, hd)+h.Dim] {
				ss += float64(v) * float64(v)
			}
			return tol(math.Abs(float64(x.vals[idx]))/math.Sqrt(ss+eps), h.Dim)
		})
		if err := e.check(fmt.Sprintf("L2Norm %+v n=%d", h, n), x, regionTol(m)); err != nil {
			return err
		}
		e.free(x)
	}
	return nil
}
