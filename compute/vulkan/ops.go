//go:build cgo

package vulkan

import (
	"context"
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// Workgroup sizes (specialisation constant 0 of the shaders that take it).
const (
	wgElem   = 128 // one thread per element
	wgRow    = 128 // one workgroup per row or head
	wgDelta  = 64  // delta rule: state columns per workgroup
	maxBatch = 8   // inputs the matvec shader handles per dispatch
	maxConvK = 16  // taps conv.comp supports
)

// buf returns the backend buffer behind x, recording an error for foreign
// or freed buffers.
func (b *Backend) buf(op string, x compute.Buffer) (*buffer, bool) {
	bb, ok := x.(*buffer)
	if !ok || bb == nil || bb.raw == nil || bb.b != b {
		b.failf("%s: buffer %T is not a live buffer of this backend", op, x)
		return nil, false
	}
	return bb, true
}

// wt returns the backend weight behind w.
func (b *Backend) wt(op string, w compute.Weight) (*weight, bool) {
	ww, ok := w.(*weight)
	if !ok || ww == nil || len(ww.chunks) == 0 {
		b.failf("%s: weight %T is not a weight of this backend", op, w)
		return nil, false
	}
	if ww.ex != nil && op != "MatMulExperts" {
		b.failf("%s: weight %s is a stack of experts; only MatMulExperts takes it", op, ww.name)
		return nil, false
	}
	if ww.dt.Quant() != quant.Keep && op != "MatMul" && op != "Embed" && op != "MatMulExperts" {
		b.failf("%s: weight %s is %v; quantized weights are only for MatMul and Embed", op, ww.name, ww.dt)
		return nil, false
	}
	return ww, true
}

// span checks that elements [off, off+n) lie in x.
func (b *Backend) span(op, what string, x *buffer, off, n int) bool {
	if off < 0 || n < 0 || off+n > x.n {
		b.failf("%s: %s elements [%d, %d) outside buffer of %d", op, what, off, off+n, x.n)
		return false
	}
	return true
}

// heads checks a head layout over n rows against x.
func (b *Backend) heads(op, what string, x *buffer, h compute.Heads, n int) bool {
	if h.Off < 0 || h.RowStride < 0 || h.HeadStride < 0 || h.Count <= 0 || h.Dim <= 0 || n < 0 {
		b.failf("%s: bad %s layout %+v for %d rows", op, what, h, n)
		return false
	}
	if n == 0 {
		return true
	}
	return b.span(op, what, x, h.Off, h.Head(n-1, h.Count-1)+h.Dim-h.Off)
}

// singleChunk returns the one chunk of a small weight (a norm or gate
// vector) that shaders index directly.
func (b *Backend) singleChunk(op string, w *weight) (*rawBuf, bool) {
	if len(w.chunks) != 1 {
		b.failf("%s: weight %s is split over %d bindings; expected one", op, w.name, len(w.chunks))
		return nil, false
	}
	return w.chunks[0].raw, true
}

func u32(v int) uint32 { return uint32(v) }

// Upload implements compute.Backend, in program order with recorded work.
func (b *Backend) Upload(dst compute.Buffer, off int, src []float32) error {
	d, ok := dst.(*buffer)
	if !ok || d == nil || d.raw == nil {
		return fmt.Errorf("vulkan: upload into %T, not a live buffer of this backend", dst)
	}
	if off < 0 || off+len(src) > d.n {
		return fmt.Errorf("vulkan: upload of %d elements at %d overflows buffer of %d", len(src), off, d.n)
	}
	return b.stage(d.raw, uint64(off)*4, float32Bytes(src))
}

// readInto records a copy of n bytes of src at off into the readback
// buffer, submits everything recorded and waits for it.
func (b *Backend) readInto(ctx context.Context, src *rawBuf, off, n uint64) ([]byte, error) {
	if b.readback == nil || b.readback.size < n {
		// Every readback is waited for before readInto returns, so the old
		// buffer is idle.
		b.readback.destroy(b)
		b.readback = nil
		r, err := b.newRaw(max(n, 1<<16), memReadback)
		if err != nil {
			return nil, fmt.Errorf("vulkan: readback buffer: %w", err)
		}
		b.readback = r
	}
	if err := b.rec.begin(b); err != nil {
		return nil, err
	}
	if n > 0 {
		b.rec.transfer(src, span{off, off + n}, b.readback, span{0, n})
		b.fast.copy(b.rec.cmd, src.buf, b.readback.buf, uint64(off), 0, uint64(n))
	}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	return b.readback.bytes()[:n], nil
}

// Download implements compute.Backend: it submits the recorded work, waits
// for it and copies the result.
func (b *Backend) Download(ctx context.Context, dst []float32, src compute.Buffer, off int) error {
	s, ok := src.(*buffer)
	if !ok || s == nil || s.raw == nil {
		return fmt.Errorf("vulkan: download from %T, not a live buffer of this backend", src)
	}
	if off < 0 || off+len(dst) > s.n {
		return fmt.Errorf("vulkan: download of %d elements at %d overflows buffer of %d", len(dst), off, s.n)
	}
	if err := b.report(); err != nil {
		b.flush(ctx)
		return err
	}
	data, err := b.readInto(ctx, s.raw, uint64(off)*4, uint64(len(dst))*4)
	if err == nil {
		copy(float32Bytes(dst), data)
	}
	return joinErr(err, b.report())
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}

// Sync implements compute.Backend.
func (b *Backend) Sync(ctx context.Context) error {
	err := b.flush(ctx)
	return joinErr(err, b.report())
}

// Copy implements compute.Backend.
func (b *Backend) Copy(dst compute.Buffer, dstOff int, src compute.Buffer, srcOff int, n int) {
	const op = "Copy"
	d, ok1 := b.buf(op, dst)
	s, ok2 := b.buf(op, src)
	if !ok1 || !ok2 || !b.span(op, "dst", d, dstOff, n) || !b.span(op, "src", s, srcOff, n) || n == 0 {
		return
	}
	if d == s && dstOff < srcOff+n && srcOff < dstOff+n {
		b.failf("Copy: overlapping ranges [%d, %d) and [%d, %d) of one buffer", dstOff, dstOff+n, srcOff, srcOff+n)
		return
	}
	if b.err != nil {
		return
	}
	if err := b.rec.begin(b); err != nil {
		b.fail(err)
		return
	}
	b.rec.transfer(s.raw, floats(srcOff, n), d.raw, floats(dstOff, n))
	b.fast.copy(b.rec.cmd, s.raw.buf, d.raw.buf, uint64(srcOff)*4, uint64(dstOff)*4, uint64(n)*4)
	b.rec.done("copy")
}

// ringData copies bytes into the upload ring and returns their offset in
// 4-byte elements.
func (b *Backend) ringData(data []byte) (uint32, bool) {
	off, err := b.ring.alloc(b, uint64(len(data)))
	if err != nil {
		b.fail(err)
		return 0, false
	}
	copy(b.ring.raw.bytes()[off:], data)
	return uint32(off / 4), true
}

// Embed implements compute.Backend.
func (b *Backend) Embed(dst compute.Buffer, table compute.Weight, ids []int32) {
	const op = "Embed"
	d, ok1 := b.buf(op, dst)
	w, ok2 := b.wt(op, table)
	if !ok1 || !ok2 || !b.span(op, "dst", d, 0, len(ids)*w.cols) || len(ids) == 0 {
		return
	}
	for i, id := range ids {
		if id < 0 || int(id) >= w.rows {
			b.failf("Embed: id %d at %d outside table %s of %d rows", id, i, w.name, w.rows)
			return
		}
	}
	off, ok := b.ringData(int32Bytes(ids))
	if !ok {
		return
	}
	if w.dt.Quant() != quant.Keep {
		// One thread dequantizes 8 values of a gathered row.
		gx, gy := grid((len(ids)*w.cols/8 + wgElem - 1) / wgElem)
		for _, c := range w.chunks {
			b.dispatch("embedq", []uint32{wgElem, uint32(w.dt)}, []*rawBuf{0: c.raw, 1: b.ring.raw, 4: d.raw},
				pushWords(&embedQPush{u32(len(ids)), u32(w.cols), u32(c.row0), u32(c.rows), off, u32(w.rowBytes)}), gx, gy, 1)
		}
		return
	}
	gx, gy := grid((len(ids)*w.cols + wgElem - 1) / wgElem)
	for _, c := range w.chunks {
		b.dispatch("embed", []uint32{wgElem, uint32(w.dt)}, []*rawBuf{0: c.raw, 1: b.ring.raw, 4: d.raw},
			pushWords(&embedPush{u32(len(ids)), u32(w.cols), u32(c.row0), u32(c.rows), off}), gx, gy, 1)
	}
}

// MatMul implements compute.Backend, once per weight chunk: the matvec
// shader for up to 8 inputs (decode) and the tiled shader above that
// (prefill), on cooperative matrices where the device has them and the
// weight is f16 or bf16 within f16's range. On CPU devices (lavapipe)
// larger batches run as matvec dispatches of 8 inputs instead, unless
// Options.TiledFrom says otherwise. Quantized weights take the same
// choices with their own shaders (matMulQuant).
func (b *Backend) MatMul(dst, x compute.Buffer, wt compute.Weight, n int) {
	const op = "MatMul"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	w, ok3 := b.wt(op, wt)
	if !ok1 || !ok2 || !ok3 || !b.span(op, "x", xs, 0, n*w.cols) || !b.span(op, "dst", d, 0, n*w.rows) || n <= 0 {
		return
	}
	if d == xs {
		b.failf("MatMul: dst and x are the same buffer")
		return
	}
	if w.dt.Quant() != quant.Keep {
		b.matMulQuant(d, xs, w, n)
		return
	}
	for _, c := range w.chunks {
		if n < b.tiledFrom {
			vec := uint32(0)
			if (w.dt == compute.F32 && w.cols%4 == 0) || (w.dt != compute.F32 && w.cols%8 == 0) {
				vec = 1
			}
			rowsPerGroup := max(1, wgRow/int(b.sg.size))
			gx, gy := grid((c.rows + rowsPerGroup - 1) / rowsPerGroup)
			for i0 := 0; i0 < n; i0 += maxBatch {
				b.dispatch("matvec", []uint32{wgRow, uint32(w.dt), u32(rowsPerGroup), u32(b.matvecUnroll)}, []*rawBuf{c.raw, c.raw, xs.raw, xs.raw, d.raw},
					pushWords(&matvecPush{u32(c.rows), u32(w.cols), u32(min(maxBatch, n-i0)), u32(c.row0), u32(w.rows), vec, u32(i0)}), gx, gy, 1)
			}
		} else if w.f16 {
			b.dispatch(b.coopmatShader, []uint32{4 * b.sg.size, uint32(w.dt)}, []*rawBuf{0: c.raw, 2: xs.raw, 4: d.raw},
				pushWords(&matmulQPush{u32(c.rows), u32(w.cols), u32(n), u32(c.row0), u32(w.rows), 0}),
				u32((c.rows+63)/64), u32((n+63)/64), 1)
		} else {
			b.dispatch("matmul", []uint32{0, uint32(w.dt)}, []*rawBuf{0: c.raw, 2: xs.raw, 4: d.raw},
				pushWords(&matmulPush{u32(c.rows), u32(w.cols), u32(n), u32(c.row0), u32(w.rows)}),
				u32((c.rows+63)/64), u32((n+63)/64), 1)
		}
	}
}

// matMulQuant records MatMul for a weight in a GGML block format, once
// per weight chunk: matvecq.comp in passes of up to 8 inputs below
// b.tiledFrom inputs, matmulq.comp from there, or the cooperative-matrix
// matmulcmq shader where the device has it and the weight's values are
// within f16's range (weight.f16). All dequantize in the shader and
// accumulate in float32.
func (b *Backend) matMulQuant(d, xs *buffer, w *weight, n int) {
	for _, c := range w.chunks {
		if n < b.tiledFrom {
			rowsPerGroup := max(1, wgRow/int(b.sg.size))
			gx, gy := grid((c.rows + rowsPerGroup - 1) / rowsPerGroup)
			for i0 := 0; i0 < n; i0 += maxBatch {
				b.dispatch("matvecq", []uint32{wgRow, uint32(w.dt), u32(rowsPerGroup)}, []*rawBuf{0: c.raw, 3: xs.raw, 4: d.raw},
					pushWords(&matvecQPush{u32(c.rows), u32(w.cols), u32(min(maxBatch, n-i0)), u32(c.row0), u32(w.rows), u32(w.rowBytes), u32(i0)}), gx, gy, 1)
			}
		} else if w.f16 {
			b.dispatch(b.coopmatQShader, []uint32{4 * b.sg.size, uint32(w.dt)}, []*rawBuf{0: c.raw, 2: xs.raw, 4: d.raw},
				pushWords(&matmulQPush{u32(c.rows), u32(w.cols), u32(n), u32(c.row0), u32(w.rows), u32(w.rowBytes)}),
				u32((c.rows+63)/64), u32((n+63)/64), 1)
		} else {
			b.dispatch("matmulq", []uint32{0, uint32(w.dt)}, []*rawBuf{0: c.raw, 2: xs.raw, 4: d.raw},
				pushWords(&matmulQPush{u32(c.rows), u32(w.cols), u32(n), u32(c.row0), u32(w.rows), u32(w.rowBytes)}),
				u32((c.rows+63)/64), u32((n+63)/64), 1)
		}
	}
}

// norm records the norm shader in the given mode.
func (b *Backend) norm(op string, mode uint32, x *buffer, xh compute.Heads, d *buffer, dh compute.Heads, w *weight, z *buffer, zh compute.Heads, n int, eps float32) {
	if n <= 0 {
		return
	}
	var wraw, zraw *rawBuf
	dt := uint32(compute.F32)
	if w != nil {
		if w.rows*w.cols != xh.Dim {
			b.failf("%s: weight %s has %d elements for dim %d", op, w.name, w.rows*w.cols, xh.Dim)
			return
		}
		var ok bool
		if wraw, ok = b.singleChunk(op, w); !ok {
			return
		}
		dt = uint32(w.dt)
	}
	if z != nil {
		zraw = z.raw
	}
	gx, gy := grid(n * xh.Count)
	b.dispatch("norm", []uint32{wgRow, dt, mode}, []*rawBuf{x.raw, d.raw, wraw, zraw},
		pushWords(&normPush{u32(n), u32(xh.Count), u32(xh.Dim), headsOf(xh), headsOf(dh), headsOf(zh), eps}), gx, gy, 1)
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(dst, x compute.Buffer, wt compute.Weight, n, dim int, eps float32) {
	const op = "RMSNorm"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	w, ok3 := b.wt(op, wt)
	if !ok1 || !ok2 || !ok3 || dim <= 0 || !b.span(op, "x", xs, 0, n*dim) || !b.span(op, "dst", d, 0, n*dim) {
		return
	}
	h := compute.Heads{RowStride: dim, HeadStride: dim, Count: 1, Dim: dim}
	b.norm(op, 0, xs, h, d, h, w, nil, h, n, eps)
}

// AddRMSNorm implements compute.Backend.
func (b *Backend) AddRMSNorm(x, y, dst compute.Buffer, wt compute.Weight, n, dim int, eps float32) {
	const op = "AddRMSNorm"
	xs, ok1 := b.buf(op, x)
	ys, ok2 := b.buf(op, y)
	d, ok3 := b.buf(op, dst)
	w, ok4 := b.wt(op, wt)
	if !ok1 || !ok2 || !ok3 || !ok4 || dim <= 0 || n <= 0 || !b.span(op, "x", xs, 0, n*dim) || !b.span(op, "y", ys, 0, n*dim) ||
		!b.span(op, "dst", d, 0, n*dim) {
		return
	}
	if d == xs || d == ys {
		b.failf("AddRMSNorm: dst aliases x or y")
		return
	}
	if w.rows*w.cols != dim {
		b.failf("AddRMSNorm: weight %s has %d elements for dim %d", w.name, w.rows*w.cols, dim)
		return
	}
	wraw, ok := b.singleChunk(op, w)
	if !ok {
		return
	}
	gx, gy := grid(n)
	b.dispatch("addnorm", []uint32{wgRow, uint32(w.dt)}, []*rawBuf{xs.raw, d.raw, wraw, ys.raw},
		pushWords(&addnormPush{u32(n), u32(dim), eps}), gx, gy, 1)
}

// HeadRMSNorm implements compute.Backend.
func (b *Backend) HeadRMSNorm(x compute.Buffer, h compute.Heads, n int, wt compute.Weight, eps float32) {
	const op = "HeadRMSNorm"
	xs, ok1 := b.buf(op, x)
	w, ok2 := b.wt(op, wt)
	if !ok1 || !ok2 || !b.heads(op, "x", xs, h, n) {
		return
	}
	b.norm(op, 0, xs, h, xs, h, w, nil, h, n, eps)
}

// GatedRMSNorm implements compute.Backend.
func (b *Backend) GatedRMSNorm(x compute.Buffer, h compute.Heads, zBuf compute.Buffer, zh compute.Heads, n int, wt compute.Weight, eps float32) {
	const op = "GatedRMSNorm"
	xs, ok1 := b.buf(op, x)
	z, ok2 := b.buf(op, zBuf)
	w, ok3 := b.wt(op, wt)
	if !ok1 || !ok2 || !ok3 || !b.heads(op, "x", xs, h, n) {
		return
	}
	zh.Count, zh.Dim = h.Count, h.Dim
	if !b.heads(op, "z", z, zh, n) {
		return
	}
	b.norm(op, 1, xs, h, xs, h, w, z, zh, n, eps)
}

// L2Norm implements compute.Backend.
func (b *Backend) L2Norm(x compute.Buffer, h compute.Heads, n int, eps float32) {
	const op = "L2Norm"
	xs, ok := b.buf(op, x)
	if !ok || !b.heads(op, "x", xs, h, n) {
		return
	}
	b.norm(op, 2, xs, h, xs, h, nil, nil, h, n, eps)
}

// Rope implements compute.Backend; the table goes through the upload ring.
func (b *Backend) Rope(x compute.Buffer, h compute.Heads, n int, table []float32, rotaryDim int) {
	const op = "Rope"
	xs, ok := b.buf(op, x)
	if !ok || !b.heads(op, "x", xs, h, n) || n == 0 {
		return
	}
	if rotaryDim <= 0 || rotaryDim%2 != 0 || rotaryDim > h.Dim || len(table) < n*rotaryDim {
		b.failf("Rope: rotary dim %d for head dim %d with a table of %d for %d rows", rotaryDim, h.Dim, len(table), n)
		return
	}
	off, ok := b.ringData(float32Bytes(table[:n*rotaryDim]))
	if !ok {
		return
	}
	gx, gy := grid((n*h.Count*rotaryDim/2 + wgElem - 1) / wgElem)
	b.dispatch("rope", []uint32{wgElem}, []*rawBuf{xs.raw, b.ring.raw},
		pushWords(&ropePush{u32(n), u32(h.Count), u32(h.Off), u32(h.RowStride), u32(h.HeadStride), u32(rotaryDim), off}), gx, gy, 1)
}

// CausalConv1D implements compute.Backend with one conv.comp dispatch per
// sequence (and weight chunk).
func (b *Backend) CausalConv1D(x compute.Buffer, rowStride, channels int, wt compute.Weight, kernel int, seqs []compute.ConvSeq) {
	const op = "CausalConv1D"
	xs, ok1 := b.buf(op, x)
	w, ok2 := b.wt(op, wt)
	if !ok1 || !ok2 {
		return
	}
	if kernel < 1 || kernel > maxConvK || w.rows != channels || w.cols != kernel || channels <= 0 || rowStride < channels {
		b.failf("CausalConv1D: kernel %d, weight [%d, %d], %d channels, row stride %d", kernel, w.rows, w.cols, channels, rowStride)
		return
	}
	for i, s := range seqs {
		if s.N <= 0 {
			continue
		}
		st, ok := b.buf(op, s.State)
		if !ok {
			return
		}
		if s.Row < 0 {
			b.failf("CausalConv1D: sequence %d starts at row %d", i, s.Row)
			return
		}
		if !b.span(op, "x", xs, s.Row*rowStride, (s.N-1)*rowStride+channels) || !b.span(op, "state", st, 0, (kernel-1)*channels) {
			return
		}
		rows := []span{floats(s.Row*rowStride, (s.N-1)*rowStride+channels)} // this sequence's rows of x
		for _, c := range w.chunks {
			gx, gy := grid((c.rows + wgElem - 1) / wgElem)
			b.dispatchSpans("conv", []uint32{wgElem, uint32(w.dt)}, []*rawBuf{xs.raw, c.raw, st.raw}, rows,
				pushWords(&convPush{u32(s.Row), u32(rowStride), u32(s.N), u32(channels), u32(kernel), u32(c.row0), u32(c.rows)}), gx, gy, 1)
		}
	}
}

// GDNGates implements compute.Backend.
func (b *Backend) GDNGates(g, beta, a, bb compute.Buffer, aLog, dtBias compute.Weight, n, heads int) {
	const op = "GDNGates"
	gs, ok1 := b.buf(op, g)
	bs, ok2 := b.buf(op, beta)
	as, ok3 := b.buf(op, a)
	bin, ok4 := b.buf(op, bb)
	al, ok5 := b.wt(op, aLog)
	dt, ok6 := b.wt(op, dtBias)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || n <= 0 {
		return
	}
	m := n * heads
	if heads <= 0 || al.rows*al.cols != heads || dt.rows*dt.cols != heads {
		b.failf("GDNGates: %d heads with A_log of %d and dt_bias of %d", heads, al.rows*al.cols, dt.rows*dt.cols)
		return
	}
	if !b.span(op, "g", gs, 0, m) || !b.span(op, "beta", bs, 0, m) || !b.span(op, "a", as, 0, m) || !b.span(op, "b", bin, 0, m) {
		return
	}
	alr, ok7 := b.singleChunk(op, al)
	dtr, ok8 := b.singleChunk(op, dt)
	if !ok7 || !ok8 {
		return
	}
	gx, gy := grid((m + wgElem - 1) / wgElem)
	b.dispatch("gates", []uint32{wgElem, uint32(al.dt), uint32(dt.dt)}, []*rawBuf{gs.raw, bs.raw, as.raw, bin.raw, alr, dtr},
		pushWords(&gatesPush{u32(n), u32(heads)}), gx, gy, 1)
}

// GatedDeltaRule implements compute.Backend, sequence by sequence. A
// sequence's tokens are cut into chunks of 64 from its first token; chunks
// of at least b.deltaChunkMin tokens run the chunked form (deltachunk.comp,
// parallel over chunks), the others (decode, a prompt's last partial chunk)
// the recurrent form (one deltarule.comp dispatch, parallel over heads and
// state columns, sequential over the tokens). Each token's form thus
// depends only on its chunk, so a prompt fed in passes cut at multiples of
// 64 gives the results of one pass bit for bit, and a sequence's results do
// not depend on the others of the call.
func (b *Backend) GatedDeltaRule(ps []compute.DeltaRule) {
	for i := range ps {
		b.deltaRule(&ps[i])
	}
}

// deltaRule records the delta rule for one sequence.
func (b *Backend) deltaRule(p *compute.DeltaRule) {
	const op = "GatedDeltaRule"
	if p.N <= 0 {
		return
	}
	qkv, ok1 := b.buf(op, p.QKV)
	g, ok2 := b.buf(op, p.G)
	beta, ok3 := b.buf(op, p.Beta)
	out, ok4 := b.buf(op, p.Out)
	st, ok5 := b.buf(op, p.State)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || p.N <= 0 {
		return
	}
	if p.Nk <= 0 || p.Nv <= 0 || p.Nv%p.Nk != 0 || p.Dk <= 0 || p.Dk > 256 || p.Dv <= 0 ||
		p.Q.Count < p.Nk || p.K.Count < p.Nk || p.V.Count < p.Nv || p.Q.Dim != p.Dk || p.K.Dim != p.Dk || p.V.Dim != p.Dv {
		b.failf("GatedDeltaRule: bad shape Nk %d Nv %d Dk %d Dv %d (Dk at most 256) with q %+v k %+v v %+v", p.Nk, p.Nv, p.Dk, p.Dv, p.Q, p.K, p.V)
		return
	}
	if !b.heads(op, "q", qkv, p.Q, p.N) || !b.heads(op, "k", qkv, p.K, p.N) || !b.heads(op, "v", qkv, p.V, p.N) ||
		!b.span(op, "g", g, p.GateRow*p.Nv, p.N*p.Nv) || !b.span(op, "beta", beta, p.GateRow*p.Nv, p.N*p.Nv) ||
		!b.span(op, "out", out, p.OutRow*p.Nv*p.Dv, p.N*p.Nv*p.Dv) || !b.span(op, "state", st, 0, p.Nv*p.Dk*p.Dv) {
		return
	}
	// The chunked form takes the leading chunks; a last partial chunk
	// shorter than b.deltaChunkMin runs token by token after them.
	head := p.N
	if tail := p.N % deltaChunk; tail > 0 && tail < b.deltaChunkMin {
		head -= tail
	}
	hp := *p
	hp.N = head
	if head > 0 && b.deltaChunkMin <= deltaChunk && b.useChunked(&hp) {
		b.deltaChunked(&hp, qkv, g, beta, out, st)
	} else {
		head = 0
	}
	if head == p.N {
		return
	}
	// The rest token by token: this sequence's rows of q, k, v, the gates
	// and the output from row head on.
	rp := *p
	rp.Q, rp.K, rp.V = p.Q.Rows(head), p.K.Rows(head), p.V.Rows(head)
	rp.GateRow, rp.OutRow, rp.N = p.GateRow+head, p.OutRow+head, p.N-head
	spans := []span{headsSpan(rp.N, rp.Q, rp.K, rp.V), floats(rp.GateRow*rp.Nv, rp.N*rp.Nv), floats(rp.GateRow*rp.Nv, rp.N*rp.Nv),
		floats(rp.OutRow*rp.Nv*rp.Dv, rp.N*rp.Nv*rp.Dv)}
	b.dispatchSpans("deltarule", []uint32{wgDelta, u32(rp.Dk)}, []*rawBuf{qkv.raw, g.raw, beta.raw, out.raw, st.raw}, spans,
		pushWords(&deltarulePush{headsOf(rp.Q), headsOf(rp.K), headsOf(rp.V),
			u32(rp.GateRow), u32(rp.OutRow), u32(rp.N), rp.QScale, u32(rp.Nk), u32(rp.Nv), u32(rp.Dv)}),
		u32((rp.Dv+wgDelta-1)/wgDelta), u32(rp.Nv), 1)
}

// CausalAttention implements compute.Backend, sequence by sequence:
// kvstore.comp writes the new keys and values into the caches, then
// attention.comp (and attnmerge.comp for a split cache length) attends.
func (b *Backend) CausalAttention(ps []compute.Attention) {
	for i := range ps {
		b.causalAttention(&ps[i])
	}
}

// causalAttention records attention for one sequence.
func (b *Backend) causalAttention(p *compute.Attention) {
	const op = "CausalAttention"
	if p.N <= 0 {
		return
	}
	q, ok1 := b.buf(op, p.QBuf)
	kb, ok2 := b.buf(op, p.KBuf)
	vb, ok3 := b.buf(op, p.VBuf)
	kc, ok4 := b.buf(op, p.KCache)
	vc, ok5 := b.buf(op, p.VCache)
	out, ok6 := b.buf(op, p.Out)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || p.N <= 0 {
		return
	}
	nkv, dim, nh := p.K.Count, p.K.Dim, p.Q.Count
	if nkv <= 0 || dim <= 0 || dim > 256 || nh <= 0 || nh%nkv != 0 || p.Q.Dim != dim || p.V.Dim != dim || p.V.Count != nkv || p.Pos < 0 || p.N > 65535 || nh > 65535 {
		b.failf("CausalAttention: bad shape: q %+v k %+v v %+v, N %d (head dim at most 256)", p.Q, p.K, p.V, p.N)
		return
	}
	width := nkv * dim
	dt := cacheType(p.CacheType)
	if dt == 0 || (dt != compute.F32 && width%2 != 0) {
		b.failf("CausalAttention: cache type %v with %d elements per position", p.CacheType, width)
		return
	}
	slots := func(positions int) int { return positions * width * dt.Size() / 4 } // cache words
	if !b.heads(op, "q", q, p.Q, p.N) || !b.heads(op, "k", kb, p.K, p.N) || !b.heads(op, "v", vb, p.V, p.N) ||
		!b.span(op, "kcache", kc, 0, slots(p.Pos+p.N)) || !b.span(op, "vcache", vc, 0, slots(p.Pos+p.N)) ||
		!b.span(op, "out", out, p.OutRow*nh*dim, p.N*nh*dim) {
		return
	}
	gx, gy := grid((slots(p.N) + wgElem - 1) / wgElem)
	b.dispatchSpans("kvstore", []uint32{wgElem, uint32(dt)}, []*rawBuf{kb.raw, vb.raw, kc.raw, vc.raw},
		[]span{headsSpan(p.N, p.K), headsSpan(p.N, p.V), floats(slots(p.Pos), slots(p.N)), floats(slots(p.Pos), slots(p.N))},
		pushWords(&kvstorePush{headsOf(p.K), headsOf(p.V), u32(p.N), u32(nkv), u32(dim), u32(p.Pos)}), gx, gy, 1)
	b.attend(*p, q, kc, vc, out)
}

// cacheType returns the element type of a compute.Attention cache (zero
// meaning F32), or 0 for an unsupported one.
func cacheType(dt compute.DType) compute.DType {
	switch dt {
	case 0, compute.F32:
		return compute.F32
	case compute.BF16, compute.F16:
		return dt
	}
	return 0
}

// Tiling of attention.comp (its RB and BK).
const (
	attnRows  = 8  // query rows per workgroup
	attnBlock = 16 // cache positions per block; split lengths are multiples
	// attnMinSplit is the cache positions of one split on devices that
	// split the cache length (GPUs).
	attnMinSplit = 256
	// attnPartCap bounds the partial results of one attention dispatch;
	// rows beyond it run in further dispatches.
	attnPartCap = 64 << 20
)

// attnSplit returns the cache positions per split of an attention whose
// longest row attends over limit positions. It never depends on the rows
// of the call: every query row reduces over the same absolute splits of
// the cache, and within them the same blocks of attnBlock positions,
// whichever piece of a prompt it is computed in and whatever rows share
// the dispatch, so prefill cut at any multiple of attnBlock gives the
// results of one pass bit for bit (a row with one split writes the same
// bits as the merge of one split). GPUs (b.attnTarget > 1) split at
// attnMinSplit positions so that decode on a long context fills the
// device; CPU devices never split. b.attnSplitLen, when set (tests),
// fixes the length instead.
func (b *Backend) attnSplit(limit int) int {
	roundUp := func(v int) int { return (max(v, 1) + attnBlock - 1) / attnBlock * attnBlock }
	switch {
	case b.attnSplitLen > 0:
		return roundUp(b.attnSplitLen)
	case b.attnTarget > 1:
		return attnMinSplit
	}
	return roundUp(limit)
}

// attend records attention.comp (and attnmerge.comp when the cache length
// is split) for p, whose caches already hold the new keys and values. When
// the partial results of all of p's rows would exceed attnPartCap (or one
// binding), the rows run in batches of tokens, each with its own
// dispatches (a row's arithmetic does not depend on the rows beside it).
func (b *Backend) attend(p compute.Attention, q, kc, vc, out *buffer) {
	nh, dim := p.Q.Count, p.Q.Dim
	splitLen := b.attnSplit(p.Pos + p.N)
	nsplit := (p.Pos + p.N + splitLen - 1) / splitLen
	batch := p.N
	if nsplit > 1 {
		per := uint64(nh*nsplit*(dim+2)) * 4 // partial bytes per token
		batch = max(1, min(p.N, int(min(b.maxBinding, attnPartCap)/per)))
	}
	for t0 := 0; t0 < p.N; t0 += batch {
		sub := p
		sub.N = min(batch, p.N-t0)
		sub.Pos = p.Pos + t0
		sub.Q = p.Q.Rows(t0)
		sub.OutRow = p.OutRow + t0
		b.attendRows(sub, q, kc, vc, out, splitLen)
	}
}

// attendRows records the dispatches of attend for one batch of rows.
func (b *Backend) attendRows(p compute.Attention, q, kc, vc, out *buffer, splitLen int) {
	nkv, dim, nh := p.K.Count, p.K.Dim, p.Q.Count
	rowBlocks := (p.N*(nh/nkv) + attnRows - 1) / attnRows
	groups := nkv * rowBlocks
	nsplit := (p.Pos + p.N + splitLen - 1) / splitLen
	part := b.dummy
	partML := 0
	if nsplit > 1 {
		partML = p.N * nh * nsplit * dim
		size := uint64(partML+2*p.N*nh*nsplit) * 4
		if b.attnPart == nil || b.attnPart.size < size {
			r, err := b.newRaw(size, memDevice)
			if err != nil {
				b.fail(fmt.Errorf("vulkan: attention partials: %w", err))
				return
			}
			if b.attnPart != nil {
				if b.rec.busy() {
					b.pending = append(b.pending, b.attnPart)
				} else {
					b.attnPart.destroy(b)
				}
			}
			b.attnPart = r
		}
		part = b.attnPart
	}
	if nsplit > 65535 {
		b.failf("CausalAttention: %d splits of %d positions exceed the dispatch limit", nsplit, splitLen)
		return
	}
	gx, gy := grid(groups)
	outRows := floats(p.OutRow*nh*dim, p.N*nh*dim)
	dt := cacheType(p.CacheType)
	cache := floats(0, (p.Pos+p.N)*nkv*dim*dt.Size()/4)
	b.dispatchSpans("attention", []uint32{uint32(dt)}, []*rawBuf{q.raw, kc.raw, vc.raw, out.raw, part},
		[]span{headsSpan(p.N, p.Q), cache, cache, outRows},
		pushWords(&attentionPush{headsOf(p.Q), u32(nh), u32(nkv), u32(dim), u32(p.Pos), u32(p.OutRow), p.Scale,
			u32(p.N), u32(splitLen), u32(nsplit), u32(rowBlocks), u32(partML)}),
		gx, gy, u32(nsplit))
	if nsplit > 1 {
		gx, gy := grid(p.N * nh)
		b.dispatchSpans("attnmerge", nil, []*rawBuf{0: part, 3: out.raw}, []span{3: outRows},
			pushWords(&attnmergePush{u32(nh), u32(dim), u32(p.N), u32(p.Pos), u32(p.OutRow), u32(splitLen), u32(nsplit), u32(partML)}),
			gx, gy, 1)
	}
}

// eltwise records d = f(a, b) over rows × count × dim with per-operand
// layouts.
func (b *Backend) eltwise(mode uint32, rows, count, dim int, d *buffer, dh compute.Heads, a *buffer, ah compute.Heads, bb *buffer, bh compute.Heads) {
	total := rows * count * dim
	if total <= 0 {
		return
	}
	gx, gy := grid((total + wgElem - 1) / wgElem)
	b.dispatch("eltwise", []uint32{wgElem, mode}, []*rawBuf{d.raw, a.raw, bb.raw},
		pushWords(&eltwisePush{u32(rows), u32(count), u32(dim), headsOf(dh), headsOf(ah), headsOf(bh)}), gx, gy, 1)
}

// SigmoidMul implements compute.Backend.
func (b *Backend) SigmoidMul(x compute.Buffer, xh compute.Heads, gate compute.Buffer, gh compute.Heads, n int) {
	const op = "SigmoidMul"
	xs, ok1 := b.buf(op, x)
	gs, ok2 := b.buf(op, gate)
	if !ok1 || !ok2 || !b.heads(op, "x", xs, xh, n) {
		return
	}
	gh.Count, gh.Dim = xh.Count, xh.Dim
	if !b.heads(op, "gate", gs, gh, n) {
		return
	}
	b.eltwise(2, n, xh.Count, xh.Dim, xs, xh, xs, xh, gs, gh)
}

// flat is the layout of n contiguous elements.
func flat(n int) compute.Heads { return compute.Heads{RowStride: n, HeadStride: n, Count: 1, Dim: n} }

// SiLUMul implements compute.Backend.
func (b *Backend) SiLUMul(dst, gate, up compute.Buffer, n int) {
	const op = "SiLUMul"
	d, ok1 := b.buf(op, dst)
	g, ok2 := b.buf(op, gate)
	u, ok3 := b.buf(op, up)
	if !ok1 || !ok2 || !ok3 || !b.span(op, "dst", d, 0, n) || !b.span(op, "gate", g, 0, n) || !b.span(op, "up", u, 0, n) {
		return
	}
	b.eltwise(0, 1, 1, n, d, flat(n), g, flat(n), u, flat(n))
}

// Add implements compute.Backend.
func (b *Backend) Add(dst, x compute.Buffer, n int) {
	const op = "Add"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, x)
	if !ok1 || !ok2 || !b.span(op, "dst", d, 0, n) || !b.span(op, "x", xs, 0, n) {
		return
	}
	b.eltwise(1, 1, 1, n, d, flat(n), d, flat(n), xs, flat(n))
}

// SumRows implements compute.Backend: one thread per result element sums
// its row's terms in order; the terms' lists travel in the ring buffer.
func (b *Backend) SumRows(dst, src compute.Buffer, dim int, s compute.RowSums) {
	const op = "SumRows"
	d, ok1 := b.buf(op, dst)
	xs, ok2 := b.buf(op, src)
	rows := s.Rows()
	if !ok1 || !ok2 || rows == 0 || dim <= 0 || !b.span(op, "dst", d, 0, rows*dim) {
		return
	}
	if err := s.Check(xs.n / dim); err != nil {
		b.failf("SumRows: %v", err)
		return
	}
	if d.raw == xs.raw {
		b.failf("SumRows: dst is src")
		return
	}
	terms := len(s.Src)
	words := make([]int32, 0, len(s.Start)+2*terms)
	words = append(words, s.Start...)
	words = append(words, s.Src...)
	for _, w := range s.Weight {
		words = append(words, int32(math.Float32bits(w)))
	}
	off, ok := b.ringData(int32Bytes(words))
	if !ok {
		return
	}
	n := uint32(len(s.Start))
	gx, gy := grid((rows*dim + wgElem - 1) / wgElem)
	b.dispatch("sumrows", []uint32{wgElem}, []*rawBuf{d.raw, xs.raw, b.ring.raw},
		pushWords(&sumrowsPush{u32(rows), u32(dim), off, off + n, off + n + u32(terms)}), gx, gy, 1)
}

// Argmax implements compute.Backend: the reduction runs on the device and
// only len(dst) indices come back.
func (b *Backend) Argmax(ctx context.Context, dst []int32, x compute.Buffer, dim int) error {
	xs, ok := x.(*buffer)
	if !ok || xs == nil || xs.raw == nil {
		return fmt.Errorf("vulkan: Argmax of %T, not a live buffer of this backend", x)
	}
	rows := len(dst)
	if dim <= 0 || rows*dim > xs.n {
		return fmt.Errorf("vulkan: Argmax of %d rows of %d in a buffer of %d", rows, dim, xs.n)
	}
	if rows == 0 {
		return b.Sync(ctx)
	}
	if b.argmaxBuf == nil || b.argmaxBuf.size < uint64(rows)*4 {
		r, err := b.newRaw(uint64(max(rows, 64))*4, memDevice)
		if err != nil {
			return fmt.Errorf("vulkan: Argmax output: %w", err)
		}
		if b.argmaxBuf != nil {
			if b.rec.busy() {
				b.pending = append(b.pending, b.argmaxBuf)
			} else {
				b.argmaxBuf.destroy(b)
			}
		}
		b.argmaxBuf = r
	}
	gx, gy := grid(rows)
	b.dispatch("argmax", nil, []*rawBuf{xs.raw, b.argmaxBuf}, pushWords(&argmaxPush{Rows: u32(rows), Dim: u32(dim)}), gx, gy, 1)
	if err := b.report(); err != nil {
		b.flush(ctx)
		return err
	}
	data, err := b.readInto(ctx, b.argmaxBuf, 0, uint64(rows)*4)
	if err == nil {
		copy(int32Bytes(dst), data)
	}
	return joinErr(err, b.report())
}
