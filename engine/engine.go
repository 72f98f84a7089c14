// Package engine schedules generation requests over one model with continuous
// batching: a single goroutine owns the model and, at every step, feeds one
// token to each decoding sequence and a chunk of its prompt to each
// prefilling one, samples the next tokens and hands them to the requests.
// Requests join the running batch at the next step and leave it as soon as
// they finish or their context is cancelled, freeing their sequence.
//
// Each sequence's prompt is cut into chunks of a fixed size that depends only
// on the prompt, and sampling state is per request, so with greedy decoding a
// request's tokens are the same whether it runs alone or among others.
//
// With Config.PrefixCache, a request resumes from the longest prefix of its
// prompt whose state the prefix cache holds (prefixcache.go) and prefills
// only the rest, bit for bit as a cold run would; concurrent requests that
// share a prefix another one is about to store wait for it. With
// Config.StateMemory, all sequence state (the running requests' KV caches
// and recurrent states, and the prefix cache) stays within one budget
// (budget.go): a request starts only once the state it may need fits,
// evicting cached prefixes first.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/sample"
)

// Errors returned by Submit.
var (
	// ErrQueueFull means the waiting queue is at its limit.
	ErrQueueFull = errors.New("engine: request queue is full")
	// ErrClosed means the engine has shut down.
	ErrClosed = errors.New("engine: closed")
)

// Defaults of Config.
const (
	DefaultMaxNumSeqs  = 16
	DefaultMaxQueue    = 256
	DefaultChunkTokens = 64
	DefaultStepTokens  = 256
)

// Config sets the engine's limits.
type Config struct {
	// MaxNumSeqs is the most sequences running (prefilling or decoding) at
	// once. Zero means DefaultMaxNumSeqs.
	MaxNumSeqs int
	// MaxQueue is the most requests waiting to start; Submit fails with
	// ErrQueueFull past it. Zero means DefaultMaxQueue.
	MaxQueue int
	// ChunkTokens is the size of the prompt chunks fed to a prefilling
	// sequence in one step. Zero means DefaultChunkTokens.
	ChunkTokens int
	// StepTokens is the token budget of one step: decoding sequences take
	// one token each, prefill chunks fill the rest (at least one chunk is
	// always scheduled so prefill makes progress). Zero means
	// DefaultStepTokens while sequences decode and the model's whole pass
	// (model.Model.MaxStepTokens) for steps that only prefill.
	StepTokens int
	// EOS lists the end-of-sequence ids every request stops on unless it
	// sets IgnoreEOS (generation_config.json's eos_token_id).
	EOS []int
	// StateMemory bounds, in bytes, all sequence state: the running
	// requests' KV caches and recurrent states (each reserved for its
	// prompt plus MaxTokens when it starts) and the prefix cache. A
	// request waits in the queue until its state fits, evicting cached
	// prefixes first; Submit rejects one that could never fit
	// (*StateBudgetError). Zero means no limit (and, with PrefixCache, a
	// cache that only grows).
	StateMemory int64
	// PrefixCache keeps prompt state at multiples of PrefixBlock tokens so
	// that later requests sharing the prefix resume there (exactly). It
	// needs ChunkTokens to be a multiple of PrefixBlock.
	PrefixCache bool
	// PrefixObserver, when set, is told what the prefix cache stores and
	// evicts.
	PrefixObserver PrefixObserver
	// PrefixDisk, when set, puts a disk tier under the prefix cache
	// (prefixdisk.go): kept points leaving memory are written there, and
	// read back for a request whose prefix memory no longer holds, by this
	// process or a later one. It needs PrefixCache.
	PrefixDisk *DiskTier
	// PrefixHost, when positive, puts a host-memory tier of that many
	// bytes between device memory and the disk tier (prefixtier.go): kept
	// points evicted from device memory are copied there (and from there
	// to disk), and a request whose prefix it holds has it uploaded back.
	// It needs PrefixCache and a backend with its own memory
	// (compute.MemoryReporter): on the CPU backend the memory tier is host
	// memory already, and New refuses it.
	PrefixHost int64
	// Speculative turns on speculative decoding of greedy requests (see
	// Speculative); the zero value is off.
	Speculative Speculative
}

// LogitProcessor constrains one request's choices, e.g. to valid JSON.
type LogitProcessor interface {
	// Process masks logits in place (disallowed tokens set to -Inf) before
	// the next token is sampled.
	Process(logits []float32)
	// Accept records the token that was chosen.
	Accept(token int) error
}

