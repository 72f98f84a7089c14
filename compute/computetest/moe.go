package computetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/quant"
)

// The cases of a mixture of experts routed on the device
// (compute.ExpertRouter), against plain Go references: the routing's
// experts exactly (ties to the lower index, near-ties kept apart) and its
// weights within a few float32 roundings; the indexed products within the
// float cases' tolerance, and bit for bit the same for a row alone as in a
// batch; the weighted sum within its rounding. A backend that does not
// implement the interface skips them.

// routeRef returns the reference routing of a row of logits: the k
// largest, ties to the lower index, ascending, and their softmax
// renormalised over the k, in float64.
func routeRef(logits []float32, k int) ([]int32, []float64) {
	taken := make([]bool, len(logits))
	var ids []int32
	for range k {
		best := -1
		for i, v := range logits {
			if !taken[i] && (best < 0 || v > logits[best]) {
				best = i
			}
		}
		taken[best] = true
		ids = append(ids, int32(best))
	}
	top := float64(logits[ids[0]])
	slices.Sort(ids)
	w := make([]float64, k)
	var sum float64
	for j, e := range ids {
		w[j] = math.Exp(float64(logits[e]) - top)
		sum += w[j]
	}
	for j := range w {
		w[j] /= sum
	}
	return ids, w
}

// routerLogits returns n rows of ne logits with ties and near-ties among
// the largest: some rows repeat a value, some hold values one float32 ulp
// apart.
func (e *Env) routerLogits(n, ne int) []float32 {
	v := e.randVals(n*ne, 2)
	for r := range n {
		row := v[r*ne : (r+1)*ne]
		best := 0
		for i := range row {
			if row[i] > row[best] {
				best = i
			}
		}
		switch r % 3 {
		case 1: // an exact tie with the largest, at a lower and a higher index
			row[e.Rng.IntN(ne)] = row[best]
			row[e.Rng.IntN(ne)] = row[best]
		case 2: // one ulp below and above, and a tie further down
			row[e.Rng.IntN(ne)] = math.Nextafter32(row[best], float32(math.Inf(-1)))
			row[e.Rng.IntN(ne)] = math.Nextafter32(row[best], float32(math.Inf(1)))
			a, b := e.Rng.IntN(ne), e.Rng.IntN(ne)
			row[b] = row[a]
		}
	}
	return v
}

// route routes n rows of logits on the backend under test into a fresh
// route buffer, returning it and its ids and weights read back.
func (e *Env) route(er compute.ExpertRouter, logits []float32, n, ne, k int) (compute.Buffer, []int32, []float32, error) {
	lb, err := e.dutBuf(logits)
	if err != nil {
		return nil, nil, nil, err
	}
	defer e.freeDUT(lb)
	rb, err := e.DUT.NewBuffer(compute.RouteLen(n, ne, k))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("route buffer: %w", err)
	}
	er.RouteExperts(rb, lb, n, ne, k)
	back := make([]float32, 2*n*k)
	if err := e.DUT.Download(e.Ctx, back, rb, 0); err != nil {
		e.freeDUT(rb)
		return nil, nil, nil, fmt.Errorf("RouteExperts %d rows of %d, k %d: %w", n, ne, k, err)
	}
	ids := make([]int32, n*k)
	for i := range ids {
		ids[i] = int32(math.Float32bits(back[i]))
	}
	return rb, ids, back[n*k:], nil
}

func testRouteExperts(e *Env) error {
	er, ok := e.DUT.(compute.ExpertRouter)
	if !ok {
		return &SkipError{"the backend does not route experts (compute.ExpertRouter)"}
	}
	for _, c := range []struct{ n, ne, k int }{{1, 8, 2}, {3, 64, 8}, {17, 256, 8}, {5, 512, 10}, {2, 100, 1}, {4, 9, 9}, {65, 128, 8}} {
		logits := e.routerLogits(c.n, c.ne)
		rb, ids, w, err := e.route(er, logits, c.n, c.ne, c.k)
		if err != nil {
			return err
		}
		e.freeDUT(rb)
		for r := range c.n {
			wantIDs, wantW := routeRef(logits[r*c.ne:(r+1)*c.ne], c.k)
			got := ids[r*c.k : (r+1)*c.k]
			if !slices.Equal(got, wantIDs) {
				return fmt.Errorf("RouteExperts %d rows of %d, k %d: row %d chose %v, want %v", c.n, c.ne, c.k, r, got, wantIDs)
			}
			for j, ww := range wantW {
				// exp, the sum of k terms and a division, each within a few ulp.
				if g := float64(w[r*c.k+j]); math.Abs(g-ww) > tol(ww+1e-30, c.k) {
					return fmt.Errorf("RouteExperts %d rows of %d, k %d: row %d weight %d = %g, want %g", c.n, c.ne, c.k, r, j, g, ww)
				}
			}
		}
	}
	return nil
}

