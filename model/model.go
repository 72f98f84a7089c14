// Package model runs the Qwen3.5 text model: it loads a Hugging Face
// checkpoint directory, binds its tensors to a compute.Backend, and computes
// logits for batches of sequences.
//
// The forward pass of one layer reads like the math:
//
//	h = h + mixer(rmsnorm(h))            // Gated DeltaNet or gated attention
//	h = h + down(silu(gate(x)) * up(x))  // x = rmsnorm(h)
//
// Each conversation owns a Sequence (conv windows, recurrent state, KV cache),
// so one Model serves many sequences; Step takes a batch of sequences, each
// adding one or more tokens at its own position, and reads every weight once
// for the whole batch.
package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/modelpath"
	"github.com/govinfer/govinfer/quant"
	"github.com/govinfer/govinfer/safetensors"
)

// DefaultMaxStepTokens is the default number of tokens computed in one pass
// over the weights; longer batches are split into several passes.
const DefaultMaxStepTokens = 256

// Options configures Open.
type Options struct {
	// Backend runs the graph; it is required and stays the caller's (the
	// model does not close it). llm.Open makes a CPU one when given none.
	Backend compute.Backend
	// Progress, when set, is called after each weight is loaded.
	Progress func(Progress)
	// MaxStepTokens bounds the tokens computed in one pass (activation
	// memory grows with it). Zero means DefaultMaxStepTokens.
	MaxStepTokens int
	// Quantize, when not empty, names a quantization mix (quant.Mixes:
	// "q8_0", "q4_k_m" or "q5_k_m") applied to a BF16/F16/F32 checkpoint while it
	// loads, tensor by tensor (see quant.Plan for which tensors get which
	// format); the original pages are released as each tensor is done.
	Quantize string
	// KVCacheType is the element type of the attention layers' KV caches:
	// compute.F32 (zero means F32, exact against the goldens),
	// compute.BF16 or compute.F16 (half the memory; keys and values are
	// rounded when stored). The Gated DeltaNet state stays float32.
	KVCacheType compute.DType
	// MTP loads the checkpoint's multi-token-prediction head (mtp.*) for
	// speculative decoding (Model.NewDraftSequence, Model.DraftStep); off
	// by default, as it costs memory. A checkpoint without one is an error.
	MTP bool
	// DraftQuantize, when not empty, names a block format (DraftTypes:
	// "q8_0", "q6_k" or "q4_k") for the MTP head's drafting: its draft
	// steps read a copy of the output matrix in that format, made while
	// loading, and the head's own matrices are loaded in it. The main
	// model's weights, lm_head included, stay as they are, so verified
	// output is unchanged; the drafts may differ from exact ones (and be
	// accepted more or less often). A matrix already stored (or
	// quantized by Quantize) in as few bytes is used as it is, with no
	// copy; a row no block of the format divides falls back to Q8_0, or
	// stays. Empty means exact drafts. It needs MTP.
	DraftQuantize string
	// Merge adds LoRA adapters' updates to the weights they target while
	// they load (--lora-merge): W' = W + Scale · s · B A. The adapted model
	// then runs at the speed of its weights' format, and cannot drop the
	// adapters. A merged matrix of a float checkpoint is kept in F32, as
	// BF16 would round most of an update away; a quantized one is
	// quantized again in its own format. Merged weights are not kept in
	// the packed-weight cache.
	Merge []MergedAdapter
	// MergeFormat is the format of a float checkpoint's merged matrices:
	// "" or "f32" keeps them exact in F32; "base" keeps the checkpoint's
	// own (BF16, F16), so the merged model reads what the base reads and
	// runs at its speed, the update rounded with the weights (the small
	// test model's logits move 0.6-1.6 %). A quantized load re-quantizes
	// either way.
	MergeFormat string
	// ExpertBackend, when set, holds and runs the experts of the mixture
	// of experts of the first CPUMoELayers layers (every layer's and the
	// MTP head's when CPUMoELayers is negative): llama.cpp's --cpu-moe and
	// --n-cpu-moe, a CPU backend keeping the experts in host memory while
	// Backend (a GPU) runs everything else, routers and shared experts
	// included. It stays the caller's. A dense model ignores it.
	ExpertBackend compute.Backend
	// CPUMoELayers is the number of leading layers whose experts
	// ExpertBackend runs; negative means all.
	CPUMoELayers int
	// HostMoERouting keeps a mixture of experts' routing on the host on a
	// backend that routes on the device (compute.ExpertRouter: Vulkan):
	// each MoE layer then reads its router's logits back, picks the
	// experts on the host and runs each chosen expert as a weight of its
	// own. By default such a backend routes the layers whose experts it
	// runs itself, with each layer's experts stacked into one weight per
	// projection and no read-back inside a step. Layers whose experts run
	// on ExpertBackend always route on the host.
	HostMoERouting bool

	// load is OpenContext's loader: its context and packed-weight cache
	// (nil under New and NewGGUF).
	load *loader
}

