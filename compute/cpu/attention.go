package cpu

import (
	"cmp"
	"math"
	"slices"

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
	// attnBlockMin is the number of new tokens from which attention runs
	// blocked, on asm.Kernels.GemmF32.
	attnBlockMin = 16
	// attnRows is the target number of query rows (tokens times the query
	// heads of one KV head) of a block.
	attnRows = 128
	// attnKeys is the number of cache positions of a key block.
	attnKeys = 64
	// attnChunk is the multiple of positions at which a sequence's new
	// tokens are cut into pieces that are each evaluated on their own: the
	// delta rule's chunk, so that prefill cut at its multiples reproduces
	// one pass exactly.
	attnChunk = deltaChunk
)

// CausalAttention implements compute.Backend. The new keys and values go
// into the caches first; then each (token, query head) pair computes
//
//	out = softmax(q · Kᵀ * Scale over positions 0..pos) · V
//
// with query head h reading KV head h / (Heads / KVHeads). A sequence's new
// tokens are cut into pieces at multiples of attnChunk positions. Pieces of
// attnBlockMin tokens or more (prompts) run as blocks of matrix products on
// the caches in place (see attendBlock). Shorter ones (decode) run one job
// per (token, KV head) that serves all the query heads of that KV head, so
// each cached key and value is read once per group: scores are dot products
// on the vector kernels, and the weighted sum of values one GemmF32 over
// the value rows. When a sequence has too few such jobs for the workers,
// its context is split into segments whose partial softmaxes are merged
// afterwards; that choice depends only on the sequence and the number of
// workers, so a sequence's results do not depend on the other sequences of
// the call. The jobs of all sequences form one list, longest first, shared
// by the workers. Caches of 16-bit elements are expanded to float32 first
// (see attention16).
func (b *Backend) CausalAttention(ps []compute.Attention) {
	if len(ps) > 0 && ps[0].CacheType.Size() == 2 {
		b.attention16(ps)
		return
	}
	for i := range ps {
		storeKV(&ps[i])
	}
	b.attend(ps)
}

// attend runs CausalAttention for sequences whose float32 caches hold their
// new keys and values already.
func (b *Backend) attend(ps []compute.Attention) {
	jobs, seqs := b.attnJobs[:0], b.attnSeqs[:0]
	var total int64
	ml, od := 0, 0 // heads of group jobs so far, and of split ones
	for i := range ps {
		p := &ps[i]
		if p.N <= 0 || p.Q.Count <= 0 {
			continue
		}
		// Pieces of the new tokens that end at multiples of attnChunk
		// positions: each piece's form and splits depend on the piece
		// alone, not on the rest of the call.
		for a := 0; a < p.N; {
			e := min(p.N, a+attnChunk-(p.Pos+a)%attnChunk)
			piece := *p
			piece.Q, piece.Pos, piece.N, piece.OutRow = p.Q.Rows(a), p.Pos+a, e-a, p.OutRow+a
			a = e
			v := b.view(piece)
			nkv, group, dim := piece.K.Count, v.group, v.dim
			if piece.N >= attnBlockMin {
				bq := max(1, attnRows/group) // tokens per block
				for t0 := 0; t0 < piece.N; t0 += bq {
					t1 := min(piece.N, t0+bq)
					cost := 2 * int64((t1-t0)*group) * int64(piece.Pos+t1) * int64(dim)
					for kvh := 0; kvh < nkv; kvh++ {
						jobs = append(jobs, attnJob{seq: len(seqs), blocked: true, kvh: kvh, t: t0, t1: t1, cost: cost})
						total += cost
					}
				}
				seqs = append(seqs, attnSeq{v: v})
				continue
			}
			splits := attnSplits(b.pool.workers, piece.N*nkv, piece.Pos+piece.N)
			sq := attnSeq{v: v, splits: splits, ml: ml, od: od}
			for t := 0; t < piece.N; t++ {
				n := piece.Pos + t + 1
				for kvh := 0; kvh < nkv; kvh++ {
					for part := 0; part < splits; part++ {
						s0, s1 := part*n/splits, (part+1)*n/splits
						cost := 2 * int64(s1-s0) * int64(group*dim)
						jobs = append(jobs, attnJob{seq: len(seqs), kvh: kvh, t: t, s0: s0, s1: s1, ml: ml, od: od, cost: cost})
						total += cost
						ml += group
						if splits > 1 {
							od += group * dim
						}
					}
				}
			}
			seqs = append(seqs, sq)
		}
	}
	b.attnJobs, b.attnSeqs = jobs, seqs
	if len(jobs) == 0 {
		return
	}
	b.attnM, b.attnL, b.attnO = grow(b.attnM, ml), grow(b.attnL, ml), grow(b.attnO, od)
	slices.SortStableFunc(jobs, func(x, y attnJob) int { return cmp.Compare(y.cost, x.cost) })
	b.drain(len(jobs), total, func(slot, j int) {
		ws := &b.ws[slot]
		job := &jobs[j]
		sq := &seqs[job.seq]
		if job.blocked {
			v := &sq.v
			sc := ws.attnScratch(max(1, attnRows/v.group)*v.group, v.dim)
			b.attendBlock(v, sc, job.kvh, job.t, job.t1)
			return
		}
		b.attendGroup(sq, &ws.group, job)
	})
	b.mergeSplits()
}

