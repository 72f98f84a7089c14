package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

func marshalValue(v any) ([]byte, error) { return json.Marshal(v) }

// chatRequest is a chat completion request read from the wire.
type chatRequest struct {
	req   llm.ChatRequest
	wire  wireOptions
	model string // the model the response names (Server.responseModel)
}

// parseChat reads a chat request's fields; llm checks their values.
func (s *Server) parseChat(body []byte) (*chatRequest, *apiError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	if err := s.checkModel(o); err != nil {
		return nil, err
	}
	r := &chatRequest{model: s.responseModel(o)}
	q := &r.req
	if q.Params, r.wire, err = parseParams(o); err != nil {
		return nil, err
	}
	if q.LoRA, err = s.requestLoRA(o); err != nil {
		return nil, err
	}
	if q.Logprobs, _, err = o.boolean("logprobs"); err != nil {
		return nil, err
	}
	if q.TopLogprobs, _, err = o.integer("top_logprobs"); err != nil {
		return nil, err
	}
	msgs, ok, err := o.array("messages")
	if err != nil {
		return nil, err
	}
	if !ok || len(msgs) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	for _, m := range msgs {
		q.Messages = append(q.Messages, llm.MessageJSON(m))
	}
	if q.Images, err = s.chatImages(msgs); err != nil {
		return nil, err
	}
	tools, _, err := o.array("tools")
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		q.Tools = append(q.Tools, llm.ToolJSON(t))
	}
	if tc, ok := o.get("tool_choice"); ok {
		switch c := tc.(type) {
		case string:
			if c == "function" { // llm's mode for a named function, not a wire value
				return nil, badRequest("tool_choice", "tool_choice must be none, auto, required or a named function, got %q", c)
			}
			q.ToolChoice.Mode = c
		case *jsonvalue.Object:
			fn, _, err := object{jsonvalue.ObjectFields(c, "tool_choice")}.obj("function")
			if err != nil {
				return nil, err
			}
			name, _, err := fn.str("name")
			if err != nil {
				return nil, err
			}
			q.ToolChoice = llm.ToolChoice{Mode: "function", Function: name}
		default:
			return nil, badRequest("tool_choice", "tool_choice must be a string or an object, got %s", jsonvalue.Kind(tc))
		}
	}
	if _, _, err := o.boolean("parallel_tool_calls"); err != nil {
		return nil, err
	}
	addGen, addGenSet, err := o.boolean("add_generation_prompt")
	if err != nil {
		return nil, err
	}
	cont, _, err := o.boolean("continue_final_message")
	if err != nil {
		return nil, err
	}
	if cont && addGen && addGenSet {
		return nil, badRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
	}
	q.NoGenerationPrompt = addGenSet && !addGen
	q.ContinueFinalMessage = cont
	if q.ReasoningEffort, _, err = o.str("reasoning_effort"); err != nil {
		return nil, err
	}
	if q.ThinkingBudget, _, err = o.integer("thinking_token_budget"); err != nil {
		return nil, err
	}
	if q.TemplateArgs, err = parseTemplateKwargs(o); err != nil {
		return nil, err
	}
	return r, nil
}

