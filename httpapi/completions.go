package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/engine"
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
// ids. It returns each prompt's token ids and text.
func (s *Server) parsePrompts(o object) ([][]int, []string, *apiError) {
	v, ok := o.get("prompt")
	if !ok {
		return nil, nil, badRequest("prompt", "prompt is required")
	}
	switch p := v.(type) {
	case string:
		if p == "" {
			return nil, nil, badRequest("prompt", "prompt must not be empty")
		}
		return [][]int{s.tok.Encode(p)}, []string{p}, nil
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
			return [][]int{ids}, []string{s.tok.Decode(ids, false)}, nil
		case string, []any:
		default:
			return nil, nil, badRequest("prompt", "prompt must be a string, an array of strings, an array of token ids or an array of arrays of token ids; prompt[0] is %s", jsonKind(p[0]))
		}
		if len(p) > maxPrompts {
			return nil, nil, badRequest("prompt", "prompt holds %d prompts; at most %d are allowed", len(p), maxPrompts)
		}
		var prompts [][]int
		var texts []string
		for i, e := range p {
			field := fmt.Sprintf("prompt[%d]", i)
			switch q := e.(type) {
			case string:
				if q == "" {
					return nil, nil, badRequest("prompt", "%s must not be empty", field)
				}
				prompts, texts = append(prompts, s.tok.Encode(q)), append(texts, q)
			case []any:
				ids, aerr := s.promptIDs(q, field)
				if aerr != nil {
					return nil, nil, aerr
				}
				prompts, texts = append(prompts, ids), append(texts, s.tok.Decode(ids, false))
			default:
				return nil, nil, badRequest("prompt", "%s must be a string or an array of token ids, got %s", field, jsonKind(e))
			}
		}
		return prompts, texts, nil
	}
	return nil, nil, badRequest("prompt", "prompt must be a string or an array, got %s", jsonKind(v))
}

// promptIDs reads one prompt given as token ids; field names it in errors.
func (s *Server) promptIDs(a []any, field string) ([]int, *apiError) {
	if len(a) == 0 {
		return nil, badRequest("prompt", "%s must not be empty", field)
	}
	vocab := s.m.Config().VocabSize
	ids := make([]int, len(a))
	for i, e := range a {
		n, isNum := e.(json.Number)
		if !isNum {
			return nil, badRequest("prompt", "%s[%d] must be an integer token id, got %s", field, i, jsonKind(e))
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
	var g genRequest
	if aerr == nil {
		g, aerr = parseGen(o, s.gen)
	}
	if aerr == nil {
		if n, ok, err := o.integer("logprobs"); err != nil {
			aerr = err
		} else if ok {
			if n < 0 || n > 20 {
				aerr = badRequest("logprobs", "logprobs must be between 0 and 20, got %d", n)
			}
			g.logprobs, g.topLogprobs = true, n
		}
	}
	var echo bool
	if aerr == nil {
		echo, _, aerr = o.boolean("echo")
	}
	var prompts [][]int
	var promptTexts []string
	if aerr == nil {
		prompts, promptTexts, aerr = s.parsePrompts(o)
	}
	var proc func() (engine.LogitProcessor, error)
	if aerr == nil {
		if gr, err := parseResponseFormat(o); err != nil {
			aerr = err
		} else if gr != nil {
			proc = s.processorFor(gr)
		}
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("cmpl-")
	reqCtx, cancelReq := context.WithCancel(s.ctx)
	j, aerr := s.submit(reqCtx, id, prompts, g, proc)
	if aerr != nil {
		cancelReq()
		writeAPIError(ctx, aerr)
		return
	}
	// Choice p*n+i is the i-th generation of prompt p.
	prefixes := make([]string, len(j.choices))
	if echo {
		for i := range prefixes {
			prefixes[i] = promptTexts[i/g.n]
		}
	}
	promptText := strings.Join(promptTexts, "\n")
	if g.stream {
		s.streamCompletion(ctx, j, g, prefixes, promptText, reqCtx, cancelReq, start)
		return
	}
	defer cancelReq()
	texts := make([]string, len(j.choices))
	lps := make([]*completionLogprobs, len(j.choices))
	for i := range texts {
		texts[i] = prefixes[i]
		if g.logprobs {
			lps[i] = &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
		}
	}
	var failed error
	err := j.run(reqCtx, func(p piece) error {
		i := p.c.index
		if lps[i] != nil {
			s.addCompletionLogprobs(lps[i], p.toks, len(texts[i]))
		}
		texts[i] += p.text
		if p.failed != nil {
			failed = p.failed
		}
		if p.done && p.c.finish == "abort" {
			failed = p.c.err
		}
		return nil
	})
	if err != nil || failed != nil {
		status := fasthttp.StatusInternalServerError
		if s.ctx.Err() != nil {
			status = fasthttp.StatusServiceUnavailable
		}
		writeError(ctx, status, fmt.Sprintf("generation failed: %v", errors.Join(err, failed)), "")
		s.logRequest(id, status, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), promptText)
		return
	}
	u := j.usage()
	resp := completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.name, Usage: &u}
	for i, c := range j.choices {
		finish := c.finish
		ch := completionChoice{Index: i, Text: texts[i], FinishReason: &finish, StopReason: c.stopReason}
		if lps[i] != nil {
			ch.Logprobs = lps[i]
		}
		resp.Choices = append(resp.Choices, ch)
	}
	writeJSON(ctx, resp)
	s.logRequest(id, fasthttp.StatusOK, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), promptText)
}