// Request is one generation job.
type Request struct {
	// Prompt holds the prompt's token ids; it must not be empty.
	Prompt []int
	// Params are the sampling settings; the zero value is greedy.
	Params sample.Params
	// MaxTokens is the most tokens to generate; it must be positive.
	MaxTokens int
	// MinTokens suppresses the stop tokens until this many were generated.
	MinTokens int
	// StopTokens end generation when sampled, in addition to Config.EOS.
	StopTokens []int
	// IgnoreEOS disables stopping on Config.EOS.
	IgnoreEOS bool
	// LogitBias is added to the logits of its token ids before anything
	// else (penalties, the processor, logprobs, sampling), as OpenAI's
	// logit_bias; ids must be in the vocabulary.
	LogitBias map[int]float32
	// Processor, when set, masks the logits before each sample.
	Processor LogitProcessor
	// Logprobs asks for the log-probability of each sampled token, and
	// TopLogprobs for that many most likely alternatives as well.
	Logprobs    bool
	TopLogprobs int
	// PromptLogits asks for the logits at the last prompt position (before
	// penalties and masks), delivered in Output.PromptLogits with the first
	// token.
	PromptLogits bool
	// CacheHints are prompt positions worth resuming at later (the start
	// of each user message, the start of each assistant turn's content):
	// with Config.PrefixCache, the state at the last multiple of
	// PrefixBlock at or before each is kept, besides the one before the
	// prompt's last token.
	CacheHints []int
	// Images replace the embeddings of runs of prompt tokens (an image's
	// pads) with the vision tower's output, in prompt order, without
	// overlaps. With Config.PrefixCache, cached state is shared only
	// between prompts whose images have the same Hash at the same tokens.
	Images []Image
	// Positions, when not nil, holds the 3-D rotary (M-RoPE) position of
	// each prompt token (vision.RopeIndex's rows, transposed); nil gives
	// text positions.
	Positions [][3]int
	// RopeDelta is the offset of the positions of generated tokens: the
	// token at cache index i has position i+RopeDelta in all three rows
	// (vision.RopeIndex's ropeDelta; 0 for text).
	RopeDelta int
	// LoRA are the adapters the request's sequence runs with, in order
	// (none: the base model). With Config.PrefixCache, cached state is
	// shared only between requests with the same adapters and scales.
	LoRA []LoRA
}

// Image is one image of a Request's prompt.
type Image struct {
	// Index is the prompt index of the first token the image replaces.
	Index int
	// Embeds holds the image's rows of the model's hidden size, one per
	// token it replaces (the vision tower's output).
	Embeds []float32
	// Hash identifies the image (imageproc.Image.Hash): the prefix cache
	// keys the image's tokens by it.
	Hash [32]byte
}

// FinishReason says why a request ended.
type FinishReason uint8

// Finish reasons.
const (
	FinishNone      FinishReason = iota // still running
	FinishStop                          // a stop or end-of-sequence token
	FinishLength                        // MaxTokens or the model's context
	FinishCancelled                     // the request's context ended
	FinishError                         // the model failed; see Output.Err
)

// String returns the OpenAI name of the reason ("stop", "length") or a
// descriptive one for the others.
func (f FinishReason) String() string {
	switch f {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishCancelled:
		return "cancelled"
	case FinishError:
		return "error"
	}
	return "none"
}

// TokenLogprob is a token with its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float64
}

// Token is one generated token.
type Token struct {
	ID int
	// At is when the engine committed the token: the tokens of one step
	// (a speculative round commits several) share it. Unlike the time a
	// consumer receives them, it does not depend on how often Next is
	// called.
	At time.Time
	// Logprob and Top are set when the request asked for logprobs; they
	// come from the model's raw distribution (before penalties and masks).
	Logprob float64
	Top     []TokenLogprob
}

// Output is what a Stream delivers at a time.
type Output struct {
	// Tokens are the tokens generated since the previous Next.
	Tokens []Token
	// Finish is set (not FinishNone) once the request has ended; no more
	// tokens follow.
	Finish FinishReason
	// StopToken is the stop or end-of-sequence id that ended the request
	// (the last of Tokens), or -1.
	StopToken int
	// Err is the model's error when Finish is FinishError.
	Err error
	// PromptLogits are the logits at the last prompt position, in the
	// first Output of a request that asked for them (Request.PromptLogits).
	PromptLogits []float32
}

// Stream receives the tokens of one request.
type Stream struct {
	req       Request
	ctx       context.Context
	submitted time.Time
	notify    chan struct{}
	// unqueue, set while the request waits, takes it out of the queue
	// once its context ends; it is stopped when the request is admitted.
	unqueue func() bool
	key     []int        // the prompt as the prefix cache keys it (cacheKey)
	hashes  []uint64     // BlockHashes of key, with a prefix cache
	cached  atomic.Int64 // prompt tokens resumed from the prefix cache
	// fetchTries counts the reads of the request's prefix from disk
	// (prefetching); lowerEnd is the end of the last one, which added
	// lowerTokens from lowerTier beyond what memory held. Engine
	// goroutine only.
	fetchTries  int
	lowerEnd    int
	lowerTokens int
	lowerTier   Tier
	// specDrafted and specAccepted count the request's draft tokens and
	// those the main model accepted (Config.Speculative).
	specDrafted, specAccepted atomic.Int64

	mu           sync.Mutex
	pending      []Token
	promptLogits []float32 // not yet delivered
	finish       FinishReason
	stopTok      int
	err          error
}

// Next waits until tokens are available or the request has ended and
// returns them. It returns ctx's error if ctx ends first.
func (s *Stream) Next(ctx context.Context) (Output, error) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 || s.finish != FinishNone {
			out := Output{Tokens: s.pending, Finish: s.finish, StopToken: s.stopTok, Err: s.err, PromptLogits: s.promptLogits}
			s.pending, s.promptLogits = nil, nil
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Output{StopToken: -1}, ctx.Err()
		}
	}
}

// CachedTokens returns the number of prompt tokens the request resumed
// from the prefix cache instead of computing them (0 before it starts).
func (s *Stream) CachedTokens() int { return int(s.cached.Load()) }

// SpecTokens returns the draft tokens speculative decoding proposed for the
// request and how many of them the main model accepted, so far (final once
// Next has delivered the request's Finish). Every round counts its drafts
// in full, the last one too even where MaxTokens or a stop token cut the
// tokens it committed; both are 0 for a request that does not speculate.
func (s *Stream) SpecTokens() (drafted, accepted int) {
	return int(s.specDrafted.Load()), int(s.specAccepted.Load())
}

