package computetest

// The conformance cases of CausalAttention.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
)

// attnCase is one attention configuration: the shape, the sequence's
// position, new tokens, first output row and cache capacity.
type attnCase struct {
	heads, kvHeads, dim, pos, n, outRow, capacity int
}

func testAttention(e *Env) error {
	cases := []attnCase{
		{1, 1, 16, 0, 1, 0, 1},
		{2, 1, 32, 0, 3, 1, 5},
		{4, 2, 64, 5, 1, 0, 9},
		{8, 2, 128, 17, 4, 2, 30},
		{4, 1, 256, 3, 17, 0, 21},
		{2, 2, 128, 200, 1, 0, 203},
		{6, 3, 32, 63, 2, 1, 70},
		{3, 1, 16, 0, 65, 0, 65},
	}
	for _, c := range cases {
		if err := e.attnBatch([]attnCase{c}, compute.F32); err != nil {
			return err
		}
	}
	// Several sequences of one layer in one call: decode steps at
	// different positions (one long enough for a backend to split), an
	// empty one, and prompt chunks.
	batches := [][]attnCase{
		{{8, 2, 64, 5, 1, 0, 9}, {8, 2, 64, 600, 1, 1, 601}, {8, 2, 64, 0, 0, 0, 4}, {8, 2, 64, 0, 20, 2, 20}, {8, 2, 64, 40, 3, 22, 50}, {8, 2, 64, 0, 1, 25, 1}},
		{{4, 1, 32, 300, 1, 0, 301}, {4, 1, 32, 17, 1, 1, 18}, {4, 1, 32, 9, 16, 2, 25}},
	}
	for _, b := range batches {
		if err := e.attnBatch(b, compute.F32); err != nil {
			return err
		}
	}
	// Caches of 16-bit elements, two per slot: new keys and values are
	// rounded to nearest even, then attended over as stored.
	for _, dt := range []compute.DType{compute.BF16, compute.F16} {
		for _, b := range [][]attnCase{
			{{4, 2, 64, 5, 1, 0, 9}},
			{{8, 2, 64, 0, 20, 2, 20}, {8, 2, 64, 300, 1, 0, 301}, {8, 2, 64, 40, 3, 22, 50}},
			{{3, 1, 16, 0, 65, 0, 66}},
		} {
			if err := e.attnBatch(b, dt); err != nil {
				return err
			}
		}
	}
	return nil
}

// halfVals returns n float32 slots packing 2n random 16-bit elements of
// type dt, of about unit magnitude.
func (e *Env) halfVals(n int, dt compute.DType) []float32 {
	out := make([]float32, n)
	for i := range out {
		var w uint32
		for j := range 2 {
			x := float32(e.Rng.NormFloat64())
			h := half.F32ToF16(x)
			if dt == compute.BF16 {
				h = half.F32ToBF16(x)
			}
			w |= uint32(h) << (16 * j)
		}
		out[i] = math.Float32frombits(w)
	}
	return out
}

// unpackHalves widens a packed 16-bit cache to float64-ready float32s.
func unpackHalves(slots []float32, dt compute.DType) []float32 {
	out := make([]float32, 2*len(slots))
	for i, s := range slots {
		w := math.Float32bits(s)
		for j := range 2 {
			h := uint16(w >> (16 * j))
			if dt == compute.BF16 {
				out[2*i+j] = half.BF16ToF32(h)
			} else {
				out[2*i+j] = half.F16ToF32(h)
			}
		}
	}
	return out
}

