// Package cpu is the CPU compute backend: every operation of
// compute.Backend on float32 activations, with weights read in their stored
// dtype (float, or GGML's quantized blocks, multiplied by 8-bit-quantized
// inputs). Matrix products and the vector loops run on package asm's kernels
// (Go assembly for the machine's vector unit, or their pure-Go twins), split
// over a persistent pool of worker goroutines; the rest is Go loops that
// read like the math. It is the reference the other backends are tested
// against. Prefill is bitwise reproducible: cut at multiples of 64 tokens,
// or batched with other sequences, it gives the results of one pass.
package cpu

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/internal/half"
	"github.com/govinfer/govinfer/internal/mmap"
	"github.com/govinfer/govinfer/quant"
)

// Backend runs the graph on the CPU. It is safe for use by one goroutine at a
// time (the model serialises steps); operations themselves use all workers.
type Backend struct {
	pool *pool
	k    *asm.Kernels

	// Reused between calls of the per-sequence operations.
	ws         []workerScratch // one per worker slot
	q          queue           // the current operation's job queue
	deltaJobs  []deltaJob
	attnJobs   []attnJob
	attnSeqs   []attnSeq
	attnMerges []attnMerge
	attnM      []float32 // per group job and head: running maximum
	attnL      []float64 // per group job and head: sum of numerators
	attnO      []float32 // per split job and head: partial output
	kv16       []float32 // float32 keys and values of a 16-bit cache (attention16)
	convJobs   []convJob
	xq         []byte // the inputs of a quantized MatMul, quantized
	// Reused between MatMuls calls (matmuls.go).
	partQs   []partQ
	partIns  []partInput
	partUse  []int // the input of each of partQs
	partXQ   []byte
	partJobs []partJob
	// mapped is the bytes of weights populateWeight has seen.
	mapped int64
	xb     []uint16 // the inputs of a MatMul with bf16 weights, in bf16 (bf16In)
	xt     []uint16 // the inputs of a MatMul on AMX tiles, packed
	bf16In bool     // Options.BF16Inputs
	tiles  bool     // bf16 matrices in the tile layout (amx, or the FMA tile products)
	amx    bool     // prompt rows on AMX tiles (not Options.NoAMXTiles, and the kernels have them)
	op     bool     // the FMA tile products on AVX2's outer-product kernel (asm.Kernels.MatMulBF16TilesOP)
	noPack bool     // quantized weights stay in GGML's layout (Options.NoPackedQuant)
	// phase receives the time of a product's input preparation (nil:
	// not timed; ReportPhases).
	phase func(string, time.Duration)
}

// The phases a CPU product reports (ReportPhases): the preparation of its
// inputs before the weights are read.
const (
	PhaseQuantizeInputs = "quantize inputs"  // to 8-bit blocks (quantized weights)
	PhaseRoundInputs    = "round inputs"     // to bf16 (Options.BF16Inputs)
	PhasePackInputs     = "pack tile inputs" // into the tile layout's bf16 parts
)

// ReportPhases implements compute.PhaseReporter: products with quantized
// weights report quantizing (and packing) their inputs, those with bf16
// weights on tiles packing their inputs, those with Options.BF16Inputs
// rounding them, each under its Phase name.
func (b *Backend) ReportPhases(f func(phase string, d time.Duration)) { b.phase = f }

// timePhase returns the function that ends a phase started now: it hands
// its time to b.phase, or does nothing when phases are not reported.
func (b *Backend) timePhase(name string) func() {
	if b.phase == nil {
		return func() {}
	}
	start := time.Now()
	return func() { b.phase(name, time.Since(start)) }
}

// Options configures a CPU backend.
type Options struct {
	// Threads is the number of worker goroutines; 0 means runtime.NumCPU().
	Threads int
	// Kernels are the inner loops to use; nil means the best set the CPU
	// supports (asm.Detect).
	Kernels *asm.Kernels
	// BF16Inputs rounds the inputs of products with bf16 weights to bf16
	// (round to nearest even), as llama.cpp does, so that they run on
	// VDPBF16PS where the CPU has AVX512_BF16 (asm.Kernels.GemmBF16): on a
	// Zen 4, 1.5 times the prefill rate and 1.2 times batched decode's of
	// the exact products, which run on f32 FMA. Each input keeps 8
	// significant bits instead of 24, so an output moves by up to 2^-8 of
	// the sum of its |w·x|; on the small random test checkpoint the logits
	// move by about 2e-2 of their largest, where the exact products stay
	// within 1e-4 of the float64 reference. Results
	// stay reproducible: any batch and any prompt cut at multiples of 64
	// give the same bits. Off by default; on CPUs without AVX512_BF16 it
	// rounds the same way and runs no faster.
	BF16Inputs bool
	// NoAMXTiles keeps bf16 weights off AMX tiles. By default, where the
	// CPU has AMX-BF16 (asm.Kernels.TilesBF16), bf16 matrices are
	// repacked once at load into the tile layout: prompt rows multiply on
	// the tiles, each input split into three bf16 parts so that the
	// products stay exact (one part, its bf16 rounding, with BF16Inputs),
	// and rows of decoded tokens (compute.DecodeMatMuler) and logits on
	// float32 FMA over the same layout. On a Sapphire Rapids-class Xeon,
	// 2 threads, the 9B-width test model, three alternating rounds:
	// prefill 1.9-2.2 times the rate of the FMA products of the row-major
	// layout, decode 0.97-1.21 times.
	// Either way every row's result is independent of the batch and of
	// where a prompt is cut. Without AMX it changes nothing.
	NoAMXTiles bool
	// NoFMATiles keeps bf16 weights in their row-major layout where they
	// would not go on AMX tiles (no AMX, or NoAMXTiles) and the kernels
	// have the FMA tile products in assembly (asm.Kernels.TilesFMA: the
	// AVX-512 sets). By default such a CPU repacks bf16 matrices into the
	// tile layout at load and runs every product on the FMA tile kernels
	// (asm.Kernels.MatMulBF16TilesFMA), exact float32 products whose sums
	// do not depend on the batch or on where a prompt is cut: one thread's
	// 512-input product ran at 1.5 times the rate of the row-major
	// kernels (see asm). BF16Inputs keeps the row-major layout, which its
	// VDPBF16PS kernels read. The AVX2 sets (CPUs with AVX2 and FMA but
	// no AVX-512, or the AVX2 set forced) do the same on their own
	// outer-product kernel (asm.Kernels.TilesOP, MatMulBF16TilesOP:
	// 16 rows × 6 inputs, each weight converted once per 6 inputs), for
	// prompt and decode rows alike; NoFMATiles turns that off too.
	NoFMATiles bool
	// NoPackedQuant keeps quantized weights in GGML's layout (MatMulQ)
	// where the kernels would repack them for their packed products
	// (asm.Kernels.PacksQ: AVX512_VNNI, or AVX2), for comparisons; the
	// results are the same bits either way.
	NoPackedQuant bool
}

