package model

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/govinfer/govinfer/compute"
)

// The MLP of a qwen3_5_moe layer is a mixture of experts (HF's
// Qwen3_5MoeSparseMoeBlock). For a row x of the normed residual stream:
//
//	p = softmax(router · x)                    over all E experts, in float64
//	T = the k experts of largest p             ties to the lower index
//	w_e = p_e / Σ_{t∈T} p_t                    always renormalised
//	y = Σ_{e∈T, ascending} w_e · down_e(silu(gate_e · x) * (up_e · x))
//	  + sigmoid(shared_gate · x) · down_s(silu(gate_s · x) * (up_s · x))
//
// The router's logits come back to the host, which picks the experts.
// Each chosen expert then runs once over all the rows that chose it,
// gathered into one block (llama.cpp's mul_mat_id), so a step reads only
// the experts some row chose, each once, and a prompt's rows share their
// experts' products. A row's sum is its own (compute.Backend.SumRows), in
// the order above, and every product gives a row the bits it gets in any
// block of rows, so a row's result does not depend on the other rows of
// its step.

// expertLayout says how a checkpoint stores a MoE layer's experts.
type expertLayout uint8

const (
	// expertsFused is the BF16 releases': experts.gate_up_proj [E, 2F, H]
	// (gate in rows 0..F-1 of each expert, up in F..2F-1) and
	// experts.down_proj [E, H, F], neither with a .weight suffix.
	expertsFused expertLayout = iota
	// expertsModules is one module per expert (the FP8 releases, older
	// exports): experts.{e}.{gate,up,down}_proj.weight.
	expertsModules
	// expertsStacked is GGUF's: gate and up apart, experts.gate_proj and
	// experts.up_proj [E, F, H], experts.down_proj [E, H, F] (ffn_*_exps).
	expertsStacked
)

// detectExpertLayout returns the layout of the experts of the layer whose
// tensors are named under p (ending in "."), fused when none is present
// (the loader then reports the fused tensors missing).
func detectExpertLayout(has func(string) bool, p string) expertLayout {
	switch {
	case has(p + "mlp.experts.gate_up_proj"):
		return expertsFused
	case has(p + "mlp.experts.0.gate_proj.weight"):
		return expertsModules
	case has(p + "mlp.experts.gate_proj"):
		return expertsStacked
	}
	return expertsFused
}

// mlp is a layer's feed-forward block: a dense SwiGLU MLP (denseMLP) or
// a mixture of experts (moeMLP), as the config says.
type mlp interface {
	// bindings lists the block's tensors under the layer prefix p.
	bindings(c *Config, p string, layout expertLayout) []binding
	// forward computes sc.tmp = mlp(sc.xn) for the pass's rows.
	forward(ctx context.Context, m *Model, rows int) error
	// weights returns the block's tensors.
	weights() []compute.Weight
}

// newMLP returns the empty feed-forward block of a layer of config c.
func newMLP(c *Config) mlp {
	if c.MoE() {
		return &moeMLP{}
	}
	return &denseMLP{}
}

// moeMLP is a layer's mixture of experts (mlp.*).
type moeMLP struct {
	router     compute.Weight // mlp.gate.weight [E, H]
	sharedGate compute.Weight // mlp.shared_expert_gate.weight [1, H]
	shared     denseMLP       // mlp.shared_expert.*
	experts    []denseMLP     // mlp.experts.*, one each
	// host, when set, holds and runs the experts (Options.ExpertBackend);
	// the router and the shared expert stay on the model's backend.
	host compute.Backend
	// hostRoute keeps the routing on the host on a backend that could
	// route on the device (Options.HostMoERouting).
	hostRoute bool

	// Routing on the device (compute.ExpertRouter), decided when the
	// first expert loads (deviceRouter): the experts then live in
	// stacked weights, one per projection, and experts stays empty.
	route        routePlace
	stack        expertStack
	ne, k, h, fw int // experts, chosen per row, hidden size, expert width
}

// routePlace says where a MoE layer routes its rows.
type routePlace uint8

const (
	routeUndecided routePlace = iota
	routeHost                 // router logits read back, experts as weights of their own
	routeDevice               // compute.ExpertRouter, experts stacked
)

