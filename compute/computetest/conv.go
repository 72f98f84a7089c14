package computetest

// The conformance cases of CausalConv1D.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

func testConv(e *Env) error {
	cases := []struct{ row, rowStride, n, channels, kernel int }{
		{0, 1, 1, 1, 1},
		{0, 5, 1, 5, 4},
		{2, 70, 3, 65, 4},
		{1, 300, 17, 257, 4},
		{0, 129, 6, 129, 2},
		{3, 1030, 9, 1024, 3},
	}
	for k, c := range cases {
		dt := dtypes[k%len(dtypes)]
		// Run twice so the second call uses the state the first produced.
		if err := e.convBatch(dt, c.rowStride, c.channels, c.kernel, []convSeq{{c.row, c.n}}, 2); err != nil {
			return err
		}
	}
	// Several sequences in one call: different lengths, one empty, rows
	// apart and adjacent.
	batches := []struct {
		rowStride, channels, kernel int
		seqs                        []convSeq
	}{
		{610, 600, 4, []convSeq{{0, 3}, {3, 0}, {4, 1}, {5, 17}, {30, 2}}},
		{65, 65, 3, []convSeq{{7, 1}, {0, 5}, {5, 1}, {6, 1}}},
	}
	for k, c := range batches {
		if err := e.convBatch(dtypes[k%len(dtypes)], c.rowStride, c.channels, c.kernel, c.seqs, 2); err != nil {
			return err
		}
	}
	return nil
}

// convSeq places one sequence of a batched convolution.
type convSeq struct{ row, n int }

// convBatch runs CausalConv1D over the sequences seqs of a shared buffer,
// calls times in a row with fresh inputs (so later calls continue from the
// states the earlier ones produced), checks every result against the
// reference, and checks that calling the backend under test once per
// sequence gives the same bits as the batched call.
func (e *Env) convBatch(dt compute.DType, rowStride, channels, kernel int, seqs []convSeq, calls int) error {
	w, err := e.weight("conv", dt, channels, kernel, e.normal(0.5))
	if err != nil {
		return err
	}
	rows := 0
	for _, s := range seqs {
		rows = max(rows, s.row+s.n+1)
	}
	x, err := e.randBuf(rows*rowStride, 1)
	if err != nil {
		return err
	}
	sts := make([]pair, len(seqs))
	soloSts := make([]compute.Buffer, len(seqs))
	for i := range seqs {
		if sts[i], err = e.randBuf((kernel-1)*channels, 1); err != nil { // prior state
			return err
		}
		if soloSts[i], err = e.dutBuf(sts[i].vals); err != nil {
			return err
		}
	}
	soloX, err := e.dutBuf(x.vals)
	if err != nil {
		return err
	}
	args := func(dut bool) []compute.ConvSeq {
		cs := make([]compute.ConvSeq, len(seqs))
		for i, s := range seqs {
			cs[i] = compute.ConvSeq{Row: s.row, N: s.n, State: sts[i].pick(dut)}
		}
		return cs
	}
	for rep := 0; rep < calls; rep++ {
		// Fresh inputs each time, since the previous call rewrote x.
		before := e.randVals(len(x.vals), 1)
		if err := e.Ref.Upload(x.ref, 0, before); err != nil {
			return err
		}
		for _, b := range []compute.Buffer{x.dut, soloX} {
			if err := e.DUT.Upload(b, 0, before); err != nil {
				return fmt.Errorf("Upload: %w", err)
			}
		}
		stBefore := make([][]float32, len(seqs))
		for i := range seqs {
			if stBefore[i], _, err = e.download(sts[i]); err != nil {
				return err
			}
		}
		e.Ref.CausalConv1D(x.ref, rowStride, channels, w.ref, kernel, args(false))
		e.DUT.CausalConv1D(x.dut, rowStride, channels, w.dut, kernel, args(true))
		for i, s := range seqs {
			e.DUT.CausalConv1D(soloX, rowStride, channels, w.dut, kernel, []compute.ConvSeq{{Row: s.row, N: s.n, State: soloSts[i]}})
		}
		m := map[int]float64{}
		for i, s := range seqs {
			for t := 0; t < s.n; t++ {
				for ch := 0; ch < channels; ch++ {
					var mag float64
					for j := 0; j < kernel; j++ {
						src := t - (kernel - 1) + j
						var in float64
						if src < 0 {
							in = float64(stBefore[i][(kernel-1+src)*channels+ch])
						} else {
							in = float64(before[(s.row+src)*rowStride+ch])
						}
						mag += math.Abs(w.vals[ch*kernel+j] * in)
					}
					m[(s.row+t)*rowStride+ch] = tol(2*mag, kernel)
				}
			}
		}
		what := fmt.Sprintf("CausalConv1D %v rowStride %d channels %d kernel %d seqs %v call %d", dt, rowStride, channels, kernel, seqs, rep)
		if err := e.check(what, x, regionTol(m)); err != nil {
			return err
		}
		// The state holds raw inputs: exactly equal on both backends.
		for i := range seqs {
			if err := e.check(fmt.Sprintf("%s state %d", what, i), sts[i], nil); err != nil {
				return err
			}
		}
		if err := e.sameBits(what+": one call per sequence vs one call", soloX, x.dut); err != nil {
			return err
		}
		for i := range seqs {
			if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, state %d", what, i), soloSts[i], sts[i].dut); err != nil {
				return err
			}
		}
	}
	e.free(append(sts, x)...)
	e.freeDUT(append(soloSts, soloX)...)
	return nil
}
