package cpu

import (
	"cmp"
	"math"
	"slices"

	"github.com/govinfer/govinfer/compute"
)

// Chunked evaluation of the delta rule (HF's torch_chunk_gated_delta_rule).
const (
	// deltaChunk is the number of tokens processed as one block of matrix
	// products in the chunked form.
	deltaChunk = 64
	// deltaChunkMin is the smallest number of tokens for which the chunked
	// form is used; shorter inputs (decode) run the recurrent form.
	deltaChunkMin = 16
	// chunkAlign is the multiple the chunk length is padded to (with zeros)
	// where it is the contracted dimension of a product, so the matrix
	// kernels never fall back to their scalar edge loops.
	chunkAlign = 16
)

// GatedDeltaRule implements compute.Backend. Per token t and value head h,
// with S the [Dk, Dv] state:
//
//	S = exp(g_t) S
//	u = beta_t (v_t - Sᵀ k_t)
//	S = S + k_t uᵀ
//	o_t = Sᵀ (q_t * QScale)
//
// A sequence's tokens are cut into chunks of deltaChunk from its first
// token; chunks of at least deltaChunkMin tokens run the equivalent chunked
// form (see deltaKeyHead), shorter ones (decode, and a prompt's last few
// tokens) the recurrence token by token. Each token's form and arithmetic
// thus depend only on its chunk, so a prompt fed in passes cut at
// multiples of deltaChunk gives the results of one pass, bit for bit. The
// work of all sequences is one list of jobs, longest first, shared by the
// workers: one job per (sequence, value head) for the recurrence, one per
// (sequence, key head) for the chunked form (split over the key head's value
// heads when there are few). Each value head's arithmetic is the same
// whichever job runs it, so a sequence's results do not depend on the other
// sequences of the call.
func (b *Backend) GatedDeltaRule(ps []compute.DeltaRule) { b.deltaRule(ps, deltaAuto) }

// deltaForm selects how deltaRule evaluates the sequences.
type deltaForm uint8

const (
	deltaAuto      deltaForm = iota // chunked for chunks of deltaChunkMin tokens or more
	deltaRecurrent                  // token by token
	deltaChunked                    // chunked form at any length
)

// chunked reports whether p runs in the chunked form under f.
func (f deltaForm) chunked(p *compute.DeltaRule) bool {
	return f == deltaChunked || f == deltaAuto && p.N >= deltaChunkMin
}

// deltaJob is one job of a GatedDeltaRule call: value heads [h0, h1) of
// sequence seq, all of which read the same key head.
type deltaJob struct {
	seq, h0, h1 int
	chunked     bool
	cost        int64 // multiply-adds, roughly
}

// deltaRule runs the delta rule for every sequence of ps in the form f.
func (b *Backend) deltaRule(ps []compute.DeltaRule, f deltaForm) {
	// Chunked jobs are per key head; when those are few, split each key
	// head's value heads so that the workers have enough jobs.
	keyHeads := 0
	for i := range ps {
		if p := &ps[i]; p.N > 0 && p.Nv > 0 && f.chunked(p) {
			keyHeads += p.Nk
		}
	}
	want := 2 * b.pool.workers
	jobs := b.deltaJobs[:0]
	var total int64
	for i := range ps {
		p := &ps[i]
		if p.N <= 0 || p.Nv <= 0 {
			continue
		}
		n, dk, dv := int64(p.N), int64(p.Dk), int64(p.Dv)
		if !f.chunked(p) {
			for h := 0; h < p.Nv; h++ {
				jobs = append(jobs, deltaJob{seq: i, h0: h, h1: h + 1, cost: 4 * n * dk * dv})
				total += 4 * n * dk * dv
			}
			continue
		}
		group := p.Nv / p.Nk
		parts := 1
		if keyHeads < want {
			parts = min(group, (want+keyHeads-1)/keyHeads)
		}
		for kh := 0; kh < p.Nk; kh++ {
			for part := 0; part < parts; part++ {
				h0, h1 := kh*group+part*group/parts, kh*group+(part+1)*group/parts
				if h0 == h1 {
					continue
				}
				cost := n * (4*int64(h1-h0)*dk*dv + 2*int64(min(p.N, deltaChunk))*dk)
				jobs = append(jobs, deltaJob{seq: i, h0: h0, h1: h1, chunked: true, cost: cost})
				total += cost
			}
		}
	}
	b.deltaJobs = jobs
	if len(jobs) == 0 {
		return
	}
	slices.SortStableFunc(jobs, func(x, y deltaJob) int { return cmp.Compare(y.cost, x.cost) })
	b.drain(len(jobs), total, func(slot, j int) {
		ws := &b.ws[slot]
		job := &jobs[j]
		p := &ps[job.seq]
		if job.chunked {
			sc := ws.deltaScratch(min(deltaChunk, p.N), p.Dk, p.Dv, p.Nv/p.Nk)
			b.deltaKeyHead(p, sc, job.h0/(p.Nv/p.Nk), job.h0, job.h1, f == deltaAuto)
		} else {
			b.deltaHead(p, ws.floats(2*p.Dv), job.h0, 0)
		}
	})
}