// expertStack is a layer's experts stacked by projection, for routing on
// the device: gateUp (the fused layout's) or gate and up, and down.
type expertStack struct {
	gateUp, gate, up, down compute.Weight
}

func (x *expertStack) weights() []compute.Weight {
	var ws []compute.Weight
	for _, w := range []compute.Weight{x.gateUp, x.gate, x.up, x.down} {
		if w != nil {
			ws = append(ws, w)
		}
	}
	return ws
}

// stackSlot is where one expert's matrix of one projection goes when the
// layer routes on the device: expert e of the n in *dst.
type stackSlot struct {
	f    *moeMLP
	dst  *compute.Weight
	e, n int
}

// deviceRouter returns the backend be as the router of f's rows, or nil
// when f routes on the host: its experts run on a host backend
// (Options.ExpertBackend), routing on the host is asked for
// (Options.HostMoERouting), or be does not route such a mixture. The
// choice is made once, at the layer's first expert.
func (f *moeMLP) deviceRouter(be compute.Backend) compute.ExpertRouter {
	if lb, ok := be.(*loadingBackend); ok {
		be = lb.Backend
	}
	er, ok := be.(compute.ExpertRouter)
	if f.route == routeUndecided {
		f.route = routeHost
		if f.host == nil && !f.hostRoute && ok && er.RoutesExperts(f.ne, f.k, f.h, f.fw) {
			f.route = routeDevice
		}
	}
	if f.route != routeDevice || !ok {
		return nil
	}
	return er
}

// load puts one expert's rows into the stack when the layer routes on the
// device (the stack made at its first expert), reporting whether it did;
// otherwise the caller loads them as a weight of their own.
func (s *stackSlot) load(be compute.Backend, name string, dt compute.DType, rows, cols int, data []byte) (bool, error) {
	er := s.f.deviceRouter(be)
	if er == nil {
		return false, nil
	}
	if *s.dst == nil {
		w, err := er.NewExperts(name, dt, s.n, rows, cols)
		if err != nil {
			return false, fmt.Errorf("stacking the experts: %w", err)
		}
		*s.dst = w
	}
	w := *s.dst
	if w.DType() != dt || w.Cols() != cols || w.Rows() != s.n*rows {
		return false, fmt.Errorf("expert %d is %v [%d, %d], expert 0 %v [%d, %d]", s.e, dt, rows, cols, w.DType(), w.Rows()/s.n, w.Cols())
	}
	if err := er.LoadExpert(w, s.e, data); err != nil {
		return false, err
	}
	return true, nil
}

// expertPlace says which layers' experts live on another backend than
// the model's (Options.ExpertBackend, Options.CPUMoELayers).
type expertPlace struct {
	be     compute.Backend
	layers int // leading layers; negative: all
	// hostRoute keeps every layer's routing on the host
	// (Options.HostMoERouting).
	hostRoute bool
}

// apply sets the host of the MoE layers it covers, before their weights
// load (the bindings point at it).
func (p expertPlace) apply(w *weights) {
	for i := range w.layers {
		moe, ok := w.layers[i].mlp.(*moeMLP)
		if !ok {
			continue
		}
		moe.hostRoute = p.hostRoute
		if p.be != nil && (p.layers < 0 || i < p.layers) {
			moe.host = p.be
		}
	}
}