// New returns a CPU backend.
func New(o Options) *Backend {
	n := o.Threads
	if n <= 0 {
		n = runtime.NumCPU()
	}
	k := o.Kernels
	if k == nil {
		k = asm.Detect()
	}
	amx := !o.NoAMXTiles && k.TilesBF16()
	fma := !amx && !o.NoFMATiles && !o.BF16Inputs && (k.TilesFMA() || k.TilesOP())
	return &Backend{pool: newPool(n), k: k, ws: make([]workerScratch, n), bf16In: o.BF16Inputs, tiles: amx || fma, amx: amx,
		op: fma && !k.TilesFMA(), noPack: o.NoPackedQuant}
}

// BF16Inputs reports whether products with bf16 weights round their inputs
// to bf16 (Options.BF16Inputs).
func (b *Backend) BF16Inputs() bool { return b.bf16In }

// Name implements compute.Backend.
func (b *Backend) Name() string {
	off := ""
	if b.k.TilesBF16() && !b.amx {
		off = ", AMX tiles off"
	}
	if b.tiles && !b.amx {
		off += ", FMA tiles"
		if b.op {
			off += " (outer product)"
		}
	}
	return fmt.Sprintf("cpu (%d threads, %s kernels%s)", b.pool.workers, b.k.Name(), off)
}

// QuantizesInputs reports that MatMul quantizes its inputs to 8-bit blocks
// for weights of a block format (see asm.MatMulQ), as GGML's CPU code does
// (computetest.InputQuantizer), and, with Options.BF16Inputs, rounds them
// to bf16 for bf16 weights.
func (b *Backend) QuantizesInputs(dt compute.DType) bool {
	return dt.Quant() != quant.Keep || dt == compute.BF16 && b.bf16In
}

// Kernels returns the kernel set the backend runs.
func (b *Backend) Kernels() *asm.Kernels { return b.k }

// Threads returns the number of worker goroutines.
func (b *Backend) Threads() int { return b.pool.workers }

// Close implements compute.Backend.
func (b *Backend) Close() error {
	if b.pool != nil {
		b.pool.close()
		b.pool = nil
	}
	return nil
}

// buffer is a float32 slice in ordinary memory.
type buffer struct{ data []float32 }

func (b *buffer) Len() int { return len(b.data) }

// Data returns the float32 contents of a buffer made by a CPU backend. It
// lets CPU-side code (tests, samplers) read activations without a copy.
func Data(b compute.Buffer) []float32 { return b.(*buffer).data }

// weight is a matrix in its stored dtype; exactly one of the slices is set.
type weight struct {
	name       string
	dt         compute.DType
	rows, cols int
	q          []byte // a block format: rows of dt.RowBytes(cols) bytes
	// packed holds a block format in the kernels' packed layout
	// (asm.PackQ) instead of q, where the kernels have one.
	packed []byte
	// tiles holds a bf16 matrix in the tile layout
	// (asm.PackTileBF16Weights) instead of u16, where the backend runs
	// tile products (on AMX or on FMA).
	tiles []uint16
	u16   []uint16 // BF16 or F16
	// f32 holds F32 weights, and a float32 copy of small BF16/F16 ones
	// (norm weights, conv taps, gate parameters) read element by element.
	f32 []float32
}

// smallWeight is the size, in elements, up to which a 16-bit weight also
// keeps a float32 copy.
const smallWeight = 1 << 16

// OwnsData implements compute.DataOwner: packed weights are a copy.
func (w *weight) OwnsData() bool { return w.packed != nil || w.tiles != nil }

func (w *weight) Rows() int            { return w.rows }
func (w *weight) Cols() int            { return w.cols }
func (w *weight) DType() compute.DType { return w.dt }