// experts makes ne experts' [rows, cols] matrices of dt stacked on the
// backend under test, returning the weight and the values (dequantized
// for block formats) by expert.
func (e *Env) experts(er compute.ExpertRouter, dt compute.DType, ne, rows, cols int) (compute.Weight, [][]float64, error) {
	w, err := er.NewExperts("experts", dt, ne, rows, cols)
	if err != nil {
		return nil, nil, fmt.Errorf("NewExperts %d × [%d, %d] %v: %w", ne, rows, cols, dt, err)
	}
	vals := make([][]float64, ne)
	for x := range ne {
		v := e.randVals(rows*cols, 1)
		var data []byte
		vals[x] = make([]float64, rows*cols)
		if q := dt.Quant(); q != quant.Keep {
			data = make([]byte, rows*dt.RowBytes(cols))
			if err := quant.QuantizeRow(q, data, v); err != nil {
				return nil, nil, err
			}
			if err := quant.DequantizeRow(q, v, data); err != nil {
				return nil, nil, err
			}
			for i, f := range v {
				vals[x][i] = float64(f)
			}
		} else {
			data = make([]byte, rows*cols*dt.Size())
			for i, f := range v {
				switch dt {
				case compute.F32:
					b := math.Float32bits(f)
					data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
					vals[x][i] = float64(f)
				case compute.BF16:
					h := half.F32ToBF16(f)
					data[2*i], data[2*i+1] = byte(h), byte(h>>8)
					vals[x][i] = float64(half.BF16ToF32(h))
				case compute.F16:
					h := half.F32ToF16(f)
					data[2*i], data[2*i+1] = byte(h), byte(h>>8)
					vals[x][i] = float64(half.F16ToF32(h))
				}
			}
		}
		if err := er.LoadExpert(w, x, data); err != nil {
			return nil, nil, fmt.Errorf("LoadExpert %d: %w", x, err)
		}
	}
	return w, vals, nil
}

