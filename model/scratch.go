package model

import (
	"fmt"

	"github.com/govinfer/govinfer/compute"
)

// scratch holds the activations of one pass of up to rows tokens.
type scratch struct {
	rows int

	// The pass's first decodeRows rows are tokens being decoded
	// (Input.Decode), which products may run on other kernels
	// (compute.DecodeMatMuler).
	decodeRows int

	x, xn, tmp compute.Buffer // [rows, hidden]: residual stream, normed, mixer/MLP output
	gate, up   compute.Buffer // [rows, Config.MLPWidth]; gate also holds silu(gate)*up; up also an expert's [rows, 2*width] fused gate/up
	core       compute.Buffer // [rows, max(value_dim, heads*head_dim)]: mixer core output

	// Gated DeltaNet.
	qkv, z        compute.Buffer // [rows, conv_dim], [rows, value_dim]
	a, b, g, beta compute.Buffer // [rows, value heads]

	// Gated attention.
	qg, k, v compute.Buffer // [rows, 2*heads*head_dim], [rows, kv*head_dim] x2

	// A mixture of experts (moe.go): router logits [rows, experts], shared
	// expert gates [rows], an expert's gathered rows and its outputs
	// [rows, hidden], every term of the rows' sums [rows*(k+1), hidden],
	// and the host's side of the routing.
	route, sgate, ex, ed, eo compute.Buffer
	moe                      moeScratch
	host                     *hostScratch // experts on a host backend, made when first used

	// Final norm and lm_head, for the rows that need logits.
	logitRows      int
	normed, logits compute.Buffer // [logitRows, hidden], [logitRows, vocab]

	// lora holds the activations of LoRA adapters' updates, made when the
	// first adapter is attached (nil without adapters).
	lora *loraScratch

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
	alloc(&sc.gate, rows*c.MLPWidth())
	alloc(&sc.up, rows*max(c.MLPWidth(), 2*c.MoEIntermediateSize)) // an expert's fused gate/up output too
	if c.MoE() {
		alloc(&sc.route, rows*c.NumExperts)
		alloc(&sc.sgate, rows)
		alloc(&sc.ex, rows*h)
		alloc(&sc.ed, rows*h)
		alloc(&sc.eo, rows*(c.NumExpertsPerTok+1)*h)
		sc.moe = newMoEScratch(c, rows)
	}
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
	if sc.host != nil {
		sc.host.free()
		sc.host = nil
	}
	if sc.lora != nil {
		sc.lora.free(be)
		sc.lora = nil
	}
	sc.moe.freeDevice(be)
	for _, b := range []compute.Buffer{sc.x, sc.xn, sc.tmp, sc.gate, sc.up, sc.core, sc.qkv, sc.z,
		sc.a, sc.b, sc.g, sc.beta, sc.qg, sc.k, sc.v, sc.normed, sc.logits, sc.route, sc.sgate, sc.ex, sc.ed, sc.eo} {
		if b != nil {
			be.Free(b)
		}
	}
}
