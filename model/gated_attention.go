package model

import (
	"math"

	"github.com/govinfer/govinfer/compute"
)

// gatedAttention is the full-attention mixer (self_attn.*,
// Qwen3_5Attention): grouped-query attention with an output gate. Its
// per-sequence state is the key/value cache (Sequence.kc, Sequence.vc).
type gatedAttention struct {
	qProj, kProj, vProj, oProj compute.Weight
	qNorm, kNorm               compute.Weight
}

func (a *gatedAttention) bindings(c *Config, p string) []binding {
	h, hd := c.HiddenSize, c.HeadDim
	p += "self_attn."
	return []binding{
		{name: p + "q_proj.weight", shape: []int{2 * c.NumHeads * hd, h}, dst: &a.qProj},
		{name: p + "k_proj.weight", shape: []int{c.NumKVHeads * hd, h}, dst: &a.kProj},
		{name: p + "v_proj.weight", shape: []int{c.NumKVHeads * hd, h}, dst: &a.vProj},
		{name: p + "o_proj.weight", shape: []int{h, c.NumHeads * hd}, dst: &a.oProj},
		{name: p + "q_norm.weight", shape: []int{hd}, dst: &a.qNorm},
		{name: p + "k_norm.weight", shape: []int{hd}, dst: &a.kNorm},
	}
}

func (a *gatedAttention) weights() []compute.Weight {
	return []compute.Weight{a.qProj, a.kProj, a.vProj, a.oProj, a.qNorm, a.kNorm}
}

// forward computes (Qwen3_5Attention.forward)
//
//	q, gate = split_per_head(q_proj(x)); k = k_proj(x); v = v_proj(x)
//	q, k = rope(rmsnorm(q) * (1+w_q)), rope(rmsnorm(k) * (1+w_k))
//	o = softmax(q kᵀ / sqrt(head_dim), causal) v       (GQA)
//	out = o_proj(o * sigmoid(gate))
//
// With out set, o_proj takes out's rows only.
func (a *gatedAttention) forward(m *Model, l int, pass []piece, rows int, rope []float32, out *rowSet) {
	c, sc, be := m.cfg, m.sc, m.be
	nh, nkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	eps := float32(c.RMSNormEps)
	m.linear(sc.qg, sc.xn, a.qProj, rows, sc.decodeRows)
	m.linear(sc.k, sc.xn, a.kProj, rows, sc.decodeRows)
	m.linear(sc.v, sc.xn, a.vProj, rows, sc.decodeRows)
	// Each q_proj row is [q_0 | gate_0 | q_1 | gate_1 | ...].
	qh := compute.Heads{Off: 0, RowStride: 2 * nh * hd, HeadStride: 2 * hd, Count: nh, Dim: hd}
	gh := compute.Heads{Off: hd, RowStride: 2 * nh * hd, HeadStride: 2 * hd, Count: nh, Dim: hd}
	kvh := compute.DenseHeads(nkv, hd)
	be.HeadRMSNorm(sc.qg, qh, rows, a.qNorm, eps)
	be.HeadRMSNorm(sc.k, kvh, rows, a.kNorm, eps)
	be.Rope(sc.qg, qh, rows, rope, c.RotaryDim())
	be.Rope(sc.k, kvh, rows, rope, c.RotaryDim())
	sc.attns = sc.attns[:0]
	for _, p := range pass {
		if p.tokenwise {
			for j := range p.tokens {
				r := p.row + j
				sc.attns = append(sc.attns, compute.Attention{
					Q: qh.Rows(r), QBuf: sc.qg,
					K: kvh.Rows(r), KBuf: sc.k,
					V: kvh.Rows(r), VBuf: sc.v,
					KCache: p.seq.kc[l], VCache: p.seq.vc[l],
					Out: sc.core, OutRow: r,
					CacheType: m.kvType(),
					Pos:       p.pos + j, N: 1,
					Scale: float32(1 / math.Sqrt(float64(hd))),
				})
			}
			continue
		}
		sc.attns = append(sc.attns, compute.Attention{
			Q: qh.Rows(p.row), QBuf: sc.qg,
			K: kvh.Rows(p.row), KBuf: sc.k,
			V: kvh.Rows(p.row), VBuf: sc.v,
			KCache: p.seq.kc[l], VCache: p.seq.vc[l],
			Out: sc.core, OutRow: p.row,
			CacheType: m.kvType(),
			Pos:       p.pos, N: len(p.tokens),
			Scale: float32(1 / math.Sqrt(float64(hd))),
		})
	}
	be.CausalAttention(sc.attns)
	be.SigmoidMul(sc.core, compute.DenseHeads(nh, hd), sc.qg, gh, rows)
	if out != nil {
		if out.n > 0 {
			// qg is free now and has room for the rows.
			m.gatherRows(sc.qg, sc.core, nh*hd, out)
			m.linearRows(sc.tmp, sc.qg, a.oProj, out.n, out.decode, out)
		}
		return
	}
	m.linear(sc.tmp, sc.core, a.oProj, rows, sc.decodeRows)
}
