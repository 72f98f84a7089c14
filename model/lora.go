package model

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/lora"
)

// A LoRA adapter changes a linear y = W x of the base model into
//
//	y = W x + s · B (A x)       A [r, in], B [out, r], s its scale
//
// unmerged: the base weights stay as they are and shared, and each
// sequence names the adapters it runs with (Sequence.SetAdapters), so one
// step can mix sequences of different adapters. A step's rows are cut into
// runs of consecutive rows with the same adapters; each run's update is
// two small products and an add on the rows of the run. A row's result
// does not depend on its neighbours: every product gives a row the bits it
// gets in any block of rows, and the runs' copies and adds are exact.
//
// Merged (Options.Merge), the update is added to W while it loads, in
// float64, so the adapter costs nothing per token.

// Adapter is a LoRA adapter attached to a Model (Model.AttachAdapter): the
// low-rank matrices of the linears it updates, on the model's backend (on
// the experts' backend for experts kept there).
type Adapter struct {
	m     *Model
	name  string
	mods  map[compute.Weight]*loraLinear
	rank  int   // the largest rank of its modules
	bytes int64 // bytes of its matrices
	uses  int   // sequences that use it
	gone  bool  // Close was called
}

// loraLinear is the update of one base matrix: A [rank, in] and B [out,
// rank] scaled by the adapter's scale, as float32 weights on be.
type loraLinear struct {
	be   compute.Backend
	a, b compute.Weight
	rank int
	out  int
}

// AdapterUse is an adapter a sequence runs with, and the factor its
// update is multiplied by (1 runs it as trained; llama-server's per-request
// scale).
type AdapterUse struct {
	Adapter *Adapter
	Scale   float32
}

// Name returns the name the adapter was attached under.
func (a *Adapter) Name() string { return a.name }

// Rank returns the largest rank of the adapter's modules.
func (a *Adapter) Rank() int { return a.rank }

// Bytes returns the memory the adapter's matrices take on the backend.
func (a *Adapter) Bytes() int64 { return a.bytes }

// Modules returns the number of base matrices the adapter updates.
func (a *Adapter) Modules() int { return len(a.mods) }

// linearKinds are the module names of the text model's matrices an
// adapter may update: those its products read.
var linearKinds = []string{
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.out_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
	"mlp.gate", "mlp.shared_expert_gate",
	"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
}

// moduleKey returns the name of a text-model module without its prefix
// (textPrefixes, the multimodal checkpoints' or the text-only ones')
// ("layers.3.self_attn.q_proj"), and whether it is one.
func moduleKey(name string) (string, bool) {
	name = strings.TrimSuffix(name, ".weight")
	for _, p := range textPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && strings.HasPrefix(rest, "layers.") {
			return rest, true
		}
	}
	return name, strings.HasPrefix(name, "layers.")
}

// isLinearKey reports whether key ("layers.N.<kind>") names a linear an
// adapter may update.
func isLinearKey(key string) bool {
	rest, ok := strings.CutPrefix(key, "layers.")
	if !ok {
		return false
	}
	dot := strings.IndexByte(rest, '.')
	if dot <= 0 {
		return false
	}
	kind := rest[dot+1:]
	for _, k := range linearKinds {
		if kind == k {
			return true
		}
	}
	return false
}

// linearOf returns the loaded matrix of the text model's module key
// together with the backend that holds it, where key is a linear an
// adapter may update.
func (m *Model) linearOf(key string) (compute.Weight, compute.Backend, bool) {
	if !isLinearKey(key) {
		return nil, nil, false
	}
	w, ok := m.w.linears[key]
	if !ok {
		return nil, nil, false
	}
	be := m.be
	if hb, ok := m.w.linearOn[key]; ok {
		be = hb
	}
	return w, be, true
}