// sameCacheBits compares a cache on both backends bit for bit.
func (e *Env) sameCacheBits(what string, p pair) error {
	ref, dut, err := e.download(p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for i := range ref {
		if math.Float32bits(ref[i]) != math.Float32bits(dut[i]) {
			return fmt.Errorf("%s: slot %d is %#08x, reference %#08x", what, i, math.Float32bits(dut[i]), math.Float32bits(ref[i]))
		}
	}
	return nil
}

// attnBatch runs attention for the sequences cs (one shape) in one call,
// their q, k and v rows one after another in shared buffers, each with its
// own caches, outputs at their OutRow of a shared buffer; checks the results
// against the reference; and checks that calling the backend under test once
// per sequence gives the same bits. dt is the caches' element type.
func (e *Env) attnBatch(cs []attnCase, dt compute.DType) error {
	c0 := cs[0]
	// Fused q/gate rows for q, separate k and v with padding, as in the model.
	q := compute.Heads{Off: 2, RowStride: 2*c0.heads*c0.dim + 1, HeadStride: 2 * c0.dim, Count: c0.heads, Dim: c0.dim}
	k := compute.Heads{Off: 0, RowStride: c0.kvHeads*c0.dim + 5, HeadStride: c0.dim, Count: c0.kvHeads, Dim: c0.dim}
	v := compute.Heads{Off: 3, RowStride: c0.kvHeads * c0.dim, HeadStride: c0.dim, Count: c0.kvHeads, Dim: c0.dim}
	base := make([]int, len(cs)) // each sequence's first q, k and v row
	rows, outRows := 0, 0
	for i, c := range cs {
		base[i] = rows
		rows += c.n
		outRows = max(outRows, c.outRow+c.n)
	}
	rows = max(rows, 1)
	qb, err := e.randBuf(headsLen(q, rows), 1)
	if err != nil {
		return err
	}
	kb, err := e.randBuf(headsLen(k, rows), 1)
	if err != nil {
		return err
	}
	vb, err := e.randBuf(headsLen(v, rows), 1)
	if err != nil {
		return err
	}
	width := c0.kvHeads * c0.dim
	// Earlier positions already in the caches; later ones are garbage the
	// op must neither read nor write.
	kcs, vcs := make([]pair, len(cs)), make([]pair, len(cs))
	soloKC, soloVC := make([]compute.Buffer, len(cs)), make([]compute.Buffer, len(cs))
	packed := dt == compute.BF16 || dt == compute.F16
	for i, c := range cs {
		if packed {
			if kcs[i], err = e.buf(e.halfVals(c.capacity*width/2, dt)); err != nil {
				return err
			}
			if vcs[i], err = e.buf(e.halfVals(c.capacity*width/2, dt)); err != nil {
				return err
			}
		} else {
			if kcs[i], err = e.randBuf(c.capacity*width, 1); err != nil {
				return err
			}
			if vcs[i], err = e.randBuf(c.capacity*width, 1); err != nil {
				return err
			}
		}
		if soloKC[i], err = e.dutBuf(kcs[i].vals); err != nil {
			return err
		}
		if soloVC[i], err = e.dutBuf(vcs[i].vals); err != nil {
			return err
		}
	}
	out, err := e.randBuf(outRows*c0.heads*c0.dim+1, 1)
	if err != nil {
		return err
	}
	soloOut, err := e.dutBuf(out.vals)
	if err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(c0.dim)))
	arg := func(i int, dut bool, kc, vc, o compute.Buffer) compute.Attention {
		c := cs[i]
		return compute.Attention{Q: q.Rows(base[i]), QBuf: qb.pick(dut), K: k.Rows(base[i]), KBuf: kb.pick(dut), V: v.Rows(base[i]), VBuf: vb.pick(dut),
			KCache: kc, VCache: vc, CacheType: dt, Out: o, OutRow: c.outRow, Pos: c.pos, N: c.n, Scale: scale}
	}
	var refArgs, dutArgs []compute.Attention
	for i := range cs {
		refArgs = append(refArgs, arg(i, false, kcs[i].ref, vcs[i].ref, out.ref))
		dutArgs = append(dutArgs, arg(i, true, kcs[i].dut, vcs[i].dut, out.dut))
	}
	e.Ref.CausalAttention(refArgs)
	e.DUT.CausalAttention(dutArgs)
	for i := range cs {
		e.DUT.CausalAttention([]compute.Attention{arg(i, true, soloKC[i], soloVC[i], soloOut)})
	}
	what := fmt.Sprintf("CausalAttention %+v", cs)
	m := map[int]float64{}
	group := c0.heads / c0.kvHeads
	for i, c := range cs {
		if err := e.sameCacheBits(fmt.Sprintf("%s kcache %d", what, i), kcs[i]); err != nil {
			return err
		}
		if err := e.sameCacheBits(fmt.Sprintf("%s vcache %d", what, i), vcs[i]); err != nil {
			return err
		}
		kcv, _, err := e.download(kcs[i])
		if err != nil {
			return err
		}
		vcv, _, err := e.download(vcs[i])
		if err != nil {
			return err
		}
		if packed {
			kcv, vcv = unpackHalves(kcv, dt), unpackHalves(vcv, dt)
		}
		for t := 0; t < c.n; t++ {
			for h := 0; h < c.heads; h++ {
				kvh := h / group
				qv := qb.vals[q.Head(base[i]+t, h) : q.Head(base[i]+t, h)+c.dim]
				L := c.pos + t + 1
				sc := make([]float64, L)
				absSc := make([]float64, L)
				mx := math.Inf(-1)
				for s := 0; s < L; s++ {
					for d := 0; d < c.dim; d++ {
						x := float64(qv[d]) * float64(kcv[s*width+kvh*c.dim+d])
						sc[s] += x
						absSc[s] += math.Abs(x)
					}
					sc[s] *= float64(scale)
					absSc[s] *= float64(scale)
					mx = max(mx, sc[s])
				}
				var sum, worstScore float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
					worstScore = max(worstScore, absSc[s])
				}
				for d := 0; d < c.dim; d++ {
					var mag float64
					for s := 0; s < L; s++ {
						mag += sc[s] / sum * math.Abs(float64(vcv[s*width+kvh*c.dim+d]))
					}
					// Score errors of u·√dim·Σ|q·k| perturb the weights; the
					// weighted sum adds its own √L rounding.
					m[(c.outRow+t)*c.heads*c.dim+h*c.dim+d] = tol(mag, L) + tol(mag*(2+2*worstScore), c.dim)
				}
			}
		}
	}
	if err := e.check(what+" out", out, regionTol(m)); err != nil {
		return err
	}
	if err := e.sameBits(what+": one call per sequence vs one call, out", soloOut, out.dut); err != nil {
		return err
	}
	for i := range cs {
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, kcache %d", what, i), soloKC[i], kcs[i].dut); err != nil {
			return err
		}
		if err := e.sameBits(fmt.Sprintf("%s: one call per sequence vs one call, vcache %d", what, i), soloVC[i], vcs[i].dut); err != nil {
			return err
		}
	}
	e.free(append(append(kcs, vcs...), qb, kb, vb, out)...)
	e.freeDUT(append(append(soloKC, soloVC...), soloOut)...)
	return nil
}
