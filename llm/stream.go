package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/outparse"
	"github.com/govinfer/govinfer/tokenizer"
)

// Kind says what an Event carries.
type Kind uint8

// Kinds of events.
const (
	// KindReasoning is a piece of a chat choice's thinking text.
	KindReasoning Kind = iota + 1
	// KindContent is a piece of the answer text.
	KindContent
	// KindToolCall is one complete tool call (Event.ToolCall).
	KindToolCall
	// KindTokens carries only tokens: the tokens since the choice's previous
	// event produced no text yet (an incomplete character, a held-back
	// stop string prefix, markup). Chat streams send it only with
	// Params.Logprobs.
	KindTokens
	// KindFinish ends a choice: Event.Finish says why. For text completions
	// it also carries the choice's last text and tokens.
	KindFinish
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case KindReasoning:
		return "reasoning"
	case KindContent:
		return "content"
	case KindToolCall:
		return "tool_call"
	case KindTokens:
		return "tokens"
	case KindFinish:
		return "finish"
	}
	return "invalid"
}

// FinishReason says why a choice ended, in OpenAI's words.
type FinishReason string

// Finish reasons.
const (
	FinishStop      FinishReason = "stop"       // an EOS or stop token, or a stop string
	FinishLength    FinishReason = "length"     // MaxTokens or the model's context
	FinishToolCalls FinishReason = "tool_calls" // a chat choice stopped after tool calls
	FinishAbort     FinishReason = "abort"      // cancelled: the request's context ended or the model closed
	FinishError     FinishReason = "error"      // the model failed
)

// Token is one generated token with, when the request asked for logprobs,
// its log-probability under the model's raw distribution and the most
// likely alternatives. Model.TokenText gives its display text.
type Token = engine.Token

// TokenLogprob is a token id with its log-probability.
type TokenLogprob = engine.TokenLogprob

// Event is one piece of a stream.
type Event struct {
	// Choice is the index of the choice the event belongs to.
	Choice int
	Kind   Kind
	// Text is the reasoning or content text, or, for KindToolCall, the
	// call's raw output text.
	Text string
	// ToolCall is the parsed call of a KindToolCall event.
	ToolCall *ToolCall
	// Tokens are the generated tokens behind this event since the
	// previous event of the choice that had tokens; the stop token is not
	// among them.
	Tokens []Token
	// Finish, StopReason and Err are set on KindFinish events. StopReason is
	// the stop string (a string) or stop token id (an int) that ended the
	// choice, nil for an EOS token or any other reason; Err is the cause of
	// FinishError and FinishAbort.
	Finish     FinishReason
	StopReason any
	Err        error
}

// Usage is the token accounting of a request.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
	// ReasoningTokens are the completion tokens generated while a chat
	// choice was reasoning (before "</think>", the tag included).
	ReasoningTokens int
	// CachedTokens counts the prompt tokens resumed from the prefix cache
	// rather than computed: for each prompt, the fewest any of its choices
	// resumed (so at most PromptTokens).
	CachedTokens int
	// SpecDraftTokens and SpecAcceptedTokens are the draft tokens
	// speculative decoding proposed for the request's choices and how many
	// of them were accepted (engine.Stream.SpecTokens); both 0 where no
	// choice speculated.
	SpecDraftTokens, SpecAcceptedTokens int
}

// choice is one of a request's generations in flight.
type choice struct {
	index  int
	st     *engine.Stream
	cancel context.CancelFunc
	dec    *tokenizer.Decoder
	parser *outparse.Parser // chat only
	calls  int              // tool calls sent

	tokens     int // completion tokens, stop token included
	reasoning  int // of those, the ones generated while reasoning
	finish     FinishReason
	stopReason any
	err        error
}

// piece is what a choice produced in one engine output: decoded text and
// the tokens behind it.
type piece struct {
	c     *choice
	text  string
	texts []string       // the text of each of toks (chat pieces are parsed token by token)
	toks  []engine.Token // tokens that produced text
	count int            // tokens this piece accounts for, stop token included
	done  bool
}