// row returns row r converted to float32 in dst (len cols).
func (w *weight) row(dst []float32, r int) {
	lo := r * w.cols
	switch {
	case w.packed != nil:
		qt := w.dt.Quant()
		p := rowPool.Get().(*[]byte)
		*p = slices.Grow((*p)[:0], w.dt.RowBytes(w.cols))[:w.dt.RowBytes(w.cols)]
		err := asm.UnpackQRow(qt, *p, w.packed, w.rows, w.cols, r)
		if err == nil {
			err = quant.DequantizeRow(qt, dst[:w.cols], *p)
		}
		rowPool.Put(p)
		if err != nil {
			panic(fmt.Sprintf("cpu: weight %s: %v", w.name, err))
		}
	case w.q != nil:
		rb := w.dt.RowBytes(w.cols)
		if err := quant.DequantizeRow(w.dt.Quant(), dst[:w.cols], w.q[r*rb:(r+1)*rb]); err != nil {
			panic(fmt.Sprintf("cpu: weight %s: %v", w.name, err))
		}
	case w.f32 != nil:
		copy(dst, w.f32[lo:lo+w.cols])
	case w.tiles != nil:
		p := w.tileRow(r)
		for i, v := range *p {
			dst[i] = half.BF16ToF32(v)
		}
		tileRowPool.Put(p)
	case w.dt == compute.BF16:
		for i, v := range w.u16[lo : lo+w.cols] {
			dst[i] = half.BF16ToF32(v)
		}
	default:
		for i, v := range w.u16[lo : lo+w.cols] {
			dst[i] = half.F16ToF32(v)
		}
	}
}

// at returns element i of the flattened weight as float32.
func (w *weight) at(i int) float32 {
	switch {
	case w.f32 != nil:
		return w.f32[i]
	case w.tiles != nil:
		p := w.tileRow(i / w.cols)
		v := half.BF16ToF32((*p)[i%w.cols])
		tileRowPool.Put(p)
		return v
	case w.dt == compute.BF16:
		return half.BF16ToF32(w.u16[i])
	default:
		return half.F16ToF32(w.u16[i])
	}
}

// LoadWeight implements compute.Backend. The weight aliases data when data is
// suitably aligned and the kernels read the stored layout; otherwise it is
// copied once (packed, see Packing).
func (b *Backend) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	return b.loadWeight(name, dt, rows, cols, data, true)
}

// populateWeight maps every page of the weight bytes data now, while the
// weights mapped so far are at most three quarters of the machine's
// memory, as llama.cpp maps its whole file at load (MAP_POPULATE): a
// decode step then never waits for a page fault the first time it reads an
// expert (about 50 faults of 64 KiB for each matrix of a 35B-A3B expert
// at Q8_0; a 64-token decode of the 8-layer bench model touches most
// experts). A model larger than that keeps the rest on disk until a step
// reads it.
func (b *Backend) populateWeight(data []byte) {
	if b.mapped += int64(len(data)); mmap.FitsMemory(b.mapped) {
		populate(data)
	}
}

// LoadTable implements compute.TableLoader: a weight that only Embed
// reads stays in the stored layout, which reads a row at a time in place
// (never packed, so a table large beside the machine's memory stays on
// disk until a token needs a row); a smaller one is mapped whole now
// (populateTable), so that no decode step waits for a page of it.
func (b *Backend) LoadTable(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	w, err := b.loadWeight(name, dt, rows, cols, data, false)
	if err == nil {
		populateTable(data)
	}
	return w, err
}

// loadWeight is LoadWeight, with weights packed in the kernels' layout
// (Packing) when pack is set.
func (b *Backend) loadWeight(name string, dt compute.DType, rows, cols int, data []byte, pack bool) (compute.Weight, error) {
	if err := checkWeightBytes(name, dt, rows, cols, data); err != nil {
		return nil, err
	}
	if layout, size := b.Packing(dt, rows, cols); pack && layout != "" {
		// The kernels stream this layout: one copy now, and data is no
		// longer referenced (rows come from the copy, or from the
		// float32 one of a small weight).
		packed := make([]byte, size)
		if err := b.Pack(context.Background(), packed, dt, rows, cols, data); err != nil {
			return nil, fmt.Errorf("cpu: weight %s: %w", name, err)
		}
		return b.LoadPacked(name, dt, rows, cols, packed)
	}
	if pack {
		b.populateWeight(data) // a table's pages are populateTable's
	}
	w := &weight{name: name, dt: dt, rows: rows, cols: cols}
	if dt.Quant() != quant.Keep {
		w.q = data
		return w, nil
	}
	size := dt.Size()
	if uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(size) != 0 {
		data = append(make([]byte, 0, len(data)+8), data...)
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	switch dt {
	case compute.F32:
		w.f32 = unsafe.Slice((*float32)(p), rows*cols)
	default:
		w.u16 = unsafe.Slice((*uint16)(p), rows*cols)
		if rows*cols <= smallWeight {
			f := make([]float32, rows*cols)
			for r := 0; r < rows; r++ {
				w.row(f[r*cols:(r+1)*cols], r) // converts from u16 while f32 is unset
			}
			w.f32 = f
		}
	}
	return w, nil
}

// NewBuffer implements compute.Backend.
func (b *Backend) NewBuffer(n int) (compute.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: negative buffer size %d", n)
	}
	return &buffer{data: make([]float32, n)}, nil
}

// Free implements compute.Backend; memory goes back to the Go heap.
func (b *Backend) Free(compute.Buffer) {}

// FreeWeight implements compute.WeightFreer: the memory goes back to the
// Go heap once nothing refers to the weight.
func (b *Backend) FreeWeight(compute.Weight) {}

// Upload implements compute.Backend.
func (b *Backend) Upload(dst compute.Buffer, off int, src []float32) error {
	d := Data(dst)
	if off < 0 || off+len(src) > len(d) {
		return fmt.Errorf("cpu: upload of %d elements at %d overflows buffer of %d", len(src), off, len(d))
	}
	copy(d[off:], src)
	return nil
}

// Download implements compute.Backend.
func (b *Backend) Download(ctx context.Context, dst []float32, src compute.Buffer, off int) error {
	s := Data(src)
	if off < 0 || off+len(dst) > len(s) {
		return fmt.Errorf("cpu: download of %d elements at %d overflows buffer of %d", len(dst), off, len(s))
	}
	copy(dst, s[off:])
	return ctx.Err()
}