func (f *moeMLP) bindings(c *Config, p string, layout expertLayout) []binding {
	h, e, fw := c.HiddenSize, c.NumExperts, c.MoEIntermediateSize
	f.ne, f.k, f.h, f.fw = e, c.NumExpertsPerTok, h, fw
	slot := func(dst *compute.Weight, i int) *stackSlot { return &stackSlot{f: f, dst: dst, e: i, n: e} }
	bs := []binding{
		{name: p + "mlp.gate.weight", shape: []int{e, h}, dst: &f.router},
		{name: p + "mlp.shared_expert_gate.weight", shape: []int{1, h}, dst: &f.sharedGate},
	}
	bs = append(bs, f.shared.bind(p+"mlp.shared_expert.", h, c.SharedExpertIntermediateSize)...)
	f.experts = make([]denseMLP, e)
	for i := range f.experts {
		x := &f.experts[i]
		x.width = fw
		last := i == e-1
		switch layout {
		case expertsModules:
			mod := x.bind(fmt.Sprintf("%smlp.experts.%d.", p, i), h, fw)
			for j, dst := range []*compute.Weight{&f.stack.gate, &f.stack.up, &f.stack.down} {
				mod[j].on, mod[j].stack = &f.host, slot(dst, i)
			}
			bs = append(bs, mod...)
		case expertsStacked:
			bs = append(bs,
				binding{name: p + "mlp.experts.gate_proj", shape: []int{e, fw, h}, dst: &x.gateProj, part: &rowPart{i * fw, fw, last}, on: &f.host, stack: slot(&f.stack.gate, i)},
				binding{name: p + "mlp.experts.up_proj", shape: []int{e, fw, h}, dst: &x.upProj, part: &rowPart{i * fw, fw, last}, on: &f.host, stack: slot(&f.stack.up, i)},
				binding{name: p + "mlp.experts.down_proj", shape: []int{e, h, fw}, dst: &x.downProj, part: &rowPart{i * h, h, last}, on: &f.host, stack: slot(&f.stack.down, i)},
			)
		default:
			bs = append(bs,
				binding{name: p + "mlp.experts.gate_up_proj", shape: []int{e, 2 * fw, h}, dst: &x.gateUp, part: &rowPart{2 * i * fw, 2 * fw, last}, on: &f.host, stack: slot(&f.stack.gateUp, i)},
				binding{name: p + "mlp.experts.down_proj", shape: []int{e, h, fw}, dst: &x.downProj, part: &rowPart{i * h, h, last}, on: &f.host, stack: slot(&f.stack.down, i)},
			)
		}
	}
	return bs
}

func (f *moeMLP) weights() []compute.Weight {
	ws := append([]compute.Weight{f.router, f.sharedGate}, f.shared.weights()...)
	if f.route == routeDevice {
		return append(ws, f.stack.weights()...)
	}
	for i := range f.experts {
		ws = append(ws, f.experts[i].weights()...)
	}
	return ws
}

// unreadExpertBytes returns the bytes of the experts of f that one token,
// choosing k of them, does not read (at their average size); 0 for a
// dense MLP.
func unreadExpertBytes(f mlp, k int) int64 {
	moe, ok := f.(*moeMLP)
	if !ok || len(moe.experts) == 0 {
		return 0
	}
	var all int64
	if moe.route == routeDevice {
		for _, w := range moe.stack.weights() {
			all += weightBytes(w)
		}
	}
	for i := range moe.experts {
		for _, w := range moe.experts[i].weights() {
			if w != nil {
				all += weightBytes(w)
			}
		}
	}
	return all - all*int64(k)/int64(len(moe.experts))
}