// Stream delivers the events of a request. Its methods are safe for
// concurrent use, but Next and Events serve one reader.
type Stream struct {
	lm        *Model
	prompt    string
	promptLen int
	chat      bool
	noTools   bool
	custom    map[string]bool // chat: the custom tools' names
	logprobs  bool
	choices   []*choice
	perPrompt int // choices per prompt
	start     time.Time

	runOnce   sync.Once
	ctx       context.Context
	outs      chan piece
	stop      chan struct{} // closed by Close
	closeOnce sync.Once
	pending   int
	queue     []Event

	mu       sync.Mutex // guards firstTok and the choices' counts and finishes
	firstTok time.Time
}

// submit validates the context budget and queues n generations of each
// prompt. Choice p*n+i is the i-th generation of prompt p. hints, when
// set, holds each prompt's turn positions (engine.Request.CacheHints).
func (lm *Model) submit(ctx context.Context, prompts [][]int, hints [][]int, r resolved, proc processorFactory, images *imagePrompt) (*Stream, error) {
	if len(prompts) == 0 {
		return nil, paramErr("prompt", "the prompt is empty")
	}
	maxTokens := make([]int, len(prompts))
	for p, prompt := range prompts {
		if len(prompt) == 0 {
			return nil, paramErr("prompt", "the prompt is empty")
		}
		// An answer asked longer than its room is lowered to it, as
		// llama-server and ollama do: agents ask the whole context.
		room := lm.answerRoom(len(prompt))
		if room < 1 {
			return nil, &ContextLengthError{MaxModelLen: lm.maxModelLen, Prompt: len(prompt), Completion: 1,
				StateTokens: lm.seqTokens, StateMemory: lm.stateMemory}
		}
		maxTokens[p] = room
		if r.maxTokens > 0 {
			maxTokens[p] = min(r.maxTokens, room)
		}
	}
	total := 0
	for _, prompt := range prompts {
		total += len(prompt) * r.n
	}
	if limit := MaxRequestPrompts * lm.maxModelLen; total > limit {
		return nil, paramErr("n", "the request would prefill %d prompt tokens (n times the prompt, over every prompt); at most %d (%d times the maximum length) are allowed", total, limit, MaxRequestPrompts)
	}
	vocab := lm.VocabSize()
	for i, t := range r.stopIDs {
		if t < 0 || t >= vocab {
			return nil, paramErr("stop_token_ids", "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, t, vocab)
		}
	}
	s := &Stream{lm: lm, start: time.Now(), ctx: ctx, logprobs: r.logprobs, perPrompt: r.n, outs: make(chan piece), stop: make(chan struct{})}
	for p, prompt := range prompts {
		s.promptLen += len(prompt)
		for i := range r.n {
			req := engine.Request{
				Prompt: prompt, Params: r.sampling, MaxTokens: maxTokens[p], MinTokens: min(r.minTokens, maxTokens[p]),
				StopTokens: r.stopIDs, IgnoreEOS: r.ignoreEOS,
				Logprobs: r.logprobs, TopLogprobs: r.topLogprobs, LogitBias: r.logitBias, LoRA: r.loras,
			}
			if hints != nil {
				req.CacheHints = hints[p]
			}
			if images != nil { // a chat: one prompt
				req.Images, req.Positions, req.RopeDelta = images.embeds, images.positions, images.delta
			}
			req.Params.Seed += uint64(i)
			if proc != nil {
				pr, err := proc(maxTokens[p])
				if err != nil {
					s.Close()
					return nil, err
				}
				req.Processor = pr
			}
			cctx, cancel := context.WithCancel(ctx)
			st, err := lm.eng.Submit(cctx, req)
			if err != nil {
				cancel()
				s.Close()
				if errors.Is(err, engine.ErrQueueFull) || errors.Is(err, engine.ErrClosed) {
					return nil, err
				}
				if be := (*engine.StateBudgetError)(nil); errors.As(err, &be) {
					return nil, &ParamError{Param: "max_tokens", Message: strings.TrimPrefix(err.Error(), "engine: ")}
				}
				return nil, &ParamError{Message: err.Error()}
			}
			s.choices = append(s.choices, &choice{index: p*r.n + i, st: st, cancel: cancel, dec: lm.tok.NewDecoder(r.skipSpecial, r.stop)})
		}
	}
	return s, nil
}

// Close cancels the choices still running and ends the stream: Next
// returns no more events. Call it once done with a stream.
func (s *Stream) Close() {
	s.closeOnce.Do(func() {
		for _, c := range s.choices {
			c.cancel()
		}
		close(s.stop)
	})
}

// Choices returns the number of choices.
func (s *Stream) Choices() int { return len(s.choices) }

// Prompt returns the prompt text: the rendered conversation of a chat, the
// prompts of a completion joined by newlines.
func (s *Stream) Prompt() string { return s.prompt }

// Usage returns the tokens of the prompts and those generated so far (the
// stop tokens included).
func (s *Stream) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, reasoning, cached, drafted, accepted := 0, 0, 0, 0, 0
	for i, ch := range s.choices {
		c += ch.tokens
		reasoning += ch.reasoning
		d, a := ch.st.SpecTokens()
		drafted += d
		accepted += a
		if i%s.perPrompt == 0 {
			low := ch.st.CachedTokens()
			for _, sib := range s.choices[i : i+s.perPrompt] {
				low = min(low, sib.st.CachedTokens())
			}
			cached += low
		}
	}
	return Usage{PromptTokens: s.promptLen, CompletionTokens: c, TotalTokens: s.promptLen + c,
		ReasoningTokens: reasoning, CachedTokens: cached, SpecDraftTokens: drafted, SpecAcceptedTokens: accepted}
}