// Sync implements compute.Backend; CPU operations complete when they return.
func (b *Backend) Sync(ctx context.Context) error { return ctx.Err() }

// Copy implements compute.Backend.
func (b *Backend) Copy(dst compute.Buffer, dstOff int, src compute.Buffer, srcOff int, n int) {
	copy(Data(dst)[dstOff:dstOff+n], Data(src)[srcOff:srcOff+n])
}

// Embed implements compute.Backend.
func (b *Backend) Embed(dst compute.Buffer, table compute.Weight, ids []int32) {
	w, d := table.(*weight), Data(dst)
	for i, id := range ids {
		w.row(d[i*w.cols:(i+1)*w.cols], int(id))
	}
}

// MatMul implements compute.Backend: dst[n, rows] = x[n, cols] · wᵀ. The
// weight rows are cut into blocks that the workers take in turn, so a worker
// slowed by something else on the machine (common on shared virtual CPUs)
// does not hold the others up; the kernels read each weight row once for
// all n inputs. Every element is summed the same way whichever block and
// worker computes it (see asm), so the blocks change no result.
func (b *Backend) MatMul(dst, x compute.Buffer, wt compute.Weight, n int) {
	w := wt.(*weight)
	b.matMul(Data(dst), Data(x)[:n*w.cols], w, n)
}

// matMul is MatMul on the elements of dst and x from the first on.
func (b *Backend) matMul(d, xs []float32, w *weight, n int) {
	rows, cols := w.rows, w.cols
	if w.q != nil || w.packed != nil {
		b.matMulQ(d, xs, w, n)
		return
	}
	if w.tiles != nil {
		if b.amx {
			b.matMulBF16Tiles(d, xs, w, n)
		} else {
			b.matMulBF16TilesFMA(d, xs, w, n)
		}
		return
	}
	if w.dt == compute.BF16 && b.bf16In {
		b.matMulBF16Inputs(d, xs, w, n)
		return
	}
	block := matMulBlock(rows, cols*w.dt.Size(), n, b.pool.workers)
	run := func(lo, hi int) {
		var err error
		switch w.dt {
		case compute.BF16:
			err = b.k.MatMulBF16(d[lo:], rows, w.u16[lo*cols:hi*cols], hi-lo, cols, xs, n)
		case compute.F16:
			err = b.k.MatMulF16(d[lo:], rows, w.u16[lo*cols:hi*cols], hi-lo, cols, xs, n)
		default:
			err = b.k.MatMulF32(d[lo:], rows, w.f32[lo*cols:hi*cols], hi-lo, cols, xs, n)
		}
		if err != nil {
			// The shapes were checked when the weight and buffers were
			// made; a failure here is a bug in the caller.
			panic(fmt.Sprintf("cpu: matmul %s: %v", w.name, err))
		}
	}
	b.rowBlocks(rows, block, run)
}

// MatMulDecode implements compute.DecodeMatMuler: with a weight on AMX
// tiles, the decode rows take the FMA products of tile-layout weights
// (asm.Kernels.MatMulBF16TilesFMA), which stream the weights at the FMA
// kernels' rate where a tile product of one input pays for three tile
// multiplies per KiB; every other weight, and the other rows, as MatMul
// (which without AMX runs every row of a tile-layout weight on FMA).
func (b *Backend) MatMulDecode(dst, x compute.Buffer, wt compute.Weight, n, decode int) {
	w := wt.(*weight)
	b.matMulDecode(Data(dst), Data(x)[:n*w.cols], w, n, decode)
}

// matMulDecode is MatMulDecode on the elements of d and xs from the first
// on.
func (b *Backend) matMulDecode(d, xs []float32, w *weight, n, decode int) {
	if w.tiles == nil || !b.amx || decode <= 0 {
		b.matMul(d, xs, w, n)
		return
	}
	decode = min(decode, n)
	rows, cols := w.rows, w.cols
	if decode < n {
		b.matMulBF16Tiles(d[decode*rows:], xs[decode*cols:n*cols], w, n-decode)
	}
	b.matMulBF16TilesFMA(d, xs[:decode*cols], w, decode)
}

// matMulBF16TilesFMA is MatMul of n inputs on the FMA products of a
// tile-layout weight (asm.Kernels.MatMulBF16TilesFMA), the weight rows
// cut into blocks of whole 16-row groups, about 8 per worker whatever n:
// the kernels read the inputs in place, so a block costs no repacking,
// and small blocks keep a worker slowed by the machine from holding the
// others up (9B-width model, 2 threads, pp512 without AMX: 1.13-1.20x
// the rate of 2 blocks per worker in four alternating rounds).
func (b *Backend) matMulBF16TilesFMA(d, xs []float32, w *weight, n int) {
	rows, cols := w.rows, w.cols
	block := matMulBlock(rows, cols*2, min(n, 8), b.pool.workers)
	b.rowBlocks(rows, block, func(lo, hi int) {
		mul := b.k.MatMulBF16TilesFMA
		if b.op {
			mul = b.k.MatMulBF16TilesOP
		}
		if err := mul(d[lo:], rows, w.tiles[lo*cols:], hi-lo, cols, xs[:n*cols], n); err != nil {
			panic(fmt.Sprintf("cpu: matmul %s: %v", w.name, err))
		}
	})
}

