package model

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/gguf/qwen35"
	"github.com/govinfer/govinfer/quant"
)

// Qwen3.5's multi-token-prediction head (mtp.*, vLLM's
// Qwen3_5MultiTokenPredictor) drafts the token after next. At position p it
// reads the main model's output after its final norm h_p and the token
// x_{p+1} that follows, and predicts x_{p+2}:
//
//	e = rmsnorm(embed(x_{p+1})) * (1 + w_e)     pre_fc_norm_embedding
//	s = rmsnorm(h_p) * (1 + w_h)                pre_fc_norm_hidden
//	y = fc([e; s])                              embedding half first
//	y = decoder layer(y) at position p          full attention, its own KV cache
//	g = rmsnorm(y) * (1 + w_n)                  mtp.norm
//	logits = lm_head(g)                         the main model's
//
// g is also the hidden a further draft step reads in place of h: chained
// drafts feed (d_j, g_j) at position p+j.

// mtpWeights holds the head's tensors.
type mtpWeights struct {
	fc                  compute.Weight // [hidden, 2*hidden]
	preEmbed, preHidden compute.Weight // [hidden]
	norm                compute.Weight // [hidden]
	layer               layer          // a full-attention decoder layer
}

// mtpPrefix is the prefix of the head's tensor names in a checkpoint.
const mtpPrefix = "mtp."

func (w *mtpWeights) bindings(c *Config, layout expertLayout) []binding {
	h := c.HiddenSize
	att := &gatedAttention{}
	w.layer.mixer = att
	p := mtpPrefix + "layers.0."
	bs := []binding{
		{name: mtpPrefix + "fc.weight", shape: []int{h, 2 * h}, dst: &w.fc},
		{name: mtpPrefix + "pre_fc_norm_embedding.weight", shape: []int{h}, dst: &w.preEmbed},
		{name: mtpPrefix + "pre_fc_norm_hidden.weight", shape: []int{h}, dst: &w.preHidden},
		{name: mtpPrefix + "norm.weight", shape: []int{h}, dst: &w.norm},
		{name: p + "input_layernorm.weight", shape: []int{h}, dst: &w.layer.inputNorm},
		{name: p + "post_attention_layernorm.weight", shape: []int{h}, dst: &w.layer.postNorm},
	}
	bs = append(bs, att.bindings(c, p)...)
	w.layer.mlp = newMLP(c)
	return append(bs, w.layer.mlp.bindings(c, p, layout)...)
}

// all returns the head's weights; none for a nil head.
func (w *mtpWeights) all() []compute.Weight {
	if w == nil {
		return nil
	}
	ws := []compute.Weight{w.fc, w.preEmbed, w.preHidden, w.norm, w.layer.inputNorm, w.layer.postNorm}
	ws = append(ws, w.layer.mixer.weights()...)
	return append(ws, w.layer.mlp.weights()...)
}

// MTPTensors lists the tensors of the MTP head for config c, in load order.
func MTPTensors(c *Config) []TensorSpec {
	return tensorSpecs((&mtpWeights{}).bindings(c, expertsFused))
}

// MTPPlanName is the text-model tensor whose quantization an MTP tensor
// follows (quant.Plan knows the text model's names only): the head's layer
// is planned as the last text layer, fc as an attention projection, the
// norms as themselves (kept).
func MTPPlanName(c *Config, name string) string {
	last := fmt.Sprintf("model.language_model.layers.%d.", c.NumLayers-1)
	if rest, ok := strings.CutPrefix(name, mtpPrefix+"layers.0."); ok {
		return last + rest
	}
	if name == mtpPrefix+"fc.weight" {
		return last + "self_attn.o_proj.weight"
	}
	return name // the norms: kept
}

