// Package compute defines the narrow set of tensor operations the Qwen3.5
// graph needs, and the Backend interface that CPU and GPU implementations
// satisfy.
//
// A Backend owns memory and kernels; the model owns the graph. Activations
// live in float32 Buffers allocated by the backend; weights live in Weights in
// their stored dtype (bf16, f16 or f32), never expanded to a float32 copy.
//
// Operations are issued in program order. A backend may run them eagerly (the
// CPU backend) or record them and run them later (a GPU backend records a
// whole step into one command buffer); Download and Sync are the points where
// results become visible to the caller and where errors surface. Operations
// that take Go slices (token ids, rope tables) copy what they need before
// returning, so the caller may reuse the slice (including the slices of
// per-sequence descriptions).
//
// The per-sequence operations of a step (CausalConv1D, GatedDeltaRule,
// CausalAttention) take all of the step's sequences at once, so a backend can
// spread them over its cores or into one dispatch. A sequence's results must
// be bit for bit the same whatever other sequences share the call: that is
// what makes greedy output identical alone and in a batch.
//
// Shapes are row-major. "n rows of dim" means a [n, dim] matrix starting at
// element 0 of a buffer unless an offset is given. Heads describes head vectors
// embedded in wider rows (for example the query part of a fused q/gate
// projection).
package compute

import (
	"context"
	"fmt"
	"time"

	"github.com/govinfer/govinfer/quant"
)

// DType is the element type of a stored weight.
type DType uint8

// Weight element types: plain floats, and GGML's quantized block formats
// (package quant has their layouts), whose rows are whole blocks.
const (
	F32 DType = iota + 1
	F16
	BF16
	Q8_0
	Q4_K
	Q5_K
	Q6_K
)