// matMulQ is MatMul with a quantized weight: the inputs are quantized to
// 8-bit blocks once (rows split over the workers; packed too for a weight
// in the kernels' packed layout), then the weight rows are cut into blocks
// as for float weights (multiples of 16 rows, whole packed groups).
func (b *Backend) matMulQ(d, xs []float32, w *weight, n int) {
	rows, cols := w.rows, w.cols
	xb := w.inputRowBytes()
	if need := n * xb; len(b.xq) < need {
		b.xq = asm.InputBuffer(need)
	}
	xq := b.xq[:n*xb]
	end := b.timePhase(PhaseQuantizeInputs)
	b.pool.parallelFor(n, max(1, parallelGrain/cols), func(lo, hi int) {
		b.quantizeInputs(xq[lo*xb:hi*xb], xs[lo*cols:hi*cols], w.dt.Quant(), cols, w.packed != nil, hi-lo)
	})
	end()
	block := matMulBlock(rows, w.dt.RowBytes(cols), n, b.pool.workers)
	b.rowBlocks(rows, block, func(lo, hi int) { b.matMulQRows(d, xq, w, n, lo, hi) })
}

// quantizeInputs quantizes the n rows of cols of xs for products with qt
// weights (in the packed layout where packed) into xq.
func (b *Backend) quantizeInputs(xq []byte, xs []float32, qt quant.Type, cols int, packed bool, n int) {
	if packed {
		mustKernel(b.k.PackInputs(qt, xq, xs, n, cols))
	} else {
		mustKernel(b.k.QuantizeInputs(qt, xq, xs, n, cols))
	}
}

// inputRowBytes returns the bytes of one input row quantized for products
// with the quantized weight w.
func (w *weight) inputRowBytes() int {
	if w.packed != nil {
		return asm.PackedInputRowBytes(w.dt.Quant(), w.cols)
	}
	return asm.InputRowBytes(w.dt.Quant(), w.cols)
}

// matMulQRows computes rows [lo, hi) of the product of the quantized
// weight w and the n quantized inputs xq into d ([n, w.rows]): one block
// of matMulQ.
func (b *Backend) matMulQRows(d []float32, xq []byte, w *weight, n, lo, hi int) {
	qt, rows, cols := w.dt.Quant(), w.rows, w.cols
	var err error
	if w.packed != nil {
		group := asm.PackedQBytes(qt, 16, cols)
		err = b.k.MatMulQPacked(qt, d[lo:], rows, w.packed[lo/16*group:], hi-lo, cols, xq, n)
	} else {
		rb := w.dt.RowBytes(cols)
		err = b.k.MatMulQ(qt, d[lo:], rows, w.q[lo*rb:hi*rb], hi-lo, cols, xq, n)
	}
	if err != nil {
		panic(fmt.Sprintf("cpu: matmul %s: %v", w.name, err))
	}
}

// rowPool holds the GGML-layout rows unpacked from packed weights.
var rowPool = sync.Pool{New: func() any { return new([]byte) }}

// matMulBF16Inputs is MatMul with bf16 weights and Options.BF16Inputs:
// the inputs are rounded to bf16 once (rows split over the workers), then
// the weight rows are cut into blocks as for float weights.
func (b *Backend) matMulBF16Inputs(d, xs []float32, w *weight, n int) {
	rows, cols := w.rows, w.cols
	b.xb = grow(b.xb, n*cols)
	xb := b.xb
	end := b.timePhase(PhaseRoundInputs)
	b.pool.parallelFor(n, max(1, parallelGrain/cols), func(lo, hi int) {
		asm.F32ToBF16Slice(xb[lo*cols:hi*cols], xs[lo*cols:hi*cols])
	})
	end()
	block := matMulBlock(rows, cols*2, n, b.pool.workers)
	b.rowBlocks(rows, block, func(lo, hi int) {
		if err := b.k.GemmBF16(d[lo:], rows, w.u16[lo*cols:hi*cols], hi-lo, cols, xb, n); err != nil {
			panic(fmt.Sprintf("cpu: matmul %s: %v", w.name, err))
		}
	})
}

// matMulBF16Tiles is MatMul with a bf16 weight in the tile layout
// (asm.Kernels.MatMulBF16Tiles), for every n, so that an input's result
// never depends on the batch around it: the inputs are packed once (runs
// of them split over the workers), in three bf16 parts, which keep them
// exact, or with Options.BF16Inputs as their bf16 rounding only; then the
// weight rows are cut into blocks of whole 16-row groups.
func (b *Backend) matMulBF16Tiles(d, xs []float32, w *weight, n int) {
	rows, cols := w.rows, w.cols
	parts := asm.MaxTileParts
	if b.bf16In {
		parts = 1
	}
	b.xt = grow(b.xt, asm.TileBF16InputLen(n, cols, parts))
	xt := b.xt
	end := b.timePhase(PhasePackInputs)
	b.pool.parallelFor(n, max(1, parallelGrain/cols), func(lo, hi int) {
		mustKernel(b.k.PackTileBF16(xt, xs, n, cols, parts, lo, hi))
	})
	end()
	block := matMulBlock(rows, cols*2, n, b.pool.workers)
	b.rowBlocks(rows, block, func(lo, hi int) {
		if err := b.k.MatMulBF16Tiles(d[lo:], rows, w.tiles[lo*cols:], hi-lo, cols, xt, n, parts); err != nil {
			panic(fmt.Sprintf("cpu: matmul %s: %v", w.name, err))
		}
	})
}

// tileRowPool holds the rows unpacked from tile-layout weights.
var tileRowPool = sync.Pool{New: func() any { return new([]uint16) }}

// tileRow returns row r of a tile-layout weight, unpacked into a buffer
// of tileRowPool (put it back when done).
func (w *weight) tileRow(r int) *[]uint16 {
	p := tileRowPool.Get().(*[]uint16)
	*p = slices.Grow((*p)[:0], w.cols)[:w.cols]
	if err := asm.UnpackTileBF16Row(*p, w.tiles, w.rows, w.cols, r); err != nil {
		panic(fmt.Sprintf("cpu: weight %s: %v", w.name, err))
	}
	return p
}

