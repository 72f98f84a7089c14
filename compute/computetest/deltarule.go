package computetest

// The conformance cases of GatedDeltaRule.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// deltaCase is one gated delta rule configuration: the shape, the number
// of tokens, and where its gate and output rows start relative to its qkv
// rows.
type deltaCase struct {
	nk, nv, dk, dv, n int
	gateRow, outRow   int
}

func testDeltaRule(e *Env) error {
	cases := []deltaCase{
		{1, 1, 16, 16, 1, 0, 0},
		{1, 2, 32, 16, 3, 1, 2},
		{2, 4, 16, 32, 5, 0, 1},
		{2, 2, 128, 128, 4, 2, 0},
		{1, 3, 64, 17, 2, 0, 0},
		{2, 4, 128, 128, 17, 1, 1},
		// Prompt lengths around and across chunks of 64 tokens (where a
		// backend may switch to a chunked form), dk != dv.
		{1, 1, 32, 16, 63, 0, 0},
		{1, 3, 32, 16, 64, 1, 0},
		{2, 4, 16, 32, 65, 0, 2},
		{1, 2, 64, 17, 130, 2, 1},
		{2, 2, 128, 128, 200, 0, 0},
		{1, 2, 256, 40, 70, 1, 0},
	}
	for _, c := range cases {
		if err := e.deltaBatch([]deltaCase{c}); err != nil {
			return err
		}
	}
	// Several sequences of one layer in one call: decode steps, an empty
	// one and prompt chunks (which a backend may evaluate differently).
	batches := [][]deltaCase{
		{{2, 4, 32, 16, 3, 1, 2}, {2, 4, 32, 16, 0, 0, 0}, {2, 4, 32, 16, 1, 0, 0}, {2, 4, 32, 16, 17, 2, 1}, {2, 4, 32, 16, 1, 1, 1}, {2, 4, 32, 16, 40, 0, 0}},
		{{2, 4, 128, 128, 1, 0, 0}, {2, 4, 128, 128, 1, 0, 0}, {2, 4, 128, 128, 2, 0, 0}, {2, 4, 128, 128, 16, 0, 0}},
		{{2, 6, 32, 16, 63, 0, 0}, {2, 6, 32, 16, 1, 0, 0}, {2, 6, 32, 16, 64, 1, 2}, {2, 6, 32, 16, 0, 0, 0}, {2, 6, 32, 16, 130, 0, 1}, {2, 6, 32, 16, 65, 2, 0}},
		{{1, 1, 32, 16, 200, 0, 0}, {1, 1, 32, 16, 3, 1, 1}, {1, 1, 32, 16, 64, 0, 0}},
	}
	for _, b := range batches {
		if err := e.deltaBatch(b); err != nil {
			return err
		}
	}
	return nil
}

