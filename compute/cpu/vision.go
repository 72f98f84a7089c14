package cpu

// The operations of a vision tower: LayerNorm, AddBias, GELU and
// SegmentAttention. Norms and GELU run in float64 per element (the tower's
// 1e-4 goldens leave no room for a float32 tanh or erf); attention runs
// on the kernels' float32 products.

import (
	"fmt"
	"math"

	"github.com/govinfer/govinfer/compute"
)

// LayerNorm implements compute.Backend, with the mean and variance of
// each row accumulated in float64.
func (b *Backend) LayerNorm(dst, x compute.Buffer, wt, bt compute.Weight, n, dim int, eps float32) {
	w, bias, d, xs := wt.(*weight), bt.(*weight), Data(dst), Data(x)
	b.eachRow(n, dim, func(r int) {
		src, o := xs[r*dim:(r+1)*dim], d[r*dim:(r+1)*dim]
		var mean float64
		for _, v := range src {
			mean += float64(v)
		}
		mean /= float64(dim)
		var variance float64
		for _, v := range src {
			e := float64(v) - mean
			variance += e * e
		}
		variance /= float64(dim)
		inv := 1 / math.Sqrt(variance+float64(eps))
		for i, v := range src {
			o[i] = float32((float64(v)-mean)*inv*float64(w.at(i)) + float64(bias.at(i)))
		}
	})
}

// AddBias implements compute.Backend.
func (b *Backend) AddBias(x compute.Buffer, bt compute.Weight, n, dim int) {
	bias, xs := bt.(*weight), Data(x)
	bv := bias.f32
	if bv == nil {
		bv = make([]float32, dim)
		bias.row(bv, 0)
	}
	bv = bv[:dim]
	b.eachRow(n, dim, func(r int) {
		row := xs[r*dim : (r+1)*dim]
		for i, v := range bv {
			row[i] += v
		}
	})
}

// GELU implements compute.Backend, each element in float64.
func (b *Backend) GELU(x compute.Buffer, n int, form compute.GELUForm) {
	xs := Data(x)[:n]
	f := geluErf
	if form == compute.GELUTanh {
		f = geluTanh
	}
	b.eachRange(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xs[i] = f(xs[i])
		}
	})
}

// geluTanh is PyTorch's tanh approximation of GELU.
func geluTanh(x float32) float32 {
	const c = 0.7978845608028654 // sqrt(2/pi)
	f := float64(x)
	return float32(0.5 * f * (1 + math.Tanh(c*(f+0.044715*f*f*f))))
}

// geluErf is the exact GELU, x·Φ(x).
func geluErf(x float32) float32 {
	f := float64(x)
	return float32(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
}

// segQBlock is the number of query rows of one SegmentAttention job.
const segQBlock = 32

// SegmentAttention implements compute.Backend. Jobs are (segment, head,
// block of segQBlock queries): the block's scores are one product with
// the segment's keys (transposed once per call, so that it is a plain
// product), the softmax runs in float32 with float64 sums, and the
// weighted values are a second product. A row's result depends only on
// its segment.
func (b *Backend) SegmentAttention(out, x compute.Buffer, q, k, v compute.Heads, n, segLen int, scale float32) {
	if n <= 0 {
		return
	}
	od, xs := Data(out), Data(x)
	heads, hd := q.Count, q.Dim
	if segLen <= 0 || n%segLen != 0 || k.Count != heads || v.Count != heads || k.Dim != hd || v.Dim != hd {
		panic(fmt.Sprintf("cpu: SegmentAttention: %d rows in segments of %d with q %+v k %+v v %+v", n, segLen, q, k, v))
	}
	d := heads * hd
	segs := n / segLen
	qBlocks := (segLen + segQBlock - 1) / segQBlock
	// The keys transposed, [hd, segLen] per (segment, head).
	kt := make([]float32, n*d)
	b.eachRow(segs*heads, segLen*hd, func(j int) {
		seg, hh := j/heads, j%heads
		blk := kt[j*hd*segLen:][:hd*segLen]
		for t := range segLen {
			key := xs[k.Head(seg*segLen+t, hh):][:hd]
			for e, val := range key {
				blk[e*segLen+t] = val
			}
		}
	})
	jobs := segs * heads * qBlocks
	cost := int64(n) * int64(segLen) * int64(2*d)
	b.drain(jobs, cost, func(slot, j int) {
		scratch := b.ws[slot].floats(segQBlock*segLen + segQBlock*hd)
		scores, o := scratch[:segQBlock*segLen], scratch[segQBlock*segLen:]
		seg, rest := j/(heads*qBlocks), j%(heads*qBlocks)
		hh, qb := rest/qBlocks, rest%qBlocks
		s0 := seg * segLen
		q0 := s0 + qb*segQBlock
		nq := min(segQBlock, s0+segLen-q0)
		keys := kt[(seg*heads+hh)*hd*segLen:][:hd*segLen]
		err := b.k.GemmF32(scores, segLen, xs[q.Head(q0, hh):], q.RowStride, 1, keys, segLen, nq, segLen, hd, false)
		var sums [segQBlock]float64
		for i := range nq {
			row := scores[i*segLen : (i+1)*segLen]
			mx := float32(math.Inf(-1))
			for kj, s := range row {
				row[kj] = s * scale
				mx = max(mx, row[kj])
			}
			for kj := range row {
				row[kj] -= mx
			}
			b.k.Exp(row, row)
			var sum float64
			for _, e := range row {
				sum += float64(e)
			}
			sums[i] = sum
		}
		if err == nil {
			err = b.k.GemmF32(o, hd, scores, segLen, 1, xs[v.Head(s0, hh):], v.RowStride, nq, hd, segLen, false)
		}
		if err != nil {
			// The shapes were checked above: a failure is a bug.
			panic(fmt.Sprintf("cpu: SegmentAttention: %v", err))
		}
		for i := range nq {
			inv := 1 / sums[i]
			dst := od[(q0+i)*d+hh*hd:][:hd]
			for e, val := range o[i*hd : (i+1)*hd] {
				dst[e] = float32(float64(val) * inv)
			}
		}
	})
}
