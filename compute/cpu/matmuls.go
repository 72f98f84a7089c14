package cpu

import (
	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/quant"
)

// partInput is one distinct quantized input of a MatMuls call: the rows
// it was made from and where it lies in Backend.partXQ.
type partInput struct {
	x         []float32 // the float rows, x[:n*cols]
	n, cols   int
	qt        quant.Type
	packed    bool
	off, size int // bytes of Backend.partXQ
}

// partBlocks is about how many blocks of a MatMuls call each worker takes
// when its products have few inputs.
const partBlocks = 8

// same reports whether in and o are the same rows quantized alike.
func (in *partInput) same(o partInput) bool {
	return in.n == o.n && in.cols == o.cols && in.qt == o.qt && in.packed == o.packed && &in.x[0] == &o.x[0]
}

// partJob is one block of rows [lo, hi) of part p of a MatMuls call.
type partJob struct {
	p, lo, hi int
}

// partQ is a MatMuls part on a quantized weight, ready to run.
type partQ struct {
	w  *weight
	d  []float32
	xq []byte
	n  int
}

// BatchesMatMuls implements compute.MatMulBatcher: MatMuls may be called.
func (b *Backend) BatchesMatMuls() bool { return true }

// MatMuls implements compute.MatMulBatcher. The parts on quantized weights
// share one pass of the workers: each distinct input (parts that read the
// same rows for weights of one type and layout, as a mixture's gate and up
// projections do, share theirs) is quantized once, then the row blocks of
// every part go into one queue that the workers drain, in the blocks MatMul
// would cut, so a batch of small products costs one hand-off between the
// workers rather than one per product. Parts on float weights run one
// after another, as MatMulDecode runs them.
func (b *Backend) MatMuls(parts []compute.MatMulPart) {
	b.partQs = b.partQs[:0]
	b.partIns = b.partIns[:0]
	b.partUse = b.partUse[:0]
	total := 0
	for _, p := range parts {
		w := p.W.(*weight)
		d := Data(p.Dst)[p.DstOff:]
		xs := Data(p.X)[p.XOff : p.XOff+p.N*w.cols]
		if p.N <= 0 {
			continue
		}
		if w.q == nil && w.packed == nil {
			b.matMulDecode(d, xs, w, p.N, p.Decode)
			continue
		}
		in := partInput{x: xs, n: p.N, cols: w.cols, qt: w.dt.Quant(), packed: w.packed != nil}
		// Parts that read the same rows come one after another (an
		// expert's gate and up, the lone rows of a decode step's
		// experts): each shares the input before it where it can.
		use := len(b.partIns) - 1
		if use < 0 || !b.partIns[use].same(in) {
			// Each input starts on a cache line, as asm.InputBuffer's do.
			in.size = (p.N*w.inputRowBytes() + 63) &^ 63
			in.off = total
			total += in.size
			use = len(b.partIns)
			b.partIns = append(b.partIns, in)
		}
		b.partUse = append(b.partUse, use)
		b.partQs = append(b.partQs, partQ{w: w, d: d, n: p.N})
	}
	if len(b.partQs) == 0 {
		return
	}
	if len(b.partXQ) < total {
		b.partXQ = asm.InputBuffer(total)
	}
	end := b.timePhase(PhaseQuantizeInputs)
	elems := 0
	for _, in := range b.partIns {
		elems += in.n * in.cols
	}
	quantize := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			in := &b.partIns[i]
			b.quantizeInputs(b.partXQ[in.off:in.off+in.size], in.x, in.qt, in.cols, in.packed, in.n)
		}
	}
	if elems <= parallelGrain*len(b.partIns) || len(b.partIns) == 1 {
		quantize(0, len(b.partIns))
	} else {
		b.pool.parallelFor(len(b.partIns), 1, quantize)
	}
	end()
	b.partJobs = b.partJobs[:0]
	var cost int64
	wbytes := 0
	for _, q := range b.partQs {
		wbytes += q.w.rows * q.w.dt.RowBytes(q.w.cols)
	}
	for i := range b.partQs {
		q := &b.partQs[i]
		in := b.partIns[b.partUse[i]]
		q.xq = b.partXQ[in.off : in.off+in.size]
		rows, rb := q.w.rows, q.w.dt.RowBytes(q.w.cols)
		block := matMulBlock(rows, rb, q.n, b.pool.workers)
		// Products of few inputs stream their weights: blocks of about
		// 1/partBlocks of a worker's share of the whole batch, longer
		// runs of memory than each product's own blocks (the many
		// products balance the workers). BenchmarkDecodeExperts, two
		// threads, a decode step's eight experts at the 35B-A3B widths,
		// GB/s, alternating in one run, 2/4/8/16 blocks a worker: Q8_0
		// 22.0/21.9/21.7/22.1 and 26.5/25.9/26.4/27.0, Q4_K
		// 30.7/31.3/31.4/29.2 and 32.6/33.2/33.2/31.8 (one product at a
		// time: Q8_0 17.7 and 19.3, Q4_K 23.4 and 25.4).
		if q.n <= 8 {
			block = max(block, (wbytes/(partBlocks*b.pool.workers)/rb+15)/16*16)
		}
		for lo := 0; lo < rows; lo += block {
			b.partJobs = append(b.partJobs, partJob{p: i, lo: lo, hi: min(lo+block, rows)})
		}
		cost += int64(rows) * int64(q.w.cols) * int64(q.n)
	}
	b.drain(len(b.partJobs), max(cost, int64(len(b.partJobs))*jobGrain), func(_, j int) {
		job := b.partJobs[j]
		q := &b.partQs[job.p]
		b.matMulQRows(q.d, q.xq, q.w, q.n, job.lo, job.hi)
	})
}
