package computetest

// The conformance cases of the vision tower's operations: LayerNorm,
// AddBias, GELU and SegmentAttention. Unlike the other cases they compare
// the backend under test with plain Go references in float64 rather than
// with the CPU backend, so the CPU backend's own run of the suite
// (TestCPUAgainstCPU) tests it against them.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// checkWant downloads the whole of the backend under test's buffer b and
// compares element i with want[i], allowing tolOf(i) (0: exact).
func (e *Env) checkWant(what string, b compute.Buffer, want []float64, tolOf func(i int) float64) error {
	got := make([]float32, b.Len())
	if len(got) != len(want) {
		return fmt.Errorf("%s: buffer of %d elements, reference of %d", what, len(got), len(want))
	}
	if err := e.DUT.Download(e.Ctx, got, b, 0); err != nil {
		return fmt.Errorf("%s: Download: %w", what, err)
	}
	bad, first := 0, -1
	var worst float64
	for i, w := range want {
		d := math.Abs(float64(got[i]) - w)
		allowed := tolOf(i)
		if float64(got[i]) != w && !(d <= allowed) {
			bad++
			if first < 0 {
				first = i
			}
			worst = max(worst, d/allowed)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%s: %d of %d elements differ; first at %d: got %g, want %g (tolerance %.3g); worst diff/tolerance %.3g",
			what, bad, len(want), first, got[first], want[first], tolOf(first), worst)
	}
	return nil
}

// widen returns v as float64 values.
func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func testLayerNorm(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range rmsNormShapes {
			n, dim := sh[0], sh[1]
			w, err := e.weight("ln.weight", dt, 1, dim, e.normal(0.5))
			if err != nil {
				return err
			}
			bias, err := e.weight("ln.bias", dt, 1, dim, e.normal(0.5))
			if err != nil {
				return err
			}
			// An offset mean, so that centring matters.
			xv := e.randVals(n*dim+1, 2)
			for i := range xv {
				xv[i] += 3
			}
			for _, inPlace := range []bool{false, true} {
				x, err := e.dutBuf(xv)
				if err != nil {
					return err
				}
				dst := x
				dv := xv
				if !inPlace {
					dv = e.randVals(n*dim+1, 1)
					if dst, err = e.dutBuf(dv); err != nil {
						return err
					}
				}
				const eps = 1e-6
				e.DUT.LayerNorm(dst, x, w.dut, bias.dut, n, dim, eps)
				want, tols := widen(dv), make([]float64, len(dv))
				for r := range n {
					row := xv[r*dim : (r+1)*dim]
					var mean, variance float64
					for _, v := range row {
						mean += float64(v)
					}
					mean /= float64(dim)
					var mag float64 // the centring's terms
					for _, v := range row {
						c := float64(v) - mean
						variance += c * c
						mag += math.Abs(float64(v))
					}
					variance /= float64(dim)
					inv := 1 / math.Sqrt(variance+eps)
					for i, v := range row {
						c := float64(v) - mean
						want[r*dim+i] = c*inv*w.vals[i] + bias.vals[i]
						// The centred value errs by the mean's rounding (a
						// sum of dim terms) and its own; the scale by the
						// variance's (2·dim terms, relative).
						errC := tol(mag/float64(dim), dim) + tol(math.Abs(float64(v)), 1)
						tols[r*dim+i] = (errC*inv+tol(math.Abs(c)*inv, 2*dim))*math.Abs(w.vals[i]) + tol(math.Abs(c*inv*w.vals[i])+math.Abs(bias.vals[i]), 1)
					}
				}
				what := fmt.Sprintf("LayerNorm %v n=%d dim=%d in place %v", dt, n, dim, inPlace)
				if err := e.checkWant(what, dst, want, func(i int) float64 { return tols[i] }); err != nil {
					return err
				}
				if !inPlace {
					if err := e.checkWant(what+" (x)", x, widen(xv), func(int) float64 { return 0 }); err != nil {
						return err
					}
					e.freeDUT(dst)
				}
				e.freeDUT(x)
			}
		}
	}
	return nil
}

func testAddBias(e *Env) error {
	for _, dt := range dtypes {
		for _, sh := range [][2]int{{1, 1}, {3, 17}, {5, 1152}, {130, 64}} {
			n, dim := sh[0], sh[1]
			bias, err := e.weight("bias", dt, 1, dim, e.normal(1))
			if err != nil {
				return err
			}
			xv := e.randVals(n*dim+1, 1)
			x, err := e.dutBuf(xv)
			if err != nil {
				return err
			}
			e.DUT.AddBias(x, bias.dut, n, dim)
			want := widen(xv)
			for i := range n * dim {
				want[i] = float64(float32(want[i] + bias.vals[i%dim])) // one float32 addition
			}
			if err := e.checkWant(fmt.Sprintf("AddBias %v n=%d dim=%d", dt, n, dim), x, want, func(int) float64 { return 0 }); err != nil {
				return err
			}
			e.freeDUT(x)
		}
	}
	return nil
}