// deltaHead runs the delta rule for value head h of p one token at a time,
// from token t0 on, with scratch of 2*Dv elements. With S the state before the token and
// d = exp(g_t), the step is rewritten so that S is read once and then
// updated once, row by row with the vector kernels:
//
//	a = Sᵀ k,  c = Sᵀ q
//	u = beta (v - d a)
//	o = QScale (d c + (k·q) u)
//	S = d S + k uᵀ
func (b *Backend) deltaHead(p *compute.DeltaRule, scratch []float32, h, t0 int) {
	qkv, gs, bs, out, st := Data(p.QKV), Data(p.G), Data(p.Beta), Data(p.Out), Data(p.State)
	dk, dv := p.Dk, p.Dv
	k := b.k
	a, c := scratch[:dv], scratch[dv:2*dv]
	kh := h / (p.Nv / p.Nk)
	s := st[h*dk*dv : (h+1)*dk*dv]
	for t := t0; t < p.N; t++ {
		qv := qkv[p.Q.Head(t, kh) : p.Q.Head(t, kh)+dk]
		kv := qkv[p.K.Head(t, kh) : p.K.Head(t, kh)+dk]
		vv := qkv[p.V.Head(t, h) : p.V.Head(t, h)+dv]
		gi := (p.GateRow+t)*p.Nv + h
		decay := float32(math.Exp(float64(gs[gi])))
		beta := bs[gi]
		clear(a)
		clear(c)
		for i := 0; i < dk; i++ {
			row := s[i*dv : (i+1)*dv]
			k.Axpy(kv[i], row, a)
			k.Axpy(qv[i], row, c)
		}
		kq := k.DotF32(kv, qv)
		o := out[(p.OutRow+t)*p.Nv*dv+h*dv : (p.OutRow+t)*p.Nv*dv+(h+1)*dv]
		for j := range a {
			u := beta * (vv[j] - decay*a[j])
			a[j] = u
			o[j] = p.QScale * (decay*c[j] + kq*u)
		}
		if decay != 1 {
			k.Scale(decay, s)
		}
		for i := 0; i < dk; i++ {
			k.Axpy(kv[i], a, s[i*dv:(i+1)*dv])
		}
	}
}

// deltaScratch is one worker's memory for the chunked delta rule, sized for
// chunks of up to c tokens; cp is c rounded up to chunkAlign.
type deltaScratch struct {
	kq   []float32 // [2c, dk]: the chunk's keys, then its scaled queries
	x    []float32 // [2c, dk]: beta_s e^{G_s} k_s, then e^{G_r} q_r
	kkqk []float32 // [2c, c]: k_s·k_j, then q_r·k_s
	pq   []float32 // [2c, dv]: (x S) for both halves of x
	u    []float32 // [c, dv]: the corrected values u_s
	ut   []float32 // [dv, cp]: u transposed, columns padded with zeros
	m    []float32 // [c, cp]: e^{G_r-G_s} q_r·k_s for s <= r, else 0
	dec  []float32 // [c, c]: e^{G_r-G_s} for s <= r
	kt   []float32 // [dk, cp]: e^{G_last-G_s} k_s, transposed and padded
	upd  []float32 // [dv, dk]: the chunk's state increment, transposed
	st   []float32 // [group, dv, dk]: transposed states of the value heads of one key head
	g    []float64 // [c]: cumulative log decay G within the chunk
}

func newDeltaScratch(c, dk, dv, group int) *deltaScratch {
	cp := alignUp(c, chunkAlign)
	sizes := []int{2 * c * dk, 2 * c * dk, 2 * c * c, 2 * c * dv, c * dv, dv * cp, c * cp, c * c, dk * cp, dv * dk, group * dv * dk}
	total := 0
	for _, n := range sizes {
		total += n
	}
	mem := make([]float32, total)
	next := func(n int) []float32 {
		s := mem[:n:n]
		mem = mem[n:]
		return s
	}
	sc := &deltaScratch{g: make([]float64, c)}
	for i, f := range []*[]float32{&sc.kq, &sc.x, &sc.kkqk, &sc.pq, &sc.u, &sc.ut, &sc.m, &sc.dec, &sc.kt, &sc.upd, &sc.st} {
		*f = next(sizes[i])
	}
	return sc
}