// loadMTP binds and loads the head's tensors (quantized as the mix plans
// the matching text tensors, when mix is not empty, and its matrices then
// to the draft format draft, where that is smaller: see draftType).
func loadMTP(src source, c *Config, be compute.Backend, mix string, draft quant.Type, experts compute.Backend, hostRoute bool) (*mtpWeights, error) {
	switch s := src.(type) {
	case ckSource:
	case *ggufSource:
		if n, err := s.nextNLayers(); err != nil || n < 1 {
			return nil, fmt.Errorf("the GGUF file has no MTP head (%s is 0 or absent)", qwen35.ArchKey(s.arch, qwen35.KeyNextNLayers))
		}
	default:
		return nil, errors.New("only safetensors checkpoints and GGUF files with nextn tensors carry an MTP head")
	}
	w := &mtpWeights{}
	bs := w.bindings(c, src.expertLayout(mtpPrefix+"layers.0."))
	if moe, ok := w.layer.mlp.(*moeMLP); ok {
		moe.host = experts
		moe.hostRoute = hostRoute
	}
	var errs []error
	for _, b := range bs {
		if _, err := src.check(b); err != nil && (len(errs) == 0 || errs[len(errs)-1].Error() != err.Error()) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, b := range bs {
		dt, data, inPlace, err := src.load(b)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", b.name, err)
		}
		rows, cols, data := b.matrix(data)
		if mix != "" && dt.Quant() == quant.Keep {
			qt, _, err := quant.Plan(mix, MTPPlanName(c, b.name), rows, cols, c.NumLayers)
			if err != nil {
				return nil, fmt.Errorf("quantizing %s: %w", b.name, err)
			}
			if qt != quant.Keep {
				if data, err = quantizeTensor(qt, dt, data, rows, cols); err != nil {
					return nil, fmt.Errorf("quantizing %s to %v: %w", b.name, qt, err)
				}
				dt, _ = compute.QuantDType(qt)
				inPlace = false
			}
		}
		if len(b.shape) == 2 {
			var copied bool
			if dt, data, copied, err = toDraftType(draft, b.name, dt, data, rows, cols); err != nil {
				return nil, err
			}
			inPlace = inPlace && !copied
		}
		var wt compute.Weight
		stacked := false
		if b.stack != nil {
			stacked, err = b.stack.load(b.backend(be), b.name, dt, rows, cols, data)
		}
		if !stacked && err == nil {
			wt, err = b.backend(be).LoadWeight(b.name, dt, rows, cols, data)
		}
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", b.name, err)
		}
		if o, ok := wt.(compute.DataOwner); b.evictable() && (!inPlace || stacked || ok && o.OwnsData()) {
			src.evict(b)
		}
		if !stacked {
			*b.dst = wt
		}
	}
	return w, nil
}

// HasMTP reports whether the model loaded an MTP head (Options.MTP).
func (m *Model) HasMTP() bool { return m.mtp != nil }

// DraftBytes returns the weight bytes one draft step of the MTP head
// reads: the head's own weights and the output matrix it drafts with (the
// main model's, or its quantized copy: Options.DraftQuantize; the
// embedding rows it gathers left out, as in DecodeBytes); 0 without a
// head.
func (m *Model) DraftBytes() int64 {
	if m.mtp == nil {
		return 0
	}
	n := weightBytes(m.draftHead)
	for _, x := range m.mtp.all() {
		n += weightBytes(x)
	}
	n -= unreadExpertBytes(m.mtp.layer.mlp, m.cfg.NumExpertsPerTok)
	return n
}

// DraftSequence is the MTP head's state for one sequence: the key/value
// cache of its attention layer, one entry per position drafted from. It is
// separate from the main Sequence it drafts for; entries are written by
// position, so a draft sequence is cut back (Truncate) when the main
// sequence rejects drafts, and later steps overwrite the stale entries.
type DraftSequence struct {
	s *Sequence // kc[0], vc[0], n, capacity and ropeDelta; no Gated DeltaNet state
}

// NewDraftSequence returns an empty draft sequence. The model must have
// loaded its MTP head (Options.MTP).
func (m *Model) NewDraftSequence() (*DraftSequence, error) {
	if m.mtp == nil {
		return nil, errors.New("model: no MTP head loaded (Options.MTP)")
	}
	return &DraftSequence{s: &Sequence{m: m, kc: make([]compute.Buffer, 1), vc: make([]compute.Buffer, 1)}}, nil
}

// Len returns the number of positions whose entries the draft sequence
// holds: a draft step appends at Len().
func (d *DraftSequence) Len() int { return d.s.n }

// Truncate drops the entries of positions n and later, so that the next
// step writes position n.
func (d *DraftSequence) Truncate(n int) error {
	m := d.s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := d.s.usable(); err != nil {
		return err
	}
	if n < 0 || n > d.s.n {
		return fmt.Errorf("model: truncating a draft sequence of %d positions to %d", d.s.n, n)
	}
	d.s.n = n
	return nil
}

// SetRopeDelta sets the offset added to a position given without 3-D
// positions (DraftInput.Positions), as Sequence.SetRopeDelta.
func (d *DraftSequence) SetRopeDelta(delta int) { d.s.SetRopeDelta(delta) }

