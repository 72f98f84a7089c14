package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// The Responses API: POST /v1/responses (streamed or not), GET and DELETE
// /v1/responses/{id}, as OpenAI's SDKs, the OpenAI Agents SDK and Codex
// use it. A request's input items become chat messages (consecutive
// function calls one assistant turn), run as a chat on the model, and the
// events become output items: reasoning, a message, function and custom
// tool calls. Finished responses are kept (store, bounded; see
// responseStore) so that previous_response_id continues them with the same
// prompt prefix; stateless clients get their reasoning sealed
// (include: ["reasoning.encrypted_content"]) and send it back.

// includeEncrypted is the include value that seals reasoning items.
const includeEncrypted = "reasoning.encrypted_content"

// hostedTools are OpenAI's tools the engine cannot run: left out of the
// prompt, never refused.
var hostedTools = map[string]bool{
	"web_search": true, "web_search_preview": true, "web_search_preview_2025_03_11": true, "web_search_2025_08_26": true,
	"file_search": true, "code_interpreter": true, "computer_use_preview": true, "computer_use": true, "computer": true,
	"image_generation": true, "mcp": true, "local_shell": true, "shell": true, "apply_patch": true,
}

// Output shapes of the Responses API, with OpenAI's keys.
type (
	// responseObject is a response, as POST and GET answer it and the
	// stream's lifecycle events carry it.
	responseObject struct {
		ID                 string             `json:"id"`
		Object             string             `json:"object"`
		CreatedAt          int64              `json:"created_at"`
		Status             string             `json:"status"`
		Background         bool               `json:"background"`
		Error              *respError         `json:"error"`
		IncompleteDetails  *respIncomplete    `json:"incomplete_details"`
		Instructions       *string            `json:"instructions"`
		MaxOutputTokens    *int               `json:"max_output_tokens"`
		MaxToolCalls       *int               `json:"max_tool_calls"`
		Model              string             `json:"model"`
		Output             []any              `json:"output"`
		ParallelToolCalls  bool               `json:"parallel_tool_calls"`
		PreviousResponseID *string            `json:"previous_response_id"`
		PromptCacheKey     *string            `json:"prompt_cache_key"`
		Reasoning          respReasoningParam `json:"reasoning"`
		SafetyIdentifier   *string            `json:"safety_identifier"`
		ServiceTier        string             `json:"service_tier"`
		Store              bool               `json:"store"`
		Temperature        *float64           `json:"temperature"`
		Text               respTextParam      `json:"text"`
		ToolChoice         any                `json:"tool_choice"`
		Tools              []any              `json:"tools"`
		TopLogprobs        int                `json:"top_logprobs"`
		TopP               *float64           `json:"top_p"`
		Truncation         string             `json:"truncation"`
		Usage              *respUsage         `json:"usage"`
		User               *string            `json:"user"`
		Metadata           map[string]string  `json:"metadata"`
	}
	respError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	respIncomplete struct {
		Reason string `json:"reason"`
	}
	respReasoningParam struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	}
	respTextParam struct {
		Format    any    `json:"format"`
		Verbosity string `json:"verbosity"`
	}
	respUsage struct {
		InputTokens         int                 `json:"input_tokens"`
		InputTokensDetails  promptTokensDetails `json:"input_tokens_details"`
		OutputTokens        int                 `json:"output_tokens"`
		OutputTokensDetails completionDetails   `json:"output_tokens_details"`
		TotalTokens         int                 `json:"total_tokens"`
	}
	// Output items.
	respReasoningItem struct {
		ID               string              `json:"id"`
		Type             string              `json:"type"`
		Summary          []any               `json:"summary"`
		Content          []respReasoningText `json:"content"`
		EncryptedContent *string             `json:"encrypted_content,omitempty"`
	}
	respReasoningText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	respMessageItem struct {
		ID      string           `json:"id"`
		Type    string           `json:"type"`
		Status  string           `json:"status"`
		Role    string           `json:"role"`
		Content []respOutputText `json:"content"`
	}
	respOutputText struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Annotations []any  `json:"annotations"`
		Logprobs    []any  `json:"logprobs"`
	}
	respFunctionCall struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	respCustomCall struct {
		ID     string `json:"id"`
		Type   string `json:"type"`
		Status string `json:"status"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
		Input  string `json:"input"`
	}
	// respEvent is a server-sent event of a streamed response; each kind
	// sets its own fields.
	respEvent struct {
		Type           string          `json:"type"`
		SequenceNumber int             `json:"sequence_number"`
		Response       *responseObject `json:"response,omitempty"`
		OutputIndex    *int            `json:"output_index,omitempty"`
		ItemID         string          `json:"item_id,omitempty"`
		ContentIndex   *int            `json:"content_index,omitempty"`
		Item           any             `json:"item,omitempty"`
		Part           any             `json:"part,omitempty"`
		Delta          *string         `json:"delta,omitempty"`
		Text           *string         `json:"text,omitempty"`
		Name           string          `json:"name,omitempty"`
		Arguments      *string         `json:"arguments,omitempty"`
		Input          *string         `json:"input,omitempty"`
		Logprobs       any             `json:"logprobs,omitempty"`
	}
)

// responsesRequest is a Responses API request read from the wire.
type responsesRequest struct {
	req llm.ChatRequest
	// history is the conversation without the instructions: the stored
	// one of previous_response_id, then this request's input.
	history          []llm.Message
	stream, store    bool
	includeEncrypted bool
	parallel         bool
	// toolIndex maps the tools passed to llm to their index in the
	// request's tools (hosted tools are left out).
	toolIndex []int
	// base holds the fields the response echoes.
	base responseObject
}

// respLog writes a note on a request to the server's log.
func (s *Server) respLog(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	fmt.Fprintf(s.cfg.Log, "%s responses: %s\n", time.Now().Format(time.RFC3339), fmt.Sprintf(format, args...))
	s.logMu.Unlock()
}

// parseResponses reads a Responses API request; llm checks the values.
func (s *Server) parseResponses(body []byte) (*responsesRequest, *apiError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	if err := s.checkModel(o); err != nil {
		return nil, err
	}
	r := &responsesRequest{store: true, parallel: true}
	r.base = responseObject{Object: "response", Model: s.responseModel(o), ServiceTier: "default", Truncation: "disabled",
		Tools: []any{}, ToolChoice: "auto", Metadata: map[string]string{}, Output: []any{},
		Text: respTextParam{Format: map[string]any{"type": "text"}, Verbosity: "medium"}}
	if bg, _, err := o.boolean("background"); err != nil {
		return nil, err
	} else if bg {
		return nil, badRequest("background", "background responses are not supported by this server")
	}
	for _, k := range []string{"conversation", "prompt"} {
		if o.has(k) {
			return nil, badRequest(k, "%s is not supported by this server (use input, instructions and previous_response_id)", k)
		}
	}
	q := &r.req
	if err := r.parseScalars(o); err != nil {
		return nil, err
	}
	if q.LoRA, err = s.requestLoRA(o); err != nil {
		return nil, err
	}
	if err := r.parseText(o); err != nil {
		return nil, err
	}
	if q.TemplateArgs, err = parseTemplateKwargs(o); err != nil {
		return nil, err
	}
	if err := s.parseRespTools(o, r); err != nil {
		return nil, err
	}
	if prev, ok, err := o.str("previous_response_id"); err != nil {
		return nil, err
	} else if ok {
		stored, found := s.responses.get(prev)
		if !found {
			return nil, badRequest("previous_response_id", "Previous response with id '%s' not found.", prev)
		}
		r.history = slices.Clip(stored.conversation)
		r.base.PreviousResponseID = &prev
	}
	conv := respConversation{}
	if v, ok := o.get("input"); ok {
		switch in := v.(type) {
		case string:
			conv.add(llm.Message{Role: "user", Content: in})
		case []any:
			for i, item := range in {
				if err := s.inputItem(&conv, fmt.Sprintf("input[%d]", i), item); err != nil {
					return nil, err
				}
			}
		default:
			return nil, badRequest("input", "input must be a string or an array of items, got %s", jsonvalue.Kind(v))
		}
	}
	r.history = append(r.history, conv.done()...)
	if len(r.history) == 0 {
		return nil, badRequest("input", "input is required: a string or a non-empty array of items")
	}
	var msgs []llm.Message
	if r.base.Instructions != nil && *r.base.Instructions != "" {
		msgs = append(msgs, llm.Message{Role: "system", Content: *r.base.Instructions})
	}
	q.Messages = promptMessages(append(msgs, r.history...))
	return r, nil
}

// parseScalars reads the sampling, echo and bookkeeping fields.
func (r *responsesRequest) parseScalars(o object) *apiError {
	q, b := &r.req, &r.base
	var err *apiError
	if v, ok, e := o.str("instructions"); e != nil {
		return e
	} else if ok {
		b.Instructions = &v
	}
	if v, ok, e := o.integer("max_output_tokens"); e != nil {
		return e
	} else if ok {
		if v < 1 {
			return badRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", v)
		}
		q.MaxTokens, b.MaxOutputTokens = v, &v
	}
	if v, ok, e := o.integer("max_tool_calls"); e != nil {
		return e
	} else if ok {
		b.MaxToolCalls = &v
	}
	for _, f := range []struct {
		key  string
		dst  **float64
		echo **float64
	}{{"temperature", &q.Temperature, &b.Temperature}, {"top_p", &q.TopP, &b.TopP}, {"min_p", &q.MinP, nil}, {"repetition_penalty", &q.RepetitionPenalty, nil}} {
		if v, ok, e := o.float(f.key); e != nil {
			return e
		} else if ok {
			*f.dst = llm.F64(v)
			if f.echo != nil {
				*f.echo = llm.F64(v)
			}
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"presence_penalty", &q.PresencePenalty}, {"frequency_penalty", &q.FrequencyPenalty}} {
		if *f.dst, _, err = o.float(f.key); err != nil {
			return err
		}
	}
	if v, ok, e := o.integer("top_k"); e != nil {
		return e
	} else if ok {
		q.TopK = llm.Int(v)
	}
	if v, ok, e := o.integer("seed"); e != nil {
		return e
	} else if ok {
		q.Seed = llm.Uint64(uint64(v))
	}
	if q.IgnoreEOS, _, err = o.boolean("ignore_eos"); err != nil {
		return err
	}
	if b.TopLogprobs, _, err = o.integer("top_logprobs"); err != nil {
		return err
	}
	if r.stream, _, err = o.boolean("stream"); err != nil {
		return err
	}
	if _, _, err = o.obj("stream_options"); err != nil {
		return err
	}
	if v, ok, e := o.boolean("store"); e != nil {
		return e
	} else if ok {
		r.store = v
	}
	b.Store = r.store
	if v, ok, e := o.boolean("parallel_tool_calls"); e != nil {
		return e
	} else if ok {
		r.parallel = v
	}
	b.ParallelToolCalls = r.parallel
	for _, f := range []struct {
		key string
		dst **string
	}{{"user", &b.User}, {"prompt_cache_key", &b.PromptCacheKey}, {"safety_identifier", &b.SafetyIdentifier}} {
		if v, ok, e := o.str(f.key); e != nil {
			return e
		} else if ok {
			*f.dst = &v
		}
	}
	if v, ok, e := o.str("service_tier"); e != nil {
		return e
	} else if ok && v != "auto" {
		b.ServiceTier = v
	}
	if v, ok, e := o.str("truncation"); e != nil {
		return e
	} else if ok {
		if v != "disabled" && v != "auto" {
			return badRequest("truncation", "truncation must be \"auto\" or \"disabled\", got %q", v)
		}
		b.Truncation = v
	}
	if md, ok, e := o.obj("metadata"); e != nil {
		return e
	} else if ok {
		for _, k := range md.f.Obj.Keys() {
			v, _, e := md.str(k)
			if e != nil {
				return e
			}
			b.Metadata[k] = v
		}
	}
	if inc, _, e := o.array("include"); e != nil {
		return e
	} else {
		for i, v := range inc {
			str, ok := v.(string)
			if !ok {
				return badRequest("include", "include[%d] must be a string, got %s", i, jsonvalue.Kind(v))
			}
			if str == includeEncrypted {
				r.includeEncrypted = true
			}
		}
	}
	if rs, ok, e := o.obj("reasoning"); e != nil {
		return e
	} else if ok {
		if v, ok, e := rs.str("effort"); e != nil {
			return e
		} else if ok {
			q.ReasoningEffort, b.Reasoning.Effort = v, &v
		}
		for _, k := range []string{"summary", "generate_summary"} {
			if v, ok, e := rs.str(k); e != nil {
				return e
			} else if ok {
				b.Reasoning.Summary = &v
			}
		}
	}
	return nil
}

// parseText reads text.format into the response format.
func (r *responsesRequest) parseText(o object) *apiError {
	t, ok, err := o.obj("text")
	if err != nil || !ok {
		return err
	}
	if v, ok, e := t.str("verbosity"); e != nil {
		return e
	} else if ok {
		r.base.Text.Verbosity = v
	}
	f, ok, err := t.obj("format")
	if err != nil || !ok {
		return err
	}
	typ, _, err := f.str("type")
	if err != nil {
		return err
	}
	r.base.Text.Format = f.f.Obj
	switch typ {
	case "text":
	case "json_object":
		r.req.ResponseFormat = &llm.ResponseFormat{Type: typ}
	case "json_schema":
		rf := &llm.ResponseFormat{Type: typ}
		if _, _, err := f.str("name"); err != nil {
			return err
		}
		if rf.Strict, _, err = f.boolean("strict"); err != nil {
			return err
		}
		if v, ok := f.get("schema"); ok {
			if _, isObj := v.(*jsonvalue.Object); !isObj {
				return badRequest("text.format.schema", "text.format.schema must be an object, got %s", jsonvalue.Kind(v))
			}
			raw, merr := marshalValue(v)
			if merr != nil {
				return badRequest("text.format.schema", "text.format.schema: %v", merr)
			}
			rf.Schema = raw
		}
		r.req.ResponseFormat = rf
	case "":
		return badRequest("text.format.type", "text.format.type is required")
	default:
		return badRequest("text.format.type", "text.format.type must be text, json_object or json_schema, got %q", typ)
	}
	return nil
}

// parseRespTools reads tools (function and custom tools; hosted tools are
// left out and logged) and tool_choice.
func (s *Server) parseRespTools(o object, r *responsesRequest) *apiError {
	tools, _, err := o.array("tools")
	if err != nil {
		return err
	}
	q := &r.req
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		to, isObj := t.(*jsonvalue.Object)
		if !isObj {
			return badRequest(field, "%s must be an object, got %s", field, jsonvalue.Kind(t))
		}
		r.base.Tools = append(r.base.Tools, to)
		f := object{jsonvalue.ObjectFields(to, field)}
		typ, _, err := f.str("type")
		if err != nil {
			return err
		}
		name, _, err := f.str("name")
		if err != nil {
			return err
		}
		desc, _, err := f.str("description")
		if err != nil {
			return err
		}
		var tool llm.Tool
		switch typ {
		case "function":
			tool = llm.Tool{Name: name, Description: desc}
			if tool.Strict, _, err = f.boolean("strict"); err != nil {
				return err
			}
			if v, ok := f.get("parameters"); ok {
				if _, isObj := v.(*jsonvalue.Object); !isObj {
					return badRequest(field+".parameters", "%s.parameters must be an object, got %s", field, jsonvalue.Kind(v))
				}
				raw, merr := marshalValue(v)
				if merr != nil {
					return badRequest(field+".parameters", "%s.parameters: %v", field, merr)
				}
				tool.Parameters = raw
			}
		case "custom":
			tool = llm.Tool{Name: name, Description: desc, Custom: true}
			format, ok, err := f.obj("format")
			if err != nil {
				return err
			}
			if ok {
				ft, _, err := format.str("type")
				if err != nil {
					return err
				}
				switch ft {
				case "text":
				case "grammar":
					syntax, _, err := format.str("syntax")
					if err != nil {
						return err
					}
					if syntax != "" && syntax != "lark" && syntax != "regex" {
						return badRequest(field+".format.syntax", "%s.format.syntax must be lark or regex, got %q", field, syntax)
					}
					if tool.Grammar, _, err = format.str("definition"); err != nil {
						return err
					}
					tool.GrammarSyntax = syntax
				default:
					return badRequest(field+".format.type", "%s.format.type must be text or grammar, got %q", field, ft)
				}
			}
		case "":
			return badRequest(field+".type", "%s.type is required", field)
		default:
			s.respLog("tools[%d] of type %q is left out: this server runs no hosted tools", i, typ)
			continue
		}
		if name == "" {
			return badRequest(field+".name", "%s.name is required", field)
		}
		q.Tools = append(q.Tools, tool)
		r.toolIndex = append(r.toolIndex, i)
	}
	tc, ok := o.get("tool_choice")
	if !ok {
		return nil
	}
	r.base.ToolChoice = tc
	switch c := tc.(type) {
	case string:
		switch c {
		case "auto", "none", "required":
			q.ToolChoice.Mode = c
		default:
			return badRequest("tool_choice", "tool_choice must be none, auto, required or an object naming a tool, got %q", c)
		}
	case *jsonvalue.Object:
		f := object{jsonvalue.ObjectFields(c, "tool_choice")}
		typ, _, err := f.str("type")
		if err != nil {
			return err
		}
		switch {
		case typ == "function" || typ == "custom":
			name, _, err := f.str("name")
			if err != nil {
				return err
			}
			if name == "" {
				return badRequest("tool_choice.name", "tool_choice.name is required")
			}
			q.ToolChoice = llm.ToolChoice{Mode: "function", Function: name}
		case hostedTools[typ]:
			s.respLog("tool_choice of hosted tool type %q is taken as auto", typ)
			q.ToolChoice.Mode = "auto"
		default:
			return badRequest("tool_choice.type", "tool_choice.type %q is not supported (use function or custom)", typ)
		}
	default:
		return badRequest("tool_choice", "tool_choice must be a string or an object, got %s", jsonvalue.Kind(tc))
	}
	return nil
}

// respConversation turns input items into chat messages: reasoning,
// assistant text and tool calls that follow each other make one assistant
// turn.
type respConversation struct {
	msgs []llm.Message
	pend *llm.Message // the assistant turn being gathered
}

func (c *respConversation) flush() {
	if c.pend != nil {
		c.msgs = append(c.msgs, *c.pend)
		c.pend = nil
	}
}

func (c *respConversation) assistant() *llm.Message {
	if c.pend == nil {
		c.pend = &llm.Message{Role: "assistant"}
	}
	return c.pend
}

// add adds a message other than the assistant's.
func (c *respConversation) add(m llm.Message) {
	c.flush()
	c.msgs = append(c.msgs, m)
}

// reasoning adds reasoning, which opens an assistant turn unless the one
// gathered has only reasoning yet.
func (c *respConversation) reasoning(text string) {
	if text == "" {
		return
	}
	if c.pend != nil && (c.pend.Content != "" || len(c.pend.ToolCalls) > 0) {
		c.flush()
	}
	p := c.assistant()
	if p.Reasoning != "" {
		p.Reasoning += "\n"
	}
	p.Reasoning += text
}

// text adds assistant text; after tool calls it opens a new turn.
func (c *respConversation) text(text string) {
	if c.pend != nil && len(c.pend.ToolCalls) > 0 {
		c.flush()
	}
	c.assistant().Content += text
}

// call adds a tool call to the assistant's turn.
func (c *respConversation) call(tc llm.ToolCall) {
	p := c.assistant()
	p.ToolCalls = append(p.ToolCalls, tc)
}

// done returns the messages.
func (c *respConversation) done() []llm.Message {
	c.flush()
	return c.msgs
}

// promptMessages returns msgs as the chat template takes them: the leading
// system messages (instructions, system and developer items) merged into
// one, and later ones given as user messages, since Qwen's template allows
// one system message, first.
func promptMessages(msgs []llm.Message) []llm.Message {
	out := make([]llm.Message, 0, len(msgs))
	var sys []string
	i := 0
	for ; i < len(msgs) && (msgs[i].Role == "system" || msgs[i].Role == "developer"); i++ {
		sys = append(sys, msgs[i].Content)
	}
	if len(sys) > 0 {
		out = append(out, llm.Message{Role: "system", Content: strings.Join(sys, "\n\n")})
	}
	for _, m := range msgs[i:] {
		if m.Role == "system" || m.Role == "developer" {
			m.Role = "user"
		}
		out = append(out, m)
	}
	return out
}

// partsText reads content given as a string or as text parts.
func partsText(v any, field string) (string, *apiError) {
	switch c := v.(type) {
	case string:
		return c, nil
	case []any:
		texts := make([]string, 0, len(c))
		for k, part := range c {
			pf := fmt.Sprintf("%s[%d]", field, k)
			po, isObj := part.(*jsonvalue.Object)
			if !isObj {
				return "", badRequest(pf, "%s must be an object, got %s", pf, jsonvalue.Kind(part))
			}
			p := object{jsonvalue.ObjectFields(po, pf)}
			typ, _, err := p.str("type")
			if err != nil {
				return "", err
			}
			key := "text"
			switch typ {
			case "input_text", "output_text", "text", "reasoning_text", "summary_text":
			case "refusal":
				key = "refusal"
			case "input_image":
				continue // read by responseImages
			default:
				return "", badRequest(pf+".type", "%s.type %q is not supported (this server takes text parts only)", pf, typ)
			}
			t, _, err := p.str(key)
			if err != nil {
				return "", err
			}
			texts = append(texts, t)
		}
		return strings.Join(texts, "\n"), nil
	case nil:
		return "", nil
	}
	return "", badRequest(field, "%s must be a string or an array of text parts, got %s", field, jsonvalue.Kind(v))
}

// inputItem adds one input item to the conversation.
func (s *Server) inputItem(c *respConversation, field string, item any) *apiError {
	itemObj, isObj := item.(*jsonvalue.Object)
	if !isObj {
		return badRequest(field, "%s must be an object, got %s", field, jsonvalue.Kind(item))
	}
	f := object{jsonvalue.ObjectFields(itemObj, field)}
	typ, _, err := f.str("type")
	if err != nil {
		return err
	}
	if typ == "" && f.has("role") {
		typ = "message"
	}
	switch typ {
	case "message":
		role, _, err := f.str("role")
		if err != nil {
			return err
		}
		content, _ := f.get("content")
		images, err := s.responseImages(content, field+".content")
		if err != nil {
			return err
		}
		text, err := partsText(content, field+".content")
		if err != nil {
			return err
		}
		switch role {
		case "user", "system", "developer":
			// The images go before the text (llm.Message.Images).
			c.add(llm.Message{Role: role, Images: images, Content: text})
		case "assistant":
			c.text(text)
		case "":
			return badRequest(field+".role", "%s.role is required", field)
		default:
			return badRequest(field+".role", "%s.role must be user, system, developer or assistant, got %q", field, role)
		}
	case "function_call", "custom_tool_call":
		callID, _, err := f.str("call_id")
		if err != nil {
			return err
		}
		name, _, err := f.str("name")
		if err != nil {
			return err
		}
		if name == "" {
			return badRequest(field+".name", "%s.name is required", field)
		}
		tc := llm.ToolCall{ID: callID, Name: name}
		if typ == "custom_tool_call" {
			if tc.Input, _, err = f.str("input"); err != nil {
				return err
			}
			tc.Custom = true
		} else {
			args, _, err := f.str("arguments")
			if err != nil {
				return err
			}
			if args == "" {
				args = "{}"
			}
			v, derr := jsonvalue.Decode([]byte(args))
			if _, isObj := v.(*jsonvalue.Object); derr != nil || !isObj {
				return badRequest(field+".arguments", "%s.arguments must be a JSON object (as a string)", field)
			}
			tc.Arguments = args
		}
		c.call(tc)
	case "function_call_output", "custom_tool_call_output":
		callID, _, err := f.str("call_id")
		if err != nil {
			return err
		}
		out, _ := f.get("output")
		text, err := partsText(out, field+".output")
		if err != nil {
			return err
		}
		c.add(llm.Message{Role: "tool", Content: text, ToolCallID: callID})
	case "reasoning":
		enc, hasEnc, err := f.str("encrypted_content")
		if err != nil {
			return err
		}
		content, _ := f.get("content")
		text, err := partsText(content, field+".content")
		if err != nil {
			return err
		}
		summary, _, err := f.array("summary")
		if err != nil {
			return err
		}
		if text == "" {
			// An item without its reasoning text (one of OpenAI's, or
			// kept by a client that drops content) gives its summary.
			if text, err = partsText(summary, field+".summary"); err != nil {
				return err
			}
		}
		if hasEnc && enc != "" {
			opened, ok := s.sealer.open(sealEncryptedContent, enc)
			if !ok {
				id, _, _ := f.str("id")
				s.respLog("%s (reasoning item %q): encrypted_content does not open with this server's key; left out", field, id)
				return nil
			}
			text = opened
		}
		c.reasoning(text)
	case "":
		return badRequest(field+".type", "%s.type is required", field)
	default:
		return badRequest(field+".type", "%s.type %q is not supported by this server", field, typ)
	}
	return nil
}

// toolsParam matches llm's parameter names for tools ("tools[2].function.name").
var toolsParam = regexp.MustCompile(`^tools\[(\d+)\](?:\.function)?`)

// remap renames the request fields llm names by their chat completion
// names to those of the Responses API.
func (r *responsesRequest) remap(e *apiError) *apiError {
	p := e.param
	switch {
	case p == "":
	case strings.HasPrefix(p, "messages"):
		p = "input"
	case strings.HasPrefix(p, "response_format"):
		p = strings.Replace(strings.Replace(p, "response_format", "text.format", 1), ".json_schema", "", 1)
	case p == "reasoning_effort":
		p = "reasoning.effort"
	case p == "max_tokens" || p == "max_completion_tokens":
		p = "max_output_tokens"
	case toolsParam.MatchString(p):
		m := toolsParam.FindStringSubmatch(p)
		var k int
		fmt.Sscan(m[1], &k)
		if k < len(r.toolIndex) {
			k = r.toolIndex[k]
		}
		p = fmt.Sprintf("tools[%d]", k) + p[len(m[0]):]
	}
	e2 := *e
	e2.param = p
	return &e2
}

// respBuilder turns a chat stream's events into output items, sending the
// stream's events as it goes when emit is set.
type respBuilder struct {
	s      *Server
	r      *responsesRequest
	output []any
	emit   func(respEvent) error
	err    error // emit's first failure

	open      string // "", "reasoning" or "message": the item being written
	openIndex int
	openID    string
	text      strings.Builder
	calls     int
	finish    llm.FinishReason
	conv      respConversation // the assistant's turn, for the store
}

func intPtr(i int) *int { return &i }

func (b *respBuilder) send(ev respEvent) {
	if b.emit != nil && b.err == nil {
		b.err = b.emit(ev)
	}
}

// event takes one event of the chat stream.
func (b *respBuilder) event(ev llm.Event) {
	switch ev.Kind {
	case llm.KindReasoning:
		b.delta("reasoning", ev.Text)
	case llm.KindContent:
		b.delta("message", ev.Text)
	case llm.KindToolCall:
		b.call(ev.ToolCall)
	case llm.KindFinish:
		b.finish = ev.Finish
	}
}

// delta adds text to the open item of the kind, opening it first.
func (b *respBuilder) delta(kind, text string) {
	if text == "" {
		return
	}
	b.openItem(kind)
	b.text.WriteString(text)
	ev := respEvent{Type: "response.output_text.delta", OutputIndex: intPtr(b.openIndex), ItemID: b.openID, ContentIndex: intPtr(0), Delta: &text, Logprobs: []any{}}
	if kind == "reasoning" {
		ev.Type, ev.Logprobs = "response.reasoning_text.delta", nil
	}
	b.send(ev)
}

// openItem opens an item of the kind ("reasoning" or "message") unless it
// is open, closing the one open.
func (b *respBuilder) openItem(kind string) {
	if b.open != kind {
		b.closeItem("completed")
		b.open, b.openIndex, b.text = kind, len(b.output), strings.Builder{}
		idx := intPtr(b.openIndex)
		if kind == "reasoning" {
			b.openID = b.s.newID("rs_")
			item := &respReasoningItem{ID: b.openID, Type: "reasoning", Summary: []any{}, Content: []respReasoningText{}}
			b.output = append(b.output, item)
			b.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: item})
			b.send(respEvent{Type: "response.content_part.added", OutputIndex: idx, ItemID: b.openID, ContentIndex: intPtr(0),
				Part: respReasoningText{Type: "reasoning_text"}})
		} else {
			b.openID = b.s.newID("msg_")
			item := &respMessageItem{ID: b.openID, Type: "message", Status: "in_progress", Role: "assistant", Content: []respOutputText{}}
			b.output = append(b.output, item)
			b.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: item})
			b.send(respEvent{Type: "response.content_part.added", OutputIndex: idx, ItemID: b.openID, ContentIndex: intPtr(0),
				Part: outputText("")})
		}
	}
}

func outputText(text string) respOutputText {
	return respOutputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// closeItem finishes the open item, if any, with the given status.
func (b *respBuilder) closeItem(status string) {
	if b.open == "" {
		return
	}
	text := b.text.String()
	idx, ci := intPtr(b.openIndex), intPtr(0)
	switch item := b.output[b.openIndex].(type) {
	case *respReasoningItem:
		part := respReasoningText{Type: "reasoning_text", Text: text}
		item.Content = []respReasoningText{part}
		if b.r.includeEncrypted {
			sealed := b.s.sealer.seal(sealEncryptedContent, text)
			item.EncryptedContent = &sealed
		}
		b.send(respEvent{Type: "response.reasoning_text.done", OutputIndex: idx, ItemID: item.ID, ContentIndex: ci, Text: &text})
		b.send(respEvent{Type: "response.content_part.done", OutputIndex: idx, ItemID: item.ID, ContentIndex: ci, Part: part})
		b.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
		b.conv.reasoning(text)
	case *respMessageItem:
		part := outputText(text)
		item.Content, item.Status = []respOutputText{part}, status
		b.send(respEvent{Type: "response.output_text.done", OutputIndex: idx, ItemID: item.ID, ContentIndex: ci, Text: &text, Logprobs: []any{}})
		b.send(respEvent{Type: "response.content_part.done", OutputIndex: idx, ItemID: item.ID, ContentIndex: ci, Part: part})
		b.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
		b.conv.text(text)
	}
	b.open = ""
}

// call adds a tool call item (only the first without parallel_tool_calls).
func (b *respBuilder) call(tc *llm.ToolCall) {
	if tc == nil || (!b.r.parallel && b.calls > 0) {
		return
	}
	b.closeItem("completed")
	b.calls++
	idx := intPtr(len(b.output))
	if tc.Custom {
		item := &respCustomCall{ID: b.s.newID("ctc_"), Type: "custom_tool_call", Status: "in_progress", CallID: tc.ID, Name: tc.Name}
		b.output = append(b.output, item)
		b.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: item})
		input := tc.Input
		b.send(respEvent{Type: "response.custom_tool_call_input.delta", OutputIndex: idx, ItemID: item.ID, Delta: &input})
		b.send(respEvent{Type: "response.custom_tool_call_input.done", OutputIndex: idx, ItemID: item.ID, Input: &input})
		item.Input, item.Status = input, "completed"
		b.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
	} else {
		item := &respFunctionCall{ID: b.s.newID("fc_"), Type: "function_call", Status: "in_progress", CallID: tc.ID, Name: tc.Name}
		b.output = append(b.output, item)
		b.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: item})
		args := tc.Arguments
		b.send(respEvent{Type: "response.function_call_arguments.delta", OutputIndex: idx, ItemID: item.ID, Delta: &args})
		b.send(respEvent{Type: "response.function_call_arguments.done", OutputIndex: idx, ItemID: item.ID, Name: tc.Name, Arguments: &args})
		item.Arguments, item.Status = args, "completed"
		b.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
	}
	b.conv.call(*tc)
}

// response returns the response as it stands: in progress until the
// stream finished.
func (b *respBuilder) response(id string, created int64, st *llm.Stream, done bool) *responseObject {
	resp := b.r.base
	resp.ID, resp.CreatedAt, resp.Status = id, created, "in_progress"
	resp.Output = []any{}
	if !done {
		return &resp
	}
	resp.Output = slices.Clone(b.output)
	resp.Status = "completed"
	if b.finish == llm.FinishLength {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &respIncomplete{Reason: "max_output_tokens"}
	}
	u := st.Usage()
	resp.Usage = &respUsage{InputTokens: u.PromptTokens, InputTokensDetails: promptTokensDetails{CachedTokens: u.CachedTokens},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: *detailsOf(u), TotalTokens: u.TotalTokens}
	return &resp
}

// complete closes the open item and returns the finished response,
// keeping it when the request says store.
func (b *respBuilder) complete(id string, created int64, st *llm.Stream) *responseObject {
	status := "completed"
	if b.finish == llm.FinishLength {
		status = "incomplete"
	}
	if b.calls == 0 && !slices.ContainsFunc(b.output, func(it any) bool { _, ok := it.(*respMessageItem); return ok }) {
		b.openItem("message") // an answer without text still has its message
	}
	b.closeItem(status)
	resp := b.response(id, created, st, true)
	if b.r.store {
		body, err := marshal(resp)
		if err == nil {
			conv := append(slices.Clip(b.r.history), b.conv.done()...)
			b.s.responses.put(&storedResponse{id: id, body: body, conversation: conv})
		}
	}
	return resp
}

func (s *Server) handleResponses(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r, aerr := s.parseResponses(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("resp_")
	created := start.Unix()
	rctx, release := s.watch(ctx)
	st, err := s.lm.Chat(rctx, r.req)
	if err != nil {
		release()
		writeAPIError(ctx, r.remap(llmError(err)))
		return
	}
	if r.stream {
		s.streamResponse(ctx, id, created, st, r, start, rctx, release)
		return
	}
	defer release()
	defer st.Close()
	b := &respBuilder{s: s, r: r}
	var fail error
	for ev := range st.Events() {
		if failed(ev) {
			fail = ev.Err
			if fail == nil {
				fail = fmt.Errorf("generation ended: %s", ev.Finish)
			}
			continue
		}
		b.event(ev)
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
	writeJSON(ctx, b.complete(id, created, st))
	s.logStream(id, fasthttp.StatusOK, st, start)
}

// streamResponse sends a response as server-sent events: the lifecycle
// events, each item's events, then response.completed,
// response.incomplete or response.failed.
func (s *Server) streamResponse(ctx *fasthttp.RequestCtx, id string, created int64, st *llm.Stream, r *responsesRequest, start time.Time, rctx context.Context, release func()) {
	setSSEHeaders(ctx)
	s.streamBody(ctx, func(bw *bufio.Writer) {
		defer release()
		defer st.Close()
		seq := 0
		emit := func(ev respEvent) error {
			ev.SequenceNumber = seq
			seq++
			data, err := marshal(ev)
			if err != nil {
				return fmt.Errorf("encoding a %s event: %w", ev.Type, err)
			}
			bw.WriteString("event: ")
			bw.WriteString(ev.Type)
			bw.WriteString("\ndata: ")
			bw.Write(data)
			bw.WriteString("\n\n")
			return bw.Flush()
		}
		b := &respBuilder{s: s, r: r, emit: emit}
		b.send(respEvent{Type: "response.created", Response: b.response(id, created, st, false)})
		b.send(respEvent{Type: "response.in_progress", Response: b.response(id, created, st, false)})
		var fail *llm.Event
		for ev := range st.Events() {
			if failed(ev) {
				fail = &ev
				continue
			}
			b.event(ev)
			if b.err != nil {
				break
			}
		}
		status := fasthttp.StatusOK
		switch {
		case b.err != nil || clientGone(rctx):
			status = statusClientClosed
		case fail != nil:
			status = s.failureStatus(fail.Err)
			resp := b.response(id, created, st, false)
			resp.Status = "failed"
			resp.Output = slices.Clone(b.output)
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			json.Unmarshal(generationFailed(*fail), &e)
			resp.Error = &respError{Code: "server_error", Message: e.Error.Message}
			b.send(respEvent{Type: "response.failed", Response: resp})
		default:
			resp := b.complete(id, created, st)
			typ := "response.completed"
			if resp.Status == "incomplete" {
				typ = "response.incomplete"
			}
			b.send(respEvent{Type: typ, Response: resp})
		}
		if b.err != nil {
			status = statusClientClosed
		}
		s.logStream(id, status, st, start)
	})
}

// routeResponse answers GET and DELETE /v1/responses/{id}.
func (s *Server) routeResponse(ctx *fasthttp.RequestCtx, id string) {
	path := "/v1/responses/" + id
	method := string(ctx.Method())
	if method != fasthttp.MethodGet && method != fasthttp.MethodDelete {
		writeError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("%s takes GET or DELETE, not %s", path, method), "")
		ctx.Response.Header.Set("Allow", "GET, DELETE") // after writeError, which resets the headers
		return
	}
	if s.cfg.APIKey != "" && !s.authorized(ctx) {
		writeUnauthorized(ctx)
		return
	}
	if !s.loaded.Load() {
		s.writeNotReady(ctx)
		return
	}
	if !s.admit(ctx, path) {
		return
	}
	defer s.release(ctx)
	if strings.Contains(id, "/") {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no endpoint %s", path), "")
		return
	}
	if method == fasthttp.MethodDelete {
		if !s.responses.delete(id) {
			writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("No response found with id '%s'.", id), "")
			return
		}
		writeJSON(ctx, struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Deleted bool   `json:"deleted"`
		}{id, "response.deleted", true})
		return
	}
	stored, ok := s.responses.get(id)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("No response found with id '%s'.", id), "")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(stored.body)
}

// responseImages resolves the input_image parts of a message's content:
// image_url a data: URL or an http(s) URL of an allowed host; file_id is
// not supported.
func (s *Server) responseImages(v any, field string) ([]llm.Image, *apiError) {
	parts, _ := v.([]any)
	var out []llm.Image
	for k, part := range parts {
		po, _ := part.(*jsonvalue.Object)
		if po == nil {
			continue
		}
		if t, _ := po.Get("type"); t != "input_image" {
			continue
		}
		pf := fmt.Sprintf("%s[%d]", field, k)
		if !s.lm.HasVision() {
			return nil, badRequest(pf+".type", "%s.type \"input_image\" is not supported: this model takes no images", pf)
		}
		p := object{jsonvalue.ObjectFields(po, pf)}
		u, ok, err := p.str("image_url")
		if err != nil {
			return nil, err
		}
		if !ok || u == "" {
			if p.has("file_id") {
				return nil, badRequest(pf+".file_id", "%s.file_id: files are not supported; send the image as image_url (a data: URL)", pf)
			}
			return nil, badRequest(pf+".image_url", "%s.image_url: required", pf)
		}
		data, err := s.media.image(u, pf+".image_url")
		if err != nil {
			return nil, err
		}
		out = append(out, llm.Image{Data: data})
	}
	return out, nil
}