// TimeToFirstToken returns the time from the request to its first token,
// or 0 before it.
func (s *Stream) TimeToFirstToken() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstTok.IsZero() {
		return 0
	}
	return s.firstTok.Sub(s.start)
}

// FinishReasons returns each choice's finish reason so far ("" while it
// runs; "stop" where a chat choice's event says "tool_calls").
func (s *Stream) FinishReasons() []FinishReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FinishReason, len(s.choices))
	for i, c := range s.choices {
		out[i] = c.finish
	}
	return out
}

// Events returns the stream's events as an iterator; stopping the
// iteration early closes the stream.
func (s *Stream) Events() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		for {
			ev, ok := s.Next()
			if !ok {
				return
			}
			if !yield(ev) {
				s.Close()
				return
			}
		}
	}
}

// Next returns the next event, waiting for it; ok is false once every
// choice has finished or the stream was closed.
func (s *Stream) Next() (ev Event, ok bool) {
	s.runOnce.Do(s.run)
	for len(s.queue) == 0 {
		if s.pending == 0 {
			return Event{}, false
		}
		var p piece
		select {
		case p = <-s.outs:
		case <-s.stop:
			return Event{}, false
		}
		if p.count > 0 {
			s.mu.Lock()
			if s.firstTok.IsZero() {
				s.firstTok = time.Now()
			}
			s.mu.Unlock()
		}
		if p.done {
			s.pending--
		}
		if s.chat {
			s.chatEvents(p)
		} else {
			s.textEvents(p)
		}
	}
	ev = s.queue[0]
	s.queue = s.queue[1:]
	return ev, true
}

// run starts a reader of each choice's engine stream.
func (s *Stream) run() {
	s.pending = len(s.choices)
	for _, c := range s.choices {
		go func() {
			for {
				out, err := c.st.Next(s.ctx)
				if err != nil {
					out = engine.Output{Finish: engine.FinishCancelled, StopToken: -1, Err: err}
				}
				s.mu.Lock() // decode writes what Usage and FinishReasons read
				pieces := s.decode(c, out)
				s.mu.Unlock()
				for _, p := range pieces {
					select {
					case s.outs <- p:
					case <-s.stop:
						return
					}
				}
				if out.Finish != engine.FinishNone {
					return
				}
			}
		}()
	}
}

