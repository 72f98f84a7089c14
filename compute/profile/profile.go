// Package profile wraps a compute.Backend and times every operation it
// runs, grouping matrix products by the weight they use (q_proj, gate_proj,
// lm_head, ...), so that a run on a backend that computes eagerly (the CPU
// backend, whose operations return when their results are ready) says
// where its time goes.
//
// On a backend that records operations and runs them later (Vulkan), the
// times are those of recording, not of the device: use that backend's own
// profiler there.
package profile

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/compute"
)

// Entry is the total time and count of one operation.
type Entry struct {
	// Op names the operation: "matmul <weight>" for matrix products (see
	// [WeightRole]), else the operation ("rmsnorm", "delta_rule",
	// "attention", ...).
	Op string
	// Count is how many calls ran.
	Count int
	// Time is their total wall time.
	Time time.Duration
}

// Backend is a compute.Backend that times the operations of another. Its
// weights wrap the inner backend's, carrying their names; they must only be
// passed to the Backend that made them.
type Backend struct {
	inner compute.Backend

	mu     sync.Mutex
	totals map[string]*Entry
	// phased is the time of the inner backend's phases (PhaseReporter)
	// since the current operation began, which done leaves out of the
	// operation's own.
	phased time.Duration
}

// New returns a backend that runs every operation on inner and times it.
// Closing it closes inner.
//
// Where inner reports phases of its operations (compute.PhaseReporter),
// each phase is an entry of its own ("matmul quantize inputs" for the CPU
// backend's quantizing of a product's inputs), and the operation's entry
// holds the rest of its time.
func New(inner compute.Backend) *Backend {
	b := &Backend{inner: inner, totals: map[string]*Entry{}}
	if pr, ok := inner.(compute.PhaseReporter); ok {
		pr.ReportPhases(b.phase)
	}
	return b
}

// phase records an inner backend's phase of d under "matmul " + name and
// takes it out of the current operation's time.
func (b *Backend) phase(name string, d time.Duration) {
	b.mu.Lock()
	b.add("matmul "+name, d)
	b.phased += d
	b.mu.Unlock()
}

// Inner returns the wrapped backend.
func (b *Backend) Inner() compute.Backend { return b.inner }

// QuantizesInputs reports whether the inner backend quantizes MatMul inputs
// for weights of dtype dt (computetest.InputQuantizer), false when it does
// not say.
func (b *Backend) QuantizesInputs(dt compute.DType) bool {
	iq, ok := b.inner.(interface{ QuantizesInputs(compute.DType) bool })
	return ok && iq.QuantizesInputs(dt)
}

// Profile returns the operations timed since the last ResetProfile,
// largest total time first (ties by name).
func (b *Backend) Profile() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Entry, 0, len(b.totals))
	for _, e := range b.totals {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(x, y Entry) int {
		if c := cmp.Compare(y.Time, x.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Op, y.Op)
	})
	return out
}

// ResetProfile forgets the operations timed so far.
func (b *Backend) ResetProfile() {
	b.mu.Lock()
	clear(b.totals)
	b.mu.Unlock()
}

// done adds the time since start to op, less the inner backend's phases
// recorded meanwhile.
func (b *Backend) done(op string, start time.Time) {
	d := time.Since(start)
	b.mu.Lock()
	b.add(op, d-b.phased)
	b.phased = 0
	b.mu.Unlock()
}

// add counts one call of op taking d. The caller holds b.mu.
func (b *Backend) add(op string, d time.Duration) {
	e := b.totals[op]
	if e == nil {
		e = &Entry{Op: op}
		b.totals[op] = e
	}
	e.Count++
	e.Time += d
}

// weight is an inner weight with its name and the op its products are
// counted under.
type weight struct {
	compute.Weight
	name string
	op   string // "matmul " + WeightRole(name)
}