func testMatMulExperts(e *Env) error {
	er, ok := e.DUT.(compute.ExpertRouter)
	if !ok {
		return &SkipError{"the backend does not route experts (compute.ExpertRouter)"}
	}
	cases := []struct {
		dt              compute.DType
		n, ne, k        int
		rows, cols      int
		perPair, single bool
	}{
		{compute.BF16, 1, 8, 2, 5, 16, false, false},
		{compute.BF16, 3, 16, 4, 33, 64, true, true},
		{compute.F16, 9, 32, 8, 17, 40, false, true},
		{compute.F32, 4, 8, 3, 7, 24, true, false},
		{compute.BF16, 40, 16, 8, 9, 32, false, true}, // experts chosen by more than 8 pairs
		{compute.Q8_0, 3, 16, 4, 13, 64, false, true},
		{compute.Q4_K, 2, 8, 2, 9, 256, true, false},
		{compute.Q5_K, 5, 8, 3, 5, 256, false, false},
		{compute.Q6_K, 3, 8, 2, 6, 512, true, true},
	}
	for _, c := range cases {
		what := fmt.Sprintf("MatMulExperts %v %d rows, %d of %d experts [%d, %d], perPair %v", c.dt, c.n, c.k, c.ne, c.rows, c.cols, c.perPair)
		w, vals, err := e.experts(er, c.dt, c.ne, c.rows, c.cols)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		logits := e.routerLogits(c.n, c.ne)
		rb, ids, _, err := e.route(er, logits, c.n, c.ne, c.k)
		if err != nil {
			return err
		}
		p := c.n * c.k
		xrows := c.n
		if c.perPair {
			xrows = p
		}
		x := e.randVals(xrows*c.cols, 1)
		xb, err := e.dutBuf(x)
		if err != nil {
			return err
		}
		// A guard row past the result, which must stay as it is.
		dvals := e.randVals(p*c.rows+c.rows, 1)
		db, err := e.dutBuf(dvals)
		if err != nil {
			return err
		}
		er.MatMulExperts(db, xb, w, rb, c.n, c.k, c.perPair)
		got := make([]float32, len(dvals))
		if err := e.DUT.Download(e.Ctx, got, db, 0); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for pi := range p {
			xr := pi / c.k
			if c.perPair {
				xr = pi
			}
			ev := vals[ids[pi]]
			for r := range c.rows {
				var sum, mag float64
				for col := range c.cols {
					t := ev[r*c.cols+col] * float64(x[xr*c.cols+col])
					sum += t
					mag += math.Abs(t)
				}
				g := float64(got[pi*c.rows+r])
				if math.Abs(g-sum) > tol(mag, c.cols) {
					return fmt.Errorf("%s: pair %d (expert %d) row %d = %g, want %g (tolerance %.3g)", what, pi, ids[pi], r, g, sum, tol(mag, c.cols))
				}
			}
		}
		for i := p * c.rows; i < len(got); i++ {
			if got[i] != dvals[i] {
				return fmt.Errorf("%s: element %d past the result changed", what, i)
			}
		}
		if c.single {
			// Each row alone gives its pairs the bits it got in the batch.
			for r := range c.n {
				one, _, _, err := e.route(er, logits[r*c.ne:(r+1)*c.ne], 1, c.ne, c.k)
				if err != nil {
					return err
				}
				xo := x[r*c.cols : (r+1)*c.cols]
				if c.perPair {
					xo = x[r*c.k*c.cols : (r+1)*c.k*c.cols]
				}
				xb1, err := e.dutBuf(xo)
				if err != nil {
					return err
				}
				db1, err := e.DUT.NewBuffer(c.k * c.rows)
				if err != nil {
					return err
				}
				er.MatMulExperts(db1, xb1, w, one, 1, c.k, c.perPair)
				alone := make([]float32, c.k*c.rows)
				if err := e.DUT.Download(e.Ctx, alone, db1, 0); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				for i, v := range alone {
					if b := got[r*c.k*c.rows+i]; math.Float32bits(v) != math.Float32bits(b) {
						return fmt.Errorf("%s: row %d alone gives element %d = %g, in the batch %g", what, r, i, v, b)
					}
				}
				e.freeDUT(one, xb1, db1)
			}
		}
		e.freeDUT(rb, xb, db)
	}
	return nil
}

func testCombineExperts(e *Env) error {
	er, ok := e.DUT.(compute.ExpertRouter)
	if !ok {
		return &SkipError{"the backend does not route experts (compute.ExpertRouter)"}
	}
	for _, c := range []struct{ n, ne, k, dim int }{{1, 8, 2, 16}, {3, 64, 8, 33}, {9, 16, 4, 130}} {
		what := fmt.Sprintf("CombineExperts %d rows of %d, %d of %d experts", c.n, c.dim, c.k, c.ne)
		logits := e.routerLogits(c.n, c.ne)
		rb, _, w, err := e.route(er, logits, c.n, c.ne, c.k)
		if err != nil {
			return err
		}
		p := c.n * c.k
		eo := e.randVals(p*c.dim, 1)
		gate := e.randVals(c.n, 2)
		shared := e.randVals(c.n*c.dim+c.dim, 1) // a guard row
		eb, err := e.dutBuf(eo)
		if err != nil {
			return err
		}
		gb, err := e.dutBuf(gate)
		if err != nil {
			return err
		}
		db, err := e.dutBuf(shared)
		if err != nil {
			return err
		}
		er.CombineExperts(db, eb, gb, rb, c.n, c.k, c.dim)
		got := make([]float32, len(shared))
		if err := e.DUT.Download(e.Ctx, got, db, 0); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for r := range c.n {
			sg := 1 / (1 + math.Exp(-float64(gate[r])))
			for i := range c.dim {
				var sum, mag float64
				for j := range c.k {
					t := float64(w[r*c.k+j]) * float64(eo[(r*c.k+j)*c.dim+i])
					sum += t
					mag += math.Abs(t)
				}
				t := sg * float64(shared[r*c.dim+i])
				sum += t
				mag += math.Abs(t)
				if g := float64(got[r*c.dim+i]); math.Abs(g-sum) > tol(mag, c.k+1) {
					return fmt.Errorf("%s: row %d element %d = %g, want %g", what, r, i, g, sum)
				}
			}
		}
		for i := c.n * c.dim; i < len(got); i++ {
			if got[i] != shared[i] {
				return fmt.Errorf("%s: element %d past the result changed", what, i)
			}
		}
		e.freeDUT(rb, eb, gb, db)
	}
	return nil
}