// forward computes sc.tmp = moe(sc.xn): the router's logits and the shared
// expert's gate come back to the host, which routes the rows; each chosen
// expert runs over its rows gathered into ex, its outputs stacked in
// sc.eo after the shared expert's, and one SumRows adds every row's terms.
// With the experts on a host backend (f.host), the normed rows go there
// and the experts' outputs come back into sc.eo.
func (f *moeMLP) forward(ctx context.Context, m *Model, rows int) error {
	start := time.Now()
	defer func() { m.moeStats.Time += time.Since(start) }()
	m.moeStats.Blocks++
	if f.route == routeDevice {
		return f.forwardDevice(ctx, m, rows)
	}
	sc, be, c := m.sc, m.be, m.cfg
	h, ne, k := c.HiddenSize, c.NumExperts, c.NumExpertsPerTok
	m.linear(sc.route, sc.xn, f.router, rows, sc.decodeRows)
	m.linear(sc.sgate, sc.xn, f.sharedGate, rows, sc.decodeRows)
	// The shared expert over every row: rows 0..rows-1 of sc.eo.
	if err := f.shared.forward(ctx, m, rows); err != nil {
		return err
	}
	be.Copy(sc.eo, 0, sc.tmp, 0, rows*h)
	mo := &sc.moe
	if err := be.Download(ctx, mo.logits[:rows*ne], sc.route, 0); err != nil {
		return fmt.Errorf("model: reading router logits: %w", err)
	}
	if err := be.Download(ctx, mo.gates[:rows], sc.sgate, 0); err != nil {
		return fmt.Errorf("model: reading shared expert gates: %w", err)
	}
	if err := mo.route(rows, ne, k); err != nil {
		return err
	}
	// Where the experts run: on the model's backend, reading sc.xn and
	// writing sc.eo after the shared expert's rows, or on the host's.
	xbe, xs, base := be, expertBuffers{xn: sc.xn, ex: sc.ex, gate: sc.gate, up: sc.up, ed: sc.ed, eo: sc.eo}, rows
	if f.host != nil {
		hs, err := sc.hostExperts(f.host, c)
		if err != nil {
			return err
		}
		if err := be.Download(ctx, hs.rows[:rows*h], sc.xn, 0); err != nil {
			return fmt.Errorf("model: reading the experts' inputs: %w", err)
		}
		if err := f.host.Upload(hs.xn, 0, hs.rows[:rows*h]); err != nil {
			return fmt.Errorf("model: handing the experts their inputs: %w", err)
		}
		xbe, xs, base = f.host, hs.expertBuffers, 0
	}
	var next int // expert rows written
	if bm, ok := xbe.(compute.MatMulBatcher); ok && bm.BatchesMatMuls() && f.batchable(m) {
		next = f.runBatched(m, xbe, bm, xs, base, rows)
	} else {
		next = f.runEach(m, xbe, xs, base, rows)
	}
	if f.host != nil && next > 0 {
		hs := sc.host
		if err := f.host.Download(ctx, hs.rows[:next*h], hs.eo, 0); err != nil {
			return fmt.Errorf("model: reading the experts' outputs: %w", err)
		}
		if err := be.Upload(sc.eo, rows*h, hs.rows[:next*h]); err != nil {
			return fmt.Errorf("model: returning the experts' outputs: %w", err)
		}
	}
	be.SumRows(sc.tmp, sc.eo, h, mo.sums(rows, k))
	return nil
}

// runEach runs each chosen expert over its rows, in expert order, on be
// (the model's backend or the experts' host), reading xs.xn and writing
// the experts' rows to xs.eo after base; rows keep their order, so a
// group's decode rows come first. It returns the expert rows written.
func (f *moeMLP) runEach(m *Model, be compute.Backend, xs expertBuffers, base, rows int) int {
	sc, h := m.sc, m.cfg.HiddenSize
	mo := &sc.moe
	next := 0
	for e, group := range mo.byExpert {
		if len(group) == 0 {
			continue
		}
		n, decode := len(group), sc.decodeIn(group)
		be.SumRows(xs.ex, xs.xn, h, compute.RowSums{Start: mo.seq[:n+1], Src: group, Weight: mo.ones[:n]}) // ex = xn[group]
		x := &f.experts[e]
		// The LoRA updates of the expert's matrices, for the rows whose
		// sequences run with adapters that have them (none with the
		// experts on a host backend: AttachAdapter refuses those).
		runs := m.expertRuns(group)
		if x.gateUp != nil {
			matMulOn(be, xs.up, xs.ex, x.gateUp, n, decode) // [n, 2*width]
			m.addLoRA(be, xs.up, xs.ex, x.gateUp, n, runs)
			be.SwiGLU(xs.gate, xs.up, n, x.width)
		} else {
			matMulOn(be, xs.gate, xs.ex, x.gateProj, n, decode)
			m.addLoRA(be, xs.gate, xs.ex, x.gateProj, n, runs)
			matMulOn(be, xs.up, xs.ex, x.upProj, n, decode)
			m.addLoRA(be, xs.up, xs.ex, x.upProj, n, runs)
			be.SiLUMul(xs.gate, xs.gate, xs.up, n*x.width)
		}
		matMulOn(be, xs.ed, xs.gate, x.downProj, n, decode)
		m.addLoRA(be, xs.ed, xs.gate, x.downProj, n, runs)
		be.Copy(xs.eo, (base+next)*h, xs.ed, 0, n*h)
		m.moeStats.ExpertRuns++
		m.moeStats.ExpertBytes += x.bytes()
		mo.at[e] = int32(rows + next)
		next += n
	}
	return next
}

