package model

import "github.com/govinfer/govinfer/compute"

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

// mlp is a layer's SwiGLU feed-forward block (mlp.*).
type mlp struct {
	gateProj, upProj, downProj compute.Weight
}

func (f *mlp) bindings(c *Config, p string) []binding {
	h := c.HiddenSize
	return []binding{
		{p + "mlp.gate_proj.weight", []int{c.IntermediateSize, h}, &f.gateProj},
		{p + "mlp.up_proj.weight", []int{c.IntermediateSize, h}, &f.upProj},
		{p + "mlp.down_proj.weight", []int{h, c.IntermediateSize}, &f.downProj},
	}
}

// forward computes sc.tmp = down(silu(gate(xn)) * up(xn)).
func (f *mlp) forward(m *Model, rows int) {
	sc, be := m.sc, m.be
	m.matMul(sc.gate, sc.xn, f.gateProj, rows, sc.decodeRows)
	m.matMul(sc.up, sc.xn, f.upProj, rows, sc.decodeRows)
	be.SiLUMul(sc.gate, sc.gate, sc.up, rows*m.cfg.IntermediateSize)
	m.matMul(sc.tmp, sc.gate, f.downProj, rows, sc.decodeRows)
}

func (f *mlp) weights() []compute.Weight {
	return []compute.Weight{f.gateProj, f.upProj, f.downProj}
}
