package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/govinfer/govinfer/chattemplate"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/outparse"
	"github.com/valyala/fasthttp"
)

func marshalValue(v any) ([]byte, error) { return json.Marshal(v) }

// chatRequest is a parsed chat completion request.
type chatRequest struct {
	gen      genRequest
	prompt   string
	ids      []int
	thinking bool
	tools    map[string]outparse.ToolSchema
	noTools  bool                                  // tool_choice none: calls stay text
	grammar  func() (engine.LogitProcessor, error) // response_format or tool_choice
}

var knownRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

// prepareMessages validates messages and converts them to what the
// template expects (tool call arguments as objects, reasoning as
// reasoning_content).
func prepareMessages(o object) ([]any, *apiError) {
	msgs, ok, err := o.array("messages")
	if err != nil {
		return nil, err
	}
	if !ok || len(msgs) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		mo, isObj := m.(*chattemplate.Object)
		if !isObj {
			return nil, badRequest(field, "%s must be an object, got %s", field, jsonKind(m))
		}
		msg := object{o: mo, prefix: field}
		role, ok, err := msg.str("role")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, badRequest(field+".role", "%s.role is required", field)
		}
		if !knownRoles[role] {
			return nil, badRequest(field+".role", "%s.role %q is not one of system, user, assistant, tool", field, role)
		}
		content, has := msg.get("content")
		switch c := content.(type) {
		case nil:
			if role != "assistant" || !has && !msg.has("tool_calls") {
				if role != "assistant" {
					return nil, badRequest(field+".content", "%s.content is required for role %s", field, role)
				}
			}
		case string:
		case []any:
			for k, part := range c {
				pf := fmt.Sprintf("%s.content[%d]", field, k)
				po, isObj := part.(*chattemplate.Object)
				if !isObj {
					return nil, badRequest(pf, "%s must be an object, got %s", pf, jsonKind(part))
				}
				p := object{o: po, prefix: pf}
				typ, _, err := p.str("type")
				if err != nil {
					return nil, err
				}
				if typ != "text" {
					return nil, badRequest(pf+".type", "%s.type %q is not supported (this server takes text parts only)", pf, typ)
				}
				if _, ok, err := p.str("text"); err != nil {
					return nil, err
				} else if !ok {
					return nil, badRequest(pf+".text", "%s.text is required", pf)
				}
			}
		default:
			return nil, badRequest(field+".content", "%s.content must be a string or an array of text parts, got %s", field, jsonKind(content))
		}
		if r, ok, err := msg.str("reasoning"); err != nil {
			return nil, err
		} else if ok && !msg.has("reasoning_content") {
			mo.Set("reasoning_content", r)
		}
		if _, _, err := msg.str("reasoning_content"); err != nil {
			return nil, err
		}
		calls, ok, err := msg.array("tool_calls")
		if err != nil {
			return nil, err
		}
		if ok && role != "assistant" {
			return nil, badRequest(field+".tool_calls", "%s.tool_calls is only allowed on assistant messages", field)
		}
		for k, tc := range calls {
			tf := fmt.Sprintf("%s.tool_calls[%d]", field, k)
			tco, isObj := tc.(*chattemplate.Object)
			if !isObj {
				return nil, badRequest(tf, "%s must be an object, got %s", tf, jsonKind(tc))
			}
			fn, ok, err := object{o: tco, prefix: tf}.obj("function")
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, badRequest(tf+".function", "%s.function is required", tf)
			}
			if name, ok, err := fn.str("name"); err != nil {
				return nil, err
			} else if !ok || name == "" {
				return nil, badRequest(tf+".function.name", "%s.function.name is required", tf)
			}
			switch a := func() any { v, _ := fn.get("arguments"); return v }().(type) {
			case nil:
				fn.o.Set("arguments", chattemplate.NewObject())
			case string:
				v, derr := chattemplate.DecodeJSON([]byte(a))
				obj, isObj := v.(*chattemplate.Object)
				if derr != nil || !isObj {
					return nil, badRequest(tf+".function.arguments", "%s.function.arguments must be a JSON object (as a string)", tf)
				}
				fn.o.Set("arguments", obj)
			case *chattemplate.Object:
			default:
				return nil, badRequest(tf+".function.arguments", "%s.function.arguments must be a JSON object string, got %s", tf, jsonKind(a))
			}
		}
		if role == "tool" {
			if _, _, err := msg.str("tool_call_id"); err != nil {
				return nil, err
			}
		}
	}
	return msgs, nil
}

