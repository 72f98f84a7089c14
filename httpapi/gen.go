package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/tokenizer"
	"github.com/valyala/fasthttp"
)

// choice is one of a request's n generations in flight.
type choice struct {
	index  int
	st     *engine.Stream
	cancel context.CancelFunc
	dec    *tokenizer.Decoder

	tokens     int // completion tokens, stop token included
	finish     string
	stopReason any // the stop string or stop token id, or nil
	err        error
}

// piece is what a choice produced in one engine output: decoded text and
// the tokens behind it.
type piece struct {
	c      *choice
	text   string
	toks   []engine.Token // tokens that produced text (logprobs)
	count  int            // tokens this piece accounts for, stop token included
	done   bool
	failed error
}

// job is a generation request spread over its choices.
type job struct {
	s         *Server
	id        string
	start     time.Time
	firstTok  time.Time
	promptLen int
	choices   []*choice
}

// submit validates the context budget and queues n generations of each
// prompt. Choice p*n+i is the i-th generation of prompt p; the job's prompt
// length is the sum over the prompts.
func (s *Server) submit(reqCtx context.Context, id string, prompts [][]int, g genRequest, proc func() (engine.LogitProcessor, error)) (*job, *apiError) {
	if len(prompts) == 0 {
		return nil, badRequest("prompt", "the prompt is empty")
	}
	maxTokens := make([]int, len(prompts))
	for p, prompt := range prompts {
		if len(prompt) == 0 {
			return nil, badRequest("prompt", "the prompt is empty")
		}
		maxTokens[p] = g.maxTokens
		if maxTokens[p] == 0 {
			maxTokens[p] = s.maxModelLen - len(prompt)
		}
		if len(prompt)+maxTokens[p] > s.maxModelLen || maxTokens[p] < 1 {
			return nil, badRequest("messages", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				s.maxModelLen, len(prompt)+maxTokens[p], len(prompt), maxTokens[p])
		}
	}
	vocab := s.m.Config().VocabSize
	for i, t := range g.stopIDs {
		if t < 0 || t >= vocab {
			return nil, badRequest("stop_token_ids", "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, t, vocab)
		}
	}
	j := &job{s: s, id: id, start: time.Now()}
	for p, prompt := range prompts {
		j.promptLen += len(prompt)
		if aerr := j.add(reqCtx, p*g.n, prompt, maxTokens[p], g, proc); aerr != nil {
			j.cancel()
			return nil, aerr
		}
	}
	return j, nil
}

// add queues n generations of one prompt as choices first, first+1, ...
func (j *job) add(reqCtx context.Context, first int, prompt []int, maxTokens int, g genRequest, proc func() (engine.LogitProcessor, error)) *apiError {
	s := j.s
	for i := range g.n {
		req := engine.Request{
			Prompt: prompt, Params: g.params, MaxTokens: maxTokens, MinTokens: g.minTokens,
			StopTokens: g.stopIDs, IgnoreEOS: g.ignoreEOS,
			Logprobs: g.logprobs, TopLogprobs: g.topLogprobs,
		}
		req.Params.Seed += uint64(i)
		if proc != nil {
			p, err := proc()
			if err != nil {
				return &apiError{status: fasthttp.StatusInternalServerError, message: err.Error()}
			}
			req.Processor = p
		}
		ctx, cancel := context.WithCancel(reqCtx)
		st, err := s.eng.Submit(ctx, req)
		if err != nil {
			cancel()
			if errors.Is(err, engine.ErrQueueFull) {
				return &apiError{status: fasthttp.StatusServiceUnavailable, message: "the server is overloaded: the request queue is full, retry later"}
			}
			if errors.Is(err, engine.ErrClosed) {
				return &apiError{status: fasthttp.StatusServiceUnavailable, message: "the server is shutting down"}
			}
			return badRequest("", "%v", err)
		}
		j.choices = append(j.choices, &choice{index: first + i, st: st, cancel: cancel, dec: s.tok.NewDecoder(g.skipSpecial, g.stop)})
	}
	return nil
}

// cancel stops every choice of the job.
func (j *job) cancel() {
	for _, c := range j.choices {
		c.cancel()
	}
}

// run reads every choice's tokens until all have finished, calling emit for
// each piece in arrival order. If emit fails (the client went away) the
// job is cancelled and run returns emit's error.
func (j *job) run(ctx context.Context, emit func(piece) error) error {
	defer j.cancel()
	outs := make(chan piece)
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range j.choices {
		go func() {
			for {
				out, err := c.st.Next(ctx)
				if err != nil {
					out = engine.Output{Finish: engine.FinishCancelled, StopToken: -1, Err: err}
				}
				for _, p := range j.decode(c, out) {
					select {
					case outs <- p:
					case <-stop:
						return
					}
				}
				if out.Finish != engine.FinishNone {
					return
				}
			}
		}()
	}
	pending := len(j.choices)
	for pending > 0 {
		p := <-outs
		if j.firstTok.IsZero() && p.count > 0 {
			j.firstTok = time.Now()
		}
		if err := emit(p); err != nil {
			return err
		}
		if p.done {
			pending--
		}
	}
	return nil
}

// decode turns an engine output into pieces of text. It runs on the
// choice's own goroutine.
func (j *job) decode(c *choice, out engine.Output) []piece {
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
			if !j.isEOS(t.ID) {
				c.stopReason = t.ID
			}
			break
		}
		text, stopped := c.dec.Push(t.ID)
		p.text += text
		p.toks = append(p.toks, t)
		if stopped {
			c.finish, c.stopReason = "stop", c.dec.StopString()
			c.cancel()
			p.done = out.Finish != engine.FinishNone
			return []piece{p}
		}
	}
	if out.Finish == engine.FinishNone {
		return []piece{p}
	}
	p.text += c.dec.Flush()
	p.done = true
	switch out.Finish {
	case engine.FinishStop:
		c.finish = "stop"
	case engine.FinishLength:
		c.finish = "length"
	case engine.FinishCancelled:
		c.finish = "abort"
		c.err = out.Err
		if c.err == nil {
			c.err = errors.New("the request was cancelled")
		}
	default:
		c.finish = "error"
		c.err = out.Err
		p.failed = fmt.Errorf("generation failed: %w", out.Err)
	}
	return []piece{p}
}

func (j *job) isEOS(id int) bool {
	for _, e := range j.s.eos {
		if e == id {
			return true
		}
	}
	return false
}

// completionTokens sums the choices' generated tokens.
func (j *job) completionTokens() int {
	n := 0
	for _, c := range j.choices {
		n += c.tokens
	}
	return n
}

// ttft returns the time to the first token.
func (j *job) ttft() time.Duration {
	if j.firstTok.IsZero() {
		return 0
	}
	return j.firstTok.Sub(j.start)
}

// finishReasons joins the choices' reasons for the log.
func (j *job) finishReasons() string {
	r := ""
	for i, c := range j.choices {
		if i > 0 {
			r += ","
		}
		r += c.finish
	}
	return r
}

// usage is the token accounting of a response.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails any `json:"prompt_tokens_details"`
}

func (j *job) usage() usage {
	c := j.completionTokens()
	return usage{PromptTokens: j.promptLen, TotalTokens: j.promptLen + c, CompletionTokens: c}
}

// tokenText is the display text of one token for logprobs.
func (s *Server) tokenText(id int) (string, []int) {
	b := s.tok.TokenBytes(id)
	ints := make([]int, len(b))
	for i, x := range b {
		ints[i] = int(x)
	}
	return s.tok.Decode([]int{id}, false), ints
}