func (s *Server) addCompletionLogprobs(lp *completionLogprobs, toks []engine.Token, offset int) {
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

func (s *Server) streamCompletion(ctx *fasthttp.RequestCtx, j *job, g genRequest, prefixes []string, promptText string, reqCtx context.Context, cancelReq context.CancelFunc, start time.Time) {
	setSSEHeaders(ctx)
	created := time.Now().Unix()
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer cancelReq()
		w := &sseWriter{w: bw}
		send := func(ch completionChoice) error {
			return w.event(completionResponse{ID: j.id, Object: "text_completion", Created: created, Model: s.name, Choices: []completionChoice{ch}})
		}
		offsets := make([]int, len(j.choices))
		for i, prefix := range prefixes {
			if prefix != "" {
				send(completionChoice{Index: i, Text: prefix})
				offsets[i] = len(prefix)
			}
		}
		status := fasthttp.StatusOK
		err := j.run(reqCtx, func(p piece) error {
			i := p.c.index
			if p.failed != nil || (p.done && p.c.finish == "abort") {
				status = fasthttp.StatusInternalServerError
				msg := "generation failed"
				if p.c.err != nil {
					msg += ": " + p.c.err.Error()
				}
				return w.raw(errorBody(status, msg, ""))
			}
			ch := completionChoice{Index: i, Text: p.text}
			if g.logprobs {
				lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
				s.addCompletionLogprobs(lp, p.toks, offsets[i])
				ch.Logprobs = lp
			}
			offsets[i] += len(p.text)
			if p.done {
				finish := p.c.finish
				ch.FinishReason, ch.StopReason = &finish, p.c.stopReason
			} else if p.text == "" && len(p.toks) == 0 {
				return nil
			}
			return send(ch)
		})
		if err == nil && g.includeUsage {
			u := j.usage()
			w.event(completionResponse{ID: j.id, Object: "text_completion", Created: created, Model: s.name, Choices: []completionChoice{}, Usage: &u})
		}
		if err == nil {
			w.raw([]byte("[DONE]"))
		} else {
			status = 499
		}
		s.logRequest(j.id, status, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), promptText)
	})
}

// handleTokenize answers vLLM's /tokenize: a prompt, or messages rendered
// with the chat template.
func (s *Server) handleTokenize(ctx *fasthttp.RequestCtx) {
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	var ids []int
	if o.has("messages") {
		r, aerr := s.parseChat(ctx.PostBody())
		if aerr != nil {
			writeAPIError(ctx, aerr)
			return
		}
		ids = r.ids
	} else {
		p, ok, err := o.str("prompt")
		if err != nil {
			writeAPIError(ctx, err)
			return
		}
		if !ok {
			writeAPIError(ctx, badRequest("prompt", "prompt or messages is required"))
			return
		}
		ids = s.tok.Encode(p)
	}
	if ids == nil {
		ids = []int{}
	}
	writeJSON(ctx, struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
		TokenStrs   any   `json:"token_strs"`
	}{len(ids), s.maxModelLen, ids, nil})
}