// AttachAdapter puts the matrices of adapter ad on the model's backend
// under name, checked against the model: each module must be a linear of
// the text model with the shapes of its base matrix. Nothing is attached
// when a module does not fit.
func (m *Model) AttachAdapter(name string, ad *lora.Adapter) (*Adapter, error) {
	if ad == nil || len(ad.Modules) == 0 {
		return nil, fmt.Errorf("model: adapter %s has no modules", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := &Adapter{m: m, name: name, mods: make(map[compute.Weight]*loraLinear, len(ad.Modules))}
	fail := func(err error) (*Adapter, error) {
		a.free()
		return nil, fmt.Errorf("model: adapter %s: %w", name, err)
	}
	for i := range ad.Modules {
		md := &ad.Modules[i]
		key, ok := moduleKey(md.Name)
		if md.Experts > 0 {
			if err := m.attachExperts(a, key, md); err != nil {
				return fail(err)
			}
			continue
		}
		w, be, found := m.linearOf(key)
		if !ok || !found {
			return fail(fmt.Errorf("module %s is not a linear of this model's text model", md.Name))
		}
		if md.In != w.Cols() || md.Out != w.Rows() {
			return fail(fmt.Errorf("module %s is [%d, %d] (out, in), the model's matrix is [%d, %d]: an adapter for another base", md.Name, md.Out, md.In, w.Rows(), w.Cols()))
		}
		if md.Rank <= 0 || len(md.A) != md.Rank*md.In || len(md.B) != md.Out*md.Rank {
			return fail(fmt.Errorf("module %s: matrices do not match rank %d", md.Name, md.Rank))
		}
		if _, dup := a.mods[w]; dup {
			return fail(fmt.Errorf("module %s is given twice", md.Name))
		}
		if h := m.tiledHeads(key); h != nil {
			md = tiledUpdate(md, key, *h)
		}
		ll, err := loadLinear(be, md)
		if err != nil {
			return fail(fmt.Errorf("module %s: %w", md.Name, err))
		}
		a.mods[w] = ll
		a.rank = max(a.rank, md.Rank)
		a.bytes += int64(len(md.A)+len(md.B)) * 4
	}
	return a, nil
}

// attachExperts loads the update of a MoE layer's stacked experts (PEFT's
// target_parameters on mlp.experts.gate_up_proj or down_proj, key
// without the prefix) for each expert's matrices: an expert's gate and up
// kept apart take their rows of the gate_up update.
func (m *Model) attachExperts(a *Adapter, key string, md *lora.Module) error {
	var l int
	var param string
	if _, err := fmt.Sscanf(key, "layers.%d.mlp.experts.%s", &l, &param); err != nil || l < 0 || l >= len(m.w.layers) {
		return fmt.Errorf("module %s is not a linear of this model's text model", md.Name)
	}
	f, ok := m.w.layers[l].mlp.(*moeMLP)
	if !ok || (param != "gate_up_proj" && param != "down_proj") {
		return fmt.Errorf("module %s is not a linear of this model's text model", md.Name)
	}
	switch {
	case f.route == routeDevice:
		return fmt.Errorf("module %s: the experts of layer %d are routed on the device, which does not run adapters' expert updates; merge the adapter (--lora-merge) or route on the host", md.Name, l)
	case f.host != nil:
		return fmt.Errorf("module %s: the experts of layer %d run on the CPU (--cpu-moe), which does not run adapters' expert updates; merge the adapter (--lora-merge)", md.Name, l)
	}
	c := m.cfg
	shape := []int{c.NumExperts, 2 * c.MoEIntermediateSize, c.HiddenSize}
	if param == "down_proj" {
		shape = []int{c.NumExperts, c.HiddenSize, c.MoEIntermediateSize}
	}
	if err := md.FitBase(shape); err != nil {
		return err
	}
	if md.Rank <= 0 || len(md.A) != md.Experts*md.Rank*md.In || len(md.B) != md.Experts*md.Out*md.Rank {
		return fmt.Errorf("module %s: matrices do not match rank %d", md.Name, md.Rank)
	}
	if md.Experts != len(f.experts) {
		return fmt.Errorf("module %s updates %d experts, layer %d has %d: an adapter for another base", md.Name, md.Experts, l, len(f.experts))
	}
	// The matrices of an expert the update covers, and the first row of
	// the update each takes.
	type part struct {
		w    compute.Weight
		row0 int
	}
	for e := range f.experts {
		x := &f.experts[e]
		parts := []part{{x.downProj, 0}}
		if param == "gate_up_proj" {
			parts = []part{{x.gateUp, 0}}
			if x.gateUp == nil {
				parts = []part{{x.gateProj, 0}, {x.upProj, c.MoEIntermediateSize}}
			}
		}
		for _, p := range parts {
			one := lora.Module{
				Name: fmt.Sprintf("%s.%d", md.Name, e), Rank: md.Rank, Scale: md.Scale, In: md.In, Out: p.w.Rows(),
				A: md.A[e*md.Rank*md.In : (e+1)*md.Rank*md.In],
				B: md.B[(e*md.Out+p.row0)*md.Rank : (e*md.Out+p.row0+p.w.Rows())*md.Rank],
			}
			if one.In != p.w.Cols() || p.row0+one.Out > md.Out {
				return fmt.Errorf("module %s is %d experts × [%d, %d] (out, in), the model's are [%d, %d]: an adapter for another base", md.Name, md.Experts, md.Out, md.In, p.w.Rows(), p.w.Cols())
			}
			if _, dup := a.mods[p.w]; dup {
				return fmt.Errorf("module %s is given twice", md.Name)
			}
			ll, err := loadLinear(m.be, &one)
			if err != nil {
				return fmt.Errorf("module %s: %w", md.Name, err)
			}
			a.mods[p.w] = ll
		}
	}
	a.rank = max(a.rank, md.Rank)
	a.bytes += int64(len(md.A)+len(md.B)) * 4
	return nil
}

// tiledHeads returns the value heads of the layer of module key when its
// in_proj_z rows and out_proj columns keep a GGUF file's tiled head order
// (gatedDeltaNet.tiled), nil otherwise.
func (m *Model) tiledHeads(key string) *qwen35.Heads {
	var l int
	var proj string
	if _, err := fmt.Sscanf(key, "layers.%d.linear_attn.%s", &l, &proj); err != nil || l < 0 || l >= len(m.w.layers) {
		return nil
	}
	if g, ok := m.w.layers[l].mixer.(*gatedDeltaNet); ok && (proj == "in_proj_z" || proj == "out_proj") {
		return g.tiled
	}
	return nil
}

// tiledUpdate returns md's update of a matrix kept in a GGUF file's tiled
// value-head order (h): in_proj_z's rows and out_proj's columns hold head
// g at position h.Tiled(g), so B's rows (in_proj_z) or A's columns
// (out_proj) move the same way. Other modules come back as they are.
func tiledUpdate(md *lora.Module, key string, h qwen35.Heads) *lora.Module {
	out := *md
	dv, r := h.Dv, md.Rank
	switch {
	case strings.HasSuffix(key, ".in_proj_z") && md.Out == h.Nv*dv:
		out.B = make([]float32, len(md.B))
		for g := range h.Nv {
			t := h.Tiled(g)
			copy(out.B[t*dv*r:(t+1)*dv*r], md.B[g*dv*r:(g+1)*dv*r])
		}
	case strings.HasSuffix(key, ".out_proj") && md.In == h.Nv*dv:
		out.A = make([]float32, len(md.A))
		for k := range r {
			row, src := out.A[k*md.In:(k+1)*md.In], md.A[k*md.In:(k+1)*md.In]
			for g := range h.Nv {
				t := h.Tiled(g)
				copy(row[t*dv:(t+1)*dv], src[g*dv:(g+1)*dv])
			}
		}
	}
	return &out
}

// loadLinear loads a module's A and its B times the module's scale as
// float32 weights on be.
func loadLinear(be compute.Backend, md *lora.Module) (*loraLinear, error) {
	s := md.Scale
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return nil, fmt.Errorf("scale %v", s)
	}
	bs := make([]float32, len(md.B))
	for i, v := range md.B {
		bs[i] = float32(s * float64(v))
	}
	a, err := be.LoadWeight(md.Name+".lora_A", compute.F32, md.Rank, md.In, f32Bytes(md.A))
	if err != nil {
		return nil, err
	}
	b, err := be.LoadWeight(md.Name+".lora_B", compute.F32, md.Out, md.Rank, f32Bytes(bs))
	if err != nil {
		freeWeight(be, a)
		return nil, err
	}
	return &loraLinear{be: be, a: a, b: b, rank: md.Rank, out: md.Out}, nil
}

// f32Bytes returns v's little-endian bytes.
func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	putF32(out, v)
	return out
}