// prepareTools validates tools and reads each tool's parameter types.
func prepareTools(o object) ([]any, map[string]outparse.ToolSchema, *apiError) {
	tools, ok, err := o.array("tools")
	if err != nil || !ok {
		return nil, nil, err
	}
	schemas := map[string]outparse.ToolSchema{}
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		to, isObj := t.(*chattemplate.Object)
		if !isObj {
			return nil, nil, badRequest(field, "%s must be an object, got %s", field, jsonKind(t))
		}
		tool := object{o: to, prefix: field}
		if typ, _, err := tool.str("type"); err != nil {
			return nil, nil, err
		} else if typ != "function" {
			return nil, nil, badRequest(field+".type", "%s.type must be \"function\", got %q", field, typ)
		}
		fn, ok, err := tool.obj("function")
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, badRequest(field+".function", "%s.function is required", field)
		}
		name, _, err := fn.str("name")
		if err != nil {
			return nil, nil, err
		}
		if name == "" {
			return nil, nil, badRequest(field+".function.name", "%s.function.name is required", field)
		}
		if _, _, err := fn.str("description"); err != nil {
			return nil, nil, err
		}
		params, ok, err := fn.obj("parameters")
		if err != nil {
			return nil, nil, err
		}
		if ok {
			if typ, ok, err := params.str("type"); err != nil {
				return nil, nil, err
			} else if ok && typ != "object" {
				return nil, nil, badRequest(field+".function.parameters.type", "%s.function.parameters.type must be \"object\", got %q", field, typ)
			}
			if _, _, err := params.obj("properties"); err != nil {
				return nil, nil, err
			}
			raw, merr := marshalValue(params.o)
			if merr != nil {
				return nil, nil, badRequest(field+".function.parameters", "%s.function.parameters: %v", field, merr)
			}
			sc, serr := outparse.SchemaFromParameters(raw)
			if serr != nil {
				return nil, nil, badRequest(field+".function.parameters", "invalid %s.function.parameters: %v", field, serr)
			}
			schemas[name] = sc
		} else {
			schemas[name] = outparse.ToolSchema{}
		}
	}
	return tools, schemas, nil
}

