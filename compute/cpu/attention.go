package cpu

import (
	"math"

	"github.com/govinfer/govinfer/compute"
)

// CausalAttention implements compute.Backend. The new keys and values go
// into the caches first; then each (token, query head) pair computes
//
//	out = softmax(q · Kᵀ * Scale over positions 0..pos) · V
//
// with query head h reading KV head h / (Heads / KVHeads). Pairs run in
// parallel.
func (b *Backend) CausalAttention(p compute.Attention) {
	kc, vc := Data(p.KCache), Data(p.VCache)
	kb, vb, qb, out := Data(p.KBuf), Data(p.VBuf), Data(p.QBuf), Data(p.Out)
	nkv, dim := p.K.Count, p.K.Dim
	width := nkv * dim
	for t := 0; t < p.N; t++ {
		row := (p.Pos + t) * width
		for h := 0; h < nkv; h++ {
			copy(kc[row+h*dim:row+(h+1)*dim], kb[p.K.Head(t, h):p.K.Head(t, h)+dim])
			copy(vc[row+h*dim:row+(h+1)*dim], vb[p.V.Head(t, h):p.V.Head(t, h)+dim])
		}
	}
	nh := p.Q.Count
	group := nh / nkv
	b.pool.parallelFor(p.N*nh, 1, func(lo, hi int) {
		scores := make([]float32, p.Pos+p.N)
		for job := lo; job < hi; job++ {
			t, h := job/nh, job%nh
			kvh := h / group
			q := qb[p.Q.Head(t, h) : p.Q.Head(t, h)+dim]
			n := p.Pos + t + 1
			maxS := float32(math.Inf(-1))
			for s := 0; s < n; s++ {
				off := s*width + kvh*dim
				scores[s] = b.k.DotF32(kc[off:off+dim], q) * p.Scale
				maxS = max(maxS, scores[s])
			}
			var sum float64
			for s := 0; s < n; s++ {
				e := float32(math.Exp(float64(scores[s] - maxS)))
				scores[s] = e
				sum += float64(e)
			}
			inv := float32(1 / sum)
			o := out[(p.OutRow+t)*nh*dim+h*dim : (p.OutRow+t)*nh*dim+(h+1)*dim]
			for j := range o {
				o[j] = 0
			}
			for s := 0; s < n; s++ {
				wgt := scores[s] * inv
				off := s*width + kvh*dim
				for j, v := range vc[off : off+dim] {
					o[j] += wgt * v
				}
			}
		}
	})
}
