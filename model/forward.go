package model

import (
	"context"
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// scratch holds the activations of one pass of up to rows tokens.
type scratch struct {
	rows int

	x, xn, tmp compute.Buffer // [rows, hidden]: residual stream, normed, mixer/MLP output
	gate, up   compute.Buffer // [rows, intermediate]; gate also holds silu(gate)*up
	core       compute.Buffer // [rows, max(value_dim, heads*head_dim)]: mixer core output

	// Gated DeltaNet.
	qkv, z        compute.Buffer // [rows, conv_dim], [rows, value_dim]
	a, b, g, beta compute.Buffer // [rows, value heads]

	// Gated attention.
	qg, k, v compute.Buffer // [rows, 2*heads*head_dim], [rows, kv*head_dim] x2

	// Final norm and lm_head, for the rows that need logits.
	logitRows      int
	normed, logits compute.Buffer // [logitRows, hidden], [logitRows, vocab]

	// Per-sequence descriptions of a layer's mixer, reused between layers.
	convs  []compute.ConvSeq
	deltas []compute.DeltaRule
	attns  []compute.Attention
}

func (m *Model) newScratch(rows int) (*scratch, error) {
	c := m.cfg
	sc := &scratch{rows: rows}
	var err error
	alloc := func(dst *compute.Buffer, n int) {
		if err == nil && n > 0 {
			*dst, err = m.be.NewBuffer(n)
		}
	}
	h := c.HiddenSize
	alloc(&sc.x, rows*h)
	alloc(&sc.xn, rows*h)
	alloc(&sc.tmp, rows*h)
	alloc(&sc.gate, rows*c.IntermediateSize)
	alloc(&sc.up, rows*c.IntermediateSize)
	alloc(&sc.core, rows*max(c.ValueDim(), c.NumHeads*c.HeadDim))
	alloc(&sc.qkv, rows*c.ConvDim())
	alloc(&sc.z, rows*c.ValueDim())
	nv := c.LinearNumValueHeads
	alloc(&sc.a, rows*nv)
	alloc(&sc.b, rows*nv)
	alloc(&sc.g, rows*nv)
	alloc(&sc.beta, rows*nv)
	alloc(&sc.qg, rows*2*c.NumHeads*c.HeadDim)
	alloc(&sc.k, rows*c.NumKVHeads*c.HeadDim)
	alloc(&sc.v, rows*c.NumKVHeads*c.HeadDim)
	if err != nil {
		sc.free(m.be)
		return nil, fmt.Errorf("model: allocating activations for %d tokens: %w", rows, err)
	}
	return sc, nil
}

// ensureLogits makes room for n rows of logits.
func (sc *scratch) ensureLogits(be compute.Backend, c *Config, n int) error {
	if n <= sc.logitRows {
		return nil
	}
	be.Free(sc.normed)
	be.Free(sc.logits)
	sc.normed, sc.logits, sc.logitRows = nil, nil, 0
	var err error
	if sc.normed, err = be.NewBuffer(n * c.HiddenSize); err != nil {
		return fmt.Errorf("model: allocating %d rows of logits: %w", n, err)
	}
	if sc.logits, err = be.NewBuffer(n * c.VocabSize); err != nil {
		return fmt.Errorf("model: allocating %d rows of logits: %w", n, err)
	}
	sc.logitRows = n
	return nil
}

func (sc *scratch) free(be compute.Backend) {
	for _, b := range []compute.Buffer{sc.x, sc.xn, sc.tmp, sc.gate, sc.up, sc.core, sc.qkv, sc.z,
		sc.a, sc.b, sc.g, sc.beta, sc.qg, sc.k, sc.v, sc.normed, sc.logits} {
		if b != nil {
			be.Free(b)
		}
	}
}

// forward runs one pass over the weights for a set of pieces and stores
// their logits in outs.
func (m *Model) forward(ctx context.Context, pass []piece, inputs []Input, outs []Output, trace func(int, []float32)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := m.cfg
	if m.sc == nil {
		sc, err := m.newScratch(m.maxTokens)
		if err != nil {
			return err
		}
		m.sc = sc
	}
	sc := m.sc
	rows := 0
	logitRows := 0
	for i := range pass {
		p := &pass[i]
		rows += len(p.tokens)
		if p.nLogits > 0 {
			p.logitRow = logitRows
			logitRows += p.nLogits
		}
		if err := p.seq.reserve(p.pos + len(p.tokens)); err != nil {
			return err
		}
	}

	// Token embeddings and the rope table of every row.
	ids := make([]int32, 0, rows)
	rd := c.RotaryDim()
	var ropeTable []float32
	if rd > 0 {
		ropeTable = make([]float32, rows*rd)
	}
	for _, p := range pass {
		for j, t := range p.tokens {
			ids = append(ids, int32(t))
			if rd > 0 {
				m.ropeRow(ropeTable[(p.row+j)*rd:(p.row+j+1)*rd], p.pos+j)
			}
		}
	}
	m.be.Embed(sc.x, m.w.embed, ids)
	if trace != nil {
		if err := m.traceHidden(ctx, trace, 0, rows); err != nil {
			return err
		}
	}

	eps := float32(c.RMSNormEps)
	h := c.HiddenSize
	// Each residual add is fused with the norm that follows it, so the
	// input norm of layer l > 0 runs at the end of layer l-1.
	if len(m.w.layers) > 0 {
		m.be.RMSNorm(sc.xn, sc.x, m.w.layers[0].inputNorm, rows, h, eps)
	}
	for l := range m.w.layers {
		lw := &m.w.layers[l]
		// h = h + mixer(xn), xn = rmsnorm(h)
		if c.LayerTypes[l] == LinearAttention {
			m.gatedDeltaNet(l, lw, pass, rows)
		} else {
			m.gatedAttention(l, lw, pass, rows, ropeTable)
		}
		m.be.AddRMSNorm(sc.x, sc.tmp, sc.xn, lw.postNorm, rows, h, eps)
		// h = h + down(silu(gate(xn)) * up(xn)), xn = next layer's rmsnorm(h)
		m.be.MatMul(sc.gate, sc.xn, lw.gateProj, rows)
		m.be.MatMul(sc.up, sc.xn, lw.upProj, rows)
		m.be.SiLUMul(sc.gate, sc.gate, sc.up, rows*c.IntermediateSize)
		m.be.MatMul(sc.tmp, sc.gate, lw.downProj, rows)
		if l+1 < len(m.w.layers) {
			m.be.AddRMSNorm(sc.x, sc.tmp, sc.xn, m.w.layers[l+1].inputNorm, rows, h, eps)
		} else {
			m.be.Add(sc.x, sc.tmp, rows*h)
		}
		if trace != nil {
			if err := m.traceHidden(ctx, trace, l+1, rows); err != nil {
				return err
			}
		}
	}

	if logitRows > 0 {
		if err := sc.ensureLogits(m.be, c, logitRows); err != nil {
			return err
		}
		// Gather the rows that need logits, then final norm and lm_head.
		for _, p := range pass {
			if p.nLogits > 0 {
				src := p.row + len(p.tokens) - p.nLogits
				m.be.Copy(sc.xn, p.logitRow*h, sc.x, src*h, p.nLogits*h)
			}
		}
		m.be.RMSNorm(sc.normed, sc.xn, m.w.norm, logitRows, h, eps)
		m.be.MatMul(sc.logits, sc.normed, m.w.lmHead, logitRows)
		var ids []int32
		for _, p := range pass {
			if !p.argmaxOnly {
				continue
			}
			if ids == nil {
				// One id per logit row; rows that also download logits cost
				// a little extra work on the device, nothing more.
				ids = make([]int32, logitRows)
				if err := m.be.Argmax(ctx, ids, sc.logits, c.VocabSize); err != nil {
					return fmt.Errorf("model: argmax: %w", err)
				}
			}
			outs[p.in].Argmax = int(ids[p.logitRow])
		}
		for _, p := range pass {
			if p.nLogits == 0 || p.argmaxOnly {
				continue
			}
			dst := outs[p.in].Logits[p.outOff : p.outOff+p.nLogits*c.VocabSize]
			if err := m.be.Download(ctx, dst, sc.logits, p.logitRow*c.VocabSize); err != nil {
				return fmt.Errorf("model: reading logits: %w", err)
			}
		}
	} else if err := m.be.Sync(ctx); err != nil {
		return fmt.Errorf("model: step: %w", err)
	}
	for _, p := range pass {
		p.seq.n = p.pos + len(p.tokens)
	}
	return nil
}

func (m *Model) traceHidden(ctx context.Context, trace func(int, []float32), layer, rows int) error {
	hid := make([]float32, rows*m.cfg.HiddenSize)
	if err := m.be.Download(ctx, hid, m.sc.x, 0); err != nil {
		return err
	}
	trace(layer, hid)
	return nil
}

// ropeRow fills dst with [cos | sin] of the rotary angles of position pos,
// computed in float64: angle_i = pos * theta^(-2i/rotaryDim).
func (m *Model) ropeRow(dst []float32, pos int) {
	half := len(m.invFreq)
	for i, f := range m.invFreq {
		s, c := math.Sincos(float64(pos) * f)
		dst[i], dst[half+i] = float32(c), float32(s)
	}
}

// gatedDeltaNet computes the linear-attention mixer of layer l into sc.tmp
// (Qwen3_5GatedDeltaNet.forward):
//
//	qkv = conv1d_silu(in_proj_qkv(x)); q, k = l2norm(q), l2norm(k)
//	g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias); beta = sigmoid(in_proj_b(x))
//	o = delta_rule(q * dk^-0.5, k, v, g, beta)
//	out = out_proj(rmsnorm(o) * w * silu(in_proj_z(x)))   per value head
func (m *Model) gatedDeltaNet(l int, lw *layerWeights, pass []piece, rows int) {
	c, sc, be := m.cfg, m.sc, m.be
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	convDim := c.ConvDim()
	be.MatMul(sc.qkv, sc.xn, lw.inProjQKV, rows)
	be.MatMul(sc.z, sc.xn, lw.inProjZ, rows)
	be.MatMul(sc.b, sc.xn, lw.inProjB, rows)
	be.MatMul(sc.a, sc.xn, lw.inProjA, rows)
	sc.convs = sc.convs[:0]
	for _, p := range pass {
		sc.convs = append(sc.convs, compute.ConvSeq{Row: p.row, N: len(p.tokens), State: p.seq.conv[l]})
	}
	be.CausalConv1D(sc.qkv, convDim, convDim, lw.conv1d, c.LinearConvKernel, sc.convs)
	// q, k and v heads inside each [q | k | v] row of qkv.
	qh := compute.Heads{Off: 0, RowStride: convDim, HeadStride: dk, Count: nk, Dim: dk}
	kh := compute.Heads{Off: nk * dk, RowStride: convDim, HeadStride: dk, Count: nk, Dim: dk}
	vh := compute.Heads{Off: 2 * nk * dk, RowStride: convDim, HeadStride: dv, Count: nv, Dim: dv}
	// q and k heads are adjacent in each row: one L2Norm over both.
	qkh := qh
	qkh.Count = 2 * nk
	be.L2Norm(sc.qkv, qkh, rows, l2NormEps)
	be.GDNGates(sc.g, sc.beta, sc.a, sc.b, lw.aLog, lw.dtBias, rows, nv)
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
	oh := compute.DenseHeads(nv, dv)
	be.GatedRMSNorm(sc.core, oh, sc.z, oh, rows, lw.gatedNorm, float32(c.RMSNormEps))
	be.MatMul(sc.tmp, sc.core, lw.outProj, rows)
}

// gatedAttention computes the full-attention mixer of layer l into sc.tmp
// (Qwen3_5Attention.forward):
//
//	q, gate = split_per_head(q_proj(x)); k = k_proj(x); v = v_proj(x)
//	q, k = rope(rmsnorm(q) * (1+w_q)), rope(rmsnorm(k) * (1+w_k))
//	o = softmax(q kᵀ / sqrt(head_dim), causal) v       (GQA)
//	out = o_proj(o * sigmoid(gate))
func (m *Model) gatedAttention(l int, lw *layerWeights, pass []piece, rows int, ropeTable []float32) {
	c, sc, be := m.cfg, m.sc, m.be
	nh, nkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	eps := float32(c.RMSNormEps)
	be.MatMul(sc.qg, sc.xn, lw.qProj, rows)
	be.MatMul(sc.k, sc.xn, lw.kProj, rows)
	be.MatMul(sc.v, sc.xn, lw.vProj, rows)
	// Each q_proj row is [q_0 | gate_0 | q_1 | gate_1 | ...].
	qh := compute.Heads{Off: 0, RowStride: 2 * nh * hd, HeadStride: 2 * hd, Count: nh, Dim: hd}
	gh := compute.Heads{Off: hd, RowStride: 2 * nh * hd, HeadStride: 2 * hd, Count: nh, Dim: hd}
	kvh := compute.DenseHeads(nkv, hd)
	be.HeadRMSNorm(sc.qg, qh, rows, lw.qNorm, eps)
	be.HeadRMSNorm(sc.k, kvh, rows, lw.kNorm, eps)
	be.Rope(sc.qg, qh, rows, ropeTable, c.RotaryDim())
	be.Rope(sc.k, kvh, rows, ropeTable, c.RotaryDim())
	sc.attns = sc.attns[:0]
	for _, p := range pass {
		sc.attns = append(sc.attns, compute.Attention{
			Q: qh.Rows(p.row), QBuf: sc.qg,
			K: kvh.Rows(p.row), KBuf: sc.k,
			V: kvh.Rows(p.row), VBuf: sc.v,
			KCache: p.seq.kc[l], VCache: p.seq.vc[l],
			Out: sc.core, OutRow: p.row,
			Pos: p.pos, N: len(p.tokens),
			Scale: float32(1 / math.Sqrt(float64(hd))),
		})
	}
	be.CausalAttention(sc.attns)
	be.SigmoidMul(sc.core, compute.DenseHeads(nh, hd), sc.qg, gh, rows)
	be.MatMul(sc.tmp, sc.core, lw.oProj, rows)
}