// freeWeight releases w on backends that can (compute.WeightFreer).
func freeWeight(be compute.Backend, w compute.Weight) {
	if f, ok := be.(compute.WeightFreer); ok && w != nil {
		f.FreeWeight(w)
	}
}

// free releases the adapter's matrices.
func (a *Adapter) free() {
	for _, ll := range a.mods {
		freeWeight(ll.be, ll.a)
		freeWeight(ll.be, ll.b)
	}
	a.mods = nil
}

// Close detaches the adapter: no sequence can take it from then on, and
// its memory is released at once, or when the last sequence that uses it
// drops it (Sequence.SetAdapters, Sequence.Close) — those finish with it.
// It reports whether the memory was released now.
func (a *Adapter) Close() (released bool) {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	if a.gone {
		return a.mods == nil
	}
	a.gone = true
	if a.uses == 0 {
		a.free()
	}
	return a.mods == nil
}

// InUse returns the number of sequences that run with the adapter.
func (a *Adapter) InUse() int {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	return a.uses
}

// SetAdapters makes the sequence's next steps run with the adapters uses
// (none: the base model). The state the sequence holds is not changed: a
// sequence's tokens so far should have been computed with the same
// adapters (the prefix cache keys states by them).
func (s *Sequence) SetAdapters(uses []AdapterUse) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for i, u := range uses {
		switch {
		case u.Adapter == nil:
			return fmt.Errorf("model: adapter %d is nil", i)
		case u.Adapter.m != s.m:
			return fmt.Errorf("model: adapter %s belongs to another model", u.Adapter.name)
		case u.Adapter.gone:
			return fmt.Errorf("model: adapter %s was closed", u.Adapter.name)
		case math.IsNaN(float64(u.Scale)) || math.IsInf(float64(u.Scale), 0):
			return fmt.Errorf("model: adapter %s: scale %v", u.Adapter.name, u.Scale)
		}
	}
	s.releaseAdapters()
	for _, u := range uses {
		if u.Scale != 0 {
			u.Adapter.uses++
			s.adapters = append(s.adapters, u)
		}
	}
	return nil
}