func (s *Server) handleDetokenize(ctx *fasthttp.RequestCtx) {
	o, aerr := parseBody(ctx.PostBody())
	if aerr == nil {
		aerr = s.checkModel(o)
	}
	var ids []int
	if aerr == nil {
		if !o.has("tokens") {
			aerr = badRequest("tokens", "tokens is required")
		} else {
			ids, aerr = o.intList("tokens")
		}
	}
	if aerr == nil {
		for i, id := range ids {
			if id < 0 || id >= s.tok.VocabSize() {
				aerr = badRequest("tokens", "tokens[%d] = %d is not a token id", i, id)
				break
			}
		}
	}
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	writeJSON(ctx, struct {
		Prompt string `json:"prompt"`
	}{s.tok.Decode(ids, false)})
}

// handleMetrics writes the Prometheus text exposition.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	b := ctx.Response.BodyWriter()
	label := "{model_name=" + strconv.Quote(s.name) + "}"
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s%s %v\n", name, help, name, name, label, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s%s %v\n", name, help, name, name, label, v)
	}
	ready := 0.0
	if s.loaded.Load() {
		ready = 1
	}
	gauge("govinfer:ready", "1 once the model is loaded.", ready)
	eng := s.Engine()
	if eng == nil {
		return
	}
	st := eng.Stats()
	gauge("vllm:num_requests_running", "Requests in the running batch.", float64(st.Running))
	gauge("vllm:num_requests_waiting", "Requests waiting to start.", float64(st.Waiting))
	gauge("govinfer:open_sequences", "Model sequences held by requests.", float64(st.OpenSequences))
	gauge("govinfer:state_bytes", "Memory of the running sequences' KV caches and recurrent states.", float64(st.StateBytes))
	counter("vllm:prompt_tokens_total", "Prompt tokens prefilled.", float64(st.PromptTokens))
	counter("vllm:generation_tokens_total", "Tokens generated.", float64(st.GenerationTokens))
	counter("govinfer:steps_total", "Model steps run.", float64(st.Steps))
	counter("govinfer:step_seconds_total", "Time spent in model steps.", st.StepSeconds)
	counter("govinfer:requests_rejected_total", "Requests refused because the queue was full.", float64(st.Rejected))
	fmt.Fprintf(b, "# HELP vllm:request_success_total Finished requests by reason.\n# TYPE vllm:request_success_total counter\n")
	for _, f := range []engine.FinishReason{engine.FinishStop, engine.FinishLength, engine.FinishCancelled, engine.FinishError} {
		fmt.Fprintf(b, "vllm:request_success_total{model_name=%s,finished_reason=%q} %d\n", strconv.Quote(s.name), f.String(), st.Finished[f])
	}
	histogram := func(name, help string, h engine.HistogramSnapshot) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		for i, ub := range h.Bounds {
			fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"%v\"} %d\n", name, strconv.Quote(s.name), ub, h.Cumulative[i])
		}
		fmt.Fprintf(b, "%s_bucket{model_name=%s,le=\"+Inf\"} %d\n", name, strconv.Quote(s.name), h.Count)
		fmt.Fprintf(b, "%s_sum%s %v\n%s_count%s %d\n", name, label, h.Sum, name, label, h.Count)
	}
	histogram("vllm:time_to_first_token_seconds", "Time to first token.", st.TimeToFirstToken)
	histogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens of a request.", st.InterToken)
	fmt.Fprintf(b, "# HELP govinfer:http_responses_total HTTP responses by status.\n# TYPE govinfer:http_responses_total counter\n")
	s.httpCount.Range(func(k, v any) bool {
		fmt.Fprintf(b, "govinfer:http_responses_total{code=\"%d\"} %d\n", k, v.(interface{ Load() uint64 }).Load())
		return true
	})
}
