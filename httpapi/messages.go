package httpapi

// The Anthropic Messages API: POST /v1/messages and
// /v1/messages/count_tokens, as the @anthropic-ai/sdk clients and Claude
// Code use them.
//
// A request becomes an llm.ChatRequest: the system prompt a system message,
// each message's text, tool_use, tool_result and thinking blocks the
// assistant, user and tool messages of the chat template, the tools and
// tool_choice llm's, thinking llm's Thinking and ThinkingBudget. The answer
// is a message of content blocks (thinking, text, tool_use) in the order
// the model produced them, or, streamed, Anthropic's server-sent events
// (message_start, ping, content_block_start/delta/stop per block,
// message_delta, message_stop). Errors have Anthropic's shape
// (writeError does that on these paths) and a 400 names the field at
// fault in its message, as "messages.1.content.0.type: ...".
//
// Thinking blocks are signed: the signature is the thinking text sealed
// with the server's reasoning key (s.sealer, sealSignature). A thinking
// block sent back with a signature that opens to exactly its text becomes
// its assistant turn's reasoning again; any other (unsigned, altered,
// another server's) is left out of the prompt with a log line, never
// refused, as are redacted_thinking blocks, so that a conversation moved
// between servers still works.
//
// What this server cannot do is left out quietly (with a log line) where a
// client may send it by default, and refused where it carries the user's
// input: Anthropic's server tools (web_search, bash, text_editor, ... any
// tool whose type is not "custom") and mcp_servers and container are left
// out, the model answering without them; image and document blocks are a
// 400 (this server takes text only). Unknown top-level fields (the betas'
// context_management and the like) are ignored.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// messagesPingInterval is how often a stream that has nothing to send
// sends a ping event, so that proxies keep the connection open through a
// long prefill.
const messagesPingInterval = 15 * time.Second

// messagesRequest is a Messages API request read from the wire.
type messagesRequest struct {
	req    llm.ChatRequest
	stream bool
	model  string // the model the response names (Server.responseModel)
	// toolIndex maps the index of each tool handed to llm to its index in
	// the request's tools (server tools are left out), for error messages.
	toolIndex []int
	// notes are log lines about what the request asked and this server
	// left out: server tools, MCP servers, unverified thinking blocks.
	notes []string
}

// messagesRequiredStr reads a string member that must be present.
func messagesRequiredStr(o object, key string) (string, *apiError) {
	v, ok, err := o.str(key)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", badRequest(o.f.Name(key), "%s: required", o.f.Name(key))
	}
	return v, nil
}

// messagesElem reads the element at path of an array, which must be an
// object.
func messagesElem(v any, path string) (object, *apiError) {
	o, ok := v.(*jsonvalue.Object)
	if !ok {
		return object{}, badRequest(path, "%s: must be an object, got %s", path, jsonvalue.Kind(v))
	}
	return object{jsonvalue.ObjectFields(o, path)}, nil
}

// messagesUnsupported is the 400 of a content block of a type this server or
// this place does not take.
func messagesUnsupported(path, typ string) *apiError {
	switch typ {
	case "image", "document":
		return badRequest(path+".type", "%s.type: %s blocks are not supported: this server takes text only", path, typ)
	}
	return badRequest(path+".type", "%s.type: %q blocks are not supported here", path, typ)
}