// Model is a loaded Qwen3.5 text model. Its methods are safe for concurrent
// use; steps are serialised.
type Model struct {
	cfg  *Config
	be   compute.Backend
	file io.Closer // the checkpoint or GGUF file Open opened, or nil
	w    *weights
	mtp  *mtpWeights // the MTP head when Options.MTP, else nil
	// draftHead is the output matrix the head's draft steps read: w.lmHead
	// or its quantized copy (Options.DraftQuantize).
	draftHead compute.Weight
	// tokenwise runs the attention of a Decode input of several tokens one
	// token at a time (piece.tokenwise): on backends whose attention splits
	// a context by the number of new tokens (compute.RowDependentAttention).
	tokenwise bool
	maxTokens int
	kvDType   compute.DType // KV cache element type; 0 means F32
	invFreq   []float64     // rope inverse frequencies, rotaryDim/2 of them
	// mrope gives, per rope frequency, the row of a 3-D position it
	// rotates by: 0 (t), 1 (h) or 2 (w) (interleaved M-RoPE).
	mrope []uint8

	mu       sync.Mutex // guards everything below and serialises steps
	moeStats MoEStats
	sc       *scratch
	msc      *mtpScratch // the MTP head's activations, made by its first step
}

// open is OpenContext, its loader in o.load.
func open(path string, o Options) (*Model, error) {
	found, err := modelpath.Resolve(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	path = found.Path
	if file, ok, err := locateGGUF(path); err != nil {
		return nil, err
	} else if ok {
		return openGGUF(file, o)
	}
	dir := path
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := New(cfg, ck, o)
	if err != nil {
		ck.Close()
		return nil, err
	}
	m.file = ck
	return m, nil
}

// New builds a model from a config and an open checkpoint. The checkpoint
// must stay open until the model is closed (the CPU backend reads weights
// from its memory map); Close does not close it.
func New(cfg *Config, ck *safetensors.Checkpoint, o Options) (*Model, error) {
	return newModel(cfg, ckSource{ck: ck, fp8Block: cfg.FP8Block}, o)
}

// newModel builds a model from a config and the source of its weights.
func newModel(cfg *Config, src source, o Options) (*Model, error) {
	if o.Backend == nil {
		return nil, errors.New("model: no backend (Options.Backend)")
	}
	switch o.KVCacheType {
	case 0, compute.F32, compute.BF16, compute.F16:
	default:
		return nil, fmt.Errorf("model: KV cache type %v is not one of F32, BF16, F16", o.KVCacheType)
	}
	if o.KVCacheType.Size() == 2 && (cfg.NumKVHeads*cfg.HeadDim)%2 != 0 {
		return nil, fmt.Errorf("model: a 16-bit KV cache needs an even KV width, got %d", cfg.NumKVHeads*cfg.HeadDim)
	}
	m := &Model{cfg: cfg, be: o.Backend, maxTokens: o.MaxStepTokens, kvDType: o.KVCacheType}
	if ra, ok := o.Backend.(compute.RowDependentAttention); ok {
		m.tokenwise = ra.AttentionDependsOnRows()
	}
	if m.maxTokens <= 0 {
		m.maxTokens = DefaultMaxStepTokens
	}
	draft, err := ParseDraftType(o.DraftQuantize)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if draft != quant.Keep && !o.MTP {
		return nil, errors.New("model: a draft quantization (Options.DraftQuantize) needs the MTP head (Options.MTP)")
	}
	merge, err := newMerger(o.Merge, cfg, o.MergeFormat)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// Merged weights are packed in memory: the pack cache holds the
	// checkpoint's own.
	packMix := o.Quantize
	if merge != nil && packMix == "" {
		packMix = "merged"
	}
	w, err := loadWeights(src, cfg, o.load.backend(m.be, src, packMix), o.Quantize, o.Progress, expertPlace{o.ExpertBackend, o.CPUMoELayers, o.HostMoERouting}, merge)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m.w = w
	if o.MTP {
		var host compute.Backend
		if o.CPUMoELayers < 0 {
			host = o.ExpertBackend
		}
		if m.mtp, err = loadMTP(src, cfg, o.load.backend(m.be, src, o.Quantize), o.Quantize, draft, host, o.HostMoERouting); err != nil {
			return nil, fmt.Errorf("model: MTP head: %w", err)
		}
		if m.draftHead, err = loadDraftHead(src, cfg, o.load.backend(m.be, src, o.Quantize), w.lmHead, draft); err != nil {
			return nil, fmt.Errorf("model: MTP head: %w", err)
		}
	}
	rd := cfg.RotaryDim()
	m.invFreq = make([]float64, rd/2)
	for i := range m.invFreq {
		m.invFreq[i] = math.Pow(cfg.RopeTheta, -float64(2*i)/float64(rd))
	}
	m.mrope = mropeRows(rd/2, cfg.MRopeSection)
	return m, nil
}

// mropeRows returns the position row of each of n rotary frequencies under
// interleaved M-RoPE (Hugging Face's Qwen3.5 recomposition): frequency i
// takes the h row when i%3 == 1 and i < 3*section[1], the w row when
// i%3 == 2 and i < 3*section[2], the t row otherwise. Without a section
// every frequency takes the t row.
func mropeRows(n int, section []int) []uint8 {
	rows := make([]uint8, n)
	if len(section) < 3 {
		return rows
	}
	for i := range rows {
		switch {
		case i%3 == 1 && i < 3*section[1]:
			rows[i] = 1
		case i%3 == 2 && i < 3*section[2]:
			rows[i] = 2
		}
	}
	return rows
}

// Config returns the model's hyperparameters.
func (m *Model) Config() *Config { return m.cfg }

// MaxStepTokens returns the most tokens computed in one pass over the
// weights (Options.MaxStepTokens): a step with more runs in several passes,
// which cut the inputs wherever a pass fills up.
func (m *Model) MaxStepTokens() int { return m.maxTokens }

// Backend returns the backend the model runs on.
func (m *Model) Backend() compute.Backend { return m.be }

// Close releases the model's memory (and its checkpoint when Open opened
// it); the backend stays open.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if m.sc != nil {
		m.sc.free(m.be)
		m.sc = nil
	}
	m.freeMTPScratch()
	if m.file != nil {
		errs = append(errs, m.file.Close())
	}
	return errors.Join(errs...)
}