// Adapters returns the adapters the sequence runs with.
func (s *Sequence) Adapters() []AdapterUse {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return append([]AdapterUse(nil), s.adapters...)
}

// releaseAdapters drops the sequence's adapters; m.mu is held.
func (s *Sequence) releaseAdapters() {
	for _, u := range s.adapters {
		if u.Adapter.uses--; u.Adapter.uses == 0 && u.Adapter.gone {
			u.Adapter.free()
		}
	}
	s.adapters = nil
}

// loraRun is rows [lo, lo+n) of a pass, which run with the same adapters.
type loraRun struct {
	lo, n int
	uses  []AdapterUse
}

// loraRuns returns the runs of the rows of pass that use adapters, rows
// numbered by row(p) with keep(p) of them per piece (consecutive pieces
// with the same adapters merge).
func loraRuns(dst []loraRun, pass []piece, row, keep func(*piece) int) []loraRun {
	dst = dst[:0]
	for i := range pass {
		p := &pass[i]
		us, n := p.seq.adapters, keep(p)
		if len(us) == 0 || n == 0 {
			continue
		}
		lo := row(p)
		if k := len(dst) - 1; k >= 0 && dst[k].lo+dst[k].n == lo && slices.Equal(dst[k].uses, us) {
			dst[k].n += n
			continue
		}
		dst = append(dst, loraRun{lo: lo, n: n, uses: us})
	}
	return dst
}