// storeKV writes the new keys and values of p into its caches.
func storeKV(p *compute.Attention) {
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
}

// attnSeq is one sequence piece of a CausalAttention call.
type attnSeq struct {
	v      attnView
	splits int // context segments per (token, KV head); 0 when blocked
	ml, od int // its first group job's head in attnM/attnL, and in attnO (elements)
}

// attnJob is one job of a CausalAttention call. A group job computes the
// query heads of KV head kvh at token t over cache positions [s0, s1); a
// blocked job those of tokens [t, t1).
type attnJob struct {
	seq, kvh, t int
	blocked     bool
	t1          int
	s0, s1      int
	ml, od      int   // group jobs: the job's first head in attnM/attnL, and in attnO
	cost        int64 // multiply-adds, roughly
}

// attnMerge is one (sequence, token, KV head) whose split partial results
// are merged.
type attnMerge struct{ seq, t, kvh, ml, od int }

// AttentionDependsOnRows implements compute.RowDependentAttention: the
// context of a call is split by its number of new tokens (attnSplits), so
// one token's sums differ with the tokens beside it in the call.
func (b *Backend) AttentionDependsOnRows() bool { return true }

// attnSplits returns into how many segments to split the context of each of
// jobs jobs, with ctx cache positions at most, so that workers workers have
// attnJobsPerWorker jobs each, without making segments shorter than
// attnSplitMin.
func attnSplits(workers, jobs, ctx int) int {
	want := attnJobsPerWorker * workers
	if jobs >= want {
		return 1
	}
	return max(1, min((want+jobs-1)/jobs, ctx/attnSplitMin))
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

// outRow returns the output vector of query head h of token t.
func (v *attnView) outRow(t, h int) []float32 {
	lo := (v.p.OutRow+t)*v.heads*v.dim + h*v.dim
	return v.out[lo : lo+v.dim]
}

// groupScratch is one worker's memory for group jobs.
type groupScratch struct {
	q      []float32 // [group, dim]: the group's query vectors
	scores []float32 // [group, segment length]
}

// size makes room for a group of group heads of dim over n positions.
func (sc *groupScratch) size(group, dim, n int) {
	if cap(sc.q) < group*dim {
		sc.q = make([]float32, group*dim)
	}
	if cap(sc.scores) < group*n {
		sc.scores = make([]float32, group*n)
	}
}

// partialGroup computes, for the query heads of KV head kvh at token t over
// cache positions [s0, s1), each head's maximum scaled score m[hh], the sum
// l[hh] of e^{score-m} and o[hh*dim:] = Σ e^{score-m} v (o is overwritten).
// An empty range gives m = -Inf, l = 0 and o = 0.
func (b *Backend) partialGroup(v *attnView, sc *groupScratch, t, kvh, s0, s1 int, o, m []float32, l []float64) {
	k, dim, group := b.k, v.dim, v.group
	n := s1 - s0
	q, scores := sc.q[:group*dim], sc.scores[:group*n]
	for hh := 0; hh < group; hh++ {
		off := v.p.Q.Head(t, kvh*group+hh)
		copy(q[hh*dim:(hh+1)*dim], v.qb[off:off+dim])
	}
	kvOff := kvh * dim
	if n > 0 {
		// scores[hh*n+s-s0] = k_s · q_hh, the keys read in place.
		mustKernel(k.MatMulF32Strided(scores, n, v.kc[s0*v.width+kvOff:], v.width, n, dim, q, group))
	}
	for hh := 0; hh < group; hh++ {
		row := scores[hh*n : (hh+1)*n]
		k.Scale(v.p.Scale, row)
		mx := float32(math.Inf(-1))
		for _, x := range row {
			mx = max(mx, x)
		}
		for i, x := range row {
			row[i] = x - mx
		}
		k.Exp(row, row)
		var sum float64
		for _, x := range row {
			sum += float64(x)
		}
		m[hh], l[hh] = mx, sum
	}
	// o = P·V over the segment: each value row is read once for the whole
	// group.
	mustKernel(k.GemmF32(o[:group*dim], dim, scores, n, 1, v.vc[s0*v.width+kvOff:], v.width, group, dim, n, false))
}

// attendGroup runs a group job of sq. With one segment it writes its
// outputs directly; otherwise it leaves partial results for mergeSplits.
func (b *Backend) attendGroup(sq *attnSeq, sc *groupScratch, job *attnJob) {
	v := &sq.v
	group, dim := v.group, v.dim
	sc.size(group, dim, job.s1-job.s0)
	m, l := b.attnM[job.ml:job.ml+group], b.attnL[job.ml:job.ml+group]
	if sq.splits == 1 {
		o := v.out[(v.p.OutRow+job.t)*v.heads*dim+job.kvh*group*dim:]
		b.partialGroup(v, sc, job.t, job.kvh, job.s0, job.s1, o, m, l)
		for hh := range group {
			b.k.Scale(float32(1/l[hh]), o[hh*dim:(hh+1)*dim])
		}
		return
	}
	b.partialGroup(v, sc, job.t, job.kvh, job.s0, job.s1, b.attnO[job.od:job.od+group*dim], m, l)
}

// mergeSplits combines the partial results of every split sequence of the
// call:
//
//	M = max_i m_i,  out = Σ_i e^{m_i-M} o_i / Σ_i e^{m_i-M} l_i
//
// one job per (sequence, token, KV head).
func (b *Backend) mergeSplits() {
	merges := b.attnMerges[:0]
	var total int64
	for i := range b.attnSeqs {
		sq := &b.attnSeqs[i]
		if sq.splits <= 1 {
			continue
		}
		p, group, dim := &sq.v.p, sq.v.group, sq.v.dim
		nkv := p.K.Count
		for t := 0; t < p.N; t++ {
			for kvh := 0; kvh < nkv; kvh++ {
				pair := t*nkv + kvh
				merges = append(merges, attnMerge{seq: i, t: t, kvh: kvh,
					ml: sq.ml + pair*sq.splits*group, od: sq.od + pair*sq.splits*group*dim})
				total += int64(sq.splits * group * dim)
			}
		}
	}
	b.attnMerges = merges
	if len(merges) == 0 {
		return
	}
	b.drain(len(merges), total, func(_, j int) { b.merge(&merges[j]) })
}

// merge combines the partial results of one (sequence, token, KV head).
func (b *Backend) merge(mg *attnMerge) {
	sq := &b.attnSeqs[mg.seq]
	v, splits := &sq.v, sq.splits
	group, dim := v.group, v.dim
	ms, ls, os := b.attnM[mg.ml:], b.attnL[mg.ml:], b.attnO[mg.od:]
	for hh := 0; hh < group; hh++ {
		mx := float32(math.Inf(-1))
		for j := 0; j < splits; j++ {
			mx = max(mx, ms[j*group+hh])
		}
		o := v.outRow(mg.t, mg.kvh*group+hh)
		clear(o)
		var l float64
		for j := 0; j < splits; j++ {
			if ls[j*group+hh] == 0 {
				continue
			}
			w := math.Exp(float64(ms[j*group+hh] - mx))
			l += w * ls[j*group+hh]
			b.k.Axpy(float32(w), os[(j*group+hh)*dim:(j*group+hh+1)*dim], o)
		}
		b.k.Scale(float32(1/l), o)
	}
}

// attnScratch is one worker's memory for blocked attention: rows query rows
// of dim elements against key blocks of attnKeys positions.
type attnScratch struct {
	qt []float32 // [dim, rows]: the scaled queries, transposed
	o  []float32 // [rows, dim]: output sums
	s  []float32 // [attnKeys, rows]: scores, then softmax numerators, transposed
	// [rows]: running maxima, the block's maxima, rescale factors and the
	// block's sums of numerators.
	m, mBlock, alpha, sum []float32
	l                     []float64 // [rows]: running sums of the numerators
}

func newAttnScratch(rows, dim int) *attnScratch {
	sizes := []int{dim * rows, rows * dim, attnKeys * rows, rows, rows, rows, rows}
	total := 0
	for _, n := range sizes {
		total += n
	}
	mem := make([]float32, total)
	sc := &attnScratch{l: make([]float64, rows)}
	for i, f := range []*[]float32{&sc.qt, &sc.o, &sc.s, &sc.m, &sc.mBlock, &sc.alpha, &sc.sum} {
		*f, mem = mem[:sizes[i]:sizes[i]], mem[sizes[i]:]
	}
	return sc
}

// attendBlock computes the outputs of tokens [t0, t1) for the query heads of
// KV head kvh as blocks of matrix products, flash-attention style: the block
// of query rows walks the cache in blocks of attnKeys positions, keeping a
// running maximum, sum and weighted value sum per row:
//
//	S = Q Kᵀ·Scale (causally masked),  m' = max(m, rowmax S),  P = e^{S-m'}
//	l = e^{m-m'} l + rowsum P,  O = e^{m-m'} O + P V
//
// and finally out = O / l. Row r of the block is token t0 + r/group, head
// kvh*group + r%group. Both products run on GemmF32 with the caches read in
// place: the scores as Sᵀ = K·Qᵀ (the key rows times the transposed
// queries), so that a row of Sᵀ holds one key's scores for every query row
// and the softmax steps are vector operations across rows; then O += P·V
// with P read from Sᵀ through its strides. Every element of S and O is one
// chain of fused multiply-adds over dimensions and positions in order, so a
// row's result does not depend on the other rows of the block.
func (b *Backend) attendBlock(v *attnView, sc *attnScratch, kvh, t0, t1 int) {
	k, p, dim, group := b.k, v.p, v.dim, v.group
	rows := (t1 - t0) * group
	qt, o := sc.qt[:dim*rows], sc.o[:rows*dim]
	for r := 0; r < rows; r++ {
		off := p.Q.Head(t0+r/group, kvh*group+r%group)
		for d, x := range v.qb[off : off+dim] {
			qt[d*rows+r] = x * p.Scale
		}
	}
	m, mBlock, alpha, sum, l := sc.m[:rows], sc.mBlock[:rows], sc.alpha[:rows], sc.sum[:rows], sc.l[:rows]
	for r := range m {
		m[r] = float32(math.Inf(-1))
	}
	clear(l)
	clear(o)
	kvOff := kvh * dim
	first := p.Pos + t0 // position of the first row's token
	end := p.Pos + t1   // one past the last position any row reads
	for s0 := 0; s0 < end; s0 += attnKeys {
		nb := min(attnKeys, end-s0)
		st := sc.s[:nb*rows]
		mustKernel(k.GemmF32(st, rows, v.kc[s0*v.width+kvOff:], v.width, 1, qt, rows, nb, rows, dim, false))
		// Key s0+s is hidden from the rows of earlier tokens, a prefix of
		// its row of Sᵀ.
		for s := 0; s < nb; s++ {
			if hidden := min(rows, (s0+s-first)*group); hidden > 0 {
				for i := range st[s*rows : s*rows+hidden] {
					st[s*rows+i] = float32(math.Inf(-1))
				}
			}
		}
		// m' = max(m, rowmax S); alpha = e^{m-m'}. The first block shows
		// position 0 to every row, so m' is finite from then on.
		copy(mBlock, m)
		for s := 0; s < nb; s++ {
			k.MaxF32(mBlock, st[s*rows:(s+1)*rows])
		}
		for r := range alpha {
			alpha[r] = m[r] - mBlock[r]
		}
		k.Exp(alpha, alpha)
		// P = e^{S-m'} (hidden keys give 0) and its row sums.
		for s := 0; s < nb; s++ {
			k.Axpy(-1, mBlock, st[s*rows:(s+1)*rows])
		}
		k.Exp(st, st)
		clear(sum)
		for s := 0; s < nb; s++ {
			k.Axpy(1, st[s*rows:(s+1)*rows], sum)
		}
		for r := 0; r < rows; r++ {
			l[r] = l[r]*float64(alpha[r]) + float64(sum[r])
			if alpha[r] != 1 {
				k.Scale(alpha[r], o[r*dim:(r+1)*dim])
			}
		}
		copy(m, mBlock)
		// O += P·V, P read from Sᵀ (row stride 1, column stride rows).
		mustKernel(k.GemmF32(o, dim, st, 1, rows, v.vc[s0*v.width+kvOff:], v.width, rows, dim, nb, true))
	}
	for r := 0; r < rows; r++ {
		dst := v.outRow(t0+r/group, kvh*group+r%group)
		scaleTo(dst, o[r*dim:(r+1)*dim], float32(1/l[r]))
	}
}