// unwrap returns the inner backend's weight.
func unwrap(w compute.Weight) compute.Weight {
	if pw, ok := w.(*weight); ok {
		return pw.Weight
	}
	return w
}

// Name returns the name a weight of this backend was loaded under, or ""
// for another weight.
func Name(w compute.Weight) string {
	if pw, ok := w.(*weight); ok {
		return pw.name
	}
	return ""
}

// WeightRole returns the short name of a checkpoint weight that products
// are grouped under: the last component before ".weight" ("q_proj",
// "in_proj_qkv", "gate_proj", ...), and "lm_head" for the output matrix,
// also when it is the (tied) embedding table.
func WeightRole(name string) string {
	s := strings.TrimSuffix(name, ".weight")
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		s = s[i+1:]
	}
	if s == "embed_tokens" {
		return "lm_head"
	}
	return s
}

// Name implements compute.Backend: the inner backend's name.
func (b *Backend) Name() string { return b.inner.Name() }

// Close implements compute.Backend: it closes the inner backend.
func (b *Backend) Close() error { return b.inner.Close() }

// LoadWeight implements compute.Backend. Loading is not timed.
func (b *Backend) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	w, err := b.inner.LoadWeight(name, dt, rows, cols, data)
	if err != nil {
		return nil, err
	}
	return &weight{Weight: w, name: name, op: "matmul " + WeightRole(name)}, nil
}

// LoadTable implements compute.TableLoader: the inner backend's, or its
// LoadWeight where it has none.
func (b *Backend) LoadTable(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	tl, ok := b.inner.(compute.TableLoader)
	if !ok {
		return b.LoadWeight(name, dt, rows, cols, data)
	}
	w, err := tl.LoadTable(name, dt, rows, cols, data)
	if err != nil {
		return nil, err
	}
	return &weight{Weight: w, name: name, op: "matmul " + WeightRole(name)}, nil
}

// NewBuffer implements compute.Backend, timed as "alloc".
func (b *Backend) NewBuffer(n int) (compute.Buffer, error) {
	defer b.done("alloc", time.Now())
	return b.inner.NewBuffer(n)
}

// Free implements compute.Backend, timed as "alloc".
func (b *Backend) Free(x compute.Buffer) {
	defer b.done("alloc", time.Now())
	b.inner.Free(x)
}

// Upload implements compute.Backend.
func (b *Backend) Upload(dst compute.Buffer, off int, src []float32) error {
	defer b.done("upload", time.Now())
	return b.inner.Upload(dst, off, src)
}

// Download implements compute.Backend.
func (b *Backend) Download(ctx context.Context, dst []float32, src compute.Buffer, off int) error {
	defer b.done("download", time.Now())
	return b.inner.Download(ctx, dst, src, off)
}

// Sync implements compute.Backend.
func (b *Backend) Sync(ctx context.Context) error {
	defer b.done("sync", time.Now())
	return b.inner.Sync(ctx)
}

// Copy implements compute.Backend.
func (b *Backend) Copy(dst compute.Buffer, dstOff int, src compute.Buffer, srcOff int, n int) {
	defer b.done("copy", time.Now())
	b.inner.Copy(dst, dstOff, src, srcOff, n)
}

// Embed implements compute.Backend.
func (b *Backend) Embed(dst compute.Buffer, table compute.Weight, ids []int32) {
	defer b.done("embed", time.Now())
	b.inner.Embed(dst, unwrap(table), ids)
}

// MatMul implements compute.Backend, timed as "matmul <weight role>".
func (b *Backend) MatMul(dst compute.Buffer, x compute.Buffer, w compute.Weight, n int) {
	defer b.done(matMulOp(w), time.Now())
	b.inner.MatMul(dst, x, unwrap(w), n)
}

// matMulOp names the product by w's role ("matmul" for a weight of
// another backend).
func matMulOp(w compute.Weight) string {
	if pw, ok := w.(*weight); ok {
		return pw.op
	}
	return "matmul"
}