// rowBlocks calls run on the blocks [j*block, (j+1)*block) covering
// [0, rows), which the workers take from a queue in turn.
func (b *Backend) rowBlocks(rows, block int, run func(lo, hi int)) {
	blocks := (rows + block - 1) / block
	if blocks <= 1 {
		run(0, rows)
		return
	}
	// Every block is worth a worker: matMulBlock makes them at least
	// 64 KiB of weights.
	b.drain(blocks, int64(blocks)*jobGrain, func(_, j int) { run(j*block, min((j+1)*block, rows)) })
}

// matMulBlock returns the weight rows of one block of a MatMul of rows rows
// of rowBytes bytes with n inputs on workers workers: a multiple of 16
// rows, at least 64 KiB of weights (below that the hand-off costs more than
// it saves), about 8 blocks per worker for matrix-vector products, where
// balance matters most, and 2 for larger batches, where every block repacks
// the inputs.
func matMulBlock(rows, rowBytes, n, workers int) int {
	perWorker := 8
	if n > 8 {
		perWorker = 2
	}
	block := (rows + workers*perWorker - 1) / (workers * perWorker)
	block = max(block, (64<<10+rowBytes-1)/rowBytes)
	return (block + 15) / 16 * 16
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(dst, x compute.Buffer, wt compute.Weight, n, dim int, eps float32) {
	w, d, xs := wt.(*weight), Data(dst), Data(x)
	b.eachRow(n, dim, func(r int) {
		rmsNorm1p(d[r*dim:(r+1)*dim], xs[r*dim:(r+1)*dim], w, eps)
	})
}

// AddRMSNorm implements compute.Backend: each row's add and norm in one
// pass of a worker.
func (b *Backend) AddRMSNorm(x, y, dst compute.Buffer, wt compute.Weight, n, dim int, eps float32) {
	w, d, xs, ys := wt.(*weight), Data(dst), Data(x), Data(y)
	b.eachRow(n, dim, func(r int) {
		row, add := xs[r*dim:(r+1)*dim], ys[r*dim:(r+1)*dim]
		for i := range row {
			row[i] += add[i]
		}
		rmsNorm1p(d[r*dim:(r+1)*dim], row, w, eps)
	})
}

// parallelGrain is the number of elements below which an elementwise
// operation is not worth handing to another worker.
const parallelGrain = 1 << 12

// rangeAlign is the multiple of elements at which eachRange splits, so that
// the vector kernels' tails fall only at the end of the whole range.
const rangeAlign = 64

// eachRow calls fn for rows 0..n-1 of width elements, split across workers
// when there is enough work.
func (b *Backend) eachRow(n, width int, fn func(r int)) {
	b.pool.parallelFor(n, max(1, parallelGrain/max(width, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			fn(r)
		}
	})
}

// eachRange calls fn on disjoint ranges covering [0, n), split across
// workers when there is enough work.
func (b *Backend) eachRange(n int, fn func(lo, hi int)) {
	blocks := (n + rangeAlign - 1) / rangeAlign
	b.pool.parallelFor(blocks, parallelGrain/rangeAlign, func(lo, hi int) {
		fn(lo*rangeAlign, min(hi*rangeAlign, n))
	})
}

// rmsNorm1p computes y = x / sqrt(mean(x²) + eps) * (1 + w).
func rmsNorm1p(y, x []float32, w *weight, eps float32) {
	inv := invRMS(x, eps)
	if w.f32 != nil {
		ws := w.f32[:len(x)]
		y = y[:len(x)]
		for i, v := range x {
			y[i] = v * inv * (1 + ws[i])
		}
		return
	}
	for i, v := range x {
		y[i] = v * inv * (1 + w.at(i))
	}
}

// invRMS returns 1 / sqrt(mean(x²) + eps), accumulated in float64.
func invRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// HeadRMSNorm implements compute.Backend.
func (b *Backend) HeadRMSNorm(x compute.Buffer, h compute.Heads, n int, wt compute.Weight, eps float32) {
	w, xs := wt.(*weight), Data(x)
	b.eachRow(n, h.Count*h.Dim, func(r int) {
		for hd := 0; hd < h.Count; hd++ {
			v := xs[h.Head(r, hd) : h.Head(r, hd)+h.Dim]
			rmsNorm1p(v, v, w, eps)
		}
	})
}

// GatedRMSNorm implements compute.Backend.
func (b *Backend) GatedRMSNorm(x compute.Buffer, h compute.Heads, zBuf compute.Buffer, zh compute.Heads, n int, wt compute.Weight, eps float32) {
	w, xs, zs := wt.(*weight), Data(x), Data(zBuf)
	b.eachRow(n, h.Count*h.Dim, func(r int) {
		for hd := 0; hd < h.Count; hd++ {
			v := xs[h.Head(r, hd) : h.Head(r, hd)+h.Dim]
			z := zs[zh.Head(r, hd) : zh.Head(r, hd)+h.Dim]
			inv := invRMS(v, eps)
			if w.f32 != nil {
				ws := w.f32[:len(v)]
				for i := range v {
					v[i] = v[i] * inv * ws[i]
				}
			} else {
				for i := range v {
					v[i] = v[i] * inv * w.at(i)
				}
			}
			b.k.SiLUMul(v, z, v) // v = silu(z) * v
		}
	})
}

// L2Norm implements compute.Backend.
func (b *Backend) L2Norm(x compute.Buffer, h compute.Heads, n int, eps float32) {
	xs := Data(x)
	b.eachRow(n, h.Count*h.Dim, func(r int) {
		for hd := 0; hd < h.Count; hd++ {
			l2Normalize(xs[h.Head(r, hd):h.Head(r, hd)+h.Dim], eps)
		}
	})
}

// l2Normalize scales v in place to x / sqrt(sum(x²) + eps).
func l2Normalize(v []float32, eps float32) {
	var ss float64
	for _, e := range v {
		ss += float64(e) * float64(e)
	}
	inv := float32(1 / math.Sqrt(ss+float64(eps)))
	for i := range v {
		v[i] *= inv
	}
}

// Rope implements compute.Backend.
func (b *Backend) Rope(x compute.Buffer, h compute.Heads, n int, table []float32, rotaryDim int) {
	xs, half := Data(x), rotaryDim/2
	for r := 0; r < n; r++ {
		cos := table[r*rotaryDim : r*rotaryDim+half]
		sin := table[r*rotaryDim+half : (r+1)*rotaryDim]
		for hd := 0; hd < h.Count; hd++ {
			v := xs[h.Head(r, hd) : h.Head(r, hd)+rotaryDim]
			for i := 0; i < half; i++ {
				a, c := v[i], v[i+half]
				v[i] = a*cos[i] - c*sin[i]
				v[i+half] = c*cos[i] + a*sin[i]
			}
		}
	}
}

// CausalConv1D implements compute.Backend:
// out[t, c] = silu(sum_j w[c, j] * in[t-(K-1)+j, c]), with inputs before the
// first token taken from the sequence's state. Jobs are (sequence, block of
// channels), longest first; the blocks depend only on channels and the
// number of workers, so a sequence's results do not depend on the other
// sequences of the call.
func (b *Backend) CausalConv1D(x compute.Buffer, rowStride, channels int, wt compute.Weight, kernel int, seqs []compute.ConvSeq) {
	if channels <= 0 {
		return
	}
	w, xs := wt.(*weight), Data(x)
	parts := min(b.pool.workers, (channels+convBlockMin-1)/convBlockMin)
	chunk := (channels + parts - 1) / parts
	jobs := b.convJobs[:0]
	var total int64
	for i, s := range seqs {
		if s.N <= 0 {
			continue
		}
		for lo := 0; lo < channels; lo += chunk {
			hi := min(lo+chunk, channels)
			cost := convCost * int64(s.N) * int64(hi-lo) * int64(kernel)
			jobs = append(jobs, convJob{seq: i, lo: lo, hi: hi, cost: cost})
			total += cost
		}
	}
	b.convJobs = jobs
	if len(jobs) == 0 {
		return
	}
	slices.SortStableFunc(jobs, func(x, y convJob) int { return cmp.Compare(y.cost, x.cost) })
	b.drain(len(jobs), total, func(slot, j int) {
		job := &jobs[j]
		s := &seqs[job.seq]
		scratch := b.ws[slot].floats(convScratch(kernel))
		b.convBlock(xs, Data(s.State), s.Row, rowStride, s.N, channels, w, kernel, job.lo, job.hi, scratch)
	})
}

// convCost is the cost of one tap of the (scalar) convolution in
// multiply-adds of the vector kernels, for partsFor.
const convCost = 4

// convBlockMin is the fewest channels of a conv job when a sequence's
// channels are split over the workers.
const convBlockMin = 256

// convJob is one job of a CausalConv1D call: channels [lo, hi) of sequence
// seq.
type convJob struct {
	seq, lo, hi int
	cost        int64
}

// convTile is the number of channels convBlock convolves side by side.
const convTile = 64

// convScratch is the scratch convBlock needs, in float32s.
func convScratch(kernel int) int { return (2*kernel + 1) * convTile }

// convBlock runs the convolution for channels [lo, hi) of the n rows of xs
// starting at row, with st the sequence's state and scratch of
// convScratch(kernel) elements. It works on convTile channels at a time,
// keeping their last kernel raw inputs in a ring of rows, so that the inner
// loops run along channels; each output is still the sum of its taps in
// order, s = 0; s += w[c, j] * in[j] for j = 0..kernel-1, then SiLU.
func (b *Backend) convBlock(xs, st []float32, row, rowStride, n, channels int, w *weight, kernel, lo, hi int, scratch []float32) {
	k1 := kernel - 1
	win := scratch[:kernel*convTile] // ring of raw input rows
	acc := scratch[kernel*convTile : (kernel+1)*convTile]
	conv := scratch[(kernel+1)*convTile : (2*kernel+1)*convTile]
	for c0 := lo; c0 < hi; c0 += convTile {
		nc := min(convTile, hi-c0)
		// taps[c*kernel+j] = w[c0+c, j]
		var taps []float32
		if w.f32 != nil {
			taps = w.f32[c0*kernel : (c0+nc)*kernel]
		} else {
			taps = conv[:nc*kernel]
			for c := 0; c < nc; c++ {
				w.row(taps[c*kernel:(c+1)*kernel], c0+c)
			}
		}
		// Window position j (oldest first) lives in ring row (head+j) % kernel.
		for j := 0; j < k1; j++ {
			copy(win[j*convTile:j*convTile+nc], st[j*channels+c0:j*channels+c0+nc])
		}
		head := 0
		for t := 0; t < n; t++ {
			x := xs[(row+t)*rowStride+c0 : (row+t)*rowStride+c0+nc]
			copy(win[((head+k1)%kernel)*convTile:], x)
			if kernel == 4 { // Qwen3.5's width, unrolled
				w0 := win[(head%4)*convTile:][:nc]
				w1 := win[((head+1)%4)*convTile:][:nc]
				w2 := win[((head+2)%4)*convTile:][:nc]
				w3 := win[((head+3)%4)*convTile:][:nc]
				for c := range x {
					t := taps[c*4 : c*4+4 : c*4+4]
					var s float32
					s += t[0] * w0[c]
					s += t[1] * w1[c]
					s += t[2] * w2[c]
					s += t[3] * w3[c]
					x[c] = s
				}
				head = (head + 1) % kernel
				continue
			}
			a := acc[:nc]
			clear(a)
			for j := 0; j < kernel; j++ {
				in := win[((head+j)%kernel)*convTile:][:nc]
				for c := range a {
					a[c] += taps[c*kernel+j] * in[c]
				}
			}
			copy(x, a)
			head = (head + 1) % kernel
		}
		for j := 0; j < k1; j++ {
			copy(st[j*channels+c0:j*channels+c0+nc], win[((head+j)%kernel)*convTile:][:nc])
		}
	}
	for t := 0; t < n; t++ {
		r := (row + t) * rowStride
		b.k.SiLU(xs[r+lo : r+hi])
	}
}

// GDNGates implements compute.Backend.
func (b *Backend) GDNGates(g, beta, a, bb compute.Buffer, aLog, dtBias compute.Weight, n, heads int) {
	gs, bs, as, bin := Data(g), Data(beta), Data(a), Data(bb)
	al, dt := aLog.(*weight), dtBias.(*weight)
	for r := 0; r < n; r++ {
		for h := 0; h < heads; h++ {
			i := r*heads + h
			gs[i] = -float32(math.Exp(float64(al.at(h)))) * softplus(as[i]+dt.at(h))
			bs[i] = sigmoid(bin[i])
		}
	}
}

// SigmoidMul implements compute.Backend.
func (b *Backend) SigmoidMul(x compute.Buffer, xh compute.Heads, gate compute.Buffer, gh compute.Heads, n int) {
	xs, gs := Data(x), Data(gate)
	b.eachRow(n, xh.Count*xh.Dim, func(r int) {
		for h := 0; h < xh.Count; h++ {
			v := xs[xh.Head(r, h) : xh.Head(r, h)+xh.Dim]
			gv := gs[gh.Head(r, h) : gh.Head(r, h)+xh.Dim]
			b.k.SigmoidMul(v, gv)
		}
	})
}

// SiLUMul implements compute.Backend.
func (b *Backend) SiLUMul(dst, gate, up compute.Buffer, n int) {
	d, g, u := Data(dst)[:n], Data(gate)[:n], Data(up)[:n]
	b.eachRange(n, func(lo, hi int) {
		b.k.SiLUMul(d[lo:hi], g[lo:hi], u[lo:hi])
	})
}

// Add implements compute.Backend.
func (b *Backend) Add(dst, x compute.Buffer, n int) {
	d, s := Data(dst)[:n], Data(x)[:n]
	b.eachRange(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] += s[i]
		}
	})
}