// deltaKeyHead runs the chunked form of the delta rule for value heads
// [h0, h1) of p, which all read key head kh: blocks of up to deltaChunk
// tokens evaluated with matrix products (the WY form of HF's torch_chunk_gated_delta_rule). For a
// chunk of L tokens starting from state S0, with G_r the cumulative sum of
// g over the chunk up to token r:
//
//	u_s = beta_s (v_s - e^{G_s} S0ᵀ k_s) - beta_s Σ_{j<s} e^{G_s-G_j} (k_s·k_j) u_j
//	o_r = e^{G_r} S0ᵀ q_r + Σ_{s<=r} e^{G_r-G_s} (q_r·k_s) u_s
//	S   = e^{G_{L-1}} S0 + Σ_s e^{G_{L-1}-G_s} k_s u_sᵀ
//
// (q already scaled by QScale). The first line is a unit lower-triangular
// system solved by forward substitution; everything else is a product of
// small matrices. The last chunk is simply shorter: HF's zero padding (g = 0,
// beta = 0) adds nothing. The states of the value heads are kept transposed
// ([Dv, Dk]) while it runs, and the key products are computed once for all
// of them. With shortTail, a last chunk shorter than deltaChunkMin runs the
// recurrence instead, as a pass of just those tokens would.
func (b *Backend) deltaKeyHead(p *compute.DeltaRule, sc *deltaScratch, kh, h0, h1 int, shortTail bool) {
	k := b.k
	qkv, gs, bs, out, st := Data(p.QKV), Data(p.G), Data(p.Beta), Data(p.Out), Data(p.State)
	dk, dv := p.Dk, p.Dv
	// Transposed copies of the states: the products below contract over
	// the key dimension, which the kernels want contiguous.
	for h := h0; h < h1; h++ {
		transpose(sc.st[(h-h0)*dv*dk:(h-h0+1)*dv*dk], dk, st[h*dk*dv:(h+1)*dk*dv], dk, dv)
	}
	for t0 := 0; t0 < p.N; t0 += deltaChunk {
		l := min(deltaChunk, p.N-t0)
		if shortTail && l < deltaChunkMin {
			for h := h0; h < h1; h++ {
				transpose(st[h*dk*dv:(h+1)*dk*dv], dv, sc.st[(h-h0)*dv*dk:(h-h0+1)*dv*dk], dv, dk)
				b.deltaHead(p, sc.pq[:2*dv], h, t0)
			}
			return
		}
		// Keys then scaled queries of the chunk, and their products with
		// the keys: kkqk[s*l+j] = k_s·k_j, kkqk[(l+r)*l+s] = q_r·k_s.
		kq := sc.kq[:2*l*dk]
		for r := 0; r < l; r++ {
			copy(kq[r*dk:(r+1)*dk], qkv[p.K.Head(t0+r, kh):p.K.Head(t0+r, kh)+dk])
			qr := kq[(l+r)*dk : (l+r+1)*dk]
			copy(qr, qkv[p.Q.Head(t0+r, kh):p.Q.Head(t0+r, kh)+dk])
			k.Scale(p.QScale, qr)
		}
		kkqk := sc.kkqk[:2*l*l]
		mustKernel(k.MatMulF32(kkqk, l, kq[:l*dk], l, dk, kq, 2*l))
		for h := h0; h < h1; h++ {
			b.advanceChunk(p, sc, h, t0, l, sc.st[(h-h0)*dv*dk:(h-h0+1)*dv*dk], gs, bs, qkv, out)
		}
	}
	for h := h0; h < h1; h++ {
		transpose(st[h*dk*dv:(h+1)*dk*dv], dv, sc.st[(h-h0)*dv*dk:(h-h0+1)*dv*dk], dv, dk)
	}
}

