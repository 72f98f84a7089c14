package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/chattemplate"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/jsonconstraint"
	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/outparse"
)

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user", "assistant" or "tool"; "developer" is
	// taken as "system", as vLLM does for models without a developer role.
	Role string
	// Images are the message's images (a user message's, usually): the
	// template sees them as image items before Content's text, in order,
	// and each becomes the image's tokens in the prompt. A model without a
	// vision tower answers them with a *ParamError.
	Images []Image
	// Content is the message's text.
	Content string
	// Reasoning is an assistant turn's thinking (the template's
	// reasoning_content).
	Reasoning string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string

	raw any // the message as OpenAI JSON, from MessageJSON
}

// MessageJSON returns a message given in OpenAI's JSON shape, as decoded by
// jsonvalue.Decode (an *jsonvalue.Object); its fields are checked when the
// request is, and every key reaches the chat template. Content parts of
// type image_url, image and input_image are images: their bytes are
// ChatRequest.Images, in order of appearance (the part's own keys, such as
// a URL, are not read).
func MessageJSON(v any) Message { return Message{raw: v} }

// ToolCall is a call of a tool.
type ToolCall struct {
	// ID identifies the call ("call_" and 24 hex digits when generated).
	ID string
	// Name is the function's name.
	Name string
	// Arguments is a JSON object, as a string; generated calls type each
	// value by the tool's parameter schema and format it as Python's
	// json.dumps does.
	Arguments string
	// Custom marks a call of a custom (free-form) tool, whose Input is
	// the call's text; Arguments then holds it as {"input": Input}.
	Custom bool
	Input  string
}

// CustomInputParam is the one string parameter a custom tool is offered to
// the model with (see Tool.Custom).
const CustomInputParam = "input"

// arguments returns the call's arguments as a JSON object string.
func (c ToolCall) arguments() string {
	if !c.Custom {
		return c.Arguments
	}
	b, _ := json.Marshal(map[string]string{CustomInputParam: c.Input})
	return string(b)
}

// DecodeArguments unmarshals the call's arguments into v (a map or a
// struct), as encoding/json does.
func (c ToolCall) DecodeArguments(v any) error { return json.Unmarshal([]byte(c.Arguments), v) }

// Tool is a function the model may call.
type Tool struct {
	Name, Description string
	// Parameters is the JSON Schema of the arguments (an object schema);
	// empty means none.
	Parameters json.RawMessage
	// Custom makes it a free-form tool (OpenAI's custom tools, such as
	// Codex's apply_patch): its input is one text, not JSON arguments. It
	// is offered to the model as a function of one string parameter
	// (CustomInputParam), described by Grammar when set (a Lark grammar,
	// or a regular expression when GrammarSyntax is "regex"), which is
	// shown to the model and enforced: once the model opens a call of the
	// tool, its input is a whole match of the grammar. Its calls come back
	// with ToolCall.Custom and ToolCall.Input. Parameters is ignored.
	Custom        bool
	Grammar       string
	GrammarSyntax string
	// Strict constrains the arguments of this tool's calls to Parameters
	// under tool_choice auto too, once the model opens a call (forced
	// calls are always constrained), and refuses a schema keyword the
	// constraint does not enforce.
	Strict bool

	raw any // the tool as OpenAI JSON, from ToolJSON
}

// ToolJSON returns a tool given in OpenAI's JSON shape ({"type":
// "function", "function": {...}}), as decoded by jsonvalue.Decode; the
// template renders it as given.
func ToolJSON(v any) Tool { return Tool{raw: v} }

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	// Mode is "" or "auto" (the model decides), "none" (no tools are
	// offered and calls stay text), "required" (some call must be made) or
	// "function" (Function must be called).
	Mode     string
	Function string
}