// LogitsMode says which positions of an input produce logits.
type LogitsMode uint8

// Logits modes.
const (
	LastLogits LogitsMode = iota // logits of the last new token only
	AllLogits                    // logits of every new token
	NoLogits                     // no logits (prefill of a prompt's head)
	// LastArgmax returns only the id of the largest logit of the last new
	// token (lowest id on ties), computed by the backend: greedy decoding
	// then moves one id off the device instead of a row of logits.
	LastArgmax
	// AllArgmax returns the id of the largest logit of every new token
	// (lowest id on ties), computed by the backend, in Output.Argmaxes:
	// a greedy verify step of speculative decoding then moves K+1 ids
	// instead of K+1 rows of logits.
	AllArgmax
)

// Input is one sequence's share of a step.
type Input struct {
	Seq    *Sequence
	Tokens []int
	Logits LogitsMode
	// Decode marks tokens that were generated, not read from a prompt.
	// Their products may run on kernels made for few inputs, whose sums
	// differ from the prompt kernels' in the last bits (on the CPU with
	// AMX tiles; compute.DecodeMatMuler): prompt tokens keep results
	// independent of the batch and of where a prompt is cut, so that a
	// prompt resumed from a snapshot matches a cold run bit for bit. Leave
	// it false for prompt tokens.
	Decode bool
	// Embeds replace the token embeddings of some of Tokens with given
	// rows (an image's vision-tower output at its pad tokens); nil for
	// text.
	Embeds []EmbedSpan
	// Positions, when not nil, holds the rotary position (t, h, w) of each
	// of Tokens (Qwen3.5's M-RoPE; see vision.RopeIndex), len(Tokens) of
	// them. Nil gives each token at cache index i the position
	// i + Sequence.RopeDelta in all three rows, the text positions.
	Positions [][3]int
	// LogitsInto, when its capacity holds the logits Logits asks for,
	// receives them: Output.Logits is then LogitsInto[:n], overwritten.
	// A caller decoding step after step passes the previous step's
	// Output.Logits, which saves allocating (and on most systems
	// faulting in) a fresh megabyte or more per row each step. Nil
	// allocates.
	LogitsInto []float32
	// Hidden asks for the model's output after its final norm (what
	// lm_head reads, and what the MTP head drafts from) of every one of
	// Tokens, in Output.Hidden; the logits are as Logits says.
	Hidden bool
}

