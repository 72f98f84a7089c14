//go:build cgo

package vulkan

import (
	"fmt"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// A mixture of experts on the device (compute.ExpertRouter): a layer's
// experts of one projection are one weight, chunked by whole experts, each
// expert at a stride of 16-byte multiples; routing (moetopk.comp), the
// plan that groups pairs by expert (moeplan.comp), the indexed products
// (matvecid.comp) and the weighted sum (moecombine.comp) run without the
// host, so a decode step reads nothing back inside its MoE layers.

// Limits of the shaders: experts per layer (moeplan.comp's EMAX) and
// experts per row (moetopk.comp's KMAX).
const (
	maxRouteExperts = 512
	maxRouteK       = 32
)

// experts is the stacking of a weight made by NewExperts.
type experts struct {
	n, rows int    // experts, rows of each
	stride  uint64 // bytes from one expert to the next
	perRaw  int    // experts per chunk
}

// RoutesExperts implements compute.ExpertRouter: up to 512 experts, 32 per
// row, rows a multiple of 8 values wide.
func (b *Backend) RoutesExperts(ne, k, hidden, width int) bool {
	return ne > 0 && ne <= maxRouteExperts && k > 0 && k <= min(ne, maxRouteK) &&
		hidden > 0 && hidden%8 == 0 && width > 0 && width%8 == 0
}

// NewExperts implements compute.ExpertRouter.
func (b *Backend) NewExperts(name string, dt compute.DType, n, rows, cols int) (compute.Weight, error) {
	if n <= 0 || rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("vulkan: experts %s: bad shape %d × [%d, %d]", name, n, rows, cols)
	}
	if n > maxRouteExperts {
		return nil, fmt.Errorf("vulkan: experts %s: %d experts, the device routes at most %d", name, n, maxRouteExperts)
	}
	if cols%8 != 0 {
		return nil, fmt.Errorf("vulkan: experts %s: %d columns are not a multiple of 8", name, cols)
	}
	rowBytes, err := weightRowBytes(dt, cols)
	if err != nil {
		return nil, fmt.Errorf("vulkan: experts %s [%d, %d]: %w", name, rows, cols, err)
	}
	if dt.Quant() == quant.Keep && rowBytes%16 != 0 {
		return nil, fmt.Errorf("vulkan: experts %s: %v rows of %d bytes are not 16-byte multiples", name, dt, rowBytes)
	}
	stride := alignUp(uint64(rows)*rowBytes, 16)
	per := int(b.chunkBytes / stride)
	if per == 0 {
		// A lowered chunk size (tests) applies only where an expert fits.
		per = int(b.maxBinding / stride)
	}
	if per == 0 {
		return nil, fmt.Errorf("vulkan: experts %s: an expert of %d bytes exceeds the largest binding (%d bytes)", name, stride, b.maxBinding)
	}
	if stride*uint64(per) > 1<<32-16 {
		per = int((1<<32 - 16) / stride) // byte offsets are 32-bit in the shader
	}
	w := &weight{name: name, dt: dt, rows: n * rows, cols: cols, rowBytes: int(rowBytes),
		ex: &experts{n: n, rows: rows, stride: stride, perRaw: per}}
	for e0 := 0; e0 < n; e0 += per {
		m := min(per, n-e0)
		raw, err := b.newRaw(uint64(m)*stride, memDevice)
		if err != nil {
			w.free(b)
			return nil, fmt.Errorf("vulkan: experts %s (%d × [%d, %d] %v) do not fit: %w", name, n, rows, cols, dt, err)
		}
		w.chunks = append(w.chunks, wchunk{raw: raw, row0: e0 * rows, rows: m * rows})
	}
	return w, nil
}

// LoadExpert implements compute.ExpertRouter.
func (b *Backend) LoadExpert(wt compute.Weight, e int, data []byte) error {
	w, ok := wt.(*weight)
	if !ok || w == nil || w.ex == nil || len(w.chunks) == 0 {
		return fmt.Errorf("vulkan: LoadExpert into %T, not a live weight of NewExperts", wt)
	}
	x := w.ex
	if e < 0 || e >= x.n {
		return fmt.Errorf("vulkan: experts %s: expert %d of %d", w.name, e, x.n)
	}
	if want := x.rows * w.rowBytes; len(data) != want {
		return fmt.Errorf("vulkan: experts %s: %d bytes for expert %d, want %d", w.name, len(data), e, want)
	}
	c := w.chunks[e/x.perRaw]
	off := uint64(e%x.perRaw) * x.stride
	if c.raw.ptr != nil {
		copy(c.raw.bytes()[off:], data)
		return nil
	}
	if err := b.stage(c.raw, off, data); err != nil {
		return fmt.Errorf("vulkan: experts %s: expert %d: %w", w.name, e, err)
	}
	return nil
}

// routeBuf checks a route buffer for n rows choosing k of ne experts.
func (b *Backend) routeBuf(op string, route compute.Buffer, n, ne, k int) (*buffer, bool) {
	r, ok := b.buf(op, route)
	if !ok {
		return nil, false
	}
	if n < 0 || ne <= 0 || k <= 0 || k > ne || k > maxRouteK || ne > maxRouteExperts {
		b.failf("%s: %d rows choosing %d of %d experts (at most %d of %d)", op, n, k, ne, maxRouteK, maxRouteExperts)
		return nil, false
	}
	if need := compute.RouteLen(n, ne, k); r.n < need {
		b.failf("%s: route buffer of %d elements for %d rows choosing %d of %d experts, want %d", op, r.n, n, k, ne, need)
		return nil, false
	}
	return r, true
}