// decodeIn returns how many of an expert's rows (ascending) are tokens
// being decoded: the step's first decodeRows rows.
func (sc *scratch) decodeIn(group []int32) int {
	d := 0
	for d < len(group) && int(group[d]) < sc.decodeRows {
		d++
	}
	return d
}

// batchable reports whether the experts chosen for the step run as
// batches of products (runBatched): they share one layout and width, and
// no adapter of the step updates them.
func (f *moeMLP) batchable(m *Model) bool {
	first := -1
	for e, group := range m.sc.moe.byExpert {
		if len(group) == 0 {
			continue
		}
		x := &f.experts[e]
		if first < 0 {
			first = e
		} else if y := &f.experts[first]; (x.gateUp == nil) != (y.gateUp == nil) || x.width != y.width {
			return false
		}
		if runs := m.expertRuns(group); len(runs) > 0 && adapts(x, runs) {
			return false
		}
	}
	return first >= 0
}

// runBatched runs the chosen experts as runEach does, with their products
// in batches: the gate and up projections of as many experts as the
// scratch buffers hold rows for (all of a decode step's), one activation
// over all their rows, then their down projections, written straight into
// their rows of xs.eo (after base). A decode step's eight experts cost two
// hand-offs between a CPU backend's workers, not twenty-four; a prompt's
// hundreds of experts a few per chunk of the scratch's rows. Within a
// chunk an expert's rows are contiguous, in expert order: rows of experts
// chosen by several rows are gathered into xs.ex, a lone row is read
// where it is. It returns the expert rows written.
func (f *moeMLP) runBatched(m *Model, be compute.Backend, bm compute.MatMulBatcher, xs expertBuffers, base, rows int) int {
	sc := m.sc
	mo := &sc.moe
	next := 0 // pairs written to xs.eo
	for e0 := 0; e0 < len(mo.byExpert); {
		// The chunk: experts e0.. while their rows fit the scratch.
		e1, n := e0, 0
		for ; e1 < len(mo.byExpert); e1++ {
			if n+len(mo.byExpert[e1]) > sc.rows {
				break
			}
			n += len(mo.byExpert[e1])
		}
		if n > 0 {
			f.runChunk(m, be, bm, xs, base, rows, e0, e1, next)
		}
		next += n
		e0 = e1
	}
	return next
}

// runChunk runs the experts [e0, e1) of runBatched, whose first row is
// pair next of xs.eo.
func (f *moeMLP) runChunk(m *Model, be compute.Backend, bm compute.MatMulBatcher, xs expertBuffers, base, rows, e0, e1, next int) {
	sc, h := m.sc, m.cfg.HiddenSize
	mo := &sc.moe
	parts, gathered := mo.parts[:0], mo.gathered[:0]
	at, width, fused := 0, 0, false // at: rows of the chunk so far
	for e := e0; e < e1; e++ {
		group := mo.byExpert[e]
		if len(group) == 0 {
			continue
		}
		x := &f.experts[e]
		width, fused = x.width, x.gateUp != nil
		n := len(group)
		in, inOff := xs.xn, int(group[0])*h
		if n > 1 {
			in, inOff = xs.ex, len(gathered)*h
			gathered = append(gathered, group...)
		}
		part := compute.MatMulPart{X: in, XOff: inOff, N: n, Decode: sc.decodeIn(group)}
		if fused {
			part.Dst, part.DstOff, part.W = xs.up, at*2*width, x.gateUp
			parts = append(parts, part)
		} else {
			part.Dst, part.DstOff, part.W = xs.gate, at*width, x.gateProj
			parts = append(parts, part)
			part.Dst, part.W = xs.up, x.upProj
			parts = append(parts, part)
		}
		m.moeStats.ExpertRuns++
		m.moeStats.ExpertBytes += x.bytes()
		mo.at[e] = int32(rows + next + at)
		at += n
	}
	if len(gathered) > 0 {
		be.SumRows(xs.ex, xs.xn, h, compute.RowSums{Start: mo.seq[:len(gathered)+1], Src: gathered, Weight: mo.ones[:len(gathered)]})
	}
	bm.MatMuls(parts)
	if fused {
		be.SwiGLU(xs.gate, xs.up, at, width)
	} else {
		be.SiLUMul(xs.gate, xs.gate, xs.up, at*width)
	}
	// The down products, each expert's rows of silu(gate)·up into its rows
	// of xs.eo.
	downs, at := parts[:0], 0
	for e := e0; e < e1; e++ {
		group := mo.byExpert[e]
		if len(group) == 0 {
			continue
		}
		downs = append(downs, compute.MatMulPart{Dst: xs.eo, DstOff: (base + next + at) * h, X: xs.gate, XOff: at * width, W: f.experts[e].downProj, N: len(group), Decode: sc.decodeIn(group)})
		at += len(group)
	}
	bm.MatMuls(downs)
	mo.parts, mo.gathered = parts, gathered
}