// EmbedSpan replaces the token embeddings of Tokens[Index:Index+n] in an
// Input by n rows of HiddenSize values.
type EmbedSpan struct {
	// Index is the position within Input.Tokens of the first row.
	Index int
	// Rows holds n*HiddenSize values, row after row.
	Rows []float32
}

// Len returns the number of tokens the span covers for a model of hidden
// size hidden.
func (e EmbedSpan) Len(hidden int) int { return len(e.Rows) / hidden }

// Output carries the logits of one Input: rows of VocabSize values, one row
// per position its LogitsMode asks for; with LastArgmax, Argmax holds the
// greedy token instead and Logits is nil; with AllArgmax, Argmaxes holds
// that of every new token, in order, and Argmax the last one's.
type Output struct {
	Logits   []float32
	Argmax   int
	Argmaxes []int
	// Hidden holds, when Input.Hidden, the final-norm output of every
	// token: len(Tokens) rows of HiddenSize values.
	Hidden []float32
}

// Step feeds each input's tokens to its sequence and returns the requested
// logits, in input order. A sequence may appear at most once per step. On
// error the sequences in the batch are left unusable.
func (m *Model) Step(ctx context.Context, inputs []Input) ([]Output, error) {
	return m.StepTrace(ctx, inputs, nil)
}

// StepTrace is Step with a hook that receives the residual stream of all
// tokens after the embedding (layer 0) and after each layer i (layer i+1),
// as [tokens, hidden] rows, for debugging and tests.
func (m *Model) StepTrace(ctx context.Context, inputs []Input, trace func(layer int, hidden []float32)) ([]Output, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkInputs(inputs); err != nil {
		return nil, err
	}
	outs := make([]Output, len(inputs))
	err := m.runPieces(ctx, inputs, outs, trace)
	if err != nil {
		for _, in := range inputs {
			in.Seq.broken = err
		}
		return nil, err
	}
	return outs, nil
}

func (m *Model) checkInputs(inputs []Input) error {
	seen := make(map[*Sequence]bool, len(inputs))
	for i, in := range inputs {
		s := in.Seq
		switch {
		case s == nil:
			return fmt.Errorf("model: input %d has no sequence", i)
		case s.m != m:
			return fmt.Errorf("model: input %d: sequence belongs to another model", i)
		case s.closed:
			return fmt.Errorf("model: input %d: sequence is closed", i)
		case s.broken != nil:
			return fmt.Errorf("model: input %d: sequence unusable after an earlier error: %w", i, s.broken)
		case seen[s]:
			return fmt.Errorf("model: input %d: sequence appears twice in one step", i)
		case in.Logits > AllArgmax:
			return fmt.Errorf("model: input %d: unknown logits mode %d", i, in.Logits)
		case len(in.Tokens) == 0:
			return fmt.Errorf("model: input %d: no tokens", i)
		case s.n+len(in.Tokens) > m.cfg.MaxContext():
			return fmt.Errorf("model: input %d: %d cached + %d new tokens exceed the context of %d", i, s.n, len(in.Tokens), m.cfg.MaxContext())
		}
		seen[s] = true
		if err := m.checkMultimodal(in); err != nil {
			return fmt.Errorf("model: input %d: %w", i, err)
		}
		for j, t := range in.Tokens {
			if t < 0 || t >= m.cfg.VocabSize {
				return fmt.Errorf("model: input %d: token %d at index %d is outside the vocabulary [0, %d)", i, t, j, m.cfg.VocabSize)
			}
		}
	}
	return nil
}

