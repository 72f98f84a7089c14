//go:build cgo

package vulkan

// The operations of a vision tower: layernorm.comp, bias.comp, gelu.comp
// and segattn.comp.

import (
	"github.com/govinfer/govinfer/compute"
)

// LayerNorm implements compute.Backend, one workgroup per row.
func (b *Backend) LayerNorm(dst, x compute.Buffer, wt, bt compute.Weight, n, dim int, eps float32) {
	const op = "LayerNorm"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	w, ok3 := b.wt(op, wt)
	bias, ok4 := b.wt(op, bt)
	if !ok1 || !ok2 || !ok3 || !ok4 || dim <= 0 || n < 0 || !b.span(op, "x", xs, 0, n*dim) || !b.span(op, "dst", d, 0, n*dim) || n == 0 {
		return
	}
	if w.rows*w.cols != dim || bias.rows*bias.cols != dim {
		b.failf("LayerNorm: weight %s has %d elements and bias %s %d for dim %d", w.name, w.rows*w.cols, bias.name, bias.rows*bias.cols, dim)
		return
	}
	wraw, ok5 := b.singleChunk(op, w)
	braw, ok6 := b.singleChunk(op, bias)
	if !ok5 || !ok6 {
		return
	}
	gx, gy := grid(n)
	b.dispatch("layernorm", []uint32{wgRow, uint32(w.dt), uint32(bias.dt)}, []*rawBuf{xs.raw, d.raw, wraw, braw},
		pushWords(&layernormPush{u32(n), u32(dim), eps}), gx, gy, 1)
}

// AddBias implements compute.Backend, one thread per element.
func (b *Backend) AddBias(x compute.Buffer, bt compute.Weight, n, dim int) {
	const op = "AddBias"
	xs, ok1 := b.buf(op, x)
	bias, ok2 := b.wt(op, bt)
	if !ok1 || !ok2 || dim <= 0 || n < 0 || !b.span(op, "x", xs, 0, n*dim) || n == 0 {
		return
	}
	if bias.rows*bias.cols != dim {
		b.failf("AddBias: bias %s has %d elements for dim %d", bias.name, bias.rows*bias.cols, dim)
		return
	}
	braw, ok := b.singleChunk(op, bias)
	if !ok {
		return
	}
	gx, gy := grid((n*dim + wgElem - 1) / wgElem)
	b.dispatch("bias", []uint32{wgElem, uint32(bias.dt)}, []*rawBuf{xs.raw, braw},
		pushWords(&biasPush{u32(n), u32(dim)}), gx, gy, 1)
}

// GELU implements compute.Backend, one thread per element.
func (b *Backend) GELU(x compute.Buffer, n int, form compute.GELUForm) {
	const op = "GELU"
	xs, ok := b.buf(op, x)
	if !ok || n < 0 || !b.span(op, "x", xs, 0, n) || n == 0 {
		return
	}
	if form != compute.GELUErf && form != compute.GELUTanh {
		b.failf("GELU: unknown form %v", form)
		return
	}
	gx, gy := grid((n + wgElem - 1) / wgElem)
	b.dispatch("gelu", []uint32{wgElem, uint32(form)}, []*rawBuf{xs.raw}, pushWords(&geluPush{u32(n)}), gx, gy, 1)
}

// segAttnRows is the query rows of one segattn.comp workgroup (its RB).
const segAttnRows = 8

// SegmentAttention implements compute.Backend: one segattn.comp dispatch,
// a workgroup per (segment, head, block of query rows).
func (b *Backend) SegmentAttention(out, x compute.Buffer, q, k, v compute.Heads, n, segLen int, scale float32) {
	const op = "SegmentAttention"
	o, ok1 := b.buf(op, out)
	xs, ok2 := b.buf(op, x)
	if !ok1 || !ok2 || n == 0 {
		return
	}
	heads, dim := q.Count, q.Dim
	if segLen <= 0 || n < 0 || n%segLen != 0 || heads <= 0 || dim <= 0 || dim > 256 ||
		k.Count != heads || v.Count != heads || k.Dim != dim || v.Dim != dim {
		b.failf("SegmentAttention: %d rows in segments of %d with q %+v k %+v v %+v (head dim at most 256)", n, segLen, q, k, v)
		return
	}
	if o == xs {
		b.failf("SegmentAttention: out and x are the same buffer")
		return
	}
	if !b.heads(op, "q", xs, q, n) || !b.heads(op, "k", xs, k, n) || !b.heads(op, "v", xs, v, n) ||
		!b.span(op, "out", o, 0, n*heads*dim) {
		return
	}
	segs := n / segLen
	rowBlocks := (segLen + segAttnRows - 1) / segAttnRows
	gx, gy := grid(segs * heads * rowBlocks)
	b.dispatch("segattn", nil, []*rawBuf{xs.raw, o.raw},
		pushWords(&segattnPush{headsOf(q), headsOf(k), headsOf(v), u32(heads), u32(dim), u32(segLen), u32(segs), u32(rowBlocks), scale}),
		gx, gy, 1)
}
