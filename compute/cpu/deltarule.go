package cpu

import (
	"math"

	"github.com/govinfer/govinfer/compute"
)

// GatedDeltaRule implements compute.Backend with the recurrent form, value
// heads in parallel. Per token t and value head h, with S the [Dk, Dv] state:
//
//	S = exp(g_t) S
//	u = beta_t (v_t - Sᵀ k_t)
//	S = S + k_t uᵀ
//	o_t = Sᵀ (q_t * QScale)
func (b *Backend) GatedDeltaRule(p compute.DeltaRule) {
	qkv, gs, bs, out, st := Data(p.QKV), Data(p.G), Data(p.Beta), Data(p.Out), Data(p.State)
	group := p.Nv / p.Nk
	dk, dv := p.Dk, p.Dv
	b.pool.parallelFor(p.Nv, 1, func(lo, hi int) {
		u := make([]float32, dv)
		for h := lo; h < hi; h++ {
			kh := h / group
			s := st[h*dk*dv : (h+1)*dk*dv]
			for t := 0; t < p.N; t++ {
				q := qkv[p.Q.Head(t, kh) : p.Q.Head(t, kh)+dk]
				k := qkv[p.K.Head(t, kh) : p.K.Head(t, kh)+dk]
				v := qkv[p.V.Head(t, h) : p.V.Head(t, h)+dv]
				gi := (p.GateRow+t)*p.Nv + h
				decay := float32(math.Exp(float64(gs[gi])))
				beta := bs[gi]
				for j := range u {
					u[j] = 0
				}
				for i := 0; i < dk; i++ {
					row := s[i*dv : (i+1)*dv]
					ki := k[i]
					for j := range row {
						row[j] *= decay
						u[j] += row[j] * ki
					}
				}
				for j := range u {
					u[j] = beta * (v[j] - u[j])
				}
				o := out[(p.OutRow+t)*p.Nv*dv+h*dv : (p.OutRow+t)*p.Nv*dv+(h+1)*dv]
				for j := range o {
					o[j] = 0
				}
				for i := 0; i < dk; i++ {
					row := s[i*dv : (i+1)*dv]
					ki, qi := k[i], q[i]*p.QScale
					for j := range row {
						row[j] += ki * u[j]
						o[j] += row[j] * qi
					}
				}
			}
		}
	})
}