// checkMultimodal validates an input's embedding spans and positions.
func (m *Model) checkMultimodal(in Input) error {
	h := m.cfg.HiddenSize
	if in.Positions != nil && len(in.Positions) != len(in.Tokens) {
		return fmt.Errorf("%d positions for %d tokens", len(in.Positions), len(in.Tokens))
	}
	for k, e := range in.Embeds {
		if len(e.Rows) == 0 || len(e.Rows)%h != 0 {
			return fmt.Errorf("embedding span %d holds %d values, not a positive multiple of the hidden size %d", k, len(e.Rows), h)
		}
		if e.Index < 0 || e.Index+e.Len(h) > len(in.Tokens) {
			return fmt.Errorf("embedding span %d covers tokens [%d, %d) of %d", k, e.Index, e.Index+e.Len(h), len(in.Tokens))
		}
	}
	return nil
}

// piece is a run of one input's tokens computed in one pass.
type piece struct {
	in       int // index into inputs
	seq      *Sequence
	tokens   []int
	row      int // first row of the piece in the pass's activations
	pos      int // position of its first token in the sequence
	logitRow int // first row of its logits in the pass's logits, -1 if none
	nLogits  int
	// argmaxOnly asks for the greedy token of the piece's logit row only.
	argmaxOnly bool
	decode     bool // Input.Decode
	// tokenwise runs the piece's attention one token at a time, each as
	// a decode step of one token would (a main-model Decode input of
	// several tokens: speculative decoding's verify and re-feed), so
	// that its rows equal plain decoding's bit for bit: the CPU splits
	// the attention of few tokens over long contexts by their number.
	// Only where the backend's attention depends on the rows of a call
	// (Model.tokenwise): elsewhere one attention call per sequence keeps
	// the backend's hazard tracking simple.
	tokenwise bool
	outOff    int // where its logits go in the input's Output
	// positions are the tokens' 3-D rotary positions (Input.Positions),
	// nil for text positions.
	positions [][3]int
	// embeds are the input's embedding spans that overlap the piece, with
	// Index relative to the piece and Rows cut to it.
	embeds []EmbedSpan
	// hidden asks for the final-norm rows of the piece's tokens
	// (Input.Hidden), stored at hidOff in the input's Output.Hidden.
	hidden bool
	hidOff int
	// keep is the number of the piece's last rows whose final hidden
	// states are read, and outRow where the first of them is after the
	// last layer (outputRows).
	keep, outRow int
}

