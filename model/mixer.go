package model

import (
	"context"

	"github.com/govinfer/govinfer/compute"
)

// mixer is a layer's token mixer: Gated DeltaNet (gated_deltanet.go) or
// gated attention (gated_attention.go). A new kind of mixer is a new type
// implementing it, bound in bindLayer.
type mixer interface {
	// bindings lists the mixer's tensors under the layer prefix p.
	bindings(c *Config, p string) []binding
	// forward computes the mixer of layer l over the pass's rows: it reads
	// the normed residual stream sc.xn, updates the sequences' state with
	// every row and writes its output to sc.tmp: of every row when out is
	// nil, else of the rows of out only, packed (gatherRows). rope holds
	// the rotary [cos | sin] row of every token.
	forward(m *Model, l int, pass []piece, rows int, rope []float32, out *rowSet)
	// weights returns the mixer's tensors.
	weights() []compute.Weight
}

// denseMLP is a SwiGLU feed-forward block: a dense layer's MLP (mlp.*), a
// MoE layer's shared expert or one of its experts.
type denseMLP struct {
	gateProj, upProj, downProj compute.Weight
	// gateUp, when set in place of gateProj and upProj, is both in one
	// [2*width, hidden] matrix, gate rows first (an expert of a fused
	// experts.gate_up_proj): one product and a SwiGLU.
	gateUp compute.Weight
	width  int // the hidden layer's
}

func (f *denseMLP) bindings(c *Config, p string, _ expertLayout) []binding {
	return f.bind(p+"mlp.", c.HiddenSize, c.IntermediateSize)
}

// bind lists the block's three projections under p for a hidden size h
// and a hidden layer of width.
func (f *denseMLP) bind(p string, h, width int) []binding {
	f.width = width
	return []binding{
		{name: p + "gate_proj.weight", shape: []int{width, h}, dst: &f.gateProj},
		{name: p + "up_proj.weight", shape: []int{width, h}, dst: &f.upProj},
		{name: p + "down_proj.weight", shape: []int{h, width}, dst: &f.downProj},
	}
}

// forward computes sc.tmp = down(silu(gate(xn)) * up(xn)).
func (f *denseMLP) forward(_ context.Context, m *Model, rows int) error {
	sc, be := m.sc, m.be
	m.linear(sc.gate, sc.xn, f.gateProj, rows, sc.decodeRows)
	m.linear(sc.up, sc.xn, f.upProj, rows, sc.decodeRows)
	be.SiLUMul(sc.gate, sc.gate, sc.up, rows*f.width)
	m.linear(sc.tmp, sc.gate, f.downProj, rows, sc.decodeRows)
	return nil
}

func (f *denseMLP) weights() []compute.Weight {
	if f.gateUp != nil {
		return []compute.Weight{f.gateUp, f.downProj}
	}
	return []compute.Weight{f.gateProj, f.upProj, f.downProj}
}