// MoEStats counts the work of a model's mixture-of-experts blocks since it
// was opened (Model.MoEStats): what a benchmark reads to tell the bytes a
// step reads and the time the blocks take.
type MoEStats struct {
	// Blocks is the number of MoE blocks computed (one per layer per pass).
	Blocks int64
	// ExpertRuns counts the experts run, each once per block for all the
	// rows that chose it; ExpertBytes adds up their weights' bytes.
	ExpertRuns, ExpertBytes int64
	// Time is the wall time spent in the blocks, routing and the products
	// included; on a backend that defers its work (Vulkan) it includes
	// waiting for the work before the router's logits.
	Time time.Duration
}

// MoEStats returns the counts of the model's mixture-of-experts blocks so
// far; zero for a dense model.
func (m *Model) MoEStats() MoEStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.moeStats
}

// bytes returns the bytes of the block's weights.
func (f *denseMLP) bytes() int64 {
	var n int64
	for _, w := range f.weights() {
		n += weightBytes(w)
	}
	return n
}

// expertBuffers are the activations the experts run on: the normed rows,
// an expert's gathered rows, its hidden layer and output, and every
// expert's stacked outputs.
type expertBuffers struct {
	xn, ex, gate, up, ed, eo compute.Buffer
}

// hostScratch is the experts' activations on a host backend
// (moeMLP.host), and the slice their rows travel through.
type hostScratch struct {
	expertBuffers
	be   compute.Backend
	rows []float32
}

// hostExperts returns the activations on the host backend be, made by the
// first step that needs them.
func (sc *scratch) hostExperts(be compute.Backend, c *Config) (*hostScratch, error) {
	if sc.host != nil {
		return sc.host, nil
	}
	h, rows, k := c.HiddenSize, sc.rows, c.NumExpertsPerTok
	hs := &hostScratch{be: be, rows: make([]float32, rows*k*h)}
	var err error
	alloc := func(dst *compute.Buffer, n int) {
		if err == nil {
			*dst, err = be.NewBuffer(n)
		}
	}
	alloc(&hs.xn, rows*h)
	alloc(&hs.ex, rows*h)
	alloc(&hs.gate, rows*c.MoEIntermediateSize)
	alloc(&hs.up, rows*2*c.MoEIntermediateSize)
	alloc(&hs.ed, rows*h)
	alloc(&hs.eo, rows*k*h)
	if err != nil {
		hs.free()
		return nil, fmt.Errorf("model: allocating the host experts' activations: %w", err)
	}
	sc.host = hs
	return hs, nil
}

func (hs *hostScratch) free() {
	for _, b := range []compute.Buffer{hs.xn, hs.ex, hs.gate, hs.up, hs.ed, hs.eo} {
		if b != nil {
			hs.be.Free(b)
		}
	}
}

// moeScratch is the host side of a pass's routing, reused between layers.
type moeScratch struct {
	logits []float32 // [rows, E] router logits
	gates  []float32 // [rows] shared expert gate logits
	probs  []float64 // one row's softmax
	topP   []float64 // its chosen probabilities

	chosen  []int32   // [rows, k] each row's experts, ascending
	weights []float32 // [rows, k] their weights
	// byExpert[e] lists the rows that chose expert e, ascending; at[e] is
	// the row of sc.eo where the outputs of its first row start.
	byExpert [][]int32
	at, pos  []int32

	// dev is the activations of routing on the device, made when first
	// needed.
	dev *deviceScratch

	// parts and gathered are runBatched's products and gathered rows.
	parts    []compute.MatMulPart
	gathered []int32

	seq  []int32   // 0, 1, 2, ...: the gathers' starts
	ones []float32 // 1, 1, 1, ...: the gathers' weights
	idx  []int32   // the sums' starts
	src  []int32   // the sums' terms
	wts  []float32
}