// Response shapes, with vLLM's keys in vLLM's order.
type (
	chatFunction struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	chatToolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatMessage struct {
		Role         string         `json:"role"`
		Content      *string        `json:"content"`
		Refusal      any            `json:"refusal"`
		Annotations  any            `json:"annotations"`
		Audio        any            `json:"audio"`
		FunctionCall any            `json:"function_call"`
		ToolCalls    []chatToolCall `json:"tool_calls"`
		// Reasoning is vLLM's field; ReasoningContent the same text under
		// the name llama-server, DeepSeek and LangChain read.
		Reasoning        *string `json:"reasoning"`
		ReasoningContent *string `json:"reasoning_content"`
	}
	chatChoice struct {
		Index        int         `json:"index"`
		Message      chatMessage `json:"message"`
		Logprobs     any         `json:"logprobs"`
		FinishReason string      `json:"finish_reason"`
		StopReason   any         `json:"stop_reason"`
		TokenIDs     any         `json:"token_ids"`
	}
	chatResponse struct {
		ID                string       `json:"id"`
		Object            string       `json:"object"`
		Created           int64        `json:"created"`
		Model             string       `json:"model"`
		Choices           []chatChoice `json:"choices"`
		ServiceTier       any          `json:"service_tier"`
		SystemFingerprint any          `json:"system_fingerprint"`
		Usage             usage        `json:"usage"`
		PromptLogprobs    any          `json:"prompt_logprobs"`
		PromptTokenIDs    any          `json:"prompt_token_ids"`
		KVTransferParams  any          `json:"kv_transfer_params"`
	}
	deltaCall struct {
		Index    int          `json:"index"`
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatDelta struct {
		Role             *string     `json:"role,omitempty"`
		Content          *string     `json:"content,omitempty"`
		Reasoning        *string     `json:"reasoning,omitempty"`
		ReasoningContent *string     `json:"reasoning_content,omitempty"`
		ToolCalls        []deltaCall `json:"tool_calls,omitempty"`
	}
	chunkChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     any       `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
		StopReason   any       `json:"stop_reason,omitempty"`
	}
	chatChunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
		Usage   *usage        `json:"usage,omitempty"`
	}
	// logprob entries of chat responses.
	topLogprob struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	tokenLogprob struct {
		Token       string       `json:"token"`
		Logprob     float64      `json:"logprob"`
		Bytes       []int        `json:"bytes"`
		TopLogprobs []topLogprob `json:"top_logprobs"`
	}
	// usage is the token accounting of a response; chat responses detail
	// the reasoning tokens, as OpenAI's do.
	usage struct {
		PromptTokens            int                 `json:"prompt_tokens"`
		TotalTokens             int                 `json:"total_tokens"`
		CompletionTokens        int                 `json:"completion_tokens"`
		PromptTokensDetails     promptTokensDetails `json:"prompt_tokens_details"`
		CompletionTokensDetails *completionDetails  `json:"completion_tokens_details,omitempty"`
	}
	completionDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
		// AcceptedPredictionTokens and RejectedPredictionTokens are the
		// speculative draft tokens the model accepted and rejected (OpenAI's
		// predicted-output counts), present where speculation ran.
		AcceptedPredictionTokens *int `json:"accepted_prediction_tokens,omitempty"`
		RejectedPredictionTokens *int `json:"rejected_prediction_tokens,omitempty"`
	}
	// promptTokensDetails says how many prompt tokens came from the prefix
	// cache (vLLM's --enable-prompt-tokens-details, always on here).
	promptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	}
)

// usageOf is the usage of a completion: with completion_tokens_details
// only where speculative decoding ran for the request (its accepted and
// rejected draft tokens).
func usageOf(st *llm.Stream) usage {
	u := st.Usage()
	res := usage{PromptTokens: u.PromptTokens, TotalTokens: u.TotalTokens, CompletionTokens: u.CompletionTokens,
		PromptTokensDetails: promptTokensDetails{CachedTokens: u.CachedTokens}}
	if u.SpecDraftTokens > 0 {
		res.CompletionTokensDetails = detailsOf(u)
	}
	return res
}

// chatUsageOf is usageOf with completion_tokens_details always: the
// reasoning tokens and, where speculative decoding ran for the request,
// the accepted and rejected draft tokens.
func chatUsageOf(st *llm.Stream) usage {
	u := usageOf(st)
	u.CompletionTokensDetails = detailsOf(st.Usage())
	return u
}

// detailsOf returns the completion details of u: the reasoning tokens and,
// where speculative decoding ran, the accepted and rejected draft tokens
// (the drafts proposed less those accepted).
func detailsOf(u llm.Usage) *completionDetails {
	d := &completionDetails{ReasoningTokens: u.ReasoningTokens}
	if u.SpecDraftTokens > 0 {
		accepted, rejected := u.SpecAcceptedTokens, u.SpecDraftTokens-u.SpecAcceptedTokens
		d.AcceptedPredictionTokens, d.RejectedPredictionTokens = &accepted, &rejected
	}
	return d
}

func toolCallOf(c *llm.ToolCall) chatToolCall {
	return chatToolCall{ID: c.ID, Type: "function", Function: chatFunction{Name: c.Name, Arguments: c.Arguments}}
}

// tokenText is the display text of one token for logprobs.
func (s *Server) tokenText(id int) (string, []int) {
	text, b := s.lm.TokenText(id)
	ints := make([]int, len(b))
	for i, x := range b {
		ints[i] = int(x)
	}
	return text, ints
}

func (s *Server) chatLogprobs(toks []llm.Token) []tokenLogprob {
	out := make([]tokenLogprob, len(toks))
	for i, t := range toks {
		text, b := s.tokenText(t.ID)
		out[i] = tokenLogprob{Token: text, Logprob: clampLogprob(t.Logprob), Bytes: b, TopLogprobs: []topLogprob{}}
		for _, alt := range t.Top {
			at, ab := s.tokenText(alt.ID)
			out[i].TopLogprobs = append(out[i].TopLogprobs, topLogprob{at, clampLogprob(alt.Logprob), ab})
		}
	}
	return out
}

// clampLogprob keeps -Inf out of JSON (vLLM reports -9999.0).
func clampLogprob(v float64) float64 { return max(v, -9999) }

func strPtr(s string) *string { return &s }

// newID returns a response id with the given prefix and 16 hex digits.
func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s%016x", prefix, uint64(time.Now().UnixNano())^s.requests.Add(1)*0x9e3779b97f4a7c15)
}

// finishReasons joins a stream's finish reasons for the log.
func finishReasons(st *llm.Stream) string {
	r := ""
	for i, f := range st.FinishReasons() {
		if i > 0 {
			r += ","
		}
		r += string(f)
	}
	return r
}

// logStream writes the log line of a finished request.
func (s *Server) logStream(id string, status int, st *llm.Stream, start time.Time) {
	u := st.Usage()
	s.logRequest(id, status, u.PromptTokens, u.CachedTokens, u.CompletionTokens, st.TimeToFirstToken(), time.Since(start), finishReasons(st), st.Prompt())
}

// failed reports whether a Finish event ends its choice in failure.
func failed(ev llm.Event) bool {
	return ev.Kind == llm.KindFinish && (ev.Finish == llm.FinishError || ev.Finish == llm.FinishAbort)
}

// failureStatus is the status of a request whose generation failed: 503
// while the server or model shuts down, else 500.
func (s *Server) failureStatus(err error) int {
	if errors.Is(err, llm.ErrClosed) || s.ctx.Err() != nil {
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusInternalServerError
}

func (s *Server) handleChat(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r, aerr := s.parseChat(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("chatcmpl-")
	rctx, release := s.watch(ctx)
	st, err := s.lm.Chat(rctx, r.req)
	if err != nil {
		release()
		writeAPIError(ctx, llmError(err))
		return
	}
	if r.wire.stream {
		s.streamChat(ctx, id, st, r, start, rctx, release)
		return
	}
	defer release()
	defer st.Close()
	type result struct {
		reasoning, content string
		calls              []chatToolCall
		lps                []tokenLogprob
		finish             llm.Event
	}
	results := make([]result, st.Choices())
	var fail, abort error
	for ev := range st.Events() {
		res := &results[ev.Choice]
		switch ev.Kind {
		case llm.KindReasoning:
			res.reasoning += ev.Text
		case llm.KindContent:
			res.content += ev.Text
		case llm.KindToolCall:
			res.calls = append(res.calls, toolCallOf(ev.ToolCall))
		case llm.KindFinish:
			res.finish = ev
			switch ev.Finish {
			case llm.FinishError:
				fail = ev.Err
			case llm.FinishAbort:
				abort = ev.Err
			}
		}
		if r.req.Logprobs {
			res.lps = append(res.lps, s.chatLogprobs(ev.Tokens)...)
		}
	}
	if fail == nil {
		fail = abort
	}
	if fail != nil && clientGone(rctx) {
		ctx.SetStatusCode(statusClientClosed)
		s.logStream(id, statusClientClosed, st, start)
		return
	}
	if fail != nil {
		status := s.failureStatus(fail)
		writeError(ctx, status, fmt.Sprintf("generation failed: %v", fail), "")
		s.logStream(id, status, st, start)
		return
	}
	resp := chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: r.model, Usage: chatUsageOf(st)}
	for i, res := range results {
		msg := chatMessage{Role: "assistant", ToolCalls: res.calls}
		if msg.ToolCalls == nil {
			msg.ToolCalls = []chatToolCall{}
		}
		if res.content != "" || (len(res.calls) == 0 && res.reasoning == "") {
			msg.Content = strPtr(res.content)
		}
		if res.reasoning != "" {
			msg.Reasoning, msg.ReasoningContent = strPtr(res.reasoning), strPtr(res.reasoning)
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: string(res.finish.Finish), StopReason: res.finish.StopReason}
		if r.req.Logprobs {
			ch.Logprobs = map[string]any{"content": res.lps}
		}
		resp.Choices = append(resp.Choices, ch)
	}
	writeJSON(ctx, resp)
	s.logStream(id, fasthttp.StatusOK, st, start)
}

// sseWriter writes server-sent events and remembers the first failure.
type sseWriter struct {
	w   *bufio.Writer
	err error
}

func (w *sseWriter) event(v any) error {
	if w.err != nil {
		return w.err
	}
	b, err := marshal(v)
	if err != nil {
		w.err = err
		return err
	}
	return w.raw(b)
}

func (w *sseWriter) raw(b []byte) error {
	if w.err != nil {
		return w.err
	}
	w.w.WriteString("data: ")
	w.w.Write(b)
	w.w.WriteString("\n\n")
	w.err = w.w.Flush()
	return w.err
}

func setSSEHeaders(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
}

// streamEvents sends each event of st to send until the stream ends or
// send fails (the client went away), which closes the stream. It returns
// send's error.
func streamEvents(st *llm.Stream, send func(llm.Event) error) error {
	for ev := range st.Events() {
		if err := send(ev); err != nil {
			return err
		}
	}
	return nil
}

// generationFailed is the SSE error event of a failed choice.
func generationFailed(ev llm.Event) []byte {
	msg := "generation failed"
	err := ev.Err
	if inner := errors.Unwrap(err); ev.Finish == llm.FinishError && inner != nil {
		err = inner // the cause, without llm's "generation failed: "
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	return errorBody(fasthttp.StatusInternalServerError, msg, "")
}

func (s *Server) streamChat(ctx *fasthttp.RequestCtx, id string, st *llm.Stream, r *chatRequest, start time.Time, rctx context.Context, release func()) {
	setSSEHeaders(ctx)
	created := time.Now().Unix()
	s.streamBody(ctx, func(bw *bufio.Writer) {
		defer release()
		defer st.Close()
		w := &sseWriter{w: bw}
		chunk := func(ch chunkChoice) error {
			return w.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: r.model, Choices: []chunkChoice{ch}})
		}
		for i := range st.Choices() {
			chunk(chunkChoice{Index: i, Delta: chatDelta{Role: strPtr("assistant"), Content: strPtr("")}})
		}
		ncalls := make([]int, st.Choices())
		status := fasthttp.StatusOK
		err := streamEvents(st, func(ev llm.Event) error {
			i := ev.Choice
			var lp any
			if r.req.Logprobs && len(ev.Tokens) > 0 {
				lp = map[string]any{"content": s.chatLogprobs(ev.Tokens)}
			}
			var d chatDelta
			switch ev.Kind {
			case llm.KindReasoning:
				d.Reasoning, d.ReasoningContent = strPtr(ev.Text), strPtr(ev.Text)
			case llm.KindContent:
				d.Content = strPtr(ev.Text)
			case llm.KindToolCall:
				c := toolCallOf(ev.ToolCall)
				d.ToolCalls = []deltaCall{{Index: ncalls[i], ID: c.ID, Type: c.Type, Function: c.Function}}
				ncalls[i]++
			case llm.KindTokens:
			case llm.KindFinish:
				if failed(ev) {
					status = fasthttp.StatusInternalServerError
					return w.raw(generationFailed(ev))
				}
				finish := string(ev.Finish)
				return chunk(chunkChoice{Index: i, Delta: chatDelta{}, FinishReason: &finish, StopReason: ev.StopReason})
			}
			return chunk(chunkChoice{Index: i, Delta: d, Logprobs: lp})
		})
		if err == nil && r.wire.includeUsage {
			u := chatUsageOf(st)
			w.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: r.model, Choices: []chunkChoice{}, Usage: &u})
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