// RouteExperts implements compute.ExpertRouter: moetopk.comp picks each
// row's experts, then moeplan.comp groups the pairs by expert.
func (b *Backend) RouteExperts(route, logits compute.Buffer, n, ne, k int) {
	const op = "RouteExperts"
	r, ok1 := b.routeBuf(op, route, n, ne, k)
	l, ok2 := b.buf(op, logits)
	if !ok1 || !ok2 || n == 0 || !b.span(op, "logits", l, 0, n*ne) {
		return
	}
	p := n * k
	gx, gy := grid(n)
	b.dispatchSpans("moetopk", nil, []*rawBuf{l.raw, r.raw}, []span{floats(0, n*ne), floats(0, 2*p)},
		pushWords(&moetopkPush{u32(n), u32(ne), u32(k), u32(p)}), gx, gy, 1)
	plan := 2 * p
	b.dispatchSpans("moeplan", nil, []*rawBuf{r.raw}, []span{floats(0, compute.RouteLen(n, ne, k))},
		pushWords(&moeplanPush{u32(p), u32(ne), u32(plan), u32(compute.RouteTasks(n, ne, k))}), 1, 1, 1)
}

// MatMulExperts implements compute.ExpertRouter with matvecid.comp, once
// per chunk of experts: a workgroup row per task of the plan (those of
// other chunks' experts return at once).
func (b *Backend) MatMulExperts(dst, x compute.Buffer, wt compute.Weight, route compute.Buffer, n, k int, perPair bool) {
	const op = "MatMulExperts"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	w, ok3 := b.wt(op, wt)
	if !ok1 || !ok2 || !ok3 || n <= 0 {
		return
	}
	if w.ex == nil {
		b.failf("%s: weight %s is not a stack of experts (NewExperts)", op, w.name)
		return
	}
	ex := w.ex
	r, ok := b.routeBuf(op, route, n, ex.n, k)
	if !ok {
		return
	}
	p := n * k
	xrows := n
	if perPair {
		xrows = p
	}
	if !b.span(op, "x", xs, 0, xrows*w.cols) || !b.span(op, "dst", d, 0, p*ex.rows) {
		return
	}
	if d == xs {
		b.failf("%s: dst and x are the same buffer", op)
		return
	}
	tasks := compute.RouteTasks(n, ex.n, k)
	if tasks > 65535 {
		b.failf("%s: %d tasks exceed a dispatch", op, tasks)
		return
	}
	pushPerPair := uint32(0)
	if perPair {
		pushPerPair = 1
	}
	rowsPerGroup := max(1, wgRow/int(b.sg.size))
	gx := u32((ex.rows + rowsPerGroup - 1) / rowsPerGroup)
	for ci, c := range w.chunks {
		e0 := ci * ex.perRaw
		b.dispatchSpans("matvecid", []uint32{wgRow, uint32(w.dt), u32(rowsPerGroup)},
			[]*rawBuf{0: c.raw, 1: c.raw, 2: r.raw, 3: xs.raw, 4: d.raw},
			[]span{2: floats(0, compute.RouteLen(n, ex.n, k)), 3: floats(0, xrows*w.cols), 4: floats(0, p*ex.rows)},
			pushWords(&matvecidPush{u32(ex.rows), u32(w.cols), u32(e0), u32(c.rows / ex.rows), uint32(ex.stride),
				u32(w.rowBytes), u32(k), pushPerPair, u32(2 * p), u32(tasks)}),
			gx, u32(tasks), 1)
	}
}

// CombineExperts implements compute.ExpertRouter with moecombine.comp.
func (b *Backend) CombineExperts(dst, eo, gate, route compute.Buffer, n, k, dim int) {
	const op = "CombineExperts"
	d, ok1 := b.buf(op, dst)
	e, ok2 := b.buf(op, eo)
	g, ok3 := b.buf(op, gate)
	r, ok4 := b.buf(op, route)
	if !ok1 || !ok2 || !ok3 || !ok4 || n <= 0 || dim <= 0 || k <= 0 {
		return
	}
	p := n * k
	if !b.span(op, "dst", d, 0, n*dim) || !b.span(op, "eo", e, 0, p*dim) || !b.span(op, "gate", g, 0, n) || !b.span(op, "route", r, 0, 2*p) {
		return
	}
	if d == e || d == g || d == r {
		b.failf("%s: dst is also an input", op)
		return
	}
	gx, gy := grid((n*dim + wgElem - 1) / wgElem)
	b.dispatchSpans("moecombine", []uint32{wgElem}, []*rawBuf{0: e.raw, 1: g.raw, 2: r.raw, 4: d.raw},
		[]span{0: floats(0, p*dim), 1: floats(0, n), 2: floats(0, 2*p), 4: floats(0, n*dim)},
		pushWords(&moecombinePush{u32(n), u32(dim), u32(k), u32(p)}), gx, gy, 1)
}

var _ compute.ExpertRouter = (*Backend)(nil)