// SumRows implements compute.Backend: each result row is its own work, so
// a row's sum depends only on its terms. A malformed s panics, as an
// out-of-range buffer access does.
func (b *Backend) SumRows(dst, src compute.Buffer, dim int, s compute.RowSums) {
	d, x := Data(dst), Data(src)
	if err := s.Check(len(x) / max(dim, 1)); err != nil {
		panic("cpu: SumRows: " + err.Error())
	}
	b.eachRow(s.Rows(), dim, func(r int) {
		SumRow(d[r*dim:(r+1)*dim], x, s.Src[s.Start[r]:s.Start[r+1]], s.Weight[s.Start[r]:s.Start[r+1]])
	})
}

// SumRow sets dst = Σ weight[j]·x[src[j]] (rows of len(dst) elements),
// the terms added in order of j from the first product, each product
// rounded to float32 before its add; no terms give zeros. It is
// Backend.SumRows of one row and the reference its tests compare with.
func SumRow(dst, x []float32, src []int32, weight []float32) {
	dim := len(dst)
	if len(src) == 0 {
		clear(dst)
		return
	}
	w, row := weight[0], x[int(src[0])*dim:][:dim]
	if w == 1 {
		copy(dst, row) // 1·v is v: a gather's rows, a MoE step's inputs
	} else {
		for i, v := range row {
			dst[i] = w * v
		}
	}
	for j := 1; j < len(src); j++ {
		w, row := weight[j], x[int(src[j])*dim:][:dim]
		for i, v := range row {
			dst[i] += float32(w * v) // the conversion keeps the product's rounding (no fused multiply-add)
		}
	}
}