// loraScratch holds the activations of adapters' updates: a run's input
// rows [rows, maxIn], A x [rows, rank] and its scaled copy, B (A x) and a
// run's output rows [rows, maxOut]. Made when the first adapter is
// attached, grown with the rank.
type loraScratch struct {
	rank           int
	x, t, ts, u, d compute.Buffer
	sums           compute.RowSums
	// all and out are the runs of the pass's rows and of its output rows
	// (outputRows); cur is the one the MLP reads.
	all, out, cur []loraRun
	group         []loraRun // an expert's (expertRuns)
}

// ensureLoRA makes room for updates of rank rank.
func (sc *scratch) ensureLoRA(m *Model, rank int) error {
	if sc.lora != nil && sc.lora.rank >= rank {
		return nil
	}
	c, be := m.cfg, m.be
	old := sc.lora
	ls := &loraScratch{rank: rank}
	if old != nil {
		ls.rank = max(rank, old.rank)
	}
	width := max(c.HiddenSize, c.MLPWidth(), 2*c.MoEIntermediateSize, c.ConvDim(), c.ValueDim(),
		2*c.NumHeads*c.HeadDim, c.NumExperts)
	var err error
	for _, b := range []struct {
		dst *compute.Buffer
		n   int
	}{{&ls.x, width}, {&ls.t, ls.rank}, {&ls.ts, ls.rank}, {&ls.u, width}, {&ls.d, width}} {
		if err == nil {
			*b.dst, err = be.NewBuffer(sc.rows * b.n)
		}
	}
	if err != nil {
		ls.free(be)
		return fmt.Errorf("model: allocating adapter activations: %w", err)
	}
	if old != nil {
		old.free(be)
	}
	sc.lora = ls
	return nil
}

func (ls *loraScratch) free(be compute.Backend) {
	for _, b := range []compute.Buffer{ls.x, ls.t, ls.ts, ls.u, ls.d} {
		if b != nil {
			be.Free(b)
		}
	}
}

// scaleSums returns the RowSums that copy n rows scaled by s.
func (ls *loraScratch) scaleSums(n int, s float32) compute.RowSums {
	rs := &ls.sums
	rs.Start, rs.Src, rs.Weight = rs.Start[:0], rs.Src[:0], rs.Weight[:0]
	for r := range n {
		rs.Start = append(rs.Start, int32(r))
		rs.Src = append(rs.Src, int32(r))
		rs.Weight = append(rs.Weight, s)
	}
	rs.Start = append(rs.Start, int32(n))
	return *rs
}

// startLoRA lays out the pass's runs of adapter rows, making room for
// their updates; out, when not nil, is the pass's output rows
// (outputRows).
func (m *Model) startLoRA(pass []piece, out *rowSet) error {
	rank := 0
	for i := range pass {
		for _, u := range pass[i].seq.adapters {
			rank = max(rank, u.Adapter.rank)
		}
	}
	if rank == 0 {
		m.sc.clearLoRA()
		return nil
	}
	if err := m.sc.ensureLoRA(m, rank); err != nil {
		return err
	}
	ls := m.sc.lora
	ls.all = loraRuns(ls.all, pass, func(p *piece) int { return p.row }, func(p *piece) int { return len(p.tokens) })
	ls.cur = ls.all
	ls.out = ls.out[:0]
	if out != nil {
		ls.out = loraRuns(ls.out, pass, func(p *piece) int { return p.outRow }, func(p *piece) int { return p.keep })
	}
	return nil
}

// clearLoRA makes the following products run without adapters (a pass of
// the MTP head).
func (sc *scratch) clearLoRA() {
	if sc.lora != nil {
		sc.lora.all, sc.lora.out, sc.lora.cur = sc.lora.all[:0], sc.lora.out[:0], nil
	}
}