// deltaBatch runs the delta rule for the sequences cs (one shape) in one
// call, their q, k and v rows one after another in a shared fused buffer
// and their gates and outputs in shared buffers, checks the results against
// the reference, and checks that calling the backend under test once per
// sequence gives the same bits.
func (e *Env) deltaBatch(cs []deltaCase) error {
	c0 := cs[0]
	// Fused qkv rows as in the model: [q heads | k heads | v heads | pad].
	qOff, kOff, vOff := 0, c0.nk*c0.dk, 2*c0.nk*c0.dk
	rowStride := 2*c0.nk*c0.dk + c0.nv*c0.dv + 3
	q := compute.Heads{Off: qOff + 1, RowStride: rowStride, HeadStride: c0.dk, Count: c0.nk, Dim: c0.dk}
	k := compute.Heads{Off: kOff + 1, RowStride: rowStride, HeadStride: c0.dk, Count: c0.nk, Dim: c0.dk}
	v := compute.Heads{Off: vOff + 1, RowStride: rowStride, HeadStride: c0.dv, Count: c0.nv, Dim: c0.dv}
	base := make([]int, len(cs)) // each sequence's first qkv row
	rows, gateRows, outRows := 0, 0, 0
	for i, c := range cs {
		base[i] = rows
		rows += c.n + 1
		gateRows = max(gateRows, base[i]+c.gateRow+c.n)
		outRows = max(outRows, base[i]+c.outRow+c.n)
	}
	qkvVals := e.randVals(rows*rowStride+2, 1)
	// q and k are L2-normalised in the model; keep them at that scale.
	for t := 0; t < rows; t++ {
		for h := 0; h < c0.nk; h++ {
			for _, hs := range []compute.Heads{q, k} {
				seg := qkvVals[hs.Head(t, h) : hs.Head(t, h)+c0.dk]
				var ss float64
				for _, x := range seg {
					ss += float64(x) * float64(x)
				}
				for i := range seg {
					seg[i] = float32(float64(seg[i]) / math.Sqrt(ss))
				}
			}
		}
	}
	qkv, err := e.buf(qkvVals)
	if err != nil {
		return err
	}
	gv := make([]float32, gateRows*c0.nv)
	bv := make([]float32, len(gv))
	for i := range gv {
		gv[i] = float32(-e.Rng.Float64() * 2)
		bv[i] = float32(e.Rng.Float64())
	}
	g, err := e.buf(gv)
	if err != nil {
		return err
	}
	beta, err := e.buf(bv)
	if err != nil {
		return err
	}
	out, err := e.randBuf(outRows*c0.nv*c0.dv+1, 1)
	if err != nil {
		return err
	}
	soloOut, err := e.dutBuf(out.vals)
	if err != nil {
		return err
	}
	sts := make([]pair, len(cs))
	soloSts := make([]compute.Buffer, len(cs))
	for i := range cs {
		if sts[i], err = e.randBuf(c0.nv*c0.dk*c0.dv, 0.5); err != nil { // prior state
			return err
		}
		if soloSts[i], err = e.dutBuf(sts[i].vals); err != nil {
			return err
		}
	}
	scale := float32(1 / math.Sqrt(float64(c0.dk)))
	arg := func(i int, dut bool, o, st compute.Buffer) compute.DeltaRule {
		c := cs[i]
		return compute.DeltaRule{Q: q.Rows(base[i]), K: k.Rows(base[i]), V: v.Rows(base[i]), QKV: qkv.pick(dut),
			G: g.pick(dut), Beta: beta.pick(dut), GateRow: base[i] + c.gateRow,
			Out: o, OutRow: base[i] + c.outRow, State: st, N: c.n, QScale: scale, Nk: c.nk, Nv: c.nv, Dk: c.dk, Dv: c.dv}
	}
	var refArgs, dutArgs []compute.DeltaRule
	for i := range cs {
		refArgs = append(refArgs, arg(i, false, out.ref, sts[i].ref))
		dutArgs = append(dutArgs, arg(i, true, out.dut, sts[i].dut))
	}
	e.Ref.GatedDeltaRule(refArgs)
	e.DUT.GatedDeltaRule(dutArgs)
	for i := range cs {
		e.DUT.GatedDeltaRule([]compute.DeltaRule{arg(i, true, soloOut, soloSts[i])})
	}

	// Magnitudes: the same recurrence on absolute values, in float64.
	outTol := map[int]float64{}
	stTols := make([][]float64, len(cs))
	group := c0.nv / c0.nk
	for ci, c := range cs {
		sAbs := make([]float64, len(sts[ci].vals))
		for i, x := range sts[ci].vals {
			sAbs[i] = math.Abs(float64(x))
		}
		for h := 0; h < c.nv; h++ {
			kh := h / group
			s := sAbs[h*c.dk*c.dv : (h+1)*c.dk*c.dv]
			for t := 0; t < c.n; t++ {
				gi := (base[ci]+c.gateRow+t)*c.nv + h
				decay := math.Exp(float64(gv[gi]))
				b := float64(bv[gi])
				row := base[ci] + t
				kv := qkvVals[k.Head(row, kh) : k.Head(row, kh)+c.dk]
				qv := qkvVals[q.Head(row, kh) : q.Head(row, kh)+c.dk]
				vv := qkvVals[v.Head(row, h) : v.Head(row, h)+c.dv]
				for j := 0; j < c.dv; j++ {
					var u float64
					for i := 0; i < c.dk; i++ {
						s[i*c.dv+j] *= decay
						u += s[i*c.dv+j] * math.Abs(float64(kv[i]))
					}
					u = b * (math.Abs(float64(vv[j])) + u)
					var o float64
					for i := 0; i < c.dk; i++ {
						s[i*c.dv+j] += math.Abs(float64(kv[i])) * u
						o += s[i*c.dv+j] * math.Abs(float64(qv[i])*float64(scale))
					}
					outTol[(base[ci]+c.outRow+t)*c.nv*c.dv+h*c.dv+j] = tol(o, c.dk) * float64(t+2)
				}
			}
		}
		for i := range sAbs {
			sAbs[i] = tol(sAbs[i], c.dk) * float64(c.n+1)
			if c.n <= 0 {
				sAbs[i] = 0 // skipped: left exactly as it was
			}
		}
		stTols[ci] = sAbs
	}
	what := fmt.Sprintf("GatedDeltaRule %+v", cs)
	if err := e.check(what+" out", out, regionTol(outTol)); err != nil {
		return err
	}
	for i := range cs {
		st := stTols[i]
		if err := e.check(fmt.Sprintf("%s state %d", what, i), sts[i], func(j int) float64 { return st[j] }); err != nil {
			return err
		}
	}
	if err := e.sameBits(what+": one call per sequence vs one call, out", soloOut, out.dut); err != nil {
		return err
	}
	for i := range cs {
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, state %d", what, i), soloSts[i], sts[i].dut); err != nil {
			return err
		}
	}
	e.free(append(sts, qkv, g, beta, out)...)
	e.freeDUT(append(soloSts, soloOut)...)
	return nil
}