// ChatRequest is a chat completion.
type ChatRequest struct {
	Messages []Message
	// Images are the bytes of the image parts of the messages given as
	// JSON (MessageJSON), in order of appearance; messages given as
	// structs carry their own (Message.Images).
	Images []Image
	Tools  []Tool
	// ToolChoice constrains the calls; see ToolChoice.
	ToolChoice ToolChoice
	// Thinking, when set, turns the model's reasoning on or off (the
	// template's enable_thinking); nil leaves it to TemplateArgs, then to
	// ReasoningEffort, then to Options.DefaultTemplateArgs, then to the
	// template's default (on for Qwen3.5).
	Thinking *bool
	// ReasoningEffort is OpenAI's reasoning_effort: "none" turns thinking
	// off; "minimal", "low", "medium", "high" and "xhigh" turn it on and,
	// where the chat template reads a reasoning_effort variable (Qwen3.8's
	// does), reach it as that variable unless TemplateArgs set it; ""
	// leaves both.
	ReasoningEffort string
	// ThinkingBudget bounds the reasoning in tokens (vLLM's
	// thinking_token_budget): once spent, "</think>" is forced. Zero means
	// no bound, except before a forced tool call, where it defaults to
	// outparse.DefaultThinkingBudget (at most half of MaxTokens).
	ThinkingBudget int
	// TemplateArgs are further chat template variables (a request's
	// chat_template_kwargs, such as Qwen3.6's preserve_thinking, which
	// keeps the reasoning of earlier assistant turns given as
	// Message.Reasoning); they override Options.DefaultTemplateArgs.
	TemplateArgs map[string]any
	// CacheBreaks are texts of the conversation after whose end a later
	// request is likely to diverge from this one (Anthropic's cache_control
	// breakpoints: the text of each block that carries one). The prefix
	// cache keeps the state at the end of each one's last occurrence in the
	// rendered prompt, besides the turn starts it always keeps, so that a
	// request that changes what follows resumes there. A text not found is
	// ignored.
	CacheBreaks []string
	// NoGenerationPrompt leaves out the opening of the assistant's turn;
	// ContinueFinalMessage (which implies it) makes the model continue the
	// last message instead.
	NoGenerationPrompt, ContinueFinalMessage bool
	Params
}

// Bool returns a pointer to v, for ChatRequest.Thinking.
func Bool(v bool) *bool { return &v }

// chatPrompt is a checked and rendered chat request.
type chatPrompt struct {
	text     string
	ids      []int
	hints    []int // turn positions in ids (outparse.TurnPositions)
	thinking bool
	tools    map[string]outparse.ToolSchema
	noTools  bool             // tool_choice none: calls stay text
	custom   map[string]bool  // the custom (free-form) tools' names
	grammar  processorFactory // response_format, tool_choice, strict tools or a thinking budget
	params   resolved
	images   *imagePrompt // nil without images
}

var knownRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "developer": true}

// Request bounds checked before any work.
const (
	// MaxTools is the most tools a request may offer (as OpenAI).
	MaxTools = outparse.MaxCallTools
	// MaxPromptBytesPerToken bounds a prompt's text: at most this many
	// bytes per token of the model's maximum length, so that no request
	// makes the tokenizer work on far more text than could fit.
	MaxPromptBytesPerToken = 16
	// MaxRequestPrompts bounds the prompt tokens of a request summed over
	// its choices (n times the prompt, over every prompt), in units of
	// the model's maximum length.
	MaxRequestPrompts = 4
)