// linear computes dst = x Wᵀ for n rows (the first decode of them decoded
// tokens) and adds the updates of the adapters of the rows' sequences:
// the product of a module of the model with LoRA.
func (m *Model) linear(dst, x compute.Buffer, w compute.Weight, n, decode int) {
	m.matMul(dst, x, w, n, decode)
	if ls := m.sc.lora; ls != nil && len(ls.cur) > 0 {
		m.addLoRA(m.be, dst, x, w, n, ls.cur)
	}
}

// linearRows is linear for the rows of out (outputRows), which the last
// layer's mixer computes alone, or for every row when out is nil.
func (m *Model) linearRows(dst, x compute.Buffer, w compute.Weight, n, decode int, out *rowSet) {
	if out == nil {
		m.linear(dst, x, w, n, decode)
		return
	}
	m.matMul(dst, x, w, n, decode)
	if ls := m.sc.lora; ls != nil && len(ls.out) > 0 {
		m.addLoRA(m.be, dst, x, w, n, ls.out)
	}
}

// expertRuns returns the runs of adapters among the rows an expert runs
// over (group: rows of the pass, ascending, gathered in that order), nil
// when no row runs with adapters.
func (m *Model) expertRuns(group []int32) []loraRun {
	ls := m.sc.lora
	if ls == nil || len(ls.cur) == 0 {
		return nil
	}
	ls.group = ls.group[:0]
	ri := 0
	for i, src := range group {
		for ri < len(ls.cur) && ls.cur[ri].lo+ls.cur[ri].n <= int(src) {
			ri++
		}
		if ri == len(ls.cur) {
			break
		}
		r := ls.cur[ri]
		if int(src) < r.lo {
			continue
		}
		if k := len(ls.group) - 1; k >= 0 && ls.group[k].lo+ls.group[k].n == i && slices.Equal(ls.group[k].uses, r.uses) {
			ls.group[k].n++
			continue
		}
		ls.group = append(ls.group, loraRun{lo: i, n: 1, uses: r.uses})
	}
	return ls.group
}

// adapts reports whether an adapter of runs updates one of the expert
// x's matrices.
func adapts(x *denseMLP, runs []loraRun) bool {
	for _, r := range runs {
		for _, u := range r.uses {
			for _, w := range []compute.Weight{x.gateProj, x.upProj, x.gateUp, x.downProj} {
				if w != nil && u.Adapter.mods[w] != nil {
					return true
				}
			}
		}
	}
	return false
}

// addLoRA adds to the n rows of dst the updates of w by the adapters of
// runs, on be: for each run and adapter, dst[run] += s · B (A x[run]).
func (m *Model) addLoRA(be compute.Backend, dst, x compute.Buffer, w compute.Weight, n int, runs []loraRun) {
	ls := m.sc.lora
	in := w.Cols()
	for _, r := range runs {
		if r.lo+r.n > n {
			break // runs past the rows of this product (none in the model's passes)
		}
		whole := r.lo == 0 && r.n == n
		src, copied := x, false
		for _, u := range r.uses {
			ll := u.Adapter.mods[w]
			if ll == nil {
				continue
			}
			if !whole && !copied {
				be.Copy(ls.x, 0, x, r.lo*in, r.n*in)
				src, copied = ls.x, true
			}
			be.MatMul(ls.t, src, ll.a, r.n) // A x: [n, rank]
			t := ls.t
			if u.Scale != 1 {
				be.SumRows(ls.ts, ls.t, ll.rank, ls.scaleSums(r.n, u.Scale))
				t = ls.ts
			}
			be.MatMul(ls.u, t, ll.b, r.n) // s B (A x): [n, out]
			if whole {
				be.Add(dst, ls.u, r.n*ll.out)
				continue
			}
			be.Copy(ls.d, 0, dst, r.lo*ll.out, r.n*ll.out)
			be.Add(ls.d, ls.u, r.n*ll.out)
			be.Copy(dst, r.lo*ll.out, ls.d, 0, r.n*ll.out)
		}
	}
}