// StateBytes returns the memory the draft sequence's cache occupies.
func (d *DraftSequence) StateBytes() int64 { return d.s.StateBytes() }

// Close frees the draft sequence's memory. It is safe to call more than once.
func (d *DraftSequence) Close() { d.s.Close() }

// reserveDraft grows the draft cache to hold at least n positions. The
// caller holds the model lock.
func (d *DraftSequence) reserve(n int) error {
	s, m := d.s, d.s.m
	if n <= s.capacity {
		return nil
	}
	capacity := max(s.capacity, minKVCapacity)
	for capacity < n {
		capacity *= 2
	}
	capacity = min(capacity, max(m.cfg.MaxContext(), n))
	for _, cache := range []*compute.Buffer{&s.kc[0], &s.vc[0]} {
		nb, err := m.be.NewBuffer(m.kvSlots(capacity))
		if err != nil {
			return fmt.Errorf("model: growing draft KV cache to %d tokens: %w", capacity, err)
		}
		if *cache != nil {
			m.be.Copy(nb, 0, *cache, 0, m.kvSlots(s.n))
			m.be.Free(*cache)
		}
		*cache = nb
	}
	s.capacity = capacity
	return nil
}

// DraftInput is one draft sequence's share of a draft step: the head runs
// at positions Seq.Len() .. Seq.Len()+len(Tokens)-1.
type DraftInput struct {
	Seq *DraftSequence
	// Tokens are the tokens read at each position: at position p the
	// token that followed the main model's position p (x_{p+1}), or the
	// previous draft in a chain.
	Tokens []int
	// Hidden holds len(Tokens) rows of HiddenSize values: the main
	// model's final-norm output at each position (Input.Hidden), or the
	// previous draft step's DraftOutput.Hidden in a chain.
	Hidden []float32
	// Logits says which positions produce logits (and argmax and hidden
	// rows); LastArgmax gives the argmax and hidden of the last position
	// without its logits.
	Logits LogitsMode
	// Positions, when not nil, holds the rotary position of each token
	// (M-RoPE); nil gives position p+ropeDelta in all three rows.
	Positions [][3]int
}

// DraftOutput carries the results of one DraftInput for each row its
// LogitsMode asks for.
type DraftOutput struct {
	// Logits holds rows of VocabSize values; nil with LastArgmax.
	Logits []float32
	// Argmax holds the largest logit's id of each row (lowest on ties):
	// the greedy drafts.
	Argmax []int
	// Hidden holds the rows of g (mtp.norm's output), HiddenSize values
	// each: the Hidden of the next step of a draft chain.
	Hidden []float32
}

// DraftStep runs the MTP head on each input's tokens and returns the
// drafts, in input order. A draft sequence may appear at most once per step.
func (m *Model) DraftStep(ctx context.Context, inputs []DraftInput) ([]DraftOutput, error) {
	return m.DraftStepTrace(ctx, inputs, nil)
}

// Trace stages of DraftStepTrace.
const (
	DraftTraceFC    = 0 // fc's output, the layer's input
	DraftTraceLayer = 1 // the layer's output (residual stream), before mtp.norm
)