// decode turns an engine output into pieces of text. It runs on the
// choice's own goroutine, holding s.mu.
func (s *Stream) decode(c *choice, out engine.Output) []piece {
	if c.finish != "" {
		// Stopped by a stop string; the rest of the output is dropped.
		if out.Finish != engine.FinishNone {
			return []piece{{c: c, done: true}}
		}
		return nil
	}
	p := piece{c: c}
	for k, t := range out.Tokens {
		c.tokens++
		p.count++
		if out.Finish == engine.FinishStop && k == len(out.Tokens)-1 && t.ID == out.StopToken {
			// The stop token itself is counted but not shown.
			if !s.lm.isEOS(t.ID) {
				c.stopReason = t.ID
			}
			break
		}
		text, stopped := c.dec.Push(t.ID)
		p.text += text
		p.texts = append(p.texts, text)
		p.toks = append(p.toks, t)
		if stopped {
			c.finish, c.stopReason = FinishStop, c.dec.StopString()
			c.cancel()
			p.done = out.Finish != engine.FinishNone
			return []piece{p}
		}
	}
	if out.Finish == engine.FinishNone {
		return []piece{p}
	}
	if rest := c.dec.Flush(); rest != "" {
		p.text += rest
		p.texts = append(p.texts, rest)
	}
	p.done = true
	switch out.Finish {
	case engine.FinishStop:
		c.finish = FinishStop
	case engine.FinishLength:
		c.finish = FinishLength
	case engine.FinishCancelled:
		c.finish = FinishAbort
		c.err = out.Err
		if c.err == nil {
			c.err = errors.New("the request was cancelled")
		}
	default:
		c.finish = FinishError
		c.err = out.Err
		if c.err == nil {
			c.err = errors.New("the model failed")
		}
	}
	return []piece{p}
}

func (lm *Model) isEOS(id int) bool {
	for _, e := range lm.eos {
		if e == id {
			return true
		}
	}
	return false
}

// finishEvent is the Finish event of a piece's choice.
func finishEvent(c *choice) Event {
	ev := Event{Choice: c.index, Kind: KindFinish, Finish: c.finish, StopReason: c.stopReason, Err: c.err}
	if c.finish == FinishError {
		ev.Err = fmt.Errorf("generation failed: %w", c.err)
	}
	return ev
}

// textEvents queues a completion piece: its text (or its tokens alone), or
// the Finish event carrying them.
func (s *Stream) textEvents(p piece) {
	if p.done {
		ev := finishEvent(p.c)
		ev.Text, ev.Tokens = p.text, p.toks
		s.queue = append(s.queue, ev)
		return
	}
	switch {
	case p.text != "":
		s.queue = append(s.queue, Event{Choice: p.c.index, Kind: KindContent, Text: p.text, Tokens: p.toks})
	case len(p.toks) > 0:
		s.queue = append(s.queue, Event{Choice: p.c.index, Kind: KindTokens, Tokens: p.toks})
	}
}

// chatEvents queues a chat piece: the parser's events, the tokens on the
// first of them (or alone), then the Finish event.
func (s *Stream) chatEvents(p piece) {
	c := p.c
	var evs []outparse.Event
	for i, text := range p.texts {
		if i < len(p.toks) && c.parser.Reasoning() {
			s.mu.Lock()
			c.reasoning++
			s.mu.Unlock()
		}
		evs = append(evs, c.parser.Push(text)...)
	}
	if p.done {
		evs = append(evs, c.parser.Finish()...)
	}
	toks := p.toks
	for _, e := range evs {
		ev := Event{Choice: c.index, Text: e.Text}
		switch {
		case e.Kind == outparse.Reasoning:
			ev.Kind = KindReasoning
		case e.Kind == outparse.Content || (e.Kind == outparse.ToolCall && s.noTools):
			ev.Kind = KindContent
		case e.Kind == outparse.ToolCall:
			ev.Kind = KindToolCall
			ev.ToolCall = &ToolCall{ID: e.Call.ID, Name: e.Call.Function.Name, Arguments: e.Call.Function.Arguments}
			if s.custom[ev.ToolCall.Name] {
				ev.ToolCall.Custom, ev.ToolCall.Input = true, customInput(ev.ToolCall.Arguments)
			}
			c.calls++
		default:
			continue
		}
		ev.Tokens, toks = toks, nil
		s.queue = append(s.queue, ev)
	}
	if len(toks) > 0 && s.logprobs {
		s.queue = append(s.queue, Event{Choice: c.index, Kind: KindTokens, Tokens: toks})
	}
	if p.done {
		ev := finishEvent(c)
		if ev.Finish == FinishStop && c.calls > 0 {
			ev.Finish = FinishToolCalls
		}
		s.queue = append(s.queue, ev)
	}
}

// customInput returns the text a custom tool's call gives: its one string
// argument, else the arguments as they are.
func customInput(args string) string {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) == nil {
		if v, ok := m[CustomInputParam].(string); ok {
			return v
		}
	}
	return args
}