// advanceChunk advances value head h over the l tokens starting at t0, with
// sc.kq and sc.kkqk already holding the chunk's keys, queries and their
// products, and st the head's transposed state.
func (b *Backend) advanceChunk(p *compute.DeltaRule, sc *deltaScratch, h, t0, l int, st, gs, bs, qkv, out []float32) {
	k := b.k
	dk, dv := p.Dk, p.Dv
	kq, kkqk := sc.kq[:2*l*dk], sc.kkqk[:2*l*l]
	// Cumulative log decays, in float64 so long chunks lose nothing.
	g := sc.g[:l]
	var acc float64
	for r := 0; r < l; r++ {
		acc += float64(gs[(p.GateRow+t0+r)*p.Nv+h])
		g[r] = acc
	}
	beta := func(s int) float32 { return bs[(p.GateRow+t0+s)*p.Nv+h] }
	// x = [beta_s e^{G_s} k_s ; e^{G_r} q_r], then pq = x S0.
	x := sc.x[:2*l*dk]
	for r := 0; r < l; r++ {
		e := math.Exp(g[r])
		scaleTo(x[r*dk:(r+1)*dk], kq[r*dk:(r+1)*dk], float32(e)*beta(r))
		scaleTo(x[(l+r)*dk:(l+r+1)*dk], kq[(l+r)*dk:(l+r+1)*dk], float32(e))
	}
	pq := sc.pq[:2*l*dv]
	mustKernel(k.MatMulF32(pq, dv, st, dv, dk, x, 2*l))
	// Decays e^{G_r-G_s} for s <= r, and the masked query-key matrix.
	lp := alignUp(l, chunkAlign)
	dec, m := sc.dec[:l*l], sc.m[:l*lp]
	for r := 0; r < l; r++ {
		for s := 0; s <= r; s++ {
			d := float32(math.Exp(g[r] - g[s]))
			dec[r*l+s] = d
			m[r*lp+s] = d * kkqk[(l+r)*l+s]
		}
		clear(m[r*lp+r+1 : (r+1)*lp])
	}
	// Forward substitution for the corrected values.
	u := sc.u[:l*dv]
	for s := 0; s < l; s++ {
		us := u[s*dv : (s+1)*dv]
		vs := qkv[p.V.Head(t0+s, h) : p.V.Head(t0+s, h)+dv]
		ps := pq[s*dv : (s+1)*dv]
		bt := beta(s)
		for j := range us {
			us[j] = bt*vs[j] - ps[j]
		}
		for j := 0; j < s; j++ {
			a := -bt * dec[s*l+j] * kkqk[s*l+j]
			if a != 0 {
				k.Axpy(a, u[j*dv:(j+1)*dv], us)
			}
		}
	}
	ut := sc.ut[:dv*lp]
	transpose(ut, lp, u, l, dv)
	// Outputs: o = m u + e^{G_r} S0ᵀ q_r, written straight into their rows.
	ld := p.Nv * dv
	o := out[(p.OutRow+t0)*ld+h*dv:]
	mustKernel(k.MatMulF32(o, ld, ut, dv, lp, m, l))
	for r := 0; r < l; r++ {
		k.Axpy(1, pq[(l+r)*dv:(l+r+1)*dv], o[r*ld:r*ld+dv])
	}
	// State: S = e^{G_last} S0 + Σ_s e^{G_last-G_s} k_s u_sᵀ, transposed.
	last := g[l-1]
	kt := sc.kt[:dk*lp]
	for s := 0; s < l; s++ {
		e := float32(math.Exp(last - g[s]))
		ks := kq[s*dk : (s+1)*dk]
		for i, kv := range ks {
			kt[i*lp+s] = e * kv
		}
	}
	for i := 0; i < dk; i++ {
		clear(kt[i*lp+l : (i+1)*lp])
	}
	upd := sc.upd[:dv*dk]
	mustKernel(k.MatMulF32(upd, dk, kt, dk, lp, ut, dv))
	if d := float32(math.Exp(last)); d != 1 {
		k.Scale(d, st)
	}
	k.Axpy(1, upd, st)
}

// transpose writes the [cols, rows] transpose of the [rows, cols] matrix src
// into dst, whose rows are ldd >= rows apart; elements rows..ldd-1 of each
// dst row are set to zero.
func transpose(dst []float32, ldd int, src []float32, rows, cols int) {
	transposeStrided(dst, ldd, src, cols, rows, cols)
}

// transposeStrided is transpose with the rows of src lds elements apart.
func transposeStrided(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	transposeCols(dst, ldd, src, lds, rows, cols)
	if ldd > rows {
		for c := 0; c < cols; c++ {
			clear(dst[c*ldd+rows : (c+1)*ldd])
		}
	}
}

// alignUp rounds n up to a multiple of a.
func alignUp(n, a int) int { return (n + a - 1) / a * a }

// scaleTo sets dst[i] = a*src[i].
func scaleTo(dst, src []float32, a float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = a * v
	}
}

// mustKernel panics on a kernel shape error: the shapes here are derived
// from a DeltaRule or Attention the model built, so an error is a bug.
func mustKernel(err error) {
	if err != nil {
		panic("cpu: " + err.Error())
	}
}

// transposeCols writes the [cols, rows] transpose of the rows×cols block of
// src (rows lds apart) into dst, rows ldd apart, leaving the rest of dst as
// it is.
func transposeCols(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	const blk = 16
	for r0 := 0; r0 < rows; r0 += blk {
		r1 := min(r0+blk, rows)
		for c0 := 0; c0 < cols; c0 += blk {
			c1 := min(c0+blk, cols)
			for r := r0; r < r1; r++ {
				row := src[r*lds+c0 : r*lds+c1]
				for i, x := range row {
					dst[(c0+i)*ldd+r] = x
				}
			}
		}
	}
}