// runPieces packs the inputs' tokens into passes of at most m.maxTokens
// tokens and runs them in order.
func (m *Model) runPieces(ctx context.Context, inputs []Input, outs []Output, trace func(int, []float32)) error {
	var pass []piece
	rows := 0
	flush := func() error {
		if len(pass) == 0 {
			return nil
		}
		err := m.forward(ctx, pass, outs, trace)
		pass, rows = pass[:0], 0
		return err
	}
	vocab := m.cfg.VocabSize
	// Decode inputs first, so that their rows lead every pass
	// (scratch.decodeRows).
	order := make([]int, 0, len(inputs))
	for i, in := range inputs {
		if in.Decode {
			order = append(order, i)
		}
	}
	for i, in := range inputs {
		if !in.Decode {
			order = append(order, i)
		}
	}
	for _, i := range order {
		in := inputs[i]
		switch in.Logits {
		case AllLogits:
			outs[i].Logits = reuseLogits(in.LogitsInto, len(in.Tokens)*vocab)
		case AllArgmax:
			outs[i].Argmaxes = make([]int, len(in.Tokens))
		case LastLogits:
			outs[i].Logits = reuseLogits(in.LogitsInto, vocab)
		}
		if in.Hidden {
			outs[i].Hidden = make([]float32, len(in.Tokens)*m.cfg.HiddenSize)
		}
		pos := in.Seq.n
		for done := 0; done < len(in.Tokens); {
			n := min(len(in.Tokens)-done, m.maxTokens-rows)
			p := piece{in: i, seq: in.Seq, tokens: in.Tokens[done : done+n], row: rows, pos: pos + done, logitRow: -1, decode: in.Decode}
			p.tokenwise = m.tokenwise && in.Decode && n > 1
			if in.Positions != nil {
				p.positions = in.Positions[done : done+n]
			}
			p.embeds = cutSpans(in.Embeds, done, done+n, m.cfg.HiddenSize)
			p.hidden, p.hidOff = in.Hidden, done*m.cfg.HiddenSize
			switch {
			case in.Logits == AllLogits:
				p.nLogits, p.outOff = n, done*vocab
			case in.Logits == AllArgmax:
				p.nLogits, p.outOff, p.argmaxOnly = n, done, true
			case (in.Logits == LastLogits || in.Logits == LastArgmax) && done+n == len(in.Tokens):
				p.nLogits = 1
				p.argmaxOnly = in.Logits == LastArgmax
			}
			pass = append(pass, p)
			rows += n
			done += n
			if rows == m.maxTokens {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// reuseLogits returns buf[:n] when buf can hold n logits, else a new
// slice of n.
func reuseLogits(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}

// cutSpans returns the parts of spans that fall in tokens [lo, hi), with
// indices relative to lo.
func cutSpans(spans []EmbedSpan, lo, hi, hidden int) []EmbedSpan {
	var out []EmbedSpan
	for _, e := range spans {
		a, b := max(e.Index, lo), min(e.Index+e.Len(hidden), hi)
		if a >= b {
			continue
		}
		out = append(out, EmbedSpan{Index: a - lo, Rows: e.Rows[(a-e.Index)*hidden : (b-e.Index)*hidden]})
	}
	return out
}

// WeightBytes returns the size of the model's weights.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, x := range m.w.all() {
		n += weightBytes(x)
	}
	for _, x := range m.mtp.all() {
		n += weightBytes(x)
	}
	if m.draftHead != nil && m.draftHead != m.w.lmHead {
		n += weightBytes(m.draftHead)
	}
	return n
}

// BlockFormatBytes returns the bytes of the weights stored in a block
// format (quantized: Q8_0, Q4_K, ...), part of WeightBytes.
func (m *Model) BlockFormatBytes() int64 {
	var n int64
	ws := append(m.w.all(), m.mtp.all()...)
	if m.draftHead != nil && m.draftHead != m.w.lmHead {
		ws = append(ws, m.draftHead)
	}
	for _, x := range ws {
		if x.DType().Quant() != quant.Keep {
			n += weightBytes(x)
		}
	}
	return n
}

// OutputBytes returns the bytes of the weights a decode step reads outside
// the decoder layers: the final norm and the output matrix.
func (m *Model) OutputBytes() int64 { return weightBytes(m.w.lmHead) + weightBytes(m.w.norm) }

// DecodeBytes returns the weight bytes one decode step reads: every weight
// except the embedding table, of which it gathers single rows (unless the
// table is also the output matrix), and of a mixture of experts' experts
// only the k a token chooses (their average size).
func (m *Model) DecodeBytes() int64 {
	n := m.WeightBytes()
	for i := range m.w.layers {
		n -= unreadExpertBytes(m.w.layers[i].mlp, m.cfg.NumExpertsPerTok)
	}
	for _, x := range m.mtp.all() { // the head is read by draft steps only
		n -= weightBytes(x)
	}
	if m.mtp != nil {
		n += unreadExpertBytes(m.mtp.layer.mlp, m.cfg.NumExpertsPerTok)
	}
	if m.draftHead != nil && m.draftHead != m.w.lmHead {
		n -= weightBytes(m.draftHead)
	}
	if m.w.lmHead != m.w.embed {
		n -= weightBytes(m.w.embed)
	}
	return n
}