// parseChat reads and renders a chat request.
func (s *Server) parseChat(body []byte) (*chatRequest, *apiError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	if err := s.checkModel(o); err != nil {
		return nil, err
	}
	if s.tmpl == nil {
		return nil, badRequest("messages", "this checkpoint has no chat template: %v", s.tmplErr)
	}
	r := &chatRequest{}
	if r.gen, err = parseGen(o, s.gen); err != nil {
		return nil, err
	}
	if r.gen.logprobs, _, err = o.boolean("logprobs"); err != nil {
		return nil, err
	}
	if n, ok, err := o.integer("top_logprobs"); err != nil {
		return nil, err
	} else if ok {
		if n < 0 || n > 20 {
			return nil, badRequest("top_logprobs", "top_logprobs must be between 0 and 20, got %d", n)
		}
		if !r.gen.logprobs && n > 0 {
			return nil, badRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		r.gen.topLogprobs = n
	}
	msgs, err := prepareMessages(o)
	if err != nil {
		return nil, err
	}
	tools, schemas, err := prepareTools(o)
	if err != nil {
		return nil, err
	}
	r.tools = schemas
	// forceCall: a call must be made; forceName: of that function.
	var forceCall bool
	var forceName string
	if tc, ok := o.get("tool_choice"); ok {
		switch c := tc.(type) {
		case string:
			switch c {
			case "none":
				r.noTools, tools = true, nil
			case "auto":
			case "required":
				if len(schemas) == 0 {
					return nil, badRequest("tool_choice", "tool_choice \"required\" needs at least one tool in tools")
				}
				forceCall = true
			default:
				return nil, badRequest("tool_choice", "tool_choice must be none, auto, required or a named function, got %q", c)
			}
		case *chattemplate.Object:
			fn, _, err := object{o: c, prefix: "tool_choice"}.obj("function")
			if err != nil {
				return nil, err
			}
			name, _, err := fn.str("name")
			if err != nil {
				return nil, err
			}
			if _, known := schemas[name]; !known {
				return nil, badRequest("tool_choice", "tool_choice names function %q, which is not in tools", name)
			}
			forceCall, forceName = true, name
		default:
			return nil, badRequest("tool_choice", "tool_choice must be a string or an object, got %s", jsonKind(tc))
		}
	}
	if _, _, err := o.boolean("parallel_tool_calls"); err != nil {
		return nil, err
	}
	addGen := true
	if v, ok, err := o.boolean("add_generation_prompt"); err != nil {
		return nil, err
	} else if ok {
		addGen = v
	}
	cont, _, err := o.boolean("continue_final_message")
	if err != nil {
		return nil, err
	}
	if cont && addGen && o.has("add_generation_prompt") {
		return nil, badRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
	}
	if cont {
		addGen = false
	}
	kwargs := map[string]any{}
	if kw, ok, err := o.obj("chat_template_kwargs"); err != nil {
		return nil, err
	} else if ok {
		for _, k := range kw.o.Keys() {
			v, _ := kw.o.Get(k)
			kwargs[k] = v
		}
	}
	var toolsArg any
	if tools != nil {
		toolsArg = tools
	}
	prompt, rerr := s.tmpl.RenderChat(chattemplate.Options{
		Messages: msgs, Tools: toolsArg, AddGenerationPrompt: addGen, Kwargs: kwargs,
		EOS: "<|im_end|>", PAD: "<|endoftext|>",
	})
	if rerr != nil {
		return nil, badRequest("messages", "rendering the chat template: %v", rerr)
	}
	if cont {
		prompt = continueFinal(prompt, msgs)
	}
	if g, err := parseResponseFormat(o); err != nil {
		return nil, err
	} else if g != nil {
		r.grammar = s.processorFor(g)
	}
	if forceCall && r.grammar != nil {
		return nil, badRequest("response_format", "response_format cannot be combined with tool_choice \"required\" or a named function")
	}
	r.prompt = prompt
	// Constrained output is the answer itself, never reasoning.
	r.thinking = strings.HasSuffix(prompt, "<think>\n") && r.grammar == nil
	if forceCall {
		// With thinking the reasoning stays free and the call is forced
		// after it (see toolForcer).
		names := slices.Sorted(maps.Keys(schemas))
		proc, ferr := s.toolForcerFor(forceName, names, r.thinking)
		if ferr != nil {
			return nil, badRequest("tool_choice", "tool_choice: %v", ferr)
		}
		r.grammar = proc
	}
	r.ids = s.tok.Encode(prompt)
	return r, nil
}

// continueFinal cuts a rendered conversation right after the final
// message's content, so that the model continues it (transformers'
// continue_final_message).
func continueFinal(prompt string, msgs []any) string {
	last, _ := msgs[len(msgs)-1].(*chattemplate.Object)
	if last == nil {
		return prompt
	}
	c, _ := last.Get("content")
	text, _ := c.(string)
	if text == "" {
		return prompt
	}
	if i := strings.LastIndex(prompt, text); i >= 0 {
		return prompt[:i+len(text)]
	}
	return prompt
}

// Response shapes, with vLLM's keys in vLLM's order.
type (
	chatMessage struct {
		Role         string          `json:"role"`
		Content      *string         `json:"content"`
		Refusal      any             `json:"refusal"`
		Annotations  any             `json:"annotations"`
		Audio        any             `json:"audio"`
		FunctionCall any             `json:"function_call"`
		ToolCalls    []outparse.Call `json:"tool_calls"`
		Reasoning    *string         `json:"reasoning"`
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
		Index    int               `json:"index"`
		ID       string            `json:"id"`
		Type     string            `json:"type"`
		Function outparse.Function `json:"function"`
	}
	chatDelta struct {
		Role      *string     `json:"role,omitempty"`
		Content   *string     `json:"content,omitempty"`
		Reasoning *string     `json:"reasoning,omitempty"`
		ToolCalls []deltaCall `json:"tool_calls,omitempty"`
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
)

func (s *Server) chatLogprobs(toks []engine.Token) []tokenLogprob {
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

func (s *Server) handleChat(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r, aerr := s.parseChat(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("chatcmpl-")
	reqCtx, cancelReq := context.WithCancel(s.ctx)
	j, aerr := s.submit(reqCtx, id, [][]int{r.ids}, r.gen, r.grammar)
	if aerr != nil {
		cancelReq()
		writeAPIError(ctx, aerr)
		return
	}
	parsers := make([]*outparse.Parser, len(j.choices))
	for i := range parsers {
		parsers[i] = outparse.NewParser(outparse.Options{Thinking: r.thinking, Tools: r.tools})
	}
	if r.gen.stream {
		s.streamChat(ctx, j, r, parsers, reqCtx, cancelReq, start)
		return
	}
	defer cancelReq()
	results := make([]outparse.Result, len(j.choices))
	lps := make([][]tokenLogprob, len(j.choices))
	var failed error
	err := j.run(reqCtx, func(p piece) error {
		i := p.c.index
		evs := parsers[i].Push(p.text)
		if p.done {
			evs = append(evs, parsers[i].Finish()...)
		}
		addEvents(&results[i], evs, r.noTools)
		if r.gen.logprobs {
			lps[i] = append(lps[i], s.chatLogprobs(p.toks)...)
		}
		if p.failed != nil {
			failed = p.failed
		}
		return nil
	})
	if err == nil && failed == nil {
		for _, c := range j.choices {
			if c.finish == "abort" {
				failed = c.err
			}
		}
	}
	if err != nil || failed != nil {
		status := fasthttp.StatusInternalServerError
		if errors.Is(failed, engine.ErrClosed) || s.ctx.Err() != nil {
			status = fasthttp.StatusServiceUnavailable
		}
		writeError(ctx, status, fmt.Sprintf("generation failed: %v", errors.Join(err, failed)), "")
		s.logRequest(id, status, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), r.prompt)
		return
	}
	resp := chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.name, Usage: j.usage()}
	for i, c := range j.choices {
		res := results[i]
		msg := chatMessage{Role: "assistant", ToolCalls: res.ToolCalls}
		if msg.ToolCalls == nil {
			msg.ToolCalls = []outparse.Call{}
		}
		if res.Content != "" || (len(res.ToolCalls) == 0 && res.Reasoning == "") {
			msg.Content = strPtr(res.Content)
		}
		if res.Reasoning != "" {
			msg.Reasoning = strPtr(res.Reasoning)
		}
		finish := c.finish
		if len(res.ToolCalls) > 0 && finish == "stop" {
			finish = "tool_calls"
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: finish, StopReason: c.stopReason}
		if r.gen.logprobs {
			ch.Logprobs = map[string]any{"content": lps[i]}
		}
		resp.Choices = append(resp.Choices, ch)
	}
	writeJSON(ctx, resp)
	s.logRequest(id, fasthttp.StatusOK, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), r.prompt)
}

// addEvents folds parser events into a result; with noTools, calls stay
// text.
func addEvents(r *outparse.Result, evs []outparse.Event, noTools bool) {
	for _, e := range evs {
		switch e.Kind {
		case outparse.Reasoning:
			r.Reasoning += e.Text
		case outparse.Content:
			r.Content += e.Text
		case outparse.ToolCall:
			if noTools {
				r.Content += e.Text
			} else {
				r.ToolCalls = append(r.ToolCalls, *e.Call)
			}
		}
	}
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

func (s *Server) streamChat(ctx *fasthttp.RequestCtx, j *job, r *chatRequest, parsers []*outparse.Parser, reqCtx context.Context, cancelReq context.CancelFunc, start time.Time) {
	setSSEHeaders(ctx)
	created := time.Now().Unix()
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer cancelReq()
		w := &sseWriter{w: bw}
		chunk := func(ch chunkChoice) error {
			return w.event(chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: created, Model: s.name, Choices: []chunkChoice{ch}})
		}
		for i := range j.choices {
			chunk(chunkChoice{Index: i, Delta: chatDelta{Role: strPtr("assistant"), Content: strPtr("")}})
		}
		ncalls := make([]int, len(j.choices))
		status := fasthttp.StatusOK
		err := j.run(reqCtx, func(p piece) error {
			i := p.c.index
			evs := parsers[i].Push(p.text)
			if p.done {
				evs = append(evs, parsers[i].Finish()...)
			}
			var lp any
			if r.gen.logprobs && len(p.toks) > 0 {
				lp = map[string]any{"content": s.chatLogprobs(p.toks)}
			}
			for _, e := range evs {
				var d chatDelta
				switch {
				case e.Kind == outparse.Reasoning:
					d.Reasoning = strPtr(e.Text)
				case e.Kind == outparse.Content || (e.Kind == outparse.ToolCall && r.noTools):
					d.Content = strPtr(e.Text)
				case e.Kind == outparse.ToolCall:
					d.ToolCalls = []deltaCall{{Index: ncalls[i], ID: e.Call.ID, Type: e.Call.Type, Function: e.Call.Function}}
					ncalls[i]++
				default:
					continue
				}
				if err := chunk(chunkChoice{Index: i, Delta: d, Logprobs: lp}); err != nil {
					return err
				}
				lp = nil
			}
			if lp != nil {
				if err := chunk(chunkChoice{Index: i, Delta: chatDelta{}, Logprobs: lp}); err != nil {
					return err
				}
			}
			if p.failed != nil || (p.done && p.c.finish == "abort") {
				msg := "generation failed"
				if p.c.err != nil {
					msg += ": " + p.c.err.Error()
				}
				status = fasthttp.StatusInternalServerError
				return w.raw(errorBody(status, msg, ""))
			}
			if p.done {
				finish := p.c.finish
				if ncalls[i] > 0 && finish == "stop" {
					finish = "tool_calls"
				}
				return chunk(chunkChoice{Index: i, Delta: chatDelta{}, FinishReason: &finish, StopReason: p.c.stopReason})
			}
			return nil
		})
		if err == nil && r.gen.includeUsage {
			u := j.usage()
			w.event(chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: created, Model: s.name, Choices: []chunkChoice{}, Usage: &u})
		}
		if err == nil {
			w.raw([]byte("[DONE]"))
		} else {
			status = 499 // client closed the connection
		}
		s.logRequest(j.id, status, j.promptLen, j.completionTokens(), j.ttft(), time.Since(start), j.finishReasons(), r.prompt)
	})
}
