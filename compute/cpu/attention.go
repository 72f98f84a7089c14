package cpu

import (
	"math"
	"sync/atomic"

	"github.com/govinfer/govinfer/compute"
)

// Work division of CausalAttention.
const (
	// attnJobsPerWorker is how many (token, head) jobs per worker are
	// enough to keep every worker busy; with fewer, long contexts are split.
	attnJobsPerWorker = 4
	// attnSplitMin is the fewest cache positions worth a job of their own
	// when a context is split.
	attnSplitMin = 256
)

// CausalAttention implements compute.Backend. The new keys and values go
// into the caches first; then each (token, query head) pair computes
//
//	out = softmax(q · Kᵀ * Scale over positions 0..pos) · V
//
// with query head h reading KV head h / (Heads / KVHeads). Scores are dot
// products and the weighted sum of values is a run of axpys, both on the
// vector kernels. The pairs are shared out dynamically, longest first; when
// there are too few of them for the workers (decode with few heads) the
// positions of each pair are split into segments whose partial softmaxes
// are merged afterwards.
func (b *Backend) CausalAttention(p compute.Attention) {
	kc, vc := Data(p.KCache), Data(p.VCache)
	kb, vb := Data(p.KBuf), Data(p.VBuf)
	nkv, dim := p.K.Count, p.K.Dim
	width := nkv * dim
	for t := 0; t < p.N; t++ {
		row := (p.Pos + t) * width
		for h := 0; h < nkv; h++ {
			copy(kc[row+h*dim:row+(h+1)*dim], kb[p.K.Head(t, h):p.K.Head(t, h)+dim])
			copy(vc[row+h*dim:row+(h+1)*dim], vb[p.V.Head(t, h):p.V.Head(t, h)+dim])
		}
	}
	if p.N <= 0 || p.Q.Count <= 0 {
		return
	}
	splits := attnSplits(b.pool.workers, p.N*p.Q.Count, p.Pos+p.N)
	if splits == 1 {
		b.attendWhole(p)
		return
	}
	b.attendSplit(p, splits)
}

// attnSplits returns into how many segments to split the context of each of
// pairs (token, head) pairs, with ctx cache positions at most, so that
// workers workers have attnJobsPerWorker jobs each, without making
// segments shorter than attnSplitMin.
func attnSplits(workers, pairs, ctx int) int {
	want := attnJobsPerWorker * workers
	if pairs >= want {
		return 1
	}
	return max(1, min((want+pairs-1)/pairs, ctx/attnSplitMin))
}

// attnView holds what an attention job reads and writes.
type attnView struct {
	p      compute.Attention
	qb, kc []float32
	vc     []float32
	out    []float32
	dim    int
	width  int // elements per cache row
	group  int // query heads per KV head
	heads  int // query heads
}

func (b *Backend) view(p compute.Attention) attnView {
	return attnView{p: p, qb: Data(p.QBuf), kc: Data(p.KCache), vc: Data(p.VCache), out: Data(p.Out),
		dim: p.K.Dim, width: p.K.Count * p.K.Dim, group: p.Q.Count / p.K.Count, heads: p.Q.Count}
}

// partial computes, for query head h of token t over cache positions
// [s0, s1), the running maximum m of the scaled scores, the sum l of
// e^{score-m} and o = Σ e^{score-m} v (o is overwritten). scores has room
// for s1-s0 values. An empty range gives m = -Inf, l = 0 and o = 0.
func (b *Backend) partial(v *attnView, t, h, s0, s1 int, scores, o []float32) (m float32, l float64) {
	k := b.k
	dim := v.dim
	kvOff := (h / v.group) * dim
	q := v.qb[v.p.Q.Head(t, h) : v.p.Q.Head(t, h)+dim]
	scores = scores[:s1-s0]
	m = float32(math.Inf(-1))
	for s := s0; s < s1; s++ {
		off := s*v.width + kvOff
		x := k.DotF32(v.kc[off:off+dim], q) * v.p.Scale
		scores[s-s0] = x
		m = max(m, x)
	}
	clear(o)
	for s := s0; s < s1; s++ {
		e := float32(math.Exp(float64(scores[s-s0] - m)))
		if e == 0 {
			continue
		}
		l += float64(e)
		off := s*v.width + kvOff
		k.Axpy(e, v.vc[off:off+dim], o)
	}
	return m, l
}

// outRow returns the output vector of query head h of token t.
func (v *attnView) outRow(t, h int) []float32 {
	lo := (v.p.OutRow+t)*v.heads*v.dim + h*v.dim
	return v.out[lo : lo+v.dim]
}

// attendWhole runs one job per (token, head) pair over its whole context.
// Jobs are numbered so that the longest (last tokens) come first and are
// handed out one at a time.
func (b *Backend) attendWhole(p compute.Attention) {
	v := b.view(p)
	jobs := p.N * v.heads
	var next atomic.Int64
	b.pool.parallelFor(min(b.pool.workers, jobs), 1, func(int, int) {
		scores := make([]float32, p.Pos+p.N)
		for {
			j := int(next.Add(1)) - 1
			if j >= jobs {
				return
			}
			t, h := p.N-1-j/v.heads, j%v.heads
			o := v.outRow(t, h)
			_, l := b.partial(&v, t, h, 0, p.Pos+t+1, scores, o)
			b.k.Scale(float32(1/l), o)
		}
	})
}

// attendSplit runs each (token, head) pair as splits jobs over consecutive
// segments of its context, then merges their partial softmaxes:
//
//	M = max_i m_i,  out = Σ_i e^{m_i-M} o_i / Σ_i e^{m_i-M} l_i
func (b *Backend) attendSplit(p compute.Attention, splits int) {
	v := b.view(p)
	pairs := p.N * v.heads
	jobs := pairs * splits
	ms := make([]float32, jobs)
	ls := make([]float64, jobs)
	os := make([]float32, jobs*v.dim)
	var next atomic.Int64
	b.pool.parallelFor(min(b.pool.workers, jobs), 1, func(int, int) {
		scores := make([]float32, (p.Pos+p.N+splits-1)/splits+1)
		for {
			j := int(next.Add(1)) - 1
			if j >= jobs {
				return
			}
			pair, part := j/splits, j%splits
			t, h := pair/v.heads, pair%v.heads
			n := p.Pos + t + 1
			s0, s1 := part*n/splits, (part+1)*n/splits
			ms[j], ls[j] = b.partial(&v, t, h, s0, s1, scores, os[j*v.dim:(j+1)*v.dim])
		}
	})
	for pair := 0; pair < pairs; pair++ {
		t, h := pair/v.heads, pair%v.heads
		m := float32(math.Inf(-1))
		for j := pair * splits; j < (pair+1)*splits; j++ {
			m = max(m, ms[j])
		}
		o := v.outRow(t, h)
		clear(o)
		var l float64
		for j := pair * splits; j < (pair+1)*splits; j++ {
			if ls[j] == 0 {
				continue
			}
			w := math.Exp(float64(ms[j] - m))
			l += w * ls[j]
			b.k.Axpy(float32(w), os[j*v.dim:(j+1)*v.dim], o)
		}
		b.k.Scale(float32(1/l), o)
	}
}