func newMoEScratch(c *Config, rows int) moeScratch {
	ne, k := c.NumExperts, c.NumExpertsPerTok
	mo := moeScratch{
		logits:   make([]float32, rows*ne),
		gates:    make([]float32, rows),
		probs:    make([]float64, ne),
		topP:     make([]float64, k),
		chosen:   make([]int32, rows*k),
		weights:  make([]float32, rows*k),
		byExpert: make([][]int32, ne),
		at:       make([]int32, ne),
		pos:      make([]int32, ne),
		seq:      make([]int32, rows+1),
		ones:     make([]float32, rows),
		idx:      make([]int32, rows+1),
		src:      make([]int32, rows*(k+1)),
		wts:      make([]float32, rows*(k+1)),
	}
	for i := range mo.seq {
		mo.seq[i] = int32(i)
	}
	for i := range mo.ones {
		mo.ones[i] = 1
	}
	return mo
}

// route picks each row's k experts and their weights from the router
// logits, and lists each expert's rows. A row whose logits are not all
// finite (broken weights or activations) is an error.
func (mo *moeScratch) route(rows, ne, k int) error {
	for e := range mo.byExpert {
		mo.byExpert[e] = mo.byExpert[e][:0]
	}
	for r := range rows {
		chosen, w := mo.chosen[r*k:(r+1)*k], mo.weights[r*k:(r+1)*k]
		logits := mo.logits[r*ne : (r+1)*ne]
		for e, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("model: router logit %d of row %d is %v", e, r, v)
			}
		}
		routeRow(chosen, w, logits, mo.probs, mo.topP)
		for _, e := range chosen {
			mo.byExpert[e] = append(mo.byExpert[e], int32(r))
		}
	}
	return nil
}

// routeRow sets chosen to the indices of the len(chosen) largest of
// softmax(logits) (of logits), ascending (ties to the lower index), and w to their
// probabilities divided by their sum, in float64; probs is scratch of
// len(logits), topP of len(chosen).
func routeRow(chosen []int32, w []float32, logits []float32, probs, topP []float64) {
	top := math.Inf(-1)
	for _, v := range logits {
		top = max(top, float64(v))
	}
	for i, v := range logits {
		probs[i] = math.Exp(float64(v) - top) // softmax's numerators: its denominator cancels below
	}
	// Selection by repeated maximum (k is small: 8 or 10); a taken
	// expert's entry becomes -1. The logits are compared, which order the
	// experts as their probabilities do (and keep apart logits whose
	// exponentials would round together), so the device's routing
	// (compute.ExpertRouter) makes the same choice by construction.
	var sum float64
	for j := range chosen {
		best := -1
		for i, v := range logits {
			if probs[i] >= 0 && (best < 0 || v > logits[best]) {
				best = i
			}
		}
		chosen[j], topP[j] = int32(best), probs[best]
		sum += probs[best]
		probs[best] = -1
	}
	// Ascending expert order, each weight with its expert.
	for i := 1; i < len(chosen); i++ {
		for j := i; j > 0 && chosen[j] < chosen[j-1]; j-- {
			chosen[j], chosen[j-1] = chosen[j-1], chosen[j]
			topP[j], topP[j-1] = topP[j-1], topP[j]
		}
	}
	for j, p := range topP {
		w[j] = float32(p / sum)
	}
}

// sums returns the terms of every row's result: its experts' outputs in
// ascending expert order with their weights, then the shared expert's
// (row r of sc.eo) with sigmoid of its gate.
func (mo *moeScratch) sums(rows, k int) compute.RowSums {
	// Each expert's rows are in ascending order, so a row's place in its
	// expert's group is counted as the rows are visited in order.
	pos := mo.pos
	clear(pos)
	n := 0
	for r := range rows {
		mo.idx[r] = int32(n)
		for j := range k {
			e := mo.chosen[r*k+j]
			mo.src[n] = mo.at[e] + pos[e]
			mo.wts[n] = mo.weights[r*k+j]
			pos[e]++
			n++
		}
		mo.src[n] = int32(r)
		mo.wts[n] = float32(1 / (1 + math.Exp(-float64(mo.gates[r]))))
		n++
	}
	mo.idx[rows] = int32(n)
	return compute.RowSums{Start: mo.idx[:rows+1], Src: mo.src[:n], Weight: mo.wts[:n]}
}