// push delivers a token and, with the first, the prompt's logits.
func (s *Stream) push(t Token, promptLogits []float32) {
	s.mu.Lock()
	s.pending = append(s.pending, t)
	if promptLogits != nil {
		s.promptLogits = promptLogits
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Stream) end(f FinishReason, stopTok int, err error) {
	s.mu.Lock()
	if s.finish == FinishNone {
		s.finish, s.stopTok, s.err = f, stopTok, err
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Engine runs requests over a model. Its methods are safe for concurrent
// use.
type Engine struct {
	m          *model.Model
	cfg        Config
	eos        map[int]bool
	metrics    *metrics
	stepTokens int          // tokens of a step, at most a model pass
	fillTokens int          // tokens of a step without decoding sequences
	cache      *prefixCache // nil without Config.PrefixCache
	budget     budget
	loras      loraCounts // running requests per adapter
	// fetch is the read of a waiting request's prefix from disk under way,
	// or nil (prefetching); fetchWG waits for its goroutine. Engine
	// goroutine only.
	fetch   *prefetch
	fetchWG sync.WaitGroup
	// fetchHook, when set (by tests, before the first Submit), runs on a
	// read's goroutine before it reads.
	fetchHook func()

	mu      sync.Mutex
	waiting []*Stream
	closed  bool
	wake    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// New starts an engine over m. Close stops it; the model stays open and
// remains the caller's.
func New(m *model.Model, cfg Config) (*Engine, error) {
	if m == nil {
		return nil, errors.New("engine: nil model")
	}
	for name, v := range map[string]*int{"max_num_seqs": &cfg.MaxNumSeqs, "max_queue": &cfg.MaxQueue, "chunk_tokens": &cfg.ChunkTokens, "step_tokens": &cfg.StepTokens} {
		if *v < 0 {
			return nil, fmt.Errorf("engine: %s must not be negative, got %d", name, *v)
		}
	}
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.ChunkTokens == 0 {
		cfg.ChunkTokens = DefaultChunkTokens
	}
	if cfg.StateMemory < 0 {
		return nil, fmt.Errorf("engine: state memory must not be negative, got %d", cfg.StateMemory)
	}
	if err := cfg.Speculative.check(m); err != nil {
		return nil, err
	}
	if cfg.PrefixCache && cfg.ChunkTokens%PrefixBlock != 0 {
		return nil, fmt.Errorf("engine: the prefix cache needs chunk_tokens to be a multiple of %d, got %d", PrefixBlock, cfg.ChunkTokens)
	}
	// A step is one pass over the weights, so the model never cuts a
	// prompt chunk where the pass fills up: every chunk starts and ends
	// where it would alone, and results do not depend on the batch.
	pass := m.MaxStepTokens()
	fill := pass
	if cfg.StepTokens == 0 {
		cfg.StepTokens = min(max(DefaultStepTokens, cfg.MaxNumSeqs+cfg.ChunkTokens), pass)
	} else {
		fill = min(cfg.StepTokens, pass)
	}
	if cfg.MaxNumSeqs-1+cfg.ChunkTokens > min(cfg.StepTokens, pass) {
		return nil, fmt.Errorf("engine: max_num_seqs %d and chunk_tokens %d do not fit a step of %d tokens (the model's passes hold %d)",
			cfg.MaxNumSeqs, cfg.ChunkTokens, cfg.StepTokens, pass)
	}
	e := &Engine{
		m:          m,
		cfg:        cfg,
		eos:        map[int]bool{},
		metrics:    newMetrics(),
		stepTokens: min(cfg.StepTokens, pass),
		fillTokens: fill,
		budget:     budget{limit: cfg.StateMemory},
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	if cfg.PrefixCache {
		e.cache = newPrefixCache(m, cfg.PrefixObserver)
	}
	if cfg.PrefixHost < 0 {
		return nil, fmt.Errorf("engine: the prefix cache's host memory must not be negative, got %d", cfg.PrefixHost)
	}
	if cfg.PrefixHost > 0 {
		if !cfg.PrefixCache {
			return nil, errors.New("engine: a prefix cache host tier needs the prefix cache")
		}
		if e.cache.tier != TierDevice {
			return nil, fmt.Errorf("engine: a prefix cache host tier needs a backend with its own memory; on %s the memory tier (the state memory) is host memory already", m.Backend().Name())
		}
		e.cache.host = newHostTier(cfg.PrefixHost)
	}
	if cfg.PrefixDisk != nil {
		if !cfg.PrefixCache {
			return nil, errors.New("engine: a prefix cache disk tier needs the prefix cache")
		}
		var err error
		if e.cache.disk, err = openDisk(m, cfg.PrefixDisk, e.poke); err != nil {
			return nil, err
		}
	}
	for _, id := range cfg.EOS {
		e.eos[id] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.loop(ctx)
	return e, nil
}

// poke wakes the engine goroutine without waiting.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Model returns the engine's model.
func (e *Engine) Model() *model.Model { return e.m }

// Close cancels every request, frees their sequences and stops the engine.
func (e *Engine) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.cancel()
	}
	e.mu.Unlock()
	<-e.done
	return nil
}

// Submit queues a request. ctx bounds the request: once it ends the request
// leaves the batch at the next step with FinishCancelled. Submit fails at
// once when the request is invalid, the queue is full or the engine closed.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := e.validate(r); err != nil {
		return nil, err
	}
	s := &Stream{req: r, ctx: ctx, submitted: time.Now(), notify: make(chan struct{}, 1), stopTok: -1}
	if e.cache != nil {
		s.key = cacheKey(r.Prompt, r.Images, e.m.Config().HiddenSize)
		s.hashes = blockHashesFrom(loraSetOf(r.LoRA).seed(), s.key)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, ErrClosed
	case len(e.waiting) >= e.cfg.MaxQueue:
		e.metrics.rejected.Add(1)
		return nil, ErrQueueFull
	}
	e.waiting = append(e.waiting, s)
	e.metrics.waiting.Store(int64(len(e.waiting)))
	s.unqueue = context.AfterFunc(ctx, func() { e.dequeue(s) })
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// dequeue ends a waiting request whose context ended, freeing its place in
// the queue at once rather than when it would have started.
func (e *Engine) dequeue(s *Stream) {
	e.mu.Lock()
	i := slices.Index(e.waiting, s)
	if i >= 0 {
		e.waiting = slices.Delete(e.waiting, i, i+1)
		e.metrics.waiting.Store(int64(len(e.waiting)))
	}
	e.mu.Unlock()
	if i >= 0 {
		s.end(FinishCancelled, -1, nil)
		e.metrics.finished(FinishCancelled)
	}
}

func (e *Engine) validate(r Request) error {
	c := e.m.Config()
	switch {
	case len(r.Prompt) == 0:
		return errors.New("engine: empty prompt")
	case r.MaxTokens <= 0:
		return fmt.Errorf("engine: max tokens must be positive, got %d", r.MaxTokens)
	case r.MinTokens < 0:
		return fmt.Errorf("engine: min tokens must not be negative, got %d", r.MinTokens)
	case r.TopLogprobs < 0:
		return fmt.Errorf("engine: top logprobs must not be negative, got %d", r.TopLogprobs)
	case len(r.Prompt) >= c.MaxContext():
		return fmt.Errorf("engine: prompt of %d tokens leaves no room in the context of %d", len(r.Prompt), c.MaxContext())
	}
	if err := r.Params.Validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if tokens, need := e.reserveTokens(r), e.requestBytes(r); e.budget.limit > 0 && need > e.budget.limit {
		return &StateBudgetError{Tokens: tokens, Need: need, Budget: e.budget.limit}
	}
	for i, t := range r.Prompt {
		if t < 0 || t >= c.VocabSize {
			return fmt.Errorf("engine: prompt token %d at index %d is outside the vocabulary [0, %d)", t, i, c.VocabSize)
		}
	}
	for id := range r.LogitBias {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("engine: logit bias for token %d, outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	if err := e.checkLoRA(r.LoRA); err != nil {
		return err
	}
	if r.Positions != nil && len(r.Positions) != len(r.Prompt) {
		return fmt.Errorf("engine: %d positions for a prompt of %d tokens", len(r.Positions), len(r.Prompt))
	}
	end := 0
	for i, im := range r.Images {
		n := len(im.Embeds) / c.HiddenSize
		switch {
		case len(im.Embeds) == 0 || len(im.Embeds)%c.HiddenSize != 0:
			return fmt.Errorf("engine: image %d has %d embedding values, not a positive multiple of the hidden size %d", i, len(im.Embeds), c.HiddenSize)
		case im.Index < end:
			return fmt.Errorf("engine: image %d starts at prompt index %d, before the end %d of the previous one", i, im.Index, end)
		case im.Index+n > len(r.Prompt):
			return fmt.Errorf("engine: image %d covers prompt tokens [%d, %d) of %d", i, im.Index, im.Index+n, len(r.Prompt))
		}
		end = im.Index + n
	}
	return nil
}

// promptInput returns the model input of prompt tokens [lo, hi) of r:
// their tokens, 3-D positions and the parts of images among them.
func promptInput(r *Request, hidden, lo, hi int) model.Input {
	in := model.Input{Tokens: r.Prompt[lo:hi]}
	if r.Positions != nil {
		in.Positions = r.Positions[lo:hi]
	}
	for _, im := range r.Images {
		a, b := max(im.Index, lo), min(im.Index+len(im.Embeds)/hidden, hi)
		if a < b {
			in.Embeds = append(in.Embeds, model.EmbedSpan{Index: a - lo, Rows: im.Embeds[(a-im.Index)*hidden : (b-im.Index)*hidden]})
		}
	}
	return in
}

// reserveTokens returns the positions r's sequence may hold: its prompt
// plus MaxTokens (the last sampled token is never fed), and the drafts of
// a last speculative round, within the model's context.
func (e *Engine) reserveTokens(r Request) int {
	n := len(r.Prompt) + r.MaxTokens - 1
	if e.speculates(&r) {
		n += e.cfg.Speculative.Tokens
	}
	return min(n, e.m.Config().MaxContext())
}

// requestBytes is the state memory r may need: its sequence's and, when it
// speculates, the rollback snapshot's and the head's.
func (e *Engine) requestBytes(r Request) int64 {
	tokens := e.reserveTokens(r)
	need := e.m.SequenceBytes(tokens)
	if e.speculates(&r) {
		need += e.specBytes(tokens)
	}
	return need
}

// running is the engine's state of one admitted request.
type running struct {
	s         *Stream
	seq       *model.Sequence
	sampler   *sample.Sampler
	stop      map[int]bool
	fed       int   // prompt tokens fed so far
	keep      []int // prompt positions ahead whose state the prefix cache keeps, ascending
	reserved  int64 // state memory held in the budget
	last      int   // last sampled token, fed at the next step
	generated int
	lastTime  time.Time
	spec      *specState // nil unless the request speculates
	// unfed are tokens before last that were committed but not fed yet,
	// fed with it at the next step: the accepted tokens of a speculative
	// round that was rolled back (see specFollowUp).
	unfed []int
	// logits is the largest logits buffer a step gave r, which the next
	// step receives its logits in (model.Input.LogitsInto): nothing
	// holds a step's logits past the step.
	logits []float32
	// endForced is set when the processor left only stop tokens (or no
	// token at all): the choice then ends on the stop token even before
	// MinTokens, since nothing else may follow.
	endForced bool
}

func (e *Engine) loop(ctx context.Context) {
	defer close(e.done)
	var run []*running
	defer func() {
		for _, r := range run {
			e.finish(r, FinishCancelled, -1, nil)
		}
		e.mu.Lock()
		w := e.waiting
		e.waiting = nil
		e.mu.Unlock()
		for _, s := range w {
			s.unqueue()
			s.end(FinishCancelled, -1, ErrClosed)
		}
		e.metrics.waiting.Store(0)
		if e.fetch != nil {
			e.landFetch(true)
		}
		e.fetchWG.Wait()
		if e.cache != nil {
			e.cache.obs = nil // nothing is reported at close
			e.cache.spillAll()
			e.cache.clear()
			e.noteCache()
			if e.cache.disk != nil {
				e.cache.disk.Close()
			}
		}
	}()
	for {
		// Drop requests whose context ended, then fill the room that
		// they and the requests finished at the last step left.
		run = slices.DeleteFunc(run, func(r *running) bool {
			if r.s.ctx.Err() != nil {
				e.finish(r, FinishCancelled, -1, nil)
				return true
			}
			return false
		})
		if e.cache != nil {
			e.landFetch(false)
			e.cache.drainDisk()
		}
		run = e.admit(run)
		e.metrics.running.Store(int64(len(run)))
		if len(run) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		run = e.step(ctx, run)
	}
}

// admit moves waiting requests into the running batch, in order, while
// there is room in the batch and their state fits the budget. A request
// that should wait for a prefix a running request is about to store stays
// queued while later ones may start; the first that does not fit the
// budget stops admission, so that large requests are not overtaken
// forever.
func (e *Engine) admit(run []*running) []*running {
	for i := 0; len(run) < e.cfg.MaxNumSeqs; {
		e.mu.Lock()
		if i >= len(e.waiting) {
			e.mu.Unlock()
			break
		}
		s := e.waiting[i]
		e.mu.Unlock()
		if s.ctx.Err() != nil {
			// Ended while waiting: dequeue ends it, unless the context's
			// own callback did so already; either way it has left the
			// queue, and the next one is at i now.
			e.dequeue(s)
			continue
		}
		if e.awaitsPrefix(s, run) || e.prefetching(s) {
			i++
			continue
		}
		if !s.unqueue() {
			continue // its context ended just now: the callback dequeues it
		}
		r, fits := e.start(s)
		if !fits {
			// It waits on: watch its context again.
			s.unqueue = context.AfterFunc(s.ctx, func() { e.dequeue(s) })
			break
		}
		e.unwait(s)
		if r != nil {
			run = append(run, r)
		}
	}
	return run
}

// unwait removes s, which is starting, from the queue.
func (e *Engine) unwait(s *Stream) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i := slices.Index(e.waiting, s); i >= 0 {
		e.waiting = slices.Delete(e.waiting, i, i+1)
		e.metrics.waiting.Store(int64(len(e.waiting)))
	}
}

// start admits s if its state fits the budget (fits false otherwise):
// it reserves the state, opens its sequence and resumes it from the prefix
// cache. It returns nil when s failed (and has been ended).
func (e *Engine) start(s *Stream) (r *running, fits bool) {
	tokens := e.reserveTokens(s.req)
	need := e.requestBytes(s.req)
	var path []*prefixNode
	fromHost := 0
	if e.cache != nil {
		path = e.cache.lookup(s.key, s.hashes)
		if e.cache.host != nil {
			path, fromHost = e.fromHost(s, path, need)
		}
	}
	pin(path, 1)
	if !e.makeRoom(need) {
		// The prefix the request would resume from is all that is left
		// to evict: start cold rather than wait.
		pin(path, -1)
		path, fromHost = nil, 0
		if !e.makeRoom(need) {
			return nil, false
		}
	}
	defer pin(path, -1)
	e.budget.running.Add(need)
	e.budget.note()
	fail := func(err error) (*running, bool) {
		e.budget.running.Add(-need)
		s.end(FinishError, -1, fmt.Errorf("engine: %w", err))
		e.metrics.finished(FinishError)
		return nil, true
	}
	seq, err := e.m.NewSequence()
	if err != nil {
		return fail(err)
	}
	if err := setLoRA(seq, s.req.LoRA); err != nil {
		// The adapter was unloaded while the request waited.
		seq.Close()
		return fail(err)
	}
	// Under a budget the caches are allocated once, at their reserved size,
	// so that memory never exceeds what the budget accounts (growing
	// would hold the old and new caches at once).
	if e.budget.limit > 0 {
		if err := seq.Reserve(tokens); err != nil {
			seq.Close()
			return fail(err)
		}
	}
	hit := 0
	if len(path) > 0 {
		last := path[len(path)-1]
		if err := seq.Restore(blocks(path), last.state); err != nil {
			seq.Close()
			return fail(err)
		}
		hit = last.end
		e.cache.touch(path)
	}
	seq.SetRopeDelta(s.req.RopeDelta)
	e.metrics.seqOpen.Add(1)
	e.loras.add(s.req.LoRA, 1)
	r = &running{s: s, seq: seq, sampler: sample.New(s.req.Params), stop: map[int]bool{}, fed: hit, reserved: need}
	if e.cache != nil {
		r.keep = keepPoints(len(s.req.Prompt), s.req.CacheHints, hit)
		e.metrics.prefixQueries.Add(uint64(len(s.req.Prompt)))
		e.metrics.prefixHits.Add(uint64(hit))
		e.metrics.hostHits.Add(uint64(fromHost))
		if hit >= s.lowerEnd && s.lowerEnd > 0 {
			// Resumed at or beyond the point read for it before it started.
			if s.lowerTier == TierDisk {
				e.metrics.diskHits.Add(uint64(s.lowerTokens))
			} else {
				e.metrics.hostHits.Add(uint64(s.lowerTokens))
			}
		}
	}
	s.cached.Store(int64(hit))
	if e.speculates(&s.req) {
		if err := e.startSpec(r); err != nil {
			seq.Close()
			e.metrics.seqOpen.Add(-1)
			e.loras.add(s.req.LoRA, -1)
			return fail(err)
		}
	}
	r.sampler.AddPrompt(s.req.Prompt)
	if !s.req.IgnoreEOS {
		for id := range e.eos {
			r.stop[id] = true
		}
	}
	for _, id := range s.req.StopTokens {
		r.stop[id] = true
	}
	return r, true
}

// finish ends a running request and frees its sequence.
func (e *Engine) finish(r *running, f FinishReason, stopTok int, err error) {
	r.seq.Close()
	if r.spec != nil {
		r.spec.close()
	}
	e.budget.running.Add(-r.reserved)
	e.metrics.seqOpen.Add(-1)
	e.loras.add(r.s.req.LoRA, -1)
	r.s.end(f, stopTok, err)
	e.metrics.finished(f)
}

// step runs one model step over the batch and returns the requests still
// running. Speculating requests (Config.Speculative) draft before it,
// verify their drafts in it, and roll back and run the head after it.
func (e *Engine) step(ctx context.Context, run []*running) []*running {
	ended := map[*running]bool{}
	// live drops the requests this step ended; on shutdown the loop's
	// cleanup finishes the rest.
	live := func() []*running { return slices.DeleteFunc(run, func(r *running) bool { return ended[r] }) }
	if e.cfg.Speculative.Tokens > 0 && !e.draftAll(ctx, run, ended) {
		return live()
	}
	inputs := make([]model.Input, 0, len(run))
	members := make([]*running, 0, len(run))
	budget := e.stepTokens
	for _, r := range run {
		if ended[r] || r.fed != len(r.s.req.Prompt) {
			continue
		}
		in := model.Input{Seq: r.seq, Tokens: append(slices.Clone(r.unfed), r.last), Logits: r.logitsMode(), Decode: true}
		// A paused request keeps its hidden rows for the head (back-off).
		in.Hidden = r.spec != nil && r.spec.ds != nil && r.spec.pause > 0
		if r.drafting() {
			in = verifyInput(r.seq, r.unfed, r.last, r.spec.drafts, in.Logits == model.LastArgmax)
		}
		in.LogitsInto = r.logits
		inputs = append(inputs, in)
		members = append(members, r)
		budget -= len(in.Tokens)
	}
	// While sequences decode, each prefill takes one chunk per step, so
	// that their next tokens are not held up by long passes. Without
	// them, a prefill takes as many whole chunks as the step holds: fewer
	// passes over the weights for the same tokens, cut at the same
	// multiples of the chunk, so the results are the same.
	decoding := len(inputs) > 0
	if !decoding {
		budget = e.fillTokens
	}
	prefilled := false
	for _, r := range run {
		p := r.s.req.Prompt
		if ended[r] || r.fed == len(p) {
			continue
		}
		chunk := e.cfg.ChunkTokens
		n := min(chunk, len(p)-r.fed)
		if last := (len(p) - 1) / chunk * chunk; !decoding && r.fed < last {
			// Whole chunks, but never the prompt's last piece with them:
			// that runs alone, as in a run resumed from the cache (on
			// GPUs a product of a few rows runs on another shader).
			n = min(max(chunk, budget/chunk*chunk), last-r.fed)
		}
		if len(r.keep) > 0 {
			n = min(n, r.keep[0]-r.fed) // stop where the cache keeps state
		}
		if n > budget && prefilled { // the first chunk always fits (see New)
			continue
		}
		mode := model.NoLogits
		if r.fed+n == len(p) {
			mode = r.logitsMode()
		}
		in := promptInput(&r.s.req, e.m.Config().HiddenSize, r.fed, r.fed+n)
		in.Seq, in.Logits, in.LogitsInto = r.seq, mode, r.logits
		// The head drafts from the prompt's hidden rows.
		in.Hidden = r.spec != nil && r.spec.ds != nil
		inputs = append(inputs, in)
		members = append(members, r)
		budget -= n
		prefilled = true
	}
	if len(inputs) == 0 {
		return live()
	}
	start := time.Now()
	outs, err := e.m.Step(ctx, inputs)
	e.metrics.observeStep(time.Since(start))
	if err != nil {
		if ctx.Err() != nil {
			return live()
		}
		for _, r := range members {
			ended[r] = true
			e.finish(r, FinishError, -1, fmt.Errorf("engine: model step: %w", err))
		}
		return live()
	}
	var follow []specFollowUp
	now := time.Now()
	for i, r := range members {
		in := inputs[i]
		if l := outs[i].Logits; cap(l) > cap(r.logits) {
			r.logits = l
		}
		if r.fed < len(r.s.req.Prompt) {
			lo := r.fed
			r.fed += len(in.Tokens)
			e.metrics.promptTokens.Add(uint64(len(in.Tokens)))
			if len(r.keep) > 0 && r.fed == r.keep[0] {
				r.keep = r.keep[1:]
				e.keepState(r)
			}
			if in.Logits == model.NoLogits {
				if r.spec != nil && r.spec.ds != nil {
					// Position p reads the token after it: the next
					// chunk's first for the chunk's last position.
					follow = append(follow, specFollowUp{r: r, draft: e.promptDraft(r, outs[i].Hidden, lo, r.fed, -1)})
				}
				continue
			}
		}
		if r.drafting() {
			if end, f := e.verify(r, in, outs[i], now); end {
				ended[r] = true
			} else {
				follow = append(follow, f)
			}
			continue
		}
		r.unfed = nil
		var promptLogits []float32
		if r.generated == 0 && r.s.req.PromptLogits {
			promptLogits = slices.Clone(outs[i].Logits) // sampling masks the row in place
		}
		var tok Token
		var err error
		if in.Logits == model.LastArgmax {
			tok = r.takeArgmax(outs[i].Argmax)
		} else {
			tok, err = e.sample(r, outs[i].Logits)
		}
		if err != nil {
			e.finish(r, FinishError, -1, err)
			ended[r] = true
			continue
		}
		if e.emit(r, tok, promptLogits, now) {
			ended[r] = true
			continue
		}
		switch {
		case r.spec != nil && r.spec.ds == nil && r.generated == 1:
			r.spec.ready = true // n-gram drafts need no head
		case r.spec != nil && r.generated == 1:
			// The prompt's last chunk: the head runs over it, the last
			// position reading the token just chosen.
			lo := r.fed - len(in.Tokens)
			follow = append(follow, specFollowUp{r: r, draft: e.promptDraft(r, outs[i].Hidden, lo, r.fed, tok.ID)})
		case r.spec != nil && r.spec.pause > 0:
			var hidden []float32
			if h := e.m.Config().HiddenSize; r.spec.ds != nil {
				hidden = outs[i].Hidden[len(outs[i].Hidden)-h:]
			}
			if f, ok := e.paused(r, tok.ID, hidden); ok {
				follow = append(follow, f)
			}
		}
	}
	if len(follow) > 0 && !e.followUp(ctx, follow, ended) {
		return live()
	}
	var state int64
	run = live()
	for _, r := range run {
		state += r.seq.StateBytes()
		if r.spec != nil {
			state += r.spec.snap.Bytes()
			if r.spec.ds != nil {
				state += r.spec.ds.StateBytes()
			}
		}
	}
	e.metrics.stateBytes.Store(state)
	return run
}

// promptDraft is the head's input over prompt positions [lo, hi) of r: the
// main model's hidden rows there, each position reading the token after it
// (the prompt's, or next, the token the main model chose, after the
// prompt's last). Only the prompt's last chunk asks for the argmax.
func (e *Engine) promptDraft(r *running, hidden []float32, lo, hi, next int) model.DraftInput {
	req := &r.s.req
	toks := slices.Clone(req.Prompt[lo+1 : hi])
	mode := r.spec.headMode()
	if hi < len(req.Prompt) {
		toks, mode = append(toks, req.Prompt[hi]), model.NoLogits
	} else {
		toks = append(toks, next)
	}
	in := model.DraftInput{Seq: r.spec.ds, Tokens: toks, Hidden: hidden, Logits: mode}
	if req.Positions != nil {
		in.Positions = req.Positions[lo:hi]
	}
	return in
}

// emit delivers a generated token of r and ends r when it is a stop token
// (after MinTokens), the MaxTokens-th or the last the context holds; it
// reports whether r ended.
func (e *Engine) emit(r *running, tok Token, promptLogits []float32, now time.Time) bool {
	r.generated++
	e.metrics.generationTokens.Add(1)
	if r.generated == 1 {
		e.metrics.ttft.Observe(now.Sub(r.s.submitted).Seconds())
	} else {
		e.metrics.itl.Observe(now.Sub(r.lastTime).Seconds())
	}
	r.lastTime = now
	tok.At = now
	r.last = tok.ID
	if r.spec != nil && r.spec.hist != nil {
		r.spec.hist = append(r.spec.hist, tok.ID)
	}
	r.s.push(tok, promptLogits)
	switch {
	case r.endForced || r.stop[tok.ID] && r.generated >= r.s.req.MinTokens:
		e.finish(r, FinishStop, tok.ID, nil)
		return true
	// The sequence holds the prompt and every generated token but this
	// one (never fed).
	case r.generated >= r.s.req.MaxTokens || len(r.s.req.Prompt)+r.generated-1 >= e.m.Config().MaxContext():
		e.finish(r, FinishLength, -1, nil)
		return true
	}
	return false
}

// logitsMode returns what r needs from the model to pick its next token:
// plain greedy decoding needs only the argmax, which the backend computes
// (a GPU then sends back one id instead of a row of logits); sampling,
// penalties, logprobs, logit processors, min_tokens masking and a request
// for the prompt's logits need the logits. Either way the token is the
// same: the argmax of the same logits.
func (r *running) logitsMode() model.LogitsMode {
	req := &r.s.req
	p := req.Params
	if p.Greedy() && (p.RepetitionPenalty == 0 || p.RepetitionPenalty == 1) && p.PresencePenalty == 0 &&
		p.FrequencyPenalty == 0 && req.Processor == nil && len(req.LogitBias) == 0 && !req.Logprobs && r.generated >= req.MinTokens &&
		(!req.PromptLogits || r.generated > 0) {
		return model.LastArgmax
	}
	return model.LastLogits
}

// takeArgmax records the backend's argmax id as r's next token, as plain
// greedy decoding (model.LastArgmax) chooses it.
func (r *running) takeArgmax(id int) Token {
	r.sampler.Accept(id)
	return Token{ID: id}
}

// sample picks the next token of r from its logits row (owned by the
// engine for this step, so it is masked in place) and records it.
func (e *Engine) sample(r *running, logits []float32) (Token, error) {
	lp := e.prepare(r, logits)
	if r.endForced {
		return e.forcedEnd(r, logits, lp), nil
	}
	return e.commit(r, r.sampler.Sample(logits), lp)
}

// forcedEnd is the token of a choice whose processor allows nothing but
// stop tokens, or nothing at all: the most likely stop token it allows,
// else an end-of-sequence id (the choice ends there either way, see
// emit). The processor sees the token only when it allowed it, so a
// constraint never rejects the engine's own choice.
func (e *Engine) forcedEnd(r *running, logits []float32, lp []float64) Token {
	id := -1
	for s := range r.stop {
		if s < 0 || s >= len(logits) || math.IsInf(float64(logits[s]), -1) {
			continue
		}
		if id < 0 || logits[s] > logits[id] || logits[s] == logits[id] && s < id {
			id = s
		}
	}
	if id >= 0 {
		if tok, err := e.commit(r, id, lp); err == nil {
			return tok
		}
	}
	// A dead end: no token at all is allowed.
	id = -1
	for s := range e.eos {
		if id < 0 || s < id {
			id = s
		}
	}
	for s := range r.stop {
		if id < 0 || s < id {
			id = s
		}
	}
	tok := Token{ID: max(id, 0)}
	r.sampler.Accept(tok.ID)
	if lp != nil {
		tok.Logprob = lp[tok.ID]
	}
	return tok
}

// sampleDraft decides the draft x of a sampled request, drawn from q, at a
// verified position by the speculative-sampling rule against the
// distribution plain sampling would draw from there (the logits after
// prepare), and records the token it commits.
func (e *Engine) sampleDraft(r *running, logits []float32, q sample.Dist, x int) (Token, bool, error) {
	lp := e.prepare(r, logits)
	if r.endForced {
		tok := e.forcedEnd(r, logits, lp)
		return tok, tok.ID == x, nil
	}
	id, accepted := r.sampler.Speculate(r.sampler.Dist(logits), q, x)
	tok, err := e.commit(r, id, lp)
	return tok, accepted, err
}

// prepare applies to r's logits row, in place, what comes before sampling:
// the logit bias, then (for logprobs, returned) the log-probabilities, the
// processor's mask and, before MinTokens, the stop tokens' mask.
func (e *Engine) prepare(r *running, logits []float32) []float64 {
	req := &r.s.req
	var lp []float64
	for id, b := range req.LogitBias {
		logits[id] += b
	}
	if req.Logprobs {
		lp = sample.LogSoftmax(logits)
	}
	if req.Processor != nil {
		req.Processor.Process(logits)
		// A processor that leaves only stop tokens (a constraint whose
		// output is complete) or nothing (a dead end) ends the choice:
		// min_tokens cannot mask what the constraint forces.
		r.endForced = onlyStops(logits, r.stop)
	}
	if r.generated < req.MinTokens && !r.endForced {
		ninf := float32(math.Inf(-1))
		for id := range r.stop {
			if id >= 0 && id < len(logits) {
				logits[id] = ninf
			}
		}
	}
	return lp
}

// onlyStops reports whether no token outside stop has a finite logit.
func onlyStops(logits []float32, stop map[int]bool) bool {
	for id, l := range logits {
		if !math.IsInf(float64(l), -1) && !stop[id] {
			return false
		}
	}
	return true
}

// commit records the token id chosen for r (its sampler's and processor's
// state advance) and returns it with its logprobs from lp.
func (e *Engine) commit(r *running, id int, lp []float64) (Token, error) {
	req := &r.s.req
	tok := Token{ID: id}
	r.sampler.Accept(tok.ID)
	if req.Processor != nil {
		if err := req.Processor.Accept(tok.ID); err != nil {
			return tok, fmt.Errorf("engine: logit processor rejected token %d: %w", tok.ID, err)
		}
	}
	if lp != nil {
		tok.Logprob = lp[tok.ID]
		if req.TopLogprobs > 0 {
			tok.Top = topN(lp, req.TopLogprobs)
		}
	}
	return tok, nil
}

// topN returns the n most likely tokens, most likely first, lower ids first
// on ties.
func topN(lp []float64, n int) []TokenLogprob {
	n = min(n, len(lp))
	top := make([]TokenLogprob, 0, n+1)
	for id, v := range lp {
		if len(top) == n && v <= top[n-1].Logprob {
			continue
		}
		i := len(top)
		for i > 0 && top[i-1].Logprob < v {
			i--
		}
		top = slices.Insert(top, i, TokenLogprob{ID: id, Logprob: v})
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}
