package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

type (
	completionLogprobs struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	completionChoice struct {
		Index          int     `json:"index"`
		Text           string  `json:"text"`
		Logprobs       any     `json:"logprobs"`
		FinishReason   *string `json:"finish_reason"`
		StopReason     any     `json:"stop_reason"`
		PromptLogprobs any     `json:"prompt_logprobs"`
		TokenIDs       any     `json:"token_ids"`
	}
	completionResponse struct {
		ID                string             `json:"id"`
		Object            string             `json:"object"`
		Created           int64              `json:"created"`
		Model             string             `json:"model"`
		Choices           []completionChoice `json:"choices"`
		ServiceTier       any                `json:"service_tier"`
		SystemFingerprint any                `json:"system_fingerprint"`
		Usage             *usage             `json:"usage"`
		KVTransferParams  any                `json:"kv_transfer_params,omitempty"`
	}
)

// maxPrompts bounds the prompts of one completion request.
const maxPrompts = 64

// parsePrompts reads a completion prompt as vLLM accepts it: a string, an
// array of strings, an array of token ids, or an array of arrays of token
// ids. It returns the prompts and their texts.
func (s *Server) parsePrompts(o object) ([]llm.Prompt, []string, *apiError) {
	v, ok := o.get("prompt")
	if !ok {
		return nil, nil, badRequest("prompt", "prompt is required")
	}
	switch p := v.(type) {
	case string:
		if p == "" {
			return nil, nil, badRequest("prompt", "prompt must not be empty")
		}
		return []llm.Prompt{{Text: p}}, []string{p}, nil
	case []any:
		if len(p) == 0 {
			return nil, nil, badRequest("prompt", "prompt must not be an empty array")
		}
		switch p[0].(type) {
		case json.Number:
			ids, aerr := s.promptIDs(p, "prompt")
			if aerr != nil {
				return nil, nil, aerr
			}
			return []llm.Prompt{{IDs: ids}}, []string{s.lm.Tokenizer().Decode(ids, false)}, nil
		case string, []any:
		default:
			return nil, nil, badRequest("prompt", "prompt must be a string, an array of strings, an array of token ids or an array of arrays of token ids; prompt[0] is %s", jsonvalue.Kind(p[0]))
		}
		if len(p) > maxPrompts {
			return nil, nil, badRequest("prompt", "prompt holds %d prompts; at most %d are allowed", len(p), maxPrompts)
		}
		var prompts []llm.Prompt
		var texts []string
		for i, e := range p {
			field := fmt.Sprintf("prompt[%d]", i)
			switch q := e.(type) {
			case string:
				if q == "" {
					return nil, nil, badRequest("prompt", "%s must not be empty", field)
				}
				prompts, texts = append(prompts, llm.Prompt{Text: q}), append(texts, q)
			case []any:
				ids, aerr := s.promptIDs(q, field)
				if aerr != nil {
					return nil, nil, aerr
				}
				prompts, texts = append(prompts, llm.Prompt{IDs: ids}), append(texts, s.lm.Tokenizer().Decode(ids, false))
			default:
				return nil, nil, badRequest("prompt", "%s must be a string or an array of token ids, got %s", field, jsonvalue.Kind(e))
			}
		}
		return prompts, texts, nil
	}
	return nil, nil, badRequest("prompt", "prompt must be a string or an array, got %s", jsonvalue.Kind(v))
}

// promptIDs reads one prompt given as token ids; field names it in errors.
func (s *Server) promptIDs(a []any, field string) ([]int, *apiError) {
	if len(a) == 0 {
		return nil, badRequest("prompt", "%s must not be empty", field)
	}
	vocab := s.lm.VocabSize()
	ids := make([]int, len(a))
	for i, e := range a {
		n, isNum := e.(json.Number)
		if !isNum {
			return nil, badRequest("prompt", "%s[%d] must be an integer token id, got %s", field, i, jsonvalue.Kind(e))
		}
		id, err := strconv.Atoi(string(n))
		if err != nil {
			return nil, badRequest("prompt", "%s[%d] must be an integer token id, got %s", field, i, n)
		}
		if id < 0 || id >= vocab {
			return nil, badRequest("prompt", "%s[%d] = %d is outside the vocabulary [0, %d)", field, i, id, vocab)
		}
		ids[i] = id
	}
	return ids, nil
}