// messageValue returns the template value of m.
func (m Message) value() any {
	if m.raw != nil {
		return m.raw
	}
	o := jsonvalue.NewObject()
	o.Set("role", m.Role)
	if len(m.Images) > 0 {
		parts := make([]any, 0, len(m.Images)+1)
		for range m.Images {
			p := jsonvalue.NewObject()
			p.Set("type", "image")
			parts = append(parts, p)
		}
		if m.Content != "" {
			p := jsonvalue.NewObject()
			p.Set("type", "text")
			p.Set("text", m.Content)
			parts = append(parts, p)
		}
		o.Set("content", parts)
	} else {
		o.Set("content", m.Content)
	}
	if m.Reasoning != "" {
		o.Set("reasoning_content", m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			fn := jsonvalue.NewObject()
			fn.Set("name", c.Name)
			if args := c.arguments(); args != "" {
				fn.Set("arguments", args)
			}
			tc := jsonvalue.NewObject()
			if c.ID != "" {
				tc.Set("id", c.ID)
			}
			tc.Set("type", "function")
			tc.Set("function", fn)
			calls[i] = tc
		}
		o.Set("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		o.Set("tool_call_id", m.ToolCallID)
	}
	return o
}

// value returns the template value of t.
func (t Tool) value() (any, error) {
	if t.raw != nil {
		return t.raw, nil
	}
	fn := jsonvalue.NewObject()
	fn.Set("name", t.Name)
	if t.Description != "" {
		fn.Set("description", t.Description)
	}
	if t.Custom {
		fn.Set("parameters", t.customParameters())
	} else if len(t.Parameters) > 0 {
		p, err := jsonvalue.Decode(t.Parameters)
		if err != nil {
			return nil, err
		}
		fn.Set("parameters", p)
	}
	if t.Strict {
		fn.Set("strict", true)
	}
	o := jsonvalue.NewObject()
	o.Set("type", "function")
	o.Set("function", fn)
	return o, nil
}

// customParameters is the parameter schema a custom tool is offered with.
func (t Tool) customParameters() *jsonvalue.Object {
	desc := "The tool's input, as free text (not JSON)."
	if t.Grammar != "" {
		desc += " It must follow this grammar:\n" + t.Grammar
	}
	in := jsonvalue.NewObject()
	in.Set("type", "string")
	in.Set("description", desc)
	props := jsonvalue.NewObject()
	props.Set(CustomInputParam, in)
	p := jsonvalue.NewObject()
	p.Set("type", "object")
	p.Set("properties", props)
	p.Set("required", []any{CustomInputParam})
	return p
}

// fieldErr turns a field error into a parameter error.
func fieldErr(e *jsonvalue.FieldError) error {
	if e == nil {
		return nil
	}
	return &ParamError{Param: e.Field, Message: e.Message}
}

// prepareMessages validates messages and converts them to what the
// template expects (tool call arguments as objects, reasoning as
// reasoning_content).
func prepareMessages(in []Message) ([]any, error) {
	if len(in) == 0 {
		return nil, paramErr("messages", "messages must be a non-empty array")
	}
	msgs := make([]any, len(in))
	for i, m := range in {
		msgs[i] = m.value()
		if err := prepareMessage(msgs[i], fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// contentBytes sums the lengths of the messages' text contents.
func contentBytes(msgs []any) int {
	n := 0
	for _, m := range msgs {
		mo, _ := m.(*jsonvalue.Object)
		if mo == nil {
			continue
		}
		switch c := func() any { v, _ := mo.Get("content"); return v }().(type) {
		case string:
			n += len(c)
		case []any:
			for _, part := range c {
				if po, ok := part.(*jsonvalue.Object); ok {
					if t, ok := po.Get("text"); ok {
						s, _ := t.(string)
						n += len(s)
					}
				}
			}
		}
	}
	return n
}

func prepareMessage(m any, field string) error {
	mo, isObj := m.(*jsonvalue.Object)
	if !isObj {
		return paramErr(field, "%s must be an object, got %s", field, jsonvalue.Kind(m))
	}
	msg := jsonvalue.ObjectFields(mo, field)
	role, ok, err := msg.Str("role")
	if err != nil {
		return fieldErr(err)
	}
	if !ok {
		return paramErr(field+".role", "%s.role is required", field)
	}
	if !knownRoles[role] {
		return paramErr(field+".role", "%s.role %q is not one of system, developer, user, assistant, tool", field, role)
	}
	if role == "developer" {
		role = "system"
		mo.Set("role", role)
	}
	content, _ := msg.Get("content")
	switch c := content.(type) {
	case nil:
		if role != "assistant" {
			return paramErr(field+".content", "%s.content is required for role %s", field, role)
		}
	case string:
	case []any:
		for k, part := range c {
			pf := fmt.Sprintf("%s.content[%d]", field, k)
			po, isObj := part.(*jsonvalue.Object)
			if !isObj {
				return paramErr(pf, "%s must be an object, got %s", pf, jsonvalue.Kind(part))
			}
			p := jsonvalue.ObjectFields(po, pf)
			typ, _, err := p.Str("type")
			if err != nil {
				return fieldErr(err)
			}
			if imageParts[typ] {
				continue
			}
			if typ != "text" {
				return paramErr(pf+".type", "%s.type %q is not supported (this server takes text, image_url, input_image and image parts)", pf, typ)
			}
			if _, ok, err := p.Str("text"); err != nil {
				return fieldErr(err)
			} else if !ok {
				return paramErr(pf+".text", "%s.text is required", pf)
			}
		}
	default:
		return paramErr(field+".content", "%s.content must be a string or an array of content parts, got %s", field, jsonvalue.Kind(content))
	}
	if r, ok, err := msg.Str("reasoning"); err != nil {
		return fieldErr(err)
	} else if ok && !msg.Has("reasoning_content") {
		mo.Set("reasoning_content", r)
	}
	if _, _, err := msg.Str("reasoning_content"); err != nil {
		return fieldErr(err)
	}
	calls, ok, ferr := msg.Array("tool_calls")
	if ferr != nil {
		return fieldErr(ferr)
	}
	if ok && role != "assistant" {
		return paramErr(field+".tool_calls", "%s.tool_calls is only allowed on assistant messages", field)
	}
	for k, tc := range calls {
		tf := fmt.Sprintf("%s.tool_calls[%d]", field, k)
		tco, isObj := tc.(*jsonvalue.Object)
		if !isObj {
			return paramErr(tf, "%s must be an object, got %s", tf, jsonvalue.Kind(tc))
		}
		fn, ok, err := jsonvalue.ObjectFields(tco, tf).Object("function")
		if err != nil {
			return fieldErr(err)
		}
		if !ok {
			return paramErr(tf+".function", "%s.function is required", tf)
		}
		if name, ok, err := fn.Str("name"); err != nil {
			return fieldErr(err)
		} else if !ok || name == "" {
			return paramErr(tf+".function.name", "%s.function.name is required", tf)
		}
		switch a := func() any { v, _ := fn.Get("arguments"); return v }().(type) {
		case nil:
			fn.Obj.Set("arguments", jsonvalue.NewObject())
		case string:
			v, derr := jsonvalue.Decode([]byte(a))
			obj, isObj := v.(*jsonvalue.Object)
			if derr != nil || !isObj {
				return paramErr(tf+".function.arguments", "%s.function.arguments must be a JSON object (as a string)", tf)
			}
			fn.Obj.Set("arguments", obj)
		case *jsonvalue.Object:
		default:
			return paramErr(tf+".function.arguments", "%s.function.arguments must be a JSON object string, got %s", tf, jsonvalue.Kind(a))
		}
	}
	if role == "tool" {
		if _, _, err := msg.Str("tool_call_id"); err != nil {
			return fieldErr(err)
		}
	}
	return nil
}

// prepareTools validates tools and reads each tool's parameter types and
// its schema for constrained calls.
func prepareTools(in []Tool) ([]any, map[string]outparse.ToolSchema, []outparse.CallTool, error) {
	if in == nil {
		return nil, nil, nil, nil
	}
	if len(in) > MaxTools {
		return nil, nil, nil, paramErr("tools", "tools holds %d tools; at most %d are allowed", len(in), MaxTools)
	}
	tools := make([]any, len(in))
	schemas := map[string]outparse.ToolSchema{}
	calls := make([]outparse.CallTool, 0, len(in))
	for i, t := range in {
		field := fmt.Sprintf("tools[%d]", i)
		v, err := t.value()
		if err != nil {
			return nil, nil, nil, paramErr(field+".function.parameters", "invalid %s.function.parameters: %v", field, err)
		}
		tools[i] = v
		to, isObj := v.(*jsonvalue.Object)
		if !isObj {
			return nil, nil, nil, paramErr(field, "%s must be an object, got %s", field, jsonvalue.Kind(v))
		}
		tool := jsonvalue.ObjectFields(to, field)
		if typ, _, err := tool.Str("type"); err != nil {
			return nil, nil, nil, fieldErr(err)
		} else if typ != "function" {
			return nil, nil, nil, paramErr(field+".type", "%s.type must be \"function\", got %q", field, typ)
		}
		fn, ok, ferr := tool.Object("function")
		if ferr != nil {
			return nil, nil, nil, fieldErr(ferr)
		}
		if !ok {
			return nil, nil, nil, paramErr(field+".function", "%s.function is required", field)
		}
		name, _, ferr := fn.Str("name")
		if ferr != nil {
			return nil, nil, nil, fieldErr(ferr)
		}
		if name == "" {
			return nil, nil, nil, paramErr(field+".function.name", "%s.function.name is required", field)
		}
		if _, _, err := fn.Str("description"); err != nil {
			return nil, nil, nil, fieldErr(err)
		}
		strict, _, ferr := fn.Bool("strict")
		if ferr != nil {
			return nil, nil, nil, fieldErr(ferr)
		}
		params, ok, ferr := fn.Object("parameters")
		if ferr != nil {
			return nil, nil, nil, fieldErr(ferr)
		}
		if !ok {
			schemas[name] = outparse.ToolSchema{}
			calls = append(calls, outparse.CallTool{Name: name, Strict: strict})
			continue
		}
		if typ, ok, err := params.Str("type"); err != nil {
			return nil, nil, nil, fieldErr(err)
		} else if ok && typ != "object" {
			return nil, nil, nil, paramErr(field+".function.parameters.type", "%s.function.parameters.type must be \"object\", got %q", field, typ)
		}
		if _, _, err := params.Object("properties"); err != nil {
			return nil, nil, nil, fieldErr(err)
		}
		raw, merr := json.Marshal(params.Obj)
		if merr != nil {
			return nil, nil, nil, paramErr(field+".function.parameters", "%s.function.parameters: %v", field, merr)
		}
		sc, serr := outparse.SchemaFromParameters(raw)
		if serr != nil {
			return nil, nil, nil, paramErr(field+".function.parameters", "invalid %s.function.parameters: %v", field, serr)
		}
		schemas[name] = sc
		calls = append(calls, outparse.CallTool{Name: name, Parameters: raw, Strict: strict})
	}
	return tools, schemas, calls, nil
}

// prepareChat checks and renders a chat request.
func (lm *Model) prepareChat(req ChatRequest) (*chatPrompt, error) {
	if lm.tmpl == nil {
		return nil, paramErr("messages", "this checkpoint has no chat template: %v", lm.tmplErr)
	}
	params, err := lm.resolve(req.Params)
	if err != nil {
		return nil, err
	}
	r := &chatPrompt{params: params}
	msgs, err := prepareMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	if err := lm.checkPromptBytes("messages", contentBytes(msgs)); err != nil {
		return nil, err // before rendering and tokenizing it
	}
	imageFields, imageData, err := chatImages(req, msgs)
	if err != nil {
		return nil, err
	}
	tools, schemas, calls, err := prepareTools(req.Tools)
	if err != nil {
		return nil, err
	}
	if err := lm.customGrammars(req.Tools, calls); err != nil {
		return nil, err
	}
	r.tools = schemas
	for _, t := range req.Tools {
		if t.Custom && t.raw == nil {
			if r.custom == nil {
				r.custom = map[string]bool{}
			}
			r.custom[t.Name] = true
		}
	}
	// forceCall: a call must be made; forceName: of that function.
	var forceCall bool
	var forceName string
	switch c := req.ToolChoice; c.Mode {
	case "", "auto":
	case "none":
		r.noTools, tools, calls = true, nil, nil
	case "required":
		if len(schemas) == 0 {
			return nil, paramErr("tool_choice", "tool_choice \"required\" needs at least one tool in tools")
		}
		forceCall = true
	case "function":
		if _, known := schemas[c.Function]; !known {
			return nil, paramErr("tool_choice", "tool_choice names function %q, which is not in tools", c.Function)
		}
		forceCall, forceName = true, c.Function
	default:
		return nil, paramErr("tool_choice", "tool_choice must be none, auto, required or a named function, got %q", c.Mode)
	}
	if req.ThinkingBudget < 0 {
		return nil, paramErr("thinking_token_budget", "thinking_token_budget must not be negative, got %d", req.ThinkingBudget)
	}
	kwargs, err := lm.templateArgs(req)
	if err != nil {
		return nil, err
	}
	addGen := !req.NoGenerationPrompt && !req.ContinueFinalMessage
	var toolsArg any
	if tools != nil {
		toolsArg = tools
	}
	prompt, rerr := lm.tmpl.RenderChat(chattemplate.Options{
		Messages: msgs, Tools: toolsArg, AddGenerationPrompt: addGen, Kwargs: kwargs,
		BOS: lm.special.BOS, EOS: lm.special.EOS, PAD: lm.special.PAD,
	})
	if rerr != nil {
		return nil, paramErr("messages", "rendering the chat template: %v", rerr)
	}
	if req.ContinueFinalMessage {
		prompt = continueFinal(prompt, msgs)
	}
	if err := lm.checkPromptBytes("messages", len(prompt)); err != nil {
		return nil, err
	}
	r.text = prompt
	r.thinking = outparse.ThinkingOpened(prompt)
	// The answer's format (response_format or a structured output) beside
	// tools: a forced call is the whole answer, constrained by its tool's
	// schema, so the format has nothing to apply to; under tool_choice
	// auto the answer is calls (each constrained from its start) or a text
	// under the format, and the call grammar reads both.
	content := outparse.CallOptions{ContentJSON: params.grammar, ContentGrammar: params.structured}
	switch {
	case forceCall, len(calls) > 0 && (params.grammar != nil || params.structured != nil):
	case params.grammar != nil:
		r.grammar = lm.processorFor(params.grammar)
	case params.structured != nil:
		r.grammar = lm.structuredFor(params.structured)
	}
	if r.grammar != nil && r.thinking {
		// A constrained answer comes after the reasoning, which is free
		// and bounded by the thinking budget.
		r.grammar = lm.thinkFirst(r.grammar, req.ThinkingBudget, r.params.askedTokens)
	}
	if r.grammar == nil {
		if r.grammar, err = lm.callProcessor(r, calls, forceCall, forceName, req.ThinkingBudget, content); err != nil {
			return nil, err
		}
	}
	r.ids = lm.tok.Encode(prompt)
	r.hints = outparse.TurnPositions(lm.tok, r.ids)
	if breaks := lm.breakPositions(prompt, r.ids, req.CacheBreaks); len(breaks) > 0 {
		r.hints = slices.Compact(slices.Sorted(slices.Values(append(r.hints, breaks...))))
	}
	unexpanded := r.ids
	if r.ids, r.images, err = lm.prepareImages(r.ids, imageFields, imageData); err != nil {
		return nil, err
	}
	if r.images != nil {
		r.hints = r.images.expandPositions(unexpanded, lm.vision.imageToken, r.hints)
	}
	return r, nil
}

// breakPositions returns the token positions of ids (prompt tokenized)
// where the last occurrence of each of texts in prompt ends: the tokens
// before a position cover no byte past that end.
func (lm *Model) breakPositions(prompt string, ids []int, texts []string) []int {
	var ends []int // byte offsets, ascending
	for _, t := range texts {
		if i := strings.LastIndex(prompt, t); t != "" && i >= 0 {
			ends = append(ends, i+len(t))
		}
	}
	if len(ends) == 0 {
		return nil
	}
	slices.Sort(ends)
	var out []int
	off := 0 // byte offset of token k
	for k, id := range ids {
		next := off + len(lm.tok.TokenBytes(id))
		for len(ends) > 0 && ends[0] < next {
			if k > 0 {
				out = append(out, k) // token k reaches past the end: stop before it
			}
			ends = ends[1:]
		}
		off = next
	}
	return out
}

// ReasoningEffortVar is the chat template variable a request's reasoning
// effort reaches where the template reads it (Qwen3.8's levels are xhigh,
// medium and low).
const ReasoningEffortVar = "reasoning_effort"

// TemplateReads reports whether the model's chat template reads a
// variable of that name (chattemplate.Template.Reads); false without a
// template.
func (lm *Model) TemplateReads(name string) bool { return lm.tmpl != nil && lm.tmpl.Reads(name) }

// templateArgs merges the chat template variables: the server's defaults,
// then reasoning_effort, then the request's own variables, then Thinking.
func (lm *Model) templateArgs(req ChatRequest) (map[string]any, error) {
	kwargs := make(map[string]any, len(lm.defaultArgs)+len(req.TemplateArgs)+2)
	maps.Copy(kwargs, lm.defaultArgs)
	switch req.ReasoningEffort {
	case "":
	case "none":
		kwargs["enable_thinking"] = false
	case "minimal", "low", "medium", "high", "xhigh":
		kwargs["enable_thinking"] = true
		if lm.TemplateReads(ReasoningEffortVar) {
			kwargs[ReasoningEffortVar] = req.ReasoningEffort
		}
	default:
		return nil, paramErr("reasoning_effort", "reasoning_effort must be none, minimal, low, medium, high or xhigh, got %q", req.ReasoningEffort)
	}
	maps.Copy(kwargs, req.TemplateArgs)
	if req.Thinking != nil {
		kwargs["enable_thinking"] = *req.Thinking
	}
	return kwargs, nil
}

// checkPromptBytes refuses a prompt text too long to fit in any case
// before it is tokenized.
func (lm *Model) checkPromptBytes(param string, n int) error {
	if limit := lm.maxModelLen * MaxPromptBytesPerToken; n > limit {
		return paramErr(param, "the prompt is %d bytes; at most %d (%d per token of the maximum length %d) are allowed", n, limit, MaxPromptBytesPerToken, lm.maxModelLen)
	}
	return nil
}

// callProcessor returns the tool-call constraint a chat needs, or nil: a
// forced call, strict tools under tool_choice auto, or a thinking budget.
func (lm *Model) callProcessor(r *chatPrompt, calls []outparse.CallTool, force bool, name string, budget int, content outparse.CallOptions) (processorFactory, error) {
	strict := slices.ContainsFunc(calls, func(c outparse.CallTool) bool { return c.Strict || c.Grammar != nil })
	answer := !force && len(calls) > 0 && (content.ContentJSON != nil || content.ContentGrammar != nil)
	// Under tool_choice auto every declared tool's calls are constrained
	// from the moment the model opens one.
	auto := !force && len(calls) > 0
	if !force && !strict && !auto && (budget == 0 || !r.thinking) {
		return nil, nil
	}
	if !r.thinking {
		budget = 0
	}
	cv, err := lm.constraints.callVocab()
	if err != nil {
		return nil, err
	}
	o := outparse.CallOptions{Tools: calls, Force: force, Function: name, Thinking: r.thinking, Auto: auto}
	if answer {
		o.ContentJSON, o.ContentGrammar = content.ContentJSON, content.ContentGrammar
	}
	g, err := outparse.NewCallGrammar(cv, o)
	if err != nil {
		param := "tools"
		if force {
			param = "tool_choice"
		}
		var ke *jsonconstraint.KeywordError
		if errors.As(err, &ke) {
			return nil, paramErr("tools", "tools: the keyword %q (at %s of a function's parameters) is not supported with strict: true; remove it or set strict to false", ke.Keyword, ke.Path)
		}
		return nil, paramErr(param, "%s: %v", param, err)
	}
	maps.Copy(r.tools, g.Schemas())
	asked := r.params.askedTokens
	return func(maxTokens int) (engine.LogitProcessor, error) {
		b := lowerBudget(budget, asked, maxTokens)
		if (force || answer) && b == 0 && r.thinking {
			b = min(outparse.DefaultThinkingBudget, maxTokens/2)
		}
		return callProcessor{g.NewConstraint(maxTokens, b)}, nil
	}, nil
}

// lowerBudget lowers a thinking budget with the answer it belongs to: in
// proportion when the request's max_tokens (asked) was lowered to
// maxTokens, and to half the answer when the request asked no bound and
// the budget would take all of it. Zero (no budget) stays zero.
func lowerBudget(budget, asked, maxTokens int) int {
	switch {
	case budget <= 0:
		return budget
	case asked > maxTokens:
		return max(1, int(int64(budget)*int64(maxTokens)/int64(asked)))
	case asked == 0 && budget >= maxTokens:
		return max(1, maxTokens/2)
	}
	return budget
}

// ChatPrompt checks and renders a chat request without running it: the
// prompt text and its token ids.
func (lm *Model) ChatPrompt(req ChatRequest) (string, []int, error) {
	r, err := lm.prepareChat(req)
	if err != nil {
		return "", nil, err
	}
	return r.text, r.ids, nil
}

// continueFinal cuts a rendered conversation right after the final
// message's content, so that the model continues it (transformers'
// continue_final_message).
func continueFinal(prompt string, msgs []any) string {
	last, _ := msgs[len(msgs)-1].(*jsonvalue.Object)
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

// chatImages returns the image parts of the messages (as field names) and
// their bytes, in order: a struct message's own images, a JSON message's
// from req.Images.
func chatImages(req ChatRequest, msgs []any) ([]string, []Image, error) {
	fields := collectImages(msgs)
	if len(fields) == 0 && len(req.Images) == 0 {
		return nil, nil, nil
	}
	var data []Image
	next := 0
	for i, m := range req.Messages {
		if m.raw == nil {
			data = append(data, m.Images...)
			continue
		}
		n := len(collectImages([]any{msgs[i]}))
		if next+n > len(req.Images) {
			return nil, nil, paramErr("messages", "the messages hold more image parts than the %d images given", len(req.Images))
		}
		data = append(data, req.Images[next:next+n]...)
		next += n
	}
	if next != len(req.Images) {
		return nil, nil, paramErr("messages", "%d images were given for %d image parts of the messages", len(req.Images), next)
	}
	return fields, data, nil
}
