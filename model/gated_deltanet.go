package model

import (
	"math"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/gguf/qwen35"
)

// l2NormEps is the epsilon of the Gated DeltaNet q/k L2 normalisation, fixed
// in the reference implementation (not rms_norm_eps).
const l2NormEps = 1e-6

// gatedDeltaNet is the linear-attention mixer (linear_attn.*,
// Qwen3_5GatedDeltaNet). Its per-sequence state is the convolution window
// and the recurrent state (Sequence.conv, Sequence.rec).
type gatedDeltaNet struct {
	inProjQKV, inProjZ, inProjB, inProjA compute.Weight
	conv1d, aLog, dtBias, norm           compute.Weight
	outProj                              compute.Weight
	// tiled, when set, says that in_proj_z's rows and out_proj's columns
	// hold the value heads in a GGUF file's tiled order (qwen35.Heads)
	// while the other tensors were moved to the grouped order the delta
	// rule reads: the core output moves to the tiled order before the
	// gated norm.
	tiled *qwen35.Heads
}

func (g *gatedDeltaNet) bindings(c *Config, p string) []binding {
	h, nv := c.HiddenSize, c.LinearNumValueHeads
	p += "linear_attn."
	return []binding{
		{name: p + "in_proj_qkv.weight", shape: []int{c.ConvDim(), h}, dst: &g.inProjQKV},
		{name: p + "in_proj_z.weight", shape: []int{c.ValueDim(), h}, dst: &g.inProjZ},
		{name: p + "in_proj_b.weight", shape: []int{nv, h}, dst: &g.inProjB},
		{name: p + "in_proj_a.weight", shape: []int{nv, h}, dst: &g.inProjA},
		{name: p + "conv1d.weight", shape: []int{c.ConvDim(), 1, c.LinearConvKernel}, dst: &g.conv1d},
		{name: p + "A_log", shape: []int{nv}, dst: &g.aLog},
		{name: p + "dt_bias", shape: []int{nv}, dst: &g.dtBias},
		{name: p + "norm.weight", shape: []int{c.LinearValueHeadDim}, dst: &g.norm},
		{name: p + "out_proj.weight", shape: []int{h, c.ValueDim()}, dst: &g.outProj},
	}
}

func (g *gatedDeltaNet) weights() []compute.Weight {
	return []compute.Weight{g.inProjQKV, g.inProjZ, g.inProjB, g.inProjA, g.conv1d, g.aLog, g.dtBias, g.norm, g.outProj}
}

// forward computes (Qwen3_5GatedDeltaNet.forward)
//
//	qkv = conv1d_silu(in_proj_qkv(x)); q, k = l2norm(q), l2norm(k)
//	g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias); beta = sigmoid(in_proj_b(x))
//	o = delta_rule(q * dk^-0.5, k, v, g, beta)
//	out = out_proj(rmsnorm(o) * w * silu(in_proj_z(x)))   per value head
//
// With out set, in_proj_z, the gated norm and out_proj take out's rows
// only.
func (g *gatedDeltaNet) forward(m *Model, l int, pass []piece, rows int, _ []float32, out *rowSet) {
	c, sc, be := m.cfg, m.sc, m.be
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	convDim := c.ConvDim()
	m.linear(sc.qkv, sc.xn, g.inProjQKV, rows, sc.decodeRows)
	// n rows of output from here on, the first decode of them decode rows,
	// whose inputs zin holds.
	n, decode, zin := rows, sc.decodeRows, sc.xn
	if out != nil {
		// tmp is free until out_proj and has room for the rows.
		n, decode, zin = out.n, out.decode, sc.tmp
		m.gatherRows(zin, sc.xn, c.HiddenSize, out)
	}
	if n > 0 {
		m.linearRows(sc.z, zin, g.inProjZ, n, decode, out)
	}
	m.linear(sc.b, sc.xn, g.inProjB, rows, sc.decodeRows)
	m.linear(sc.a, sc.xn, g.inProjA, rows, sc.decodeRows)
	sc.convs = sc.convs[:0]
	for _, p := range pass {
		sc.convs = append(sc.convs, compute.ConvSeq{Row: p.row, N: len(p.tokens), State: p.seq.conv[l]})
	}
	be.CausalConv1D(sc.qkv, convDim, convDim, g.conv1d, c.LinearConvKernel, sc.convs)
	// q, k and v heads inside each [q | k | v] row of qkv.
	qh := compute.Heads{Off: 0, RowStride: convDim, HeadStride: dk, Count: nk, Dim: dk}
	kh := compute.Heads{Off: nk * dk, RowStride: convDim, HeadStride: dk, Count: nk, Dim: dk}
	vh := compute.Heads{Off: 2 * nk * dk, RowStride: convDim, HeadStride: dv, Count: nv, Dim: dv}
	// q and k heads are adjacent in each row: one L2Norm over both.
	qkh := qh
	qkh.Count = 2 * nk
	be.L2Norm(sc.qkv, qkh, rows, l2NormEps)
	be.GDNGates(sc.g, sc.beta, sc.a, sc.b, g.aLog, g.dtBias, rows, nv)
	sc.deltas = sc.deltas[:0]
	for _, p := range pass {
		sc.deltas = append(sc.deltas, compute.DeltaRule{
			Q: qh.Rows(p.row), K: kh.Rows(p.row), V: vh.Rows(p.row), QKV: sc.qkv,
			G: sc.g, Beta: sc.beta, GateRow: p.row,
			Out: sc.core, OutRow: p.row,
			State: p.seq.rec[l], N: len(p.tokens),
			QScale: float32(1 / math.Sqrt(float64(dk))),
			Nk:     nk, Nv: nv, Dk: dk, Dv: dv,
		})
	}
	be.GatedDeltaRule(sc.deltas)
	if n == 0 {
		return
	}
	// qkv is free now and has room for the rows: core and it take turns.
	core, free := sc.core, sc.qkv
	if out != nil {
		m.gatherRows(free, core, nv*dv, out)
		core, free = free, core
	}
	if g.tiled != nil {
		tileHeads(be, free, core, n, *g.tiled)
		core = free
	}
	oh := compute.DenseHeads(nv, dv)
	be.GatedRMSNorm(core, oh, sc.z, oh, n, g.norm, float32(c.RMSNormEps))
	m.linearRows(sc.tmp, core, g.outProj, n, decode, out)
}

// tileHeads copies rows of value heads from the grouped order of src to the
// tiled order of dst: head g of each row goes to position h.Tiled(g).
func tileHeads(be compute.Backend, dst, src compute.Buffer, rows int, h qwen35.Heads) {
	width := h.Nv * h.Dv
	for r := range rows {
		for g := range h.Nv {
			be.Copy(dst, r*width+h.Tiled(g)*h.Dv, src, r*width+g*h.Dv, h.Dv)
		}
	}
}