// DraftStepTrace is DraftStep with a hook that receives the rows of all
// tokens of each pass at the DraftTrace stages, as [tokens, hidden] rows.
func (m *Model) DraftStepTrace(ctx context.Context, inputs []DraftInput, trace func(stage int, rows []float32)) ([]DraftOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mtp == nil {
		return nil, errors.New("model: no MTP head loaded (Options.MTP)")
	}
	c := m.cfg
	h, vocab := c.HiddenSize, c.VocabSize
	seen := map[*DraftSequence]bool{}
	for i, in := range inputs {
		switch {
		case in.Seq == nil || in.Seq.s.m != m:
			return nil, fmt.Errorf("model: draft input %d has no sequence of this model", i)
		case seen[in.Seq]:
			return nil, fmt.Errorf("model: draft input %d: sequence appears twice in one step", i)
		case len(in.Tokens) == 0:
			return nil, fmt.Errorf("model: draft input %d: no tokens", i)
		case len(in.Hidden) != len(in.Tokens)*h:
			return nil, fmt.Errorf("model: draft input %d: %d hidden values for %d tokens of %d", i, len(in.Hidden), len(in.Tokens), h)
		case in.Positions != nil && len(in.Positions) != len(in.Tokens):
			return nil, fmt.Errorf("model: draft input %d: %d positions for %d tokens", i, len(in.Positions), len(in.Tokens))
		case in.Logits > LastArgmax:
			return nil, fmt.Errorf("model: draft input %d: unknown logits mode %d", i, in.Logits)
		case in.Seq.s.n+len(in.Tokens) > c.MaxContext():
			return nil, fmt.Errorf("model: draft input %d: exceeds the context of %d", i, c.MaxContext())
		}
		if err := in.Seq.s.usable(); err != nil {
			return nil, fmt.Errorf("model: draft input %d: %w", i, err)
		}
		for j, t := range in.Tokens {
			if t < 0 || t >= vocab {
				return nil, fmt.Errorf("model: draft input %d: token %d at index %d is outside the vocabulary", i, t, j)
			}
		}
		seen[in.Seq] = true
	}
	outs := make([]DraftOutput, len(inputs))
	for i, in := range inputs {
		switch in.Logits {
		case AllLogits:
			outs[i].Logits = make([]float32, len(in.Tokens)*vocab)
			outs[i].Argmax = make([]int, len(in.Tokens))
			outs[i].Hidden = make([]float32, len(in.Tokens)*h)
		case LastLogits, LastArgmax:
			if in.Logits == LastLogits {
				outs[i].Logits = make([]float32, vocab)
			}
			outs[i].Argmax = make([]int, 1)
			outs[i].Hidden = make([]float32, h)
		}
	}
	// Pack the inputs into passes of at most maxTokens rows.
	var pass []piece
	var hid [][]float32 // each piece's hidden rows
	rows := 0
	flush := func() error {
		if len(pass) == 0 {
			return nil
		}
		err := m.draftForward(ctx, pass, hid, outs, trace)
		pass, hid, rows = pass[:0], hid[:0], 0
		return err
	}
	fail := func(err error) ([]DraftOutput, error) {
		for _, in := range inputs {
			in.Seq.s.broken = err
		}
		return nil, err
	}
	for i, in := range inputs {
		pos := in.Seq.s.n
		for done := 0; done < len(in.Tokens); {
			n := min(len(in.Tokens)-done, m.maxTokens-rows)
			p := piece{in: i, seq: in.Seq.s, tokens: in.Tokens[done : done+n], row: rows, pos: pos + done, logitRow: -1, decode: true}
			if in.Positions != nil {
				p.positions = in.Positions[done : done+n]
			}
			switch {
			case in.Logits == AllLogits:
				p.nLogits, p.outOff = n, done
			case (in.Logits == LastLogits || in.Logits == LastArgmax) && done+n == len(in.Tokens):
				p.nLogits = 1
				p.argmaxOnly = in.Logits == LastArgmax
			}
			pass = append(pass, p)
			hid = append(hid, in.Hidden[done*h:(done+n)*h])
			rows += n
			done += n
			if rows == m.maxTokens {
				if err := flush(); err != nil {
					return fail(err)
				}
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	return outs, nil
}

// mtpScratch holds the head's own activations.
type mtpScratch struct {
	cat compute.Buffer // [rows, 2*hidden]: fc's input
}

func (m *Model) freeMTPScratch() {
	if m.msc != nil {
		m.be.Free(m.msc.cat)
		m.msc = nil
	}
}

// draftForward runs the head over one pass. outOff of a piece counts
// logit rows, not values.
func (m *Model) draftForward(ctx context.Context, pass []piece, hid [][]float32, outs []DraftOutput, trace func(int, []float32)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, be, w := m.cfg, m.be, m.mtp
	h, eps := c.HiddenSize, float32(c.RMSNormEps)
	var err error
	if m.sc == nil {
		if m.sc, err = m.newScratch(m.maxTokens); err != nil {
			return err
		}
	}
	if m.msc == nil {
		cat, err := be.NewBuffer(m.maxTokens * 2 * h)
		if err != nil {
			return fmt.Errorf("model: allocating MTP activations: %w", err)
		}
		m.msc = &mtpScratch{cat: cat}
	}
	sc := m.sc
	sc.clearLoRA() // the head runs without adapters
	rows, logitRows := 0, 0
	for i := range pass {
		p := &pass[i]
		rows += len(p.tokens)
		if p.nLogits > 0 {
			p.logitRow = logitRows
			logitRows += p.nLogits
		}
		if err := p.seq.draft().reserve(p.pos + len(p.tokens)); err != nil {
			return err
		}
	}
	// Every row takes the decode kernels: the head's rows are never state
	// a resumed prompt depends on, and each row's result then depends only
	// on the row.
	sc.decodeRows = rows
	rope, err := m.embed(pass, rows) // sc.x = embed(tokens)
	if err != nil {
		return err
	}
	for i, p := range pass {
		if err := be.Upload(sc.tmp, p.row*h, hid[i]); err != nil {
			return fmt.Errorf("model: uploading hidden rows: %w", err)
		}
	}
	cat := m.msc.cat
	be.RMSNorm(sc.xn, sc.x, w.preEmbed, rows, h, eps)
	for r := range rows {
		be.Copy(cat, r*2*h, sc.xn, r*h, h)
	}
	be.RMSNorm(sc.xn, sc.tmp, w.preHidden, rows, h, eps)
	for r := range rows {
		be.Copy(cat, r*2*h+h, sc.xn, r*h, h)
	}
	m.matMul(sc.x, cat, w.fc, rows, sc.decodeRows) // y = fc([e; s])
	if err := m.traceHidden(ctx, trace, DraftTraceFC, rows); err != nil {
		return err
	}
	ly := &w.layer
	be.RMSNorm(sc.xn, sc.x, ly.inputNorm, rows, h, eps)
	ly.mixer.forward(m, 0, pass, rows, rope, nil)
	be.AddRMSNorm(sc.x, sc.tmp, sc.xn, ly.postNorm, rows, h, eps)
	if err := ly.mlp.forward(ctx, m, rows); err != nil {
		return err
	}
	be.Add(sc.x, sc.tmp, rows*h)
	if err := m.traceHidden(ctx, trace, DraftTraceLayer, rows); err != nil {
		return err
	}
	if logitRows > 0 {
		if err := sc.ensureLogits(be, c, logitRows); err != nil {
			return err
		}
		for _, p := range pass {
			if p.nLogits > 0 {
				src := p.row + len(p.tokens) - p.nLogits
				be.Copy(sc.xn, p.logitRow*h, sc.x, src*h, p.nLogits*h)
			}
		}
		be.RMSNorm(sc.normed, sc.xn, w.norm, logitRows, h, eps) // g
		m.matMul(sc.logits, sc.normed, m.draftHead, logitRows, logitRows)
		ids := make([]int32, logitRows)
		if err := be.Argmax(ctx, ids, sc.logits, c.VocabSize); err != nil {
			return fmt.Errorf("model: argmax: %w", err)
		}
		for _, p := range pass {
			if p.nLogits == 0 {
				continue
			}
			o := &outs[p.in]
			for j := range p.nLogits {
				o.Argmax[p.outOff+j] = int(ids[p.logitRow+j])
			}
			if err := be.Download(ctx, o.Hidden[p.outOff*h:(p.outOff+p.nLogits)*h], sc.normed, p.logitRow*h); err != nil {
				return fmt.Errorf("model: reading draft hidden rows: %w", err)
			}
			if !p.argmaxOnly {
				v := c.VocabSize
				if err := be.Download(ctx, o.Logits[p.outOff*v:(p.outOff+p.nLogits)*v], sc.logits, p.logitRow*v); err != nil {
					return fmt.Errorf("model: reading draft logits: %w", err)
				}
			}
		}
	} else if err := be.Sync(ctx); err != nil {
		return fmt.Errorf("model: draft step: %w", err)
	}
	for _, p := range pass {
		p.seq.n = p.pos + len(p.tokens)
	}
	return nil
}

// draft returns the draft sequence view of s, the inner sequence of a
// DraftSequence.
func (s *Sequence) draft() *DraftSequence { return &DraftSequence{s: s} }

// finalHidden delivers the final-norm rows of the pieces that ask for them
// (Input.Hidden), computed into sc.tmp, which the last layer has left free.
func (m *Model) finalHidden(ctx context.Context, pass []piece, outs []Output, rows int) error {
	want := false
	for _, p := range pass {
		want = want || p.hidden
	}
	if !want {
		return nil
	}
	c, sc := m.cfg, m.sc
	h := c.HiddenSize
	m.be.RMSNorm(sc.tmp, sc.x, m.w.norm, rows, h, float32(c.RMSNormEps))
	for _, p := range pass {
		if !p.hidden {
			continue
		}
		dst := outs[p.in].Hidden[p.hidOff : p.hidOff+len(p.tokens)*h]
		if err := m.be.Download(ctx, dst, sc.tmp, p.outRow*h); err != nil {
			return fmt.Errorf("model: reading hidden rows: %w", err)
		}
	}
	return nil
}