func (s *Server) handleCompletions(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	var req llm.CompletionRequest
	var w wireOptions
	if aerr == nil {
		req.Params, w, aerr = parseParams(o)
	}
	if aerr == nil {
		req.LoRA, aerr = s.requestLoRA(o)
		w.model = s.responseModel(o)
	}
	if aerr == nil {
		if n, ok, err := o.integer("logprobs"); err != nil {
			aerr = err
		} else if ok {
			if n < 0 || n > llm.MaxTopLogprobs {
				aerr = badRequest("logprobs", "logprobs must be between 0 and %d, got %d", llm.MaxTopLogprobs, n)
			}
			req.Logprobs, req.TopLogprobs = true, n
		}
	}
	var echo bool
	if aerr == nil {
		echo, _, aerr = o.boolean("echo")
	}
	var promptTexts []string
	if aerr == nil {
		req.Prompts, promptTexts, aerr = s.parsePrompts(o)
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("cmpl-")
	rctx, release := s.watch(ctx)
	st, err := s.lm.Complete(rctx, req)
	if err != nil {
		release()
		writeAPIError(ctx, llmError(err))
		return
	}
	// Choice p*n+i is the i-th generation of prompt p.
	n := max(req.N, 1)
	prefixes := make([]string, st.Choices())
	if echo {
		for i := range prefixes {
			prefixes[i] = promptTexts[i/n]
		}
	}
	if w.stream {
		s.streamCompletion(ctx, id, st, req.Logprobs, w, prefixes, start, rctx, release)
		return
	}
	defer release()
	defer st.Close()
	texts := make([]string, st.Choices())
	lps := make([]*completionLogprobs, st.Choices())
	finishes := make([]llm.Event, st.Choices())
	tokenIDs := make([][]int, st.Choices())
	for i := range texts {
		texts[i] = prefixes[i]
		if req.Logprobs {
			lps[i] = newCompletionLogprobs()
		}
	}
	var failed error
	for ev := range st.Events() {
		i := ev.Choice
		if lps[i] != nil {
			s.addCompletionLogprobs(lps[i], ev.Tokens, len(texts[i]))
		}
		texts[i] += ev.Text
		if w.returnTokenIDs {
			for _, tk := range ev.Tokens {
				tokenIDs[i] = append(tokenIDs[i], tk.ID)
			}
		}
		if ev.Kind == llm.KindFinish {
			finishes[i] = ev
			if ev.Finish == llm.FinishError || ev.Finish == llm.FinishAbort {
				failed = ev.Err
			}
		}
	}
	if failed != nil && clientGone(rctx) {
		ctx.SetStatusCode(statusClientClosed)
		s.logStream(id, statusClientClosed, st, start)
		return
	}
	if failed != nil {
		status := fasthttp.StatusInternalServerError
		if s.ctx.Err() != nil {
			status = fasthttp.StatusServiceUnavailable
		}
		writeError(ctx, status, fmt.Sprintf("generation failed: %v", failed), "")
		s.logStream(id, status, st, start)
		return
	}
	u := usageOf(st)
	resp := completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: w.model, Usage: &u}
	for i, f := range finishes {
		finish := string(f.Finish)
		ch := completionChoice{Index: i, Text: texts[i], FinishReason: &finish, StopReason: f.StopReason}
		if lps[i] != nil {
			ch.Logprobs = lps[i]
		}
		if w.returnTokenIDs {
			ch.TokenIDs = nonNil(tokenIDs[i])
		}
		resp.Choices = append(resp.Choices, ch)
	}
	writeJSON(ctx, resp)
	s.logStream(id, fasthttp.StatusOK, st, start)
}

func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

func (s *Server) addCompletionLogprobs(lp *completionLogprobs, toks []llm.Token, offset int) {
	for _, t := range toks {
		text, _ := s.tokenText(t.ID)
		lp.Tokens = append(lp.Tokens, text)
		lp.TokenLogprobs = append(lp.TokenLogprobs, clampLogprob(t.Logprob))
		top := map[string]float64{}
		for _, alt := range t.Top {
			at, _ := s.tokenText(alt.ID)
			if _, dup := top[at]; !dup {
				top[at] = clampLogprob(alt.Logprob)
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(text)
	}
}

func (s *Server) streamCompletion(ctx *fasthttp.RequestCtx, id string, st *llm.Stream, logprobs bool, wo wireOptions, prefixes []string, start time.Time,
	rctx context.Context, release func()) {
	setSSEHeaders(ctx)
	created := time.Now().Unix()
	s.streamBody(ctx, func(bw *bufio.Writer) {
		defer release()
		defer st.Close()
		w := &sseWriter{w: bw}
		send := func(ch completionChoice) error {
			return w.event(completionResponse{ID: id, Object: "text_completion", Created: created, Model: wo.model, Choices: []completionChoice{ch}})
		}
		offsets := make([]int, st.Choices())
		for i, prefix := range prefixes {
			if prefix != "" {
				send(completionChoice{Index: i, Text: prefix})
				offsets[i] = len(prefix)
			}
		}
		status := fasthttp.StatusOK
		err := streamEvents(st, func(ev llm.Event) error {
			i := ev.Choice
			if failed(ev) {
				status = fasthttp.StatusInternalServerError
				return w.raw(generationFailed(ev))
			}
			ch := completionChoice{Index: i, Text: ev.Text}
			if logprobs {
				lp := newCompletionLogprobs()
				s.addCompletionLogprobs(lp, ev.Tokens, offsets[i])
				ch.Logprobs = lp
			}
			offsets[i] += len(ev.Text)
			if ev.Kind == llm.KindFinish {
				finish := string(ev.Finish)
				ch.FinishReason, ch.StopReason = &finish, ev.StopReason
			}
			return send(ch)
		})
		if err == nil && wo.includeUsage {
			u := usageOf(st)
			w.event(completionResponse{ID: id, Object: "text_completion", Created: created, Model: wo.model, Choices: []completionChoice{}, Usage: &u})
		}
		if err == nil {
			w.raw([]byte("[DONE]"))
		}
		if err != nil || clientGone(rctx) {
			status = statusClientClosed
		}
		s.logStream(id, status, st, start)
	})
}