// geluRef returns GELU of the given form in float64.
func geluRef(x float64, form compute.GELUForm) float64 {
	if form == compute.GELUTanh {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
}

func testGELU(e *Env) error {
	for _, form := range []compute.GELUForm{compute.GELUErf, compute.GELUTanh} {
		for _, n := range []int{1, 127, 5000} {
			xv := e.randVals(n+1, 3)
			// The tails and the middle: large of both signs, tiny, zero.
			for i, v := range []float32{-12, -6, -1e-3, 0, 1e-6, 6, 12, -40, 40} {
				if i < n {
					xv[(i*7919)%n] = v
				}
			}
			x, err := e.dutBuf(xv)
			if err != nil {
				return err
			}
			e.DUT.GELU(x, n, form)
			want := widen(xv)
			for i := range n {
				want[i] = geluRef(want[i], form)
			}
			tolOf := func(i int) float64 {
				if i >= n {
					return 0
				}
				// A few ulp of exp, tanh or erf, relative to |x|.
				return tol(math.Abs(float64(xv[i])), 1)
			}
			if err := e.checkWant(fmt.Sprintf("GELU %v n=%d", form, n), x, want, tolOf); err != nil {
				return err
			}
			e.freeDUT(x)
		}
	}
	return nil
}

// segAttnRef returns the reference of SegmentAttention: out [n,
// heads*dim], the magnitude of each output's terms (Σ p·|v|) and, per row
// and head, the largest magnitude of a score's terms (scale·Σ|q·k|).
func segAttnRef(x []float32, q, k, v compute.Heads, n, segLen int, scale float64) (out, mag, smag []float64) {
	heads, dim := q.Count, q.Dim
	out, mag, smag = make([]float64, n*heads*dim), make([]float64, n*heads*dim), make([]float64, n*heads)
	scores := make([]float64, segLen)
	for r := range n {
		s0 := r / segLen * segLen
		for h := range heads {
			qv := x[q.Head(r, h):][:dim]
			mx := math.Inf(-1)
			for j := range segLen {
				kv := x[k.Head(s0+j, h):][:dim]
				var s, sm float64
				for i := range dim {
					s += float64(qv[i]) * float64(kv[i])
					sm += math.Abs(float64(qv[i]) * float64(kv[i]))
				}
				smag[r*heads+h] = max(smag[r*heads+h], sm*scale)
				scores[j] = s * scale
				mx = max(mx, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - mx)
				sum += scores[j]
			}
			o := out[(r*heads+h)*dim:][:dim]
			m := mag[(r*heads+h)*dim:][:dim]
			for j, p := range scores {
				vv := x[v.Head(s0+j, h):][:dim]
				for i := range dim {
					o[i] += p / sum * float64(vv[i])
					m[i] += p / sum * math.Abs(float64(vv[i]))
				}
			}
		}
	}
	return out, mag, smag
}

func testSegmentAttention(e *Env) error {
	cases := []struct {
		heads, dim, n, segLen int
		layout                string // "qkv": fused rows as the tower's; "strided": odd strides
	}{
		{1, 16, 1, 1, "qkv"},
		{2, 16, 24, 24, "qkv"},
		{2, 72, 48, 16, "qkv"}, // three segments
		{3, 32, 100, 50, "strided"},
		{1, 256, 17, 17, "strided"},
		{4, 64, 260, 130, "qkv"},
	}
	for _, c := range cases {
		d := c.heads * c.dim
		var q, k, v compute.Heads
		switch c.layout {
		case "qkv":
			q = compute.Heads{Off: 0, RowStride: 3 * d, HeadStride: c.dim, Count: c.heads, Dim: c.dim}
			k, v = q, q
			k.Off, v.Off = d, 2*d
		default:
			row := 3*(d+3) + 5
			q = compute.Heads{Off: 2, RowStride: row, HeadStride: c.dim + 1, Count: c.heads, Dim: c.dim}
			k = compute.Heads{Off: 2 + c.heads*(c.dim+1), RowStride: row, HeadStride: c.dim + 2, Count: c.heads, Dim: c.dim}
			v = compute.Heads{Off: 2 + c.heads*(2*c.dim+3), RowStride: row, HeadStride: c.dim, Count: c.heads, Dim: c.dim}
		}
		xv := e.randVals(c.n*q.RowStride+7, 1)
		x, err := e.dutBuf(xv)
		if err != nil {
			return err
		}
		outv := e.randVals(c.n*d+3, 1) // the tail must stay untouched
		out, err := e.dutBuf(outv)
		if err != nil {
			return err
		}
		scale := 1 / math.Sqrt(float64(c.dim))
		e.DUT.SegmentAttention(out, x, q, k, v, c.n, c.segLen, float32(scale))
		ref, mag, smag := segAttnRef(xv, q, k, v, c.n, c.segLen, float64(float32(scale)))
		want := widen(outv)
		copy(want, ref)
		tolOf := func(i int) float64 {
			if i >= c.n*d {
				return 0
			}
			// The weighted sum of segLen values, and the scores' errors
			// (sums of dim terms), which move each weight p by about p
			// times twice the error (through p and the normaliser).
			return tol(mag[i], c.segLen) + 2*mag[i]*tol(smag[i/c.dim], c.dim)
		}
		what := fmt.Sprintf("SegmentAttention heads=%d dim=%d n=%d segLen=%d %s", c.heads, c.dim, c.n, c.segLen, c.layout)
		if err := e.checkWant(what, out, want, tolOf); err != nil {
			return err
		}
		if err := e.checkWant(what+" (x)", x, widen(xv), func(int) float64 { return 0 }); err != nil {
			return err
		}
		e.freeDUT(x, out)
	}
	return nil
}