// AttentionDependsOnRows implements compute.RowDependentAttention as the
// backend it wraps does.
func (b *Backend) AttentionDependsOnRows() bool {
	ra, ok := b.inner.(compute.RowDependentAttention)
	return ok && ra.AttentionDependsOnRows()
}

// MatMulDecode implements compute.DecodeMatMuler, timed as MatMul; on an
// inner backend without decode kernels it is MatMul.
func (b *Backend) MatMulDecode(dst compute.Buffer, x compute.Buffer, w compute.Weight, n, decode int) {
	dm, ok := b.inner.(compute.DecodeMatMuler)
	if !ok {
		b.MatMul(dst, x, w, n)
		return
	}
	defer b.done(matMulOp(w), time.Now())
	dm.MatMulDecode(dst, x, unwrap(w), n, decode)
}

// BatchesMatMuls implements compute.MatMulBatcher: whether the inner
// backend batches products.
func (b *Backend) BatchesMatMuls() bool {
	bm, ok := b.inner.(compute.MatMulBatcher)
	return ok && bm.BatchesMatMuls()
}

// MatMuls implements compute.MatMulBatcher, timed as one product named by
// its parts' weight roles in order ("matmul gate_proj+up_proj"). Call it
// only where BatchesMatMuls reports true.
func (b *Backend) MatMuls(parts []compute.MatMulPart) {
	inner := make([]compute.MatMulPart, len(parts))
	var op strings.Builder
	seen := map[string]bool{}
	for i, p := range parts {
		inner[i] = p
		inner[i].W = unwrap(p.W)
		name := strings.TrimPrefix(matMulOp(p.W), "matmul ")
		if !seen[name] {
			seen[name] = true
			if op.Len() > 0 {
				op.WriteByte('+')
			}
			op.WriteString(name)
		}
	}
	defer b.done("matmul "+op.String(), time.Now())
	b.inner.(compute.MatMulBatcher).MatMuls(inner)
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(dst, x compute.Buffer, w compute.Weight, n, dim int, eps float32) {
	defer b.done("rmsnorm", time.Now())
	b.inner.RMSNorm(dst, x, unwrap(w), n, dim, eps)
}

// AddRMSNorm implements compute.Backend.
func (b *Backend) AddRMSNorm(x, y, dst compute.Buffer, w compute.Weight, n, dim int, eps float32) {
	defer b.done("add_rmsnorm", time.Now())
	b.inner.AddRMSNorm(x, y, dst, unwrap(w), n, dim, eps)
}

// HeadRMSNorm implements compute.Backend.
func (b *Backend) HeadRMSNorm(x compute.Buffer, h compute.Heads, n int, w compute.Weight, eps float32) {
	defer b.done("head_rmsnorm", time.Now())
	b.inner.HeadRMSNorm(x, h, n, unwrap(w), eps)
}

// GatedRMSNorm implements compute.Backend.
func (b *Backend) GatedRMSNorm(x compute.Buffer, h compute.Heads, zBuf compute.Buffer, zh compute.Heads, n int, w compute.Weight, eps float32) {
	defer b.done("gated_rmsnorm", time.Now())
	b.inner.GatedRMSNorm(x, h, zBuf, zh, n, unwrap(w), eps)
}

// L2Norm implements compute.Backend.
func (b *Backend) L2Norm(x compute.Buffer, h compute.Heads, n int, eps float32) {
	defer b.done("l2norm", time.Now())
	b.inner.L2Norm(x, h, n, eps)
}

// Rope implements compute.Backend.
func (b *Backend) Rope(x compute.Buffer, h compute.Heads, n int, table []float32, rotaryDim int) {
	defer b.done("rope", time.Now())
	b.inner.Rope(x, h, n, table, rotaryDim)
}

// CausalConv1D implements compute.Backend, timed as "conv".
func (b *Backend) CausalConv1D(x compute.Buffer, rowStride, channels int, w compute.Weight, kernel int, seqs []compute.ConvSeq) {
	defer b.done("conv", time.Now())
	b.inner.CausalConv1D(x, rowStride, channels, unwrap(w), kernel, seqs)
}

// GDNGates implements compute.Backend, timed as "gdn_gates".
func (b *Backend) GDNGates(g, beta, a, bb compute.Buffer, aLog, dtBias compute.Weight, n, heads int) {
	defer b.done("gdn_gates", time.Now())
	b.inner.GDNGates(g, beta, a, bb, unwrap(aLog), unwrap(dtBias), n, heads)
}

// GatedDeltaRule implements compute.Backend, timed as "delta_rule" (the
// Gated DeltaNet recurrence).
func (b *Backend) GatedDeltaRule(ps []compute.DeltaRule) {
	defer b.done("delta_rule", time.Now())
	b.inner.GatedDeltaRule(ps)
}

// CausalAttention implements compute.Backend, timed as "attention".
func (b *Backend) CausalAttention(ps []compute.Attention) {
	defer b.done("attention", time.Now())
	b.inner.CausalAttention(ps)
}

// SigmoidMul implements compute.Backend.
func (b *Backend) SigmoidMul(x compute.Buffer, xh compute.Heads, gate compute.Buffer, gh compute.Heads, n int) {
	defer b.done("sigmoid_mul", time.Now())
	b.inner.SigmoidMul(x, xh, gate, gh, n)
}

// SiLUMul implements compute.Backend.
func (b *Backend) SiLUMul(dst, gate, up compute.Buffer, n int) {
	defer b.done("silu_mul", time.Now())
	b.inner.SiLUMul(dst, gate, up, n)
}

// SwiGLU implements compute.Backend, timed as "swiglu".
func (b *Backend) SwiGLU(dst, x compute.Buffer, n, width int) {
	defer b.done("swiglu", time.Now())
	b.inner.SwiGLU(dst, x, n, width)
}

// Add implements compute.Backend.
func (b *Backend) Add(dst, x compute.Buffer, n int) {
	defer b.done("add", time.Now())
	b.inner.Add(dst, x, n)
}

// SumRows implements compute.Backend, timed as "sum_rows".
func (b *Backend) SumRows(dst, src compute.Buffer, dim int, s compute.RowSums) {
	defer b.done("sum_rows", time.Now())
	b.inner.SumRows(dst, src, dim, s)
}

// Argmax implements compute.Backend.
func (b *Backend) Argmax(ctx context.Context, dst []int32, x compute.Buffer, dim int) error {
	defer b.done("argmax", time.Now())
	return b.inner.Argmax(ctx, dst, x, dim)
}

// LayerNorm implements compute.Backend, timed as "layer_norm".
func (b *Backend) LayerNorm(dst, x compute.Buffer, w, bias compute.Weight, n, dim int, eps float32) {
	defer b.done("layer_norm", time.Now())
	b.inner.LayerNorm(dst, x, unwrap(w), unwrap(bias), n, dim, eps)
}

// AddBias implements compute.Backend, timed as "bias".
func (b *Backend) AddBias(x compute.Buffer, bias compute.Weight, n, dim int) {
	defer b.done("bias", time.Now())
	b.inner.AddBias(x, unwrap(bias), n, dim)
}

// GELU implements compute.Backend, timed as "gelu".
func (b *Backend) GELU(x compute.Buffer, n int, form compute.GELUForm) {
	defer b.done("gelu", time.Now())
	b.inner.GELU(x, n, form)
}

// SegmentAttention implements compute.Backend, timed as
// "segment_attention".
func (b *Backend) SegmentAttention(out, x compute.Buffer, q, k, v compute.Heads, n, segLen int, scale float32) {
	defer b.done("segment_attention", time.Now())
	b.inner.SegmentAttention(out, x, q, k, v, n, segLen, scale)
}

var _ compute.Backend = (*Backend)(nil)