// String returns the safetensors name of a float dtype, GGML's name of a
// block format.
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	}
	if q := d.Quant(); q != quant.Keep {
		return q.String()
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the number of bytes per element of a float dtype, and 0 for
// block formats (see RowBytes).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// Quant returns the block format of a quantized dtype, quant.Keep for the
// others.
func (d DType) Quant() quant.Type {
	switch d {
	case Q8_0:
		return quant.Q8_0
	case Q4_K:
		return quant.Q4_K
	case Q5_K:
		return quant.Q5_K
	case Q6_K:
		return quant.Q6_K
	}
	return quant.Keep
}

// QuantDType returns the dtype of a block format.
func QuantDType(t quant.Type) (DType, bool) {
	for _, d := range []DType{Q8_0, Q4_K, Q5_K, Q6_K} {
		if d.Quant() == t {
			return d, true
		}
	}
	return 0, false
}

// RowBytes returns the bytes of a row of cols elements, or 0 when the dtype
// is unknown or cols is not a whole number of its blocks.
func (d DType) RowBytes(cols int) int {
	if s := d.Size(); s > 0 {
		return cols * s
	}
	if q := d.Quant(); q != quant.Keep && q.Fits(cols) {
		return q.RowBytes(cols)
	}
	return 0
}

// Buffer is a float32 array in backend memory. Buffers are created by
// Backend.NewBuffer and released by Backend.Free.
type Buffer interface {
	// Len returns the number of float32 elements.
	Len() int
}

// Weight is a [Rows, Cols] row-major matrix (or a vector, Rows == 1) in
// backend memory, kept in its stored dtype. Quantized weights are only ever
// the matrix of a MatMul or the table of an Embed.
type Weight interface {
	Rows() int
	Cols() int
	DType() DType
}

// DataOwner is implemented by weights that may hold their own copy of the
// bytes LoadWeight was given (rearranged for the kernels, say). When
// OwnsData is true the loader can give the source's pages back, as it
// does for converted data.
type DataOwner interface {
	OwnsData() bool
}

// Heads locates head vectors inside the rows of a buffer: head h of row r
// starts at element Off + r*RowStride + h*HeadStride and has Dim elements.
type Heads struct {
	Off, RowStride, HeadStride, Count, Dim int
}

// Head returns the element offset of head h of row r.
func (hs Heads) Head(r, h int) int { return hs.Off + r*hs.RowStride + h*hs.HeadStride }

// Rows returns the same heads shifted down by r rows.
func (hs Heads) Rows(r int) Heads { hs.Off += r * hs.RowStride; return hs }

// DenseHeads returns the layout of count contiguous heads of dim elements per
// row, rows packed back to back.
func DenseHeads(count, dim int) Heads {
	return Heads{RowStride: count * dim, HeadStride: dim, Count: count, Dim: dim}
}

// DeltaRule describes one sequence's slice of a gated delta rule step: n
// tokens whose q, k and v heads live in the given buffers, with per-token,
// per-value-head decay g (log space) and write strength beta stored as [n, Nv]
// rows starting at row GateRow of G and Beta. Out receives the [n, Nv*Dv]
// outputs starting at row OutRow. Value head h reads key head h/(Nv/Nk).
// State is the sequence's recurrent state, [Nv, Dk, Dv] float32, updated in
// place. QScale multiplies q after its L2 normalisation (dk^-0.5). A
// sequence with N <= 0 is skipped: nothing is read or written.
type DeltaRule struct {
	Q, K, V Heads
	QKV     Buffer
	G, Beta Buffer
	GateRow int
	Out     Buffer
	OutRow  int
	State   Buffer
	N       int
	QScale  float32
	Nk, Nv  int
	Dk, Dv  int
}

// Attention describes one sequence's slice of a causal attention step: N new
// tokens at positions Pos..Pos+N-1. Their keys and values (K heads in KBuf, V
// heads in VBuf) are first written to the caches at those positions; then each query head
// attends over cache positions 0..its own position. KCache and VCache are
// [capacity, KVHeads*HeadDim]. Out receives [N, Heads*HeadDim] rows starting
// at row OutRow. A sequence with N <= 0 is skipped: nothing is read or
// written.
//
// CacheType is the caches' element type: F32 (or zero), or BF16 or F16,
// whose caches pack two 16-bit elements into each float32 slot (element i
// of a row in the low half of slot i/2 when i is even, the high half when
// odd, little-endian), so they are Buffers of capacity*KVHeads*HeadDim/2
// slots. New keys and values are rounded to the cache type (to nearest,
// ties to even) when stored, and attention reads the stored values, so a
// prompt's results do not depend on which step stored which position.
type Attention struct {
	Q              Heads
	QBuf           Buffer
	K              Heads
	KBuf           Buffer
	V              Heads
	VBuf           Buffer
	KCache, VCache Buffer
	CacheType      DType
	Out            Buffer
	OutRow         int
	Pos, N         int
	Scale          float32
}

// ConvSeq is one sequence's slice of a causal convolution step: N tokens in
// rows Row..Row+N-1 of the convolved buffer, and State, the sequence's last
// kernel-1 raw inputs [kernel-1, channels], read and updated. A sequence with
// N <= 0 is skipped: its state is left as it is.
type ConvSeq struct {
	Row, N int
	State  Buffer
}

// RowSums lists the terms of Backend.SumRows: row r of the result sums
// the terms Start[r] to Start[r+1]-1, term j being row Src[j] of the
// source times Weight[j]. Start has one entry more than the result has
// rows; Src and Weight have Start[len(Start)-1] entries.
type RowSums struct {
	Start  []int32
	Src    []int32
	Weight []float32
}

// Rows returns the number of result rows.
func (s RowSums) Rows() int { return max(len(s.Start)-1, 0) }

// Check reports whether s is well formed for a source of srcRows rows:
// Start non-decreasing from 0 to len(Src) == len(Weight), every Src in
// range.
func (s RowSums) Check(srcRows int) error {
	if len(s.Src) != len(s.Weight) {
		return fmt.Errorf("RowSums: %d sources for %d weights", len(s.Src), len(s.Weight))
	}
	if len(s.Start) == 0 {
		if len(s.Src) != 0 {
			return fmt.Errorf("RowSums: %d terms without rows", len(s.Src))
		}
		return nil
	}
	if s.Start[0] != 0 || int(s.Start[len(s.Start)-1]) != len(s.Src) {
		return fmt.Errorf("RowSums: starts run from %d to %d for %d terms", s.Start[0], s.Start[len(s.Start)-1], len(s.Src))
	}
	for r := 1; r < len(s.Start); r++ {
		if s.Start[r] < s.Start[r-1] {
			return fmt.Errorf("RowSums: start %d of row %d before %d of row %d", s.Start[r], r, s.Start[r-1], r-1)
		}
	}
	for j, src := range s.Src {
		if src < 0 || int(src) >= srcRows {
			return fmt.Errorf("RowSums: term %d reads row %d of %d", j, src, srcRows)
		}
	}
	return nil
}

// Backend executes the operations of the Qwen3.5 graph.
type Backend interface {
	// Name identifies the backend and its device, for logs.
	Name() string
	// Close releases all memory; the backend is unusable afterwards.
	Close() error

	// LoadWeight makes a weight of the given dtype and shape from its raw
	// little-endian bytes. The CPU backend may keep a reference to data (a
	// memory map), so data must stay valid and unmodified until Close.
	LoadWeight(name string, dt DType, rows, cols int, data []byte) (Weight, error)
	// NewBuffer allocates a zeroed float32 buffer of n elements.
	NewBuffer(n int) (Buffer, error)
	// Free releases a buffer. Freeing nil is a no-op. Operations already
	// issued that use b still see its contents: a deferred backend releases
	// the memory only after they complete.
	Free(b Buffer)
	// Upload copies src into dst starting at element off.
	Upload(dst Buffer, off int, src []float32) error
	// Download waits for pending work and copies len(dst) elements of src
	// starting at element off into dst.
	Download(ctx context.Context, dst []float32, src Buffer, off int) error
	// Sync waits for all pending work and reports any error it raised.
	Sync(ctx context.Context) error

	// Copy copies n elements: dst[dstOff:] = src[srcOff:].
	Copy(dst Buffer, dstOff int, src Buffer, srcOff int, n int)
	// Embed gathers rows of table: dst[i, :] = table[ids[i], :].
	Embed(dst Buffer, table Weight, ids []int32)
	// MatMul computes dst[n, w.Rows] = x[n, w.Cols] · wᵀ. With a weight of
	// a block format, a backend may first quantize each input row to 8-bit
	// blocks as GGML's CPU code does (the CPU backend does; see
	// asm.MatMulQ), or multiply the dequantized weights by the inputs as
	// they are (the Vulkan shaders do).
	MatMul(dst Buffer, x Buffer, w Weight, n int)
	// RMSNorm computes dst[r] = x[r] / sqrt(mean(x[r]²) + eps) * (1 + w) for n
	// rows of dim, with w a [dim] weight (Qwen3.5's zero-centred norm).
	RMSNorm(dst, x Buffer, w Weight, n, dim int, eps float32)
	// AddRMSNorm adds y to x in place and normalises the sums into dst:
	// x[r] += y[r]; dst[r] = RMSNorm of x[r] with (1 + w), for n rows of
	// dim (a residual add and the next norm, as one operation). dst must
	// not alias x or y.
	AddRMSNorm(x, y, dst Buffer, w Weight, n, dim int, eps float32)
	// HeadRMSNorm applies the (1 + w) RMSNorm in place to every head vector of
	// n rows, with w a [Dim] weight.
	HeadRMSNorm(x Buffer, h Heads, n int, w Weight, eps float32)
	// GatedRMSNorm computes, in place for every head of n rows,
	// x = x / sqrt(mean(x²) + eps) * w * silu(z), with w a [Dim] weight and z
	// laid out like x (in zBuf with layout zh).
	GatedRMSNorm(x Buffer, h Heads, zBuf Buffer, zh Heads, n int, w Weight, eps float32)
	// L2Norm normalises every head vector of n rows in place:
	// x = x / sqrt(sum(x²) + eps).
	L2Norm(x Buffer, h Heads, n int, eps float32)
	// Rope rotates the first rotaryDim elements of every head of n rows in
	// place, rotate-half (NeoX) style: element i pairs with i + rotaryDim/2.
	// table holds n rows of [cos(rotaryDim/2) | sin(rotaryDim/2)] values, one
	// row per token.
	Rope(x Buffer, h Heads, n int, table []float32, rotaryDim int)
	// CausalConv1D runs the depthwise causal convolution with SiLU, in
	// place, for every sequence of seqs: the first channels elements of rows
	// [Row, Row+N) of x (rowStride elements per row) are convolved with w,
	// [channels, kernel], continuing from the sequence's State. The
	// sequences must not share rows or states.
	CausalConv1D(x Buffer, rowStride, channels int, w Weight, kernel int, seqs []ConvSeq)
	// GDNGates computes, for n rows of heads: g = -exp(aLog) * softplus(a +
	// dtBias) into g and beta = sigmoid(b) into beta. a and b are [n, heads];
	// aLog and dtBias are [heads] weights.
	GDNGates(g, beta, a, b Buffer, aLog, dtBias Weight, n, heads int)
	// GatedDeltaRule runs the gated delta rule for every sequence of ps, the
	// linear-attention layer's sequences of one step. The sequences may
	// differ in every field but must not share a State or overlapping output
	// rows.
	GatedDeltaRule(ps []DeltaRule)
	// CausalAttention runs causal grouped-query attention for every sequence
	// of ps, the attention layer's sequences of one step. The sequences may
	// differ in every field but must not share caches or overlapping output
	// rows.
	CausalAttention(ps []Attention)
	// SigmoidMul computes x *= sigmoid(gate) elementwise, in place, for
	// every head of n rows (gate with its own layout).
	SigmoidMul(x Buffer, xh Heads, gate Buffer, gh Heads, n int)
	// SiLUMul computes dst = silu(gate) * up over n elements.
	SiLUMul(dst, gate, up Buffer, n int)
	// SwiGLU computes, for n rows of x holding a gate and an up projection
	// side by side ([n, 2*width], as one product of a fused gate/up
	// matrix gives them), dst[r] = silu(x[r, :width]) * x[r, width:]
	// into [n, width] rows. dst must not be x.
	SwiGLU(dst, x Buffer, n, width int)
	// Add computes dst += x over n elements.
	Add(dst, x Buffer, n int)
	// SumRows writes weighted sums of rows of src into the rows of dst,
	// rows of dim elements: dst[r] = Σ s.Weight[j]·src[s.Src[j]] over j in
	// [s.Start[r], s.Start[r+1]), for r < len(s.Start)-1, the terms added
	// in order of j from the first product (a row without terms is zeros).
	// With one term of weight 1 a row is a copy: SumRows gathers rows too.
	// It serves a mixture of experts' gathering of rows by expert and its
	// weighted sum of the experts' outputs. dst must not be src.
	SumRows(dst, src Buffer, dim int, s RowSums)
	// Argmax writes to dst[r] the index of the largest of x[r*dim:(r+1)*dim]
	// for len(dst) rows (lowest index on ties) and waits for the result.
	Argmax(ctx context.Context, dst []int32, x Buffer, dim int) error

	// The operations of a vision tower (a ViT): LayerNorm, biases, GELU and
	// attention without a cache or a causal mask.

	// LayerNorm computes dst[r] = (x[r] - mean) / sqrt(var + eps) * w + b
	// for n rows of dim, with the mean and the (biased) variance of each
	// row and w and b [dim] weights. dst may be x.
	LayerNorm(dst, x Buffer, w, b Weight, n, dim int, eps float32)
	// AddBias computes x[r] += b for n rows of dim, in place, with b a
	// [dim] weight.
	AddBias(x Buffer, b Weight, n, dim int)
	// GELU applies GELU of the given form in place to the first n
	// elements of x.
	GELU(x Buffer, n int, form GELUForm)
	// SegmentAttention computes non-causal multi-head attention over
	// segments of segLen consecutive rows (the patches of one image frame):
	// each of n rows (a multiple of segLen) attends, for each head, over
	// every row of its own segment. The query, key and value heads of a
	// row are q, k and v in x (the same count and dim: no grouping); out
	// receives [n, Count*Dim] rows, heads concatenated, from element 0.
	// Scores are scaled by scale. out must not be x.
	SegmentAttention(out, x Buffer, q, k, v Heads, n, segLen int, scale float32)
}

// GELUForm selects how Backend.GELU computes x·Φ(x).
type GELUForm uint8

const (
	// GELUErf is the exact form, 0.5·x·(1 + erf(x/√2)) (PyTorch's "gelu").
	GELUErf GELUForm = iota
	// GELUTanh is PyTorch's tanh approximation ("gelu_pytorch_tanh"),
	// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
	GELUTanh
)

// String returns PyTorch's name of the form.
func (f GELUForm) String() string {
	switch f {
	case GELUErf:
		return "gelu"
	case GELUTanh:
		return "gelu_pytorch_tanh"
	}
	return fmt.Sprintf("GELUForm(%d)", uint8(f))
}

// PhaseReporter is implemented by backends whose operations can report the
// time they spend in named phases of their own (the CPU backend: a
// product's quantizing, packing or rounding of its inputs), for profiles.
type PhaseReporter interface {
	// ReportPhases sets the function that receives each such phase's
	// time, called on the goroutine that called the operation, before the
	// operation returns (nil: none).
	ReportPhases(func(phase string, d time.Duration))
}

// RowDependentAttention is implemented by backends whose attention of a
// few new tokens over a long cached context splits the context among
// workers by the number of those tokens (the CPU backend), so that a row's
// sums depend on how many new tokens share the call. A model that must
// give decoded tokens the bits of plain one-token decoding (speculative
// decoding's verify steps) then runs their attention one token at a time.
type RowDependentAttention interface {
	// AttentionDependsOnRows reports whether it does.
	AttentionDependsOnRows() bool
}

// DecodeMatMuler is implemented by backends whose products have faster
// kernels for the rows of tokens being decoded than for prompt rows, with
// sums in another order (the CPU backend on AMX tiles: see
// cpu.Options.NoAMXTiles). Prompt rows keep the kernels whose results do not
// depend on the batch or on where a prompt is cut, so that a prompt
// resumed from a snapshot gives the bits of a cold run; decoded tokens are
// never snapshotted.
type DecodeMatMuler interface {
	// MatMulDecode is MatMul where the first decode of the n rows are
	// tokens being decoded. Each row's result depends only on the row,
	// the weight and whether it is a decode row.
	MatMulDecode(dst Buffer, x Buffer, w Weight, n, decode int)
}

// MatMulPart is one product of MatMulBatcher.MatMuls: the N rows of X from
// element XOff on times Wᵀ into Dst from element DstOff on, as
// MatMulDecode(Dst, X, W, N, Decode) would write them at offset zero.
type MatMulPart struct {
	Dst    Buffer
	DstOff int
	X      Buffer
	XOff   int
	W      Weight
	// N is the rows of the product, and Decode how many of the first of
	// them are tokens being decoded (DecodeMatMuler); 0 <= Decode <= N.
	N, Decode int
}

// MatMulBatcher is implemented by backends that run several independent
// products as one pass of their workers (the CPU backend): a mixture of
// experts' step multiplies its chosen experts' small matrices at once,
// rather than handing each product to the workers and waiting on it.
type MatMulBatcher interface {
	// BatchesMatMuls reports whether MatMuls may be called (a backend
	// that wraps another answers for it).
	BatchesMatMuls() bool
	// MatMuls computes every part, each element bit for bit as the part
	// alone would give it. No part may write elements another part reads
	// or writes.
	MatMuls(parts []MatMulPart)
}

// WeightFreer is a Backend that can release a weight before it closes
// (a LoRA adapter unloaded at run time). The weight must not be used
// after; work already recorded that reads it completes first.
type WeightFreer interface {
	FreeWeight(w Weight)
}

// TableLoader is implemented by backends that store a weight read only
// by Embed (an untied token embedding) otherwise than a matrix of
// products: LoadTable is LoadWeight for such a weight.
type TableLoader interface {
	LoadTable(name string, dt DType, rows, cols int, data []byte) (Weight, error)
}

// MemoryReporter is implemented by backends that allocate from a device's
// own memory (the Vulkan backend): FreeMemory returns the bytes still free
// for buffers. Backends on host memory (the CPU) do not implement it.
type MemoryReporter interface {
	FreeMemory() int64
}

// Argmax returns the index of the largest element of v, the lowest index on
// ties; NaNs are never chosen over numbers. It is the reference for
// Backend.Argmax and for greedy sampling.
func Argmax(v []float32) int {
	best := -1
	for i, e := range v {
		if e != e {
			continue
		}
		if best < 0 || e > v[best] {
			best = i
		}
	}
	return max(best, 0)
}

// ExpertRouter is implemented by backends that hold a mixture of experts'
// matrices stacked (one weight for a layer's experts of one projection)
// and route its rows on the device (the Vulkan backend), so a step reads
// no router logits back: llama.cpp's mul_mat_id.
//
// A step's routing lives in a route buffer of RouteLen(n, ne, k) elements:
// RouteExperts writes each row's k experts' ids (int32 bits) to elements
// [0, n*k), row r's j-th at r*k + j, and their weights to [n*k, 2*n*k);
// the rest is the backend's plan for MatMulExperts. Pair p = r*k + j is
// row r's j-th expert.
type ExpertRouter interface {
	// RoutesExperts reports whether the backend routes a mixture of ne
	// experts, k per row, of hidden size hidden and expert width width
	// on the device; the caller keeps to the host's routing otherwise.
	RoutesExperts(ne, k, hidden, width int) bool
	// NewExperts makes a stacked weight of n experts' [rows, cols]
	// matrices of dt, the experts' contents loaded by LoadExpert. Its
	// Rows is n*rows. A shape or dtype the backend cannot route gives an
	// error (the caller then loads the experts as weights of their own).
	NewExperts(name string, dt DType, n, rows, cols int) (Weight, error)
	// LoadExpert copies expert e's rows (rows*dt.RowBytes(cols) bytes)
	// into w, a weight of NewExperts.
	LoadExpert(w Weight, e int, data []byte) error
	// RouteExperts picks, for each of n rows of ne router logits, the k
	// experts of largest logit (the largest softmax probabilities; ties to
	// the lower index), in ascending expert order, with weights
	// softmax(logits) renormalised over the k (exp(l_e - l_max) over their
	// sum, in float32 or better), into route.
	RouteExperts(route, logits Buffer, n, ne, k int)
	// MatMulExperts computes, for every pair p of the n rows' routing,
	// dst[p, :] = W_e · x[xr, :] with e the pair's expert and xr = p when
	// perPair, else p's row r: dst is [n*k, w's expert rows]. It reads
	// only the chosen experts, each once for all the pairs that chose it
	// (within the backend's task size). A pair's result does not depend
	// on the other pairs.
	MatMulExperts(dst, x Buffer, w Weight, route Buffer, n, k int, perPair bool)
	// CombineExperts computes, for n rows of dim, in place,
	// dst[r] = Σ_j weight[r*k+j]·eo[r*k+j] + sigmoid(gate[r])·dst[r], the
	// terms added in order of j, the shared expert's (dst on entry) last:
	// a mixture's output from its experts' (eo, [n*k, dim]), the shared
	// expert's and its gate logits (gate, [n]).
	CombineExperts(dst, eo, gate, route Buffer, n, k, dim int)
}

// RouteLen returns the elements of the route buffer of n rows choosing k of
// ne experts (ExpertRouter): their ids and weights, and the plan of the
// indexed products (a count, up to min(ne, n*k) + ⌈n*k/8⌉ tasks of three
// words, and the n*k pairs sorted by expert).
func RouteLen(n, ne, k int) int {
	p := n * k
	return 2*p + 1 + 3*RouteTasks(n, ne, k) + p
}

// RouteTasks returns the most tasks of up to 8 pairs of one expert that n
// rows choosing k of ne experts make.
func RouteTasks(n, ne, k int) int {
	p := n * k
	return min(ne, p) + (p+7)/8
}