// messagesText reads a content that is a string or an array of text blocks
// (their citations ignored) and joins the blocks' texts with newlines.
// Absent (nil) is "". The text of each block with cache_control is added to
// breaks (see cacheBreak).
func messagesText(v any, path string, breaks *[]string) (string, *apiError) {
	switch c := v.(type) {
	case nil:
		return "", nil
	case string:
		return c, nil
	case []any:
		parts := make([]string, 0, len(c))
		for k, b := range c {
			bp := path + "." + strconv.Itoa(k)
			bo, err := messagesElem(b, bp)
			if err != nil {
				return "", err
			}
			typ, err := messagesRequiredStr(bo, "type")
			if err != nil {
				return "", err
			}
			if typ != "text" {
				return "", messagesUnsupported(bp, typ)
			}
			text, err := messagesRequiredStr(bo, "text")
			if err != nil {
				return "", err
			}
			cacheBreak(bo, text, breaks)
			parts = append(parts, text)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", badRequest(path, "%s: must be a string or an array of text blocks, got %s", path, jsonvalue.Kind(v))
}

// cacheBreak adds a block's text to breaks when the block carries
// cache_control: Anthropic's clients mark where the next request will
// diverge from this one (Claude Code marks the last block of the last
// message), and the prefix cache keeps its state there
// (llm.ChatRequest.CacheBreaks).
func cacheBreak(block object, text string, breaks *[]string) {
	if block.has("cache_control") && text != "" {
		*breaks = append(*breaks, text)
	}
}

// billingHeader opens the system block in which Claude Code sends its
// version and a fingerprint of the conversation: no instruction, and it
// would make the prompts of two conversations differ from their first
// tokens, defeating the prefix cache.
const billingHeader = "x-anthropic-billing-header:"

// withoutBillingHeader returns a system prompt without Claude Code's
// billing header block.
func withoutBillingHeader(v any) any {
	blocks, ok := v.([]any)
	if !ok {
		return v
	}
	out := make([]any, 0, len(blocks))
	for _, b := range blocks {
		if o, ok := b.(*jsonvalue.Object); ok {
			if t, _ := o.Get("text"); t != nil {
				if text, _ := t.(string); strings.HasPrefix(text, billingHeader) {
					continue
				}
			}
		}
		out = append(out, b)
	}
	return out
}

// messagesJoin joins two texts with a newline, leaving out an empty one.
func messagesJoin(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

// parseMessages reads a Messages API request; counting reads a
// count_tokens request, which has no max_tokens. llm checks the values.
func (s *Server) parseMessages(body []byte, counting bool) (*messagesRequest, *apiError) {
	o, err := parseBody(body)
	if err != nil {
		return nil, err
	}
	if err := s.checkModel(o); err != nil {
		return nil, err
	}
	r := &messagesRequest{model: s.responseModel(o)}
	q := &r.req
	mt, ok, err := o.integer("max_tokens")
	if err != nil {
		return nil, err
	}
	if !ok && !counting {
		return nil, badRequest("max_tokens", "max_tokens: required")
	}
	if ok && mt < 1 {
		return nil, badRequest("max_tokens", "max_tokens: must be at least 1, got %d", mt)
	}
	q.MaxTokens = mt
	if v, ok := o.get("system"); ok {
		text, err := messagesText(withoutBillingHeader(v), "system", &q.CacheBreaks)
		if err != nil {
			return nil, err
		}
		if text != "" {
			q.Messages = append(q.Messages, llm.Message{Role: "system", Content: text})
		}
	}
	msgs, ok, err := o.array("messages")
	if err != nil {
		return nil, err
	}
	if !ok || len(msgs) == 0 {
		return nil, badRequest("messages", "messages: must be a non-empty array")
	}
	if err := s.messagesConversation(msgs, r); err != nil {
		return nil, err
	}
	if err := messagesSampling(o, &q.Params); err != nil {
		return nil, err
	}
	if q.LoRA, err = s.requestLoRA(o); err != nil {
		return nil, err
	}
	if r.stream, _, err = o.boolean("stream"); err != nil {
		return nil, err
	}
	if err := messagesTools(o, r); err != nil {
		return nil, err
	}
	if err := messagesThinking(o, q); err != nil {
		return nil, err
	}
	if q.ResponseFormat, err = messagesFormat(o, "output_format"); err != nil {
		return nil, err
	}
	if q.TemplateArgs, err = parseTemplateKwargs(o); err != nil {
		return nil, err
	}
	if oc, ok, err := o.obj("output_config"); err != nil {
		return nil, err
	} else if ok {
		if q.ResponseFormat == nil {
			if q.ResponseFormat, err = messagesFormat(oc, "format"); err != nil {
				return nil, err
			}
		}
		if err := s.messagesEffort(oc, q); err != nil {
			return nil, err
		}
	}
	// Accepted and without effect here.
	if _, _, err := o.obj("metadata"); err != nil {
		return nil, err
	}
	if _, _, err := o.str("service_tier"); err != nil {
		return nil, err
	}
	// mcp_servers and container serve Anthropic's hosted tools, which this
	// server does not run: left out (the model answers without them), not
	// refused, since clients send them along with ordinary requests.
	for _, key := range []string{"mcp_servers", "container"} {
		if o.has(key) {
			r.notes = append(r.notes, fmt.Sprintf("left out %s: not supported", key))
		}
	}
	return r, nil
}

// messagesSampling reads temperature, top_p, top_k and stop_sequences.
func messagesSampling(o object, p *llm.Params) *apiError {
	if v, ok, err := o.float("temperature"); err != nil {
		return err
	} else if ok {
		p.Temperature = llm.F64(v)
	}
	if v, ok, err := o.float("top_p"); err != nil {
		return err
	} else if ok {
		p.TopP = llm.F64(v)
	}
	if v, ok, err := o.integer("top_k"); err != nil {
		return err
	} else if ok {
		p.TopK = llm.Int(v)
	}
	stops, _, err := o.array("stop_sequences")
	if err != nil {
		return err
	}
	for i, v := range stops {
		str, ok := v.(string)
		if !ok {
			return badRequest("stop_sequences", "stop_sequences.%d: must be a string, got %s", i, jsonvalue.Kind(v))
		}
		p.Stop = append(p.Stop, str)
	}
	return nil
}

// messagesConversation turns the request's messages into r.req.Messages
// (after the system message). Consecutive messages of one role are
// merged, as Anthropic does; a user message's tool_result blocks become
// tool messages ahead of its text; an assistant message's text, tool_use
// and verified thinking blocks make one assistant message. A final
// assistant message with text is a prefill: the answer continues it.
//
// System messages among the messages (Claude Code's
// mid-conversation-system beta) join the system prompt while no other
// message came before them; later ones, which the chat template cannot
// place (its system message must come first), become text of the next
// user turn, after its tool results (or a user turn of their own where
// an assistant message or the end follows), so that a conversation's
// prompt keeps its prefix as it grows.
func (s *Server) messagesConversation(msgs []any, r *messagesRequest) *apiError {
	out := r.req.Messages
	add := func(m llm.Message) {
		if n := len(out); n > 0 && out[n-1].Role == m.Role && (m.Role == "user" || m.Role == "assistant") {
			last := &out[n-1]
			last.Content = messagesJoin(last.Content, m.Content)
			last.Reasoning = messagesJoin(last.Reasoning, m.Reasoning)
			last.ToolCalls = append(last.ToolCalls, m.ToolCalls...)
			return
		}
		out = append(out, m)
	}
	var pending []string // system texts for the next user turn
	flush := func() {
		if len(pending) > 0 {
			add(llm.Message{Role: "user", Content: strings.Join(pending, "\n")})
			pending = nil
		}
	}
	started := false // a user or assistant message came
	for i, v := range msgs {
		p := "messages." + strconv.Itoa(i)
		mo, err := messagesElem(v, p)
		if err != nil {
			return err
		}
		role, err := messagesRequiredStr(mo, "role")
		if err != nil {
			return err
		}
		if role != "user" && role != "assistant" && role != "system" {
			return badRequest(p+".role", "%s.role: must be \"user\", \"assistant\" or \"system\", got %q", p, role)
		}
		content, ok := mo.get("content")
		if !ok {
			return badRequest(p+".content", "%s.content: required", p)
		}
		if role == "system" {
			text, err := messagesText(content, p+".content", &r.req.CacheBreaks)
			if err != nil {
				return err
			}
			switch {
			case started:
				pending = append(pending, text)
			case len(out) > 0: // the system prompt
				out[0].Content = messagesJoin(out[0].Content, text)
			default:
				out = append(out, llm.Message{Role: "system", Content: text})
			}
			continue
		}
		started = true
		var ms []llm.Message
		switch c := content.(type) {
		case string:
			ms = []llm.Message{{Role: role, Content: c}}
		case []any:
			if ms, err = s.messageBlocks(c, p, role, r); err != nil {
				return err
			}
		default:
			return badRequest(p+".content", "%s.content: must be a string or an array of content blocks, got %s", p, jsonvalue.Kind(content))
		}
		if role == "assistant" {
			flush()
		} else if len(pending) > 0 {
			sys := strings.Join(pending, "\n")
			pending = nil
			if last := &ms[len(ms)-1]; last.Role == "user" {
				last.Content = messagesJoin(sys, last.Content)
			} else {
				ms = append(ms, llm.Message{Role: "user", Content: sys})
			}
		}
		for _, m := range ms {
			add(m)
		}
	}
	flush()
	if !started {
		return badRequest("messages", "messages: holds no user or assistant message")
	}
	if last := out[len(out)-1]; last.Role == "assistant" && len(last.ToolCalls) == 0 && last.Content != "" {
		r.req.ContinueFinalMessage = true
	}
	r.req.Messages = out
	return nil
}

// messageBlocks reads the content blocks of message p, whose role is
// role, into the llm messages they make.
func (s *Server) messageBlocks(blocks []any, p, role string, r *messagesRequest) ([]llm.Message, *apiError) {
	var tools []llm.Message
	var texts, reasoning []string
	var calls []llm.ToolCall
	var images []llm.Image
	for j, b := range blocks {
		bp := fmt.Sprintf("%s.content.%d", p, j)
		bo, err := messagesElem(b, bp)
		if err != nil {
			return nil, err
		}
		typ, err := messagesRequiredStr(bo, "type")
		if err != nil {
			return nil, err
		}
		wrongRole := func(want string) *apiError {
			return badRequest(bp+".type", "%s.type: %s blocks belong in %s messages, not %s", bp, typ, want, role)
		}
		switch typ {
		case "text":
			text, err := messagesRequiredStr(bo, "text")
			if err != nil {
				return nil, err
			}
			cacheBreak(bo, text, &r.req.CacheBreaks)
			texts = append(texts, text)
		case "tool_result":
			if role != "user" {
				return nil, wrongRole("user")
			}
			id, err := messagesRequiredStr(bo, "tool_use_id")
			if err != nil {
				return nil, err
			}
			cv, _ := bo.get("content")
			text, err := messagesText(cv, bp+".content", &r.req.CacheBreaks)
			if err != nil {
				return nil, err
			}
			cacheBreak(bo, text, &r.req.CacheBreaks)
			isErr, _, err := bo.boolean("is_error")
			if err != nil {
				return nil, err
			}
			if isErr {
				// Say so in the text: the template has no place for it.
				text = strings.TrimSuffix("Error: "+text, ": ")
			}
			tools = append(tools, llm.Message{Role: "tool", Content: text, ToolCallID: id})
		case "tool_use":
			if role != "assistant" {
				return nil, wrongRole("assistant")
			}
			id, err := messagesRequiredStr(bo, "id")
			if err != nil {
				return nil, err
			}
			name, err := messagesRequiredStr(bo, "name")
			if err != nil {
				return nil, err
			}
			in, ok, err := bo.obj("input")
			if err != nil {
				return nil, err
			}
			args := "{}"
			if ok {
				raw, merr := json.Marshal(in.f.Obj)
				if merr != nil {
					return nil, badRequest(bp+".input", "%s.input: %v", bp, merr)
				}
				args = string(raw)
			}
			calls = append(calls, llm.ToolCall{ID: id, Name: name, Arguments: args})
		case "thinking":
			if role != "assistant" {
				return nil, wrongRole("assistant")
			}
			thinking, err := messagesRequiredStr(bo, "thinking")
			if err != nil {
				return nil, err
			}
			sig, _, err := bo.str("signature")
			if err != nil {
				return nil, err
			}
			if text, ok := s.sealer.open(sealSignature, sig); ok && text == thinking {
				reasoning = append(reasoning, thinking)
			} else {
				r.notes = append(r.notes, fmt.Sprintf("left out the thinking of %s: its signature is not this server's", bp))
			}
		case "image":
			if !s.lm.HasVision() {
				return nil, messagesUnsupported(bp, typ)
			}
			if role != "user" {
				return nil, wrongRole("user")
			}
			img, err := s.messagesImage(bo, bp)
			if err != nil {
				return nil, err
			}
			images = append(images, img)
		case "redacted_thinking":
			if role != "assistant" {
				return nil, wrongRole("assistant")
			}
			r.notes = append(r.notes, fmt.Sprintf("left out %s: redacted thinking", bp))
		default:
			return nil, messagesUnsupported(bp, typ)
		}
	}
	if role == "assistant" {
		return []llm.Message{{Role: "assistant", Content: strings.Join(texts, "\n"),
			Reasoning: strings.Join(reasoning, "\n"), ToolCalls: calls}}, nil
	}
	if len(texts) > 0 || len(images) > 0 || len(tools) == 0 {
		// The images go before the text (llm.Message.Images).
		tools = append(tools, llm.Message{Role: "user", Images: images, Content: strings.Join(texts, "\n")})
	}
	return tools, nil
}

// messagesImage reads an image block's source: {"type": "base64",
// "media_type", "data"} or {"type": "url", "url"} (allowed hosts only).
func (s *Server) messagesImage(bo object, bp string) (llm.Image, *apiError) {
	src, ok, err := bo.obj("source")
	if err != nil {
		return llm.Image{}, err
	}
	if !ok {
		return llm.Image{}, badRequest(bp+".source", "%s.source: required", bp)
	}
	typ, err := messagesRequiredStr(src, "type")
	if err != nil {
		return llm.Image{}, err
	}
	var data []byte
	switch typ {
	case "base64":
		mt, err := messagesRequiredStr(src, "media_type")
		if err != nil {
			return llm.Image{}, err
		}
		b64, err := messagesRequiredStr(src, "data")
		if err != nil {
			return llm.Image{}, err
		}
		if data, err = decodeImageData(mt, b64, bp+".source"); err != nil {
			return llm.Image{}, err
		}
	case "url":
		u, err := messagesRequiredStr(src, "url")
		if err != nil {
			return llm.Image{}, err
		}
		if data, err = s.media.image(u, bp+".source.url"); err != nil {
			return llm.Image{}, err
		}
	default:
		return llm.Image{}, badRequest(bp+".source.type", "%s.source.type: must be \"base64\" or \"url\", got %q", bp, typ)
	}
	return llm.Image{Data: data}, nil
}

// messagesTools reads tools and tool_choice. Tools of a type other than
// "custom" are Anthropic's server tools, left out with a log line.
func messagesTools(o object, r *messagesRequest) *apiError {
	q := &r.req
	tools, _, err := o.array("tools")
	if err != nil {
		return err
	}
	for i, t := range tools {
		tp := "tools." + strconv.Itoa(i)
		to, err := messagesElem(t, tp)
		if err != nil {
			return err
		}
		typ, _, err := to.str("type")
		if err != nil {
			return err
		}
		name, _, err := to.str("name")
		if err != nil {
			return err
		}
		if typ != "" && typ != "custom" {
			r.notes = append(r.notes, fmt.Sprintf("left out %s (%q, type %s): server tools are not supported", tp, name, typ))
			continue
		}
		if name == "" {
			return badRequest(tp+".name", "%s.name: required", tp)
		}
		tool := llm.Tool{Name: name}
		if tool.Description, _, err = to.str("description"); err != nil {
			return err
		}
		if sc, ok, err := to.obj("input_schema"); err != nil {
			return err
		} else if ok {
			raw, merr := json.Marshal(sc.f.Obj)
			if merr != nil {
				return badRequest(tp+".input_schema", "%s.input_schema: %v", tp, merr)
			}
			tool.Parameters = raw
		}
		if tool.Strict, _, err = to.boolean("strict"); err != nil {
			return err
		}
		q.Tools = append(q.Tools, tool)
		r.toolIndex = append(r.toolIndex, i)
	}
	tc, ok, err := o.obj("tool_choice")
	if err != nil || !ok {
		return err
	}
	typ, err := messagesRequiredStr(tc, "type")
	if err != nil {
		return err
	}
	switch typ {
	case "auto", "none":
		q.ToolChoice.Mode = typ
	case "any":
		q.ToolChoice.Mode = "required"
	case "tool":
		name, err := messagesRequiredStr(tc, "name")
		if err != nil {
			return err
		}
		q.ToolChoice = llm.ToolChoice{Mode: "function", Function: name}
	default:
		return badRequest("tool_choice.type", "tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\", got %q", typ)
	}
	// disable_parallel_tool_use is accepted and not enforced: a turn's
	// calls come in order and clients run them so.
	if _, _, err := tc.boolean("disable_parallel_tool_use"); err != nil {
		return err
	}
	return nil
}

// messagesThinking reads thinking: enabled (with budget_tokens, the
// reasoning's bound), adaptive (on, unbounded) or disabled; absent leaves
// it to the server's default.
func messagesThinking(o object, q *llm.ChatRequest) *apiError {
	th, ok, err := o.obj("thinking")
	if err != nil || !ok {
		return err
	}
	typ, err := messagesRequiredStr(th, "type")
	if err != nil {
		return err
	}
	switch typ {
	case "enabled":
		q.Thinking = llm.Bool(true)
		b, ok, err := th.integer("budget_tokens")
		if err != nil {
			return err
		}
		if ok && b < 1 {
			return badRequest("thinking.budget_tokens", "thinking.budget_tokens: must be at least 1, got %d", b)
		}
		q.ThinkingBudget = b
	case "adaptive":
		q.Thinking = llm.Bool(true)
	case "disabled":
		q.Thinking = llm.Bool(false)
	default:
		return badRequest("thinking.type", "thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\", got %q", typ)
	}
	return nil
}

// messagesEffort reads output_config.effort (low, medium, high, xhigh or
// max) into the chat template's reasoning_effort where the template reads
// one (Qwen3.8's) and the request's chat_template_kwargs do not set it;
// max is given as xhigh, the highest level reasoning_effort names.
// Anthropic's effort does not turn thinking on or off (thinking does), so
// unlike reasoning_effort on the other APIs it leaves enable_thinking.
func (s *Server) messagesEffort(oc object, q *llm.ChatRequest) *apiError {
	effort, ok, err := oc.str("effort")
	if err != nil || !ok {
		return err
	}
	switch effort {
	case "low", "medium", "high", "xhigh":
	case "max":
		effort = "xhigh"
	default:
		return badRequest("output_config.effort", "output_config.effort: must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", got %q", effort)
	}
	if _, set := q.TemplateArgs[llm.ReasoningEffortVar]; set || !s.lm.TemplateReads(llm.ReasoningEffortVar) {
		return nil
	}
	if q.TemplateArgs == nil {
		q.TemplateArgs = map[string]any{}
	}
	q.TemplateArgs[llm.ReasoningEffortVar] = effort
	return nil
}

// messagesFormat reads a structured output format ({"type":
// "json_schema", "schema": {...}}) at key of o: nil when absent.
func messagesFormat(o object, key string) (*llm.ResponseFormat, *apiError) {
	f, ok, err := o.obj(key)
	if err != nil || !ok {
		return nil, err
	}
	typ, err := messagesRequiredStr(f, "type")
	if err != nil {
		return nil, err
	}
	if typ != "json_schema" {
		return nil, badRequest(f.f.Name("type"), "%s: must be \"json_schema\", got %q", f.f.Name("type"), typ)
	}
	rf := &llm.ResponseFormat{Type: "json_schema"}
	if v, ok := f.get("schema"); ok {
		raw, merr := marshalValue(v)
		if merr != nil {
			return nil, badRequest(f.f.Name("schema"), "%s: %v", f.f.Name("schema"), merr)
		}
		rf.Schema = raw
	}
	return rf, nil
}

// llmToolField matches llm's names of tool fields, for messagesError.
var llmToolField = regexp.MustCompile(`tools\[(\d+)\](\.function\.parameters|\.function\.name|\.function)?`)

// llmFieldNames renames llm's (OpenAI's) request fields to the Messages
// API's.
var llmFieldNames = strings.NewReplacer(
	"thinking_token_budget", "thinking.budget_tokens",
	"response_format", "output_format",
	`tool_choice "required"`, `tool_choice "any"`,
	"a named function", "a named tool",
)

// llmError answers an error of llm for this request, with the Messages
// API's field names in its message.
func (r *messagesRequest) llmError(err error) *apiError {
	e := llmError(err)
	if e.status != fasthttp.StatusBadRequest {
		return e
	}
	fix := func(s string) string {
		s = llmToolField.ReplaceAllStringFunc(s, func(m string) string {
			sub := llmToolField.FindStringSubmatch(m)
			i, _ := strconv.Atoi(sub[1])
			if i < len(r.toolIndex) {
				i = r.toolIndex[i]
			}
			suffix := ""
			switch sub[2] {
			case ".function.parameters":
				suffix = ".input_schema"
			case ".function.name":
				suffix = ".name"
			}
			return "tools." + strconv.Itoa(i) + suffix
		})
		return llmFieldNames.Replace(s)
	}
	e.message, e.param = fix(e.message), fix(e.param)
	return e
}

// Response shapes.
type (
	// messagesBlock is a content block of an answer: thinking (Thinking,
	// Signature), text (Text) or tool_use (ID, Name, Input).
	messagesBlock struct {
		Type      string          `json:"type"`
		Thinking  *string         `json:"thinking,omitempty"`
		Signature *string         `json:"signature,omitempty"`
		Text      *string         `json:"text,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
	}
	// messagesUsage is Anthropic's token accounting. Its input_tokens
	// leave out the prompt tokens read from the cache, which
	// cache_read_input_tokens counts: input_tokens is the prompt minus
	// the cached tokens. This server writes no cache entries a client
	// pays for: cache_creation_input_tokens is 0.
	messagesUsage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		OutputTokens             int `json:"output_tokens"`
	}
	messagesResponse struct {
		ID           string          `json:"id"`
		Type         string          `json:"type"`
		Role         string          `json:"role"`
		Model        string          `json:"model"`
		Content      []messagesBlock `json:"content"`
		StopReason   *string         `json:"stop_reason"`
		StopSequence *string         `json:"stop_sequence"`
		Usage        messagesUsage   `json:"usage"`
	}
	// messagesDelta is the delta of a content_block_delta event.
	messagesDelta struct {
		Type        string  `json:"type"`
		Thinking    *string `json:"thinking,omitempty"`
		Signature   *string `json:"signature,omitempty"`
		Text        *string `json:"text,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	messagesStart struct {
		Type    string           `json:"type"`
		Message messagesResponse `json:"message"`
	}
	messagesBlockStart struct {
		Type         string        `json:"type"`
		Index        int           `json:"index"`
		ContentBlock messagesBlock `json:"content_block"`
	}
	messagesBlockDelta struct {
		Type  string        `json:"type"`
		Index int           `json:"index"`
		Delta messagesDelta `json:"delta"`
	}
	messagesBlockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	messagesStopDelta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	messagesMessageDelta struct {
		Type  string            `json:"type"`
		Delta messagesStopDelta `json:"delta"`
		Usage messagesUsage     `json:"usage"`
	}
	messagesEvent struct {
		Type string `json:"type"`
	}
)

// messagesUsageOf is the Anthropic usage of a stream (see messagesUsage).
func messagesUsageOf(st *llm.Stream) messagesUsage {
	u := st.Usage()
	return messagesUsage{InputTokens: u.PromptTokens - u.CachedTokens, CacheReadInputTokens: u.CachedTokens, OutputTokens: u.CompletionTokens}
}

// messagesStopReason maps the Finish event of an answer to Anthropic's
// stop_reason and stop_sequence.
func messagesStopReason(ev llm.Event) (*string, *string) {
	switch ev.Finish {
	case llm.FinishLength:
		return strPtr("max_tokens"), nil
	case llm.FinishToolCalls:
		return strPtr("tool_use"), nil
	}
	if seq, ok := ev.StopReason.(string); ok {
		return strPtr("stop_sequence"), &seq
	}
	return strPtr("end_turn"), nil
}

// toolUseID is the id of a tool_use block for a call: llm's "call_" ids
// get Anthropic's "toolu_" prefix.
func (s *Server) toolUseID(c *llm.ToolCall) string {
	switch {
	case c.ID == "":
		return s.newID("toolu_")
	case strings.HasPrefix(c.ID, "call_"):
		return "toolu_" + strings.TrimPrefix(c.ID, "call_")
	}
	return c.ID
}

// toolUseInput is a call's arguments as a tool_use block's input: the
// JSON object, {} if the arguments are not one.
func toolUseInput(args string) json.RawMessage {
	if v, err := jsonvalue.Decode([]byte(args)); err == nil {
		if _, ok := v.(*jsonvalue.Object); ok {
			return json.RawMessage(args)
		}
	}
	return json.RawMessage("{}")
}

// thinkingBlock is a thinking block with its signature.
func (s *Server) thinkingBlock(text string) messagesBlock {
	return messagesBlock{Type: "thinking", Thinking: strPtr(text), Signature: strPtr(s.sealer.seal(sealSignature, text))}
}

// logMessagesNotes writes a request's notes (what it asked and this server
// left out) to the log.
func (s *Server) logMessagesNotes(id string, notes []string) {
	if s.cfg.Log == nil || len(notes) == 0 {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	for _, n := range notes {
		fmt.Fprintf(s.cfg.Log, "%s %s note: %s\n", time.Now().Format(time.RFC3339), id, n)
	}
}

// handleMessages answers POST /v1/messages.
func (s *Server) handleMessages(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r, aerr := s.parseMessages(ctx.PostBody(), false)
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	id := s.newID("msg_")
	s.logMessagesNotes(id, r.notes)
	ctx.Response.Header.Set("request-id", id) // the SDKs' _request_id
	rctx, release := s.watch(ctx)
	st, err := s.lm.Chat(rctx, r.req)
	if err != nil {
		release()
		writeAPIError(ctx, r.llmError(err))
		return
	}
	if r.stream {
		s.streamMessages(ctx, id, r.model, st, start, rctx, release)
		return
	}
	defer release()
	defer st.Close()
	type piece struct {
		kind string // "thinking", "text" or "tool_use"
		text string
		call *llm.ToolCall
	}
	var pieces []piece
	addText := func(kind, text string) {
		if text == "" {
			return
		}
		if n := len(pieces); n > 0 && pieces[n-1].kind == kind {
			pieces[n-1].text += text
			return
		}
		pieces = append(pieces, piece{kind: kind, text: text})
	}
	var finish llm.Event
	for ev := range st.Events() {
		switch ev.Kind {
		case llm.KindReasoning:
			addText("thinking", ev.Text)
		case llm.KindContent:
			addText("text", ev.Text)
		case llm.KindToolCall:
			pieces = append(pieces, piece{kind: "tool_use", call: ev.ToolCall})
		case llm.KindFinish:
			finish = ev
		}
	}
	if finish.Kind != llm.KindFinish || failed(finish) {
		if clientGone(rctx) {
			ctx.SetStatusCode(statusClientClosed)
			s.logStream(id, statusClientClosed, st, start)
			return
		}
		status := s.failureStatus(finish.Err)
		writeError(ctx, status, messagesFailure(finish), "")
		s.logStream(id, status, st, start)
		return
	}
	resp := messagesResponse{ID: id, Type: "message", Role: "assistant", Model: r.model,
		Content: []messagesBlock{}, Usage: messagesUsageOf(st)}
	resp.StopReason, resp.StopSequence = messagesStopReason(finish)
	for _, p := range pieces {
		switch p.kind {
		case "thinking":
			resp.Content = append(resp.Content, s.thinkingBlock(p.text))
		case "text":
			resp.Content = append(resp.Content, messagesBlock{Type: "text", Text: strPtr(p.text)})
		case "tool_use":
			resp.Content = append(resp.Content, messagesBlock{Type: "tool_use", ID: s.toolUseID(p.call),
				Name: p.call.Name, Input: toolUseInput(p.call.Arguments)})
		}
	}
	writeJSON(ctx, resp)
	s.logStream(id, fasthttp.StatusOK, st, start)
}

// messagesFailure is the message of a failed answer.
func messagesFailure(ev llm.Event) string {
	msg := "generation failed"
	err := ev.Err
	if inner := errors.Unwrap(err); ev.Finish == llm.FinishError && inner != nil {
		err = inner // the cause, without llm's "generation failed: "
	}
	if err != nil {
		msg += ": " + err.Error()
	} else if ev.Kind != llm.KindFinish {
		msg += ": the answer ended without finishing"
	}
	return msg
}

// messagesSSE writes Anthropic's server-sent events (an event line and a
// data line) and remembers the first failure.
type messagesSSE struct {
	w   *bufio.Writer
	err error
}

func (w *messagesSSE) send(event string, v any) error {
	if w.err != nil {
		return w.err
	}
	b, err := marshal(v)
	if err != nil {
		w.err = err
		return err
	}
	return w.raw(event, b)
}

func (w *messagesSSE) raw(event string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	w.w.WriteString("event: ")
	w.w.WriteString(event)
	w.w.WriteString("\ndata: ")
	w.w.Write(data)
	w.w.WriteString("\n\n")
	w.err = w.w.Flush()
	return w.err
}

// streamMessages streams the answer of st as Anthropic's events: a block
// opens when the kind of output changes (a thinking block gets its
// signature_delta just before it stops), each tool call is a tool_use
// block with its input in one input_json_delta, and message_delta carries
// the stop reason and the final usage (input_tokens and
// cache_read_input_tokens too, known for sure only once the prompt ran). A
// failure is an error event; a client that goes away cancels the answer.
func (s *Server) streamMessages(ctx *fasthttp.RequestCtx, id, model string, st *llm.Stream, start time.Time, rctx context.Context, release func()) {
	setSSEHeaders(ctx)
	s.streamBody(ctx, func(bw *bufio.Writer) {
		defer release()
		defer st.Close()
		w := &messagesSSE{w: bw}
		w.send("message_start", messagesStart{Type: "message_start", Message: messagesResponse{ID: id, Type: "message",
			Role: "assistant", Model: model, Content: []messagesBlock{}, Usage: messagesUsageOf(st)}})
		ping := messagesEvent{Type: "ping"}
		w.send("ping", ping)

		open := ""  // the type of the open block, "" when none
		index := -1 // the index of the last block opened
		var thinking strings.Builder
		closeBlock := func() {
			if open == "" {
				return
			}
			if open == "thinking" {
				sig := s.sealer.seal(sealSignature, thinking.String())
				thinking.Reset()
				w.send("content_block_delta", messagesBlockDelta{Type: "content_block_delta", Index: index,
					Delta: messagesDelta{Type: "signature_delta", Signature: &sig}})
			}
			w.send("content_block_stop", messagesBlockStop{Type: "content_block_stop", Index: index})
			open = ""
		}
		openBlock := func(b messagesBlock) {
			closeBlock()
			index++
			open = b.Type
			w.send("content_block_start", messagesBlockStart{Type: "content_block_start", Index: index, ContentBlock: b})
		}
		delta := func(d messagesDelta) {
			w.send("content_block_delta", messagesBlockDelta{Type: "content_block_delta", Index: index, Delta: d})
		}

		// The events come through a goroutine so that pings go out while
		// the model is silent.
		evs := make(chan llm.Event)
		done := make(chan struct{})
		defer close(done)
		go func() {
			defer close(evs)
			for ev := range st.Events() {
				select {
				case evs <- ev:
				case <-done:
					return
				}
			}
		}()
		ticker := time.NewTicker(messagesPingInterval)
		defer ticker.Stop()
		status := fasthttp.StatusOK
		finished := false
	loop:
		for w.err == nil {
			var ev llm.Event
			select {
			case e, ok := <-evs:
				if !ok {
					break loop
				}
				ev = e
			case <-ticker.C:
				w.send("ping", ping)
				continue
			}
			switch ev.Kind {
			case llm.KindReasoning:
				if ev.Text == "" {
					continue
				}
				if open != "thinking" {
					openBlock(messagesBlock{Type: "thinking", Thinking: strPtr(""), Signature: strPtr("")})
				}
				thinking.WriteString(ev.Text)
				delta(messagesDelta{Type: "thinking_delta", Thinking: strPtr(ev.Text)})
			case llm.KindContent:
				if ev.Text == "" {
					continue
				}
				if open != "text" {
					openBlock(messagesBlock{Type: "text", Text: strPtr("")})
				}
				delta(messagesDelta{Type: "text_delta", Text: strPtr(ev.Text)})
			case llm.KindToolCall:
				openBlock(messagesBlock{Type: "tool_use", ID: s.toolUseID(ev.ToolCall), Name: ev.ToolCall.Name, Input: json.RawMessage("{}")})
				delta(messagesDelta{Type: "input_json_delta", PartialJSON: strPtr(string(toolUseInput(ev.ToolCall.Arguments)))})
				closeBlock()
			case llm.KindFinish:
				finished = true
				if failed(ev) {
					if clientGone(rctx) {
						break loop
					}
					status = fasthttp.StatusInternalServerError
					w.raw("error", anthropicErrorBody(status, messagesFailure(ev)))
					break loop
				}
				closeBlock()
				reason, seq := messagesStopReason(ev)
				w.send("message_delta", messagesMessageDelta{Type: "message_delta",
					Delta: messagesStopDelta{StopReason: reason, StopSequence: seq}, Usage: messagesUsageOf(st)})
				w.send("message_stop", messagesEvent{Type: "message_stop"})
			}
		}
		if !finished && w.err == nil && !clientGone(rctx) {
			status = fasthttp.StatusInternalServerError
			w.raw("error", anthropicErrorBody(status, messagesFailure(llm.Event{})))
		}
		if w.err != nil || clientGone(rctx) {
			status = statusClientClosed
		}
		s.logStream(id, status, st, start)
	})
}

// handleCountTokens answers POST /v1/messages/count_tokens: the prompt
// tokens of a Messages request rendered with the chat template, without
// running it (nor queueing it).
func (s *Server) handleCountTokens(ctx *fasthttp.RequestCtx) {
	r, aerr := s.parseMessages(ctx.PostBody(), true)
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	_, ids, err := s.lm.ChatPrompt(r.req)
	if err != nil {
		writeAPIError(ctx, r.llmError(err))
		return
	}
	writeJSON(ctx, struct {
		InputTokens int `json:"input_tokens"`
	}{len(ids)})
}