// Argmax implements compute.Backend: compute.Argmax of each row, the rows
// split across the workers.
func (b *Backend) Argmax(ctx context.Context, dst []int32, x compute.Buffer, dim int) error {
	xs := Data(x)
	b.eachRow(len(dst), dim, func(r int) {
		dst[r] = int32(b.argmax(xs[r*dim : (r+1)*dim]))
	})
	return ctx.Err()
}

// argmaxLanes is the number of running maxima of argmax.
const argmaxLanes = 256

// argmax returns compute.Argmax(v), the first index of the largest value
// (NaNs skipped, 0 when every value is NaN), in two passes the kernels
// run in vectors: argmaxLanes running maxima (MaxF32 skips NaNs), then
// the first index that holds the largest of them. A row of Qwen3.5's
// 248,320 logits took 0.30 ms in a decode step against 0.82 for the
// scalar pass.
func (b *Backend) argmax(v []float32) int {
	var lanes [argmaxLanes]float32
	for i := range lanes {
		lanes[i] = float32(math.Inf(-1))
	}
	for i := 0; i < len(v); i += argmaxLanes {
		b.k.MaxF32(lanes[:], v[i:min(i+argmaxLanes, len(v))])
	}
	m := lanes[0]
	for _, x := range lanes[1:] {
		m = max(m, x)
	}
	return max(slices.Index(v, m), 0)
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// softplus is log(1 + e^x), with PyTorch's threshold of 20 above which it
// returns x.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