// forwardDevice is forward on a backend that routes on the device
// (compute.ExpertRouter): the router's logits stay there, where each
// row's experts are picked, the pairs grouped by expert and the chosen
// experts run from the stacked weights, and the weighted sum with the
// gated shared expert is made, so nothing is read back. A pair's
// products, and so a row's result, do not depend on the other rows.
func (f *moeMLP) forwardDevice(ctx context.Context, m *Model, rows int) error {
	sc, be, c := m.sc, m.be, m.cfg
	er, ok := be.(compute.ExpertRouter)
	if !ok {
		return fmt.Errorf("model: backend %s does not route experts", be.Name())
	}
	h, ne, k, fw := c.HiddenSize, c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize
	ds, err := sc.moe.device(be, sc.rows, ne, k, fw)
	if err != nil {
		return err
	}
	m.linear(sc.route, sc.xn, f.router, rows, sc.decodeRows)
	m.linear(sc.sgate, sc.xn, f.sharedGate, rows, sc.decodeRows)
	er.RouteExperts(ds.route, sc.route, rows, ne, k)
	if err := f.shared.forward(ctx, m, rows); err != nil { // into sc.tmp
		return err
	}
	x := &f.stack
	if x.gateUp != nil {
		er.MatMulExperts(ds.up, sc.xn, x.gateUp, ds.route, rows, k, false) // [rows*k, 2*fw]
		be.SwiGLU(ds.gate, ds.up, rows*k, fw)
	} else {
		er.MatMulExperts(ds.gate, sc.xn, x.gate, ds.route, rows, k, false)
		er.MatMulExperts(ds.up, sc.xn, x.up, ds.route, rows, k, false)
		be.SiLUMul(ds.gate, ds.gate, ds.up, rows*k*fw)
	}
	er.MatMulExperts(sc.eo, ds.gate, x.down, ds.route, rows, k, true) // [rows*k, h]
	er.CombineExperts(sc.tmp, sc.eo, sc.sgate, ds.route, rows, k, h)
	// The host does not see the choice: every row's k experts count, at
	// the average expert's bytes (exact for one row; an upper bound when
	// rows share experts).
	var all int64
	for _, w := range x.weights() {
		all += weightBytes(w)
	}
	m.moeStats.ExpertRuns += int64(rows * k)
	m.moeStats.ExpertBytes += int64(rows*k) * all / int64(ne)
	return nil
}

// deviceScratch is the activations of routing on the device, by pair
// (row r's j-th expert at r*k + j): the route buffer, the experts' hidden
// layers and their gate/up outputs.
type deviceScratch struct {
	route, gate, up compute.Buffer
}

// device returns the activations of routing on the device for steps of
// up to rows rows, made by the first step that needs them.
func (mo *moeScratch) device(be compute.Backend, rows, ne, k, fw int) (*deviceScratch, error) {
	if mo.dev != nil {
		return mo.dev, nil
	}
	ds := &deviceScratch{}
	var err error
	for _, a := range []struct {
		dst *compute.Buffer
		n   int
	}{{&ds.route, compute.RouteLen(rows, ne, k)}, {&ds.gate, rows * k * fw}, {&ds.up, rows * k * 2 * fw}} {
		if *a.dst, err = be.NewBuffer(a.n); err != nil {
			mo.dev = ds
			mo.freeDevice(be)
			return nil, fmt.Errorf("model: allocating the experts' activations: %w", err)
		}
	}
	mo.dev = ds
	return ds, nil
}

// freeDevice releases the activations of routing on the device.
func (mo *moeScratch) freeDevice(be compute.Backend) {
	if mo.dev == nil {
		return
	}
	for _, b := range []compute.Buffer{mo.dev.route, mo.dev.gate, mo.dev.up} {
		if b != nil {
			be.Free(b)
		}
	}
	mo.dev = nil
}
